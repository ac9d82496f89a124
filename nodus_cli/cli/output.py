"""Terminal output shared by the commands: one rich console, JSON on stdout, errors on stderr.

rich is imported lazily so that ``--json`` paths and start-up stay cheap (an image pull
shows its progress with it only on a terminal: :class:`PullDisplay`). The plain-text
:class:`Writer` (``plan``, ``gpus``, ``runs``, ...) fits what it prints to the terminal's
width (:func:`terminal_width`): prose wraps at word boundaries, tables drop their
lower-priority columns and then clip long cells with "…". Where no width is known (a pipe,
COLUMNS unset) nothing is wrapped or clipped, so scripts and greps see every value.

One way to draw a table: :meth:`Writer.table`, for every command (``plan``, ``gpus``,
``runs``, ``spend``, ``nodes``, ``catalog``). rich draws no table in nodus; it prints the
errors (:func:`fail`), the progress bars (an image pull, a run on a terminal, ``catalog
update``) and ``swarm init-node``'s steps.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, TextIO

from nodus_cli.text import RESET, bounded, clipped, display_width, safe, wrap

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


def emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def emit_json_list(head: Mapping[str, Any], key: str, items: Iterable[Any]) -> None:
    """What :func:`emit_json` prints of ``{**head, key: list(items)}``, byte for byte, with
    the list written an item at a time as ``items`` yields them: a long listing is never
    held whole, neither its items nor its text."""
    write = sys.stdout.write
    sep = None
    for item in items:
        if sep is None:
            opening = json.dumps({**head, key: [None]}, indent=2, ensure_ascii=False)
            write(opening[: opening.rindex("null")])
            sep = ",\n    "
        else:
            write(sep)
        write(json.dumps(item, indent=2, ensure_ascii=False).replace("\n", "\n    "))
    if sep is None:
        emit_json({**head, key: []})
        return
    write("\n  ]\n}\n")


def fail(message: str, hint: str | None = None) -> None:
    """Print an actionable error to stderr (no traceback, no markup surprises)."""
    from rich.markup import escape

    err = error_console()
    err.print(f"[bold red]error:[/] {escape(safe(bounded(message)))}")
    if hint:
        err.print(f"[dim]hint:[/] {escape(safe(bounded(hint)))}")


# -- plain text: aligned columns and ANSI colour without rich's start-up cost ---------

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


#: The narrowest width fitting aims for: below it nothing readable fits anyway.
MIN_WIDTH = 20
#: A clipped cell keeps at least this many characters (or its header's width).
MIN_CELL = 8


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The width human output on ``stream`` (stdout) must fit, or None for no limit.

    COLUMNS when it is set (a test, a user's choice; :func:`shutil.get_terminal_size` reads
    it first), else the terminal's width when the stream is one. When it is not a terminal
    and COLUMNS is unset the answer is None: a pipe or a file gets every value in full, so
    ``grep`` finds a machine ID that a terminal would show clipped.
    """
    columns = os.environ.get("COLUMNS", "").strip()
    if not (columns.isdigit() and int(columns) > 0):
        try:
            if not (stream or sys.stdout).isatty():
                return None
        except (AttributeError, ValueError):
            return None
    import shutil  # only here: `nodus validate` imports this module and never needs it

    return max(shutil.get_terminal_size().columns, MIN_WIDTH)


def stderr_line(text: str) -> None:
    """A line for people on stderr (``nodus: …``), wrapped to the terminal like the
    Writer's prose, so that notes around a fitted table fit too."""
    width = terminal_width(sys.stderr)
    text = bounded(text)
    lines = [text] if width is None else wrap(text, width)
    sys.stderr.write("".join(line + "\n" for line in lines))
    sys.stderr.flush()


