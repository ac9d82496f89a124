"""Terminal output shared by the commands: one rich console, JSON on stdout, errors on stderr.

rich is imported lazily so that ``--json`` paths and start-up stay cheap (an image pull
shows its progress with it only on a terminal: :class:`PullDisplay`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


@cache
def console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


@cache
def error_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def safe(text: str, newlines: bool = True) -> str:
    """Text from a workload or the engine, fit for a terminal: control characters (an
    escape sequence in a workload name, say) are shown escaped, never interpreted."""
    if not newlines:
        text = text.replace("\n", "\\n").replace("\t", "\\t")
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def fail(message: str, hint: str | None = None) -> None:
    """Print an actionable error to stderr (no traceback, no markup surprises)."""
    from rich.markup import escape

    err = error_console()
    err.print(f"[bold red]error:[/] {escape(safe(message))}")
    if hint:
        err.print(f"[dim]hint:[/] {escape(safe(hint))}")


# -- plain text: aligned columns and ANSI colour without rich's start-up cost ---------

_RESET = "\x1b[0m"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STYLES = {
    "bold": "\x1b[1m",
    "dim": "\x1b[2m",
    "red": "\x1b[1;31m",
    "yellow": "\x1b[33m",
    "green": "\x1b[32m",
    "cyan": "\x1b[1;36m",
}


def use_colour() -> bool:
    """NO_COLOR (https://no-color.org) wins; FORCE_COLOR forces; else only on a terminal."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


class Writer:
    """Collects lines, painting them only when colour is on, and writes them at once."""

    def __init__(self, colour: bool | None = None) -> None:
        self.colour = use_colour() if colour is None else colour
        self.lines: list[str] = []

    def paint(self, text: str, style: str) -> str:
        return f"{_STYLES[style]}{text}{_RESET}" if self.colour else text

    def line(self, text: str = "") -> None:
        self.lines.append(text)

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[str]],
        right: Sequence[int] = (),
        indent: str = "",
    ) -> None:
        """Aligned columns; the ones in ``right`` are right-justified (numbers).

        Cells may be painted: widths count the visible characters, not colour codes.
        """
        widths = [len(h) for h in headers]
        for row in rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], _visible_len(cell))

        def fmt(cells: Sequence[str]) -> str:
            out = []
            for i, c in enumerate(cells):
                pad = " " * (widths[i] - _visible_len(c))
                out.append(pad + c if i in right else c + pad)
            return (indent + "  ".join(out)).rstrip()

        self.line(self.paint(fmt(headers), "dim"))
        for row in rows:
            self.line(fmt(row))

    def flush(self) -> None:
        sys.stdout.write("\n".join(self.lines) + "\n")
        sys.stdout.flush()
        self.lines = []


def money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}" if value >= 0.1 or value == 0 else f"${value:,.4f}"


def gpu_text(gpu: str | None, count: int, memory_gb: float) -> str:
    return f"{count}× {gpu} {memory_gb:g} GB" if gpu else "no GPU"


class PullDisplay:
    """An image pull's progress: layer by layer on a terminal, one line otherwise."""

    def __init__(self, image: str, progress: bool) -> None:
        self.image = image
        self.progress = progress
        self._bar: Any = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> PullDisplay:
        err = error_console()
        if self.progress and err.is_terminal:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                console=err,
                transient=True,
            )
            self._bar.__enter__()
        else:
            err.print(f"pulling {self.image} …")
        return self

    def event(self, event: dict[str, Any]) -> None:
        """One progress event of the engine's pull stream."""
        if self._bar is None:
            return
        layer = event.get("id")
        detail = event.get("progressDetail") or {}
        if layer and detail.get("total"):
            if layer not in self._tasks:
                self._tasks[layer] = self._bar.add_task(
                    f"{self.image} {layer}", total=detail["total"]
                )
            self._bar.update(self._tasks[layer], completed=detail.get("current", 0))

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


def _visible_len(text: str) -> int:
    return len(_ANSI.sub("", text)) if "\x1b" in text else len(text)
