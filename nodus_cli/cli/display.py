"""A run shown live on a terminal: the ``Sink`` that ``nodus run`` hands the driver.

Output lines keep their stream (the container's stdout to stdout, its stderr to stderr;
with ``--json`` both go to stderr, stdout carrying only the final document) and carry
their stage's name (``train | ...``), or the item's index for a fan-out stage
(``shard[3] | ...``). nodus's own status lines go to stderr as ``nodus: ...``.

A fan-out stage shows a live progress bar on a terminal (done, running, failed, left,
elapsed, cost so far); piped, a plain progress line at most every few seconds. rich is
imported only for that bar.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from nodus_cli.records.logs import Stream
from nodus_cli.run.sink import Progress
from nodus_cli.text import safe

#: Plain progress lines, at most this often (seconds).
PLAIN_EVERY = 5.0


class TerminalSink:
    def __init__(self, json_mode: bool = False, out: IO[str] | None = None) -> None:
        self.out = sys.stderr if json_mode else (out or sys.stdout)
        self.err = sys.stderr
        self._bar: Any = None
        self._tasks: dict[str, Any] = {}
        self._plain_at: dict[str, float] = {}
        self._last: dict[str, Progress] = {}
        try:
            self._tty = self.err.isatty()
        except (AttributeError, ValueError):
            self._tty = False

    def output(self, stage: str, item: int | None, stream: Stream, text: str) -> None:
        prefix = f"{stage}[{item}] | " if item is not None else f"{stage} | "
        target = self.err if stream == "stderr" else self.out
        if self._bar is not None and _same_terminal(target, self.err):
            self._bar.console.print(prefix + text, markup=False, highlight=False, soft_wrap=True)
            return
        target.write(prefix + text + "\n")
        target.flush()

    def status(self, text: str) -> None:
        line = f"nodus: {safe(text)}"
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
            return
        self.err.write(line + "\n")
        self.err.flush()

    def progress(self, progress: Progress) -> None:
        self._last[progress.stage] = progress
        if self._tty:
            self._show_bar(progress)
            return
        now = time.monotonic()
        finished = progress.done + progress.failed == progress.total
        if not finished and now - self._plain_at.get(progress.stage, 0.0) < PLAIN_EVERY:
            return
        if finished and self._plain_at.get(progress.stage) == -1.0:
            return
        self._plain_at[progress.stage] = -1.0 if finished else now
        self.status(_words(progress))

    def _show_bar(self, progress: Progress) -> None:
        if self._bar is None:
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            from nodus_cli.cli.output import error_console

            self._bar = Bar(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=error_console(),
                transient=False,
            )
            self._bar.start()
        task = self._tasks.get(progress.stage)
        detail = (
            f"running {progress.running}, failed {progress.failed}, left {progress.left}, "
            f"${progress.cost:,.4f}"
        )
        if task is None:
            task = self._bar.add_task(progress.stage, total=progress.total, detail=detail)
            self._tasks[progress.stage] = task
        self._bar.update(task, completed=progress.done + progress.failed, detail=detail)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _words(p: Progress) -> str:
    return (
        f"stage {p.stage}: {p.done}/{p.total} done, {p.running} running, {p.failed} failed, "
        f"{p.left} left, {p.elapsed:.1f}s, ${p.cost:,.4f} so far"
    )


def _same_terminal(a: IO[str], b: IO[str]) -> bool:
    try:
        return a.isatty() and b.isatty()
    except (AttributeError, ValueError):
        return False