class Writer:
    """Collects lines, painting them only when colour is on, and writes them at once.

    ``width`` is what every line must fit: the terminal's (:func:`terminal_width`) unless
    given; ``wide=True`` lifts the limit (``--wide``: every column, in full). ``narrowed``
    tells whether a table lost a column or clipped a cell to fit, so a command can say that
    ``--wide`` shows everything.
    """

    def __init__(
        self, colour: bool | None = None, *, wide: bool = False, width: int | None = None
    ) -> None:
        self.colour = use_colour() if colour is None else colour
        self.width: int | None = None if wide else (width or terminal_width())
        self.lines: list[str] = []
        self.narrowed = False

    def paint(self, text: str, style: str) -> str:
        return f"{_STYLES[style]}{text}{RESET}" if self.colour else text

    def line(self, text: str = "", hang: str = "  ", keep: Sequence[str] = ()) -> None:
        """A line of prose, wrapped at word boundaries to the width: continuation lines
        take the line's own indent plus ``hang``, so a wrapped note still reads as one.
        A phrase in ``keep`` (``" = "``: ``key = value``) is never broken."""
        if self.width is None:
            self.lines.append(text)
            return
        for physical in text.split("\n"):
            for phrase in keep:  # its spaces become NULs, which wrap() does not break at
                physical = physical.replace(phrase, phrase.replace(" ", "\0"))
            self.lines.extend(x.replace("\0", " ") for x in wrap(physical, self.width, hang))

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[str]],
        right: Sequence[int] = (),
        indent: str = "",
        *,
        drop: Sequence[int] = (),
        clip: Sequence[int] = (),
        keep_end: Sequence[int] = (),
    ) -> None:
        """Aligned columns; the ones in ``right`` are right-justified (numbers).

        Cells may be painted: widths count the visible characters, not colour codes. When
        the table is wider than ``width``, the columns in ``drop`` go first, in that order,
        until it fits; then the columns in ``clip`` are shortened, the widest first, each
        to no less than its header (or :data:`MIN_CELL`), their cells ending in "…" (or,
        for the columns in ``keep_end``, starting with it: paths and file names differ at
        their end). Columns in neither list are never touched (an id to copy, a price):
        when only they remain the table is as wide as they are.
        """
        fmt = self._layout(headers, rows, right, indent, drop, clip, keep_end)
        self.lines.append(self.paint(fmt(headers), "dim"))
        self.lines.extend(fmt(row) for row in rows)

    def stream_table(
        self,
        headers: Sequence[str],
        rows: Iterable[Sequence[str]],
        right: Sequence[int] = (),
        *,
        look_ahead: int = 200,
        drop: Sequence[int] = (),
        clip: Sequence[int] = (),
    ) -> None:
        """:meth:`table` for rows of any number, written as ``rows`` yields them: the
        columns are laid out on the first ``look_ahead`` rows, so only those are ever held.

        A later cell wider than its column: on a terminal a column in ``clip`` clips it
        (with "…"); any other column, and a pipe or a file, shows it in full, that row
        then out of line rather than a value lost.
        """
        it = iter(rows)
        first = [row for _, row in zip(range(look_ahead), it, strict=False)]
        fmt = self._layout(headers, first, right, "", drop, clip, (), loose=True)
        self.lines.append(self.paint(fmt(headers), "dim"))
        self.lines.extend(fmt(row) for row in first)
        del first
        self._write_all_but_last()
        for row in it:
            self.lines.append(fmt(row))
            if len(self.lines) > look_ahead:
                self._write_all_but_last()

    def _write_all_but_last(self) -> None:
        """Write what is held but its last line (kept for :meth:`flush`, which ends the
        output with it: a flush of nothing would print an empty line)."""
        last = self.lines.pop()
        if self.lines:
            self.flush()
        self.lines.append(last)

    def _layout(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[str]],
        right: Sequence[int],
        indent: str,
        drop: Sequence[int],
        clip: Sequence[int],
        keep_end: Sequence[int],
        loose: bool = False,
    ) -> Callable[[Sequence[str]], str]:
        """How a row of the table is written: the columns fitted to ``rows`` (and the
        width). ``loose``: other rows may come, with cells wider than any here."""
        widths = [display_width(h) for h in headers]
        for row in rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], display_width(cell))
        shown = list(range(len(headers)))
        if self.width is not None:
            shown = self._fit(headers, widths, shown, len(indent), drop, clip)
        if not loose:
            clips = set(shown)  # every cell fits its width, or was fitted by _fit to be cut
        elif self.width is None:
            clips = set()  # a pipe or a file: every value in full
        else:
            clips = set(clip)

        def fmt(cells: Sequence[str]) -> str:
            out = []
            for i in shown:
                c = cells[i]
                if display_width(c) > widths[i] and i in clips:
                    c = clipped(c, widths[i], keep_end=i in keep_end)
                    self.narrowed = self.narrowed or loose
                pad = " " * max(0, widths[i] - display_width(c))
                out.append(pad + c if i in right else c + pad)
            return (indent + "  ".join(out)).rstrip()

        return fmt

    def _fit(
        self,
        headers: Sequence[str],
        widths: list[int],
        shown: list[int],
        indent: int,
        drop: Sequence[int],
        clip: Sequence[int],
    ) -> list[int]:
        """The columns kept, with ``widths`` lowered in place where cells are clipped."""
        assert self.width is not None
        width = self.width

        def over() -> int:
            return indent + sum(widths[i] for i in shown) + 2 * (len(shown) - 1) - width

        for i in drop:
            if over() <= 0:
                break
            if i in shown and len(shown) > 1:
                shown.remove(i)
                self.narrowed = True
        excess = over()
        floors = {
            i: min(widths[i], max(display_width(headers[i]), MIN_CELL)) for i in clip if i in shown
        }
        while excess > 0:
            room = [i for i in floors if widths[i] > floors[i]]
            if not room:
                break
            widest = max(room, key=lambda i: widths[i])
            cut = min(excess, widths[widest] - floors[widest])
            # Shorten the widest down to the next widest (or by what is left), so long
            # cells share the cut rather than one column losing everything.
            others = [widths[i] for i in room if i != widest]
            if others:
                cut = min(cut, max(1, widths[widest] - max(others)))
            widths[widest] -= cut
            excess -= cut
            self.narrowed = True
        return shown

    def narrowed_note(self) -> None:
        """Say that ``--wide`` shows what fitting the terminal left out, if it left any."""
        if self.narrowed:
            self.line(
                self.paint(
                    "Columns were left out or shortened to fit the terminal: --wide shows "
                    "them all.",
                    "dim",
                )
            )

    def flush(self) -> None:
        sys.stdout.write("\n".join(self.lines) + "\n")
        sys.stdout.flush()
        self.lines = []


class PullDisplay:
    """An image pull's progress: layer by layer on a terminal, one line otherwise."""

    def __init__(self, image: str, progress: bool = True) -> None:
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

    def event(self, event: Mapping[str, Any]) -> None:
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
