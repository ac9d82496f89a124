"""The report of one workload document: every problem the rules find, where it was written.

Contract: a rule reports through :class:`ProblemReport` and never raises for bad input. Each
problem carries its key path (shown as ``stages[0].mounts[1]``) and, when the document came
from a file, its line; text from the file is shown with control characters escaped, so a
problem is always one printable line. A document reports at most :data:`MAX_PROBLEMS`
errors and as many warnings: a 1 MiB file of mistakes stays fast, and a report longer than
that is never read to its end; the rest are counted in one closing problem.
:meth:`ProblemReport.ordered` gives the problems by line, those without a line last, each line's
in the order the rules found them.

The report also knows where the document is: its name as shown (``path``) and its folder
(``base_dir``), against which relative host paths resolve. :func:`clip` and :func:`toml`
are how a rule echoes a value the user wrote.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from nodus_cli.errors import Problem, Severity
from nodus_cli.text import bounded, middle, plural, safe
from nodus_cli.workload.hints import MAX_NAME
from nodus_cli.workload.lineindex import Key, LineIndex, display_key

__all__ = ["MAX_LOC", "MAX_PROBLEMS", "MAX_QUOTED", "ProblemReport", "clip", "toml"]

#: A document reports at most this many errors, and as many warnings; the rest are counted
#: in one last problem.
MAX_PROBLEMS = 1000

_T = TypeVar("_T")

#: The longest key path a problem names (a 1 MB key is shown by its start and its end).
MAX_LOC = 120
#: A quoted value longer than this, wherever a message echoes it, is clipped: whatever
#: the file holds, a message stays a readable line (rules clip what they echo to
#: :data:`~nodus_cli.workload.hints.MAX_NAME`; this catches any they do not).
MAX_QUOTED = 2 * MAX_NAME
#: Every quoted run, paired from the start (a pattern for long runs only would pair the
#: closing quote of one value with the opening quote of the next, clipping the prose).
_QUOTED = re.compile(r'"([^"\n]*)"')


def _clip_quoted(match: re.Match[str]) -> str:
    inside = match.group(1)
    return match.group(0) if len(inside) <= MAX_QUOTED else '"' + clip(inside, MAX_NAME) + '"'


class ProblemReport:
    """The problems of one document, in the order the rules found them."""

    __slots__ = ("base_dir", "hidden", "lines", "path", "problems", "shown")

    def __init__(self, lines: LineIndex | None, path: str, base_dir: Path) -> None:
        self.lines = lines
        self.path = path
        self.base_dir = base_dir
        self.problems: list[Problem] = []
        self.shown: dict[Severity, int] = {"error": 0, "warning": 0}
        self.hidden: dict[Severity, int] = {"error": 0, "warning": 0}

    def error(self, key: Key, message: str) -> None:
        self._add(key, message, "error")

    def warn(self, key: Key, message: str) -> None:
        self._add(key, message, "warning")

    @property
    def full(self) -> bool:
        """Whether no more errors are shown: a rule may skip work that only builds one and
        call :meth:`skip` instead."""
        return self.shown["error"] >= MAX_PROBLEMS

    def skip(self) -> None:
        """Count one more error past the limit, without its message (only when :attr:`full`)."""
        self.hidden["error"] += 1

    def _add(self, key: Key, message: str, severity: Severity) -> None:
        if self.shown[severity] >= MAX_PROBLEMS:
            self.hidden[severity] += 1
            return
        self.shown[severity] += 1
        loc = safe(middle(display_key(key), MAX_LOC), newlines=False)
        if len(message) > MAX_QUOTED:  # the common case is short: nothing to clip
            message = bounded(_QUOTED.sub(_clip_quoted, message))
        text = safe(message, newlines=False)
        self.problems.append(Problem(loc, text, severity, self.line(key)))

    def line(self, key: Key) -> int | None:
        return self.lines.line_of(key) if self.lines is not None else None

    def at_line(self, key: Key) -> str:
        """`` (line 7)`` when the key's line is known, else nothing."""
        line = self.line(key)
        return f" (line {line})" if line is not None else ""

    def origin(self, key: Key) -> str:
        """``train.toml:7: mounts[0]``: where a value was written, for messages at run time."""
        line = self.line(key)
        where = f"{self.path}:{line}" if line is not None else self.path
        return f"{where}: {display_key(key)}"

    def unique(
        self,
        inherited: list[tuple[_T, Key]],
        own: list[tuple[_T, Key]],
        claim: Callable[[_T], object],
        clash: Callable[[_T, str], str],
    ) -> tuple[_T, ...]:
        """The items of both lists; an ``own`` item whose ``claim`` (a container path, a host
        port) an earlier item holds is an error at its key, worded by ``clash(item, other)``
        where ``other`` names the earlier item's key and line."""
        if not own:  # the common case: nothing of this level's own to check
            return tuple(item for item, _ in inherited) if inherited else ()
        seen = {claim(item): key for item, key in inherited}
        for item, key in own:
            other = seen.setdefault(claim(item), key)
            if other != key and self.full:
                self.skip()  # only counted: skip building the message
            elif other != key:
                self.error(key, clash(item, f"{display_key(other)}{self.at_line(other)}"))
        return tuple(item for item, _ in (*inherited, *own))

    def ordered(self) -> list[Problem]:
        """The problems by line (those without one last), then the count of those left out."""
        problems = sorted(self.problems, key=lambda p: (p.line is None, p.line or 0))
        return problems + self._left_out()

    def _left_out(self) -> list[Problem]:
        """The problems past :data:`MAX_PROBLEMS`, counted in one problem per severity
        (its ``count`` says how many it stands for, so a summary agrees with it)."""
        found: list[Problem] = []
        why = (
            f"nodus reports the first {MAX_PROBLEMS:,} errors and {MAX_PROBLEMS:,} warnings "
            "of a file; fix these and validate again"
        )
        for severity in ("error", "warning"):
            hidden = self.hidden[severity]
            if hidden:
                counted = plural(hidden, f"more {severity}", grouped=True)
                found.append(Problem("", f"{counted} not shown: {why}", severity, count=hidden))
        return found


def toml(value: Any, quoted: bool = False) -> str:
    """A value as it would be written in TOML (``quoted``: as a string)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = f"{value:g}" if math.isfinite(value) else str(value)
    elif isinstance(value, int | str):
        text = str(value)
    else:
        return '"..."'
    if quoted or isinstance(value, str):
        return json.dumps(clip(text), ensure_ascii=False)
    return text


def clip(text: str, limit: int = MAX_NAME) -> str:
    """A value echoed in a message, cut to ``limit`` characters (a message stays readable
    whatever the file holds)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
