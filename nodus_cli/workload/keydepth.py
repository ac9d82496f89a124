"""The depth pre-scan: refusing keys and table headers too deep for ``tomllib`` to parse.

Contract: :func:`check_depth` returns the first key or table header of more than
:data:`MAX_KEY_PARTS` parts (counting a key under a header together with its header) as a
problem with its line, or None. It reads the text once, linearly, whatever its shape;
text it cannot follow is left to ``tomllib``, which stops there with a syntax error
before it reaches anything later.

Why: ``tomllib``'s work grows faster than a key's depth, so one deep dotted key in a file
within the size limit would keep ``nodus validate`` busy far longer than any file should
(benchmarks/README.md). No workload key
is deeper than 3 (``stages.requirements.gpu``), so refusing more than 8 refuses nothing
a workload means.
"""

from __future__ import annotations

import re

from nodus_cli.errors import Problem
from nodus_cli.workload.tomlgrammar import DOTTED_KEY, QUOTED_PART, STRING

__all__ = ["MAX_KEY_PARTS", "check_depth"]

#: A dotted key, a table header, or a key under a header together with its header, has at
#: most this many parts. No workload key is deeper than 3 (``stages.requirements.gpu``).
MAX_KEY_PARTS = 8

_INLINE_BLANK = re.compile(r"[ \t]*+")
#: Between lines: whitespace, newlines and comments.
_LINES_BLANK = re.compile(r"(?:[ \t\r\n]++|#[^\n]*+)*+")
#: The rest of a line after a value or a header: whitespace and a comment.
_LINE_END = re.compile(r"[ \t\r]*+(?:#[^\n]*+)?+(?:\n|\Z)")
#: Inside an array: values, commas, newlines and comments, up to the next bracket or brace.
_ARRAY_RUN = re.compile(rf"(?:[^\"'#\[\]{{}}]++|{STRING}|#[^\n]*+)*+")
#: One value of a key (a scalar or a string), up to what ends it on its line.
_VALUE_RUN = re.compile(rf"(?:[^\"'#\n\[\]{{}},]++|{STRING})*+")


def check_depth(text: str) -> Problem | None:
    """The first key or table header deeper than :data:`MAX_KEY_PARTS`, as a problem.

    A linear scan of the text's structure (strings, comments, arrays, inline tables are
    skipped by regular expressions). Text it cannot follow is left to ``tomllib``, which
    stops there with a syntax error before it reaches anything later.
    """
    if text.count(".") < MAX_KEY_PARTS - 1:
        # No path can be too deep (the common case): a header of h parts and a key of k
        # parts below it hold h + k - 2 dots.
        return None
    try:
        return _DepthScan(text).run()
    except _Unreadable:
        return None


class _Unreadable(Exception):
    """Text that is not TOML: ``tomllib`` reports it."""


class _DepthScan:
    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.header = 0  # parts of the current table header
        self.header_at = 0

    def run(self) -> Problem | None:
        while True:
            self.i = _LINES_BLANK.match(self.s, self.i).end()  # type: ignore[union-attr]
            if self.i >= self.n:
                return None
            header = self.s[self.i] == "["
            problem = self.table_header() if header else self.key_value()
            if problem is not None:
                return problem
            self.line_end()

    def table_header(self) -> Problem | None:
        start = self.i
        self.i += 2 if self.s.startswith("[[", self.i) else 1
        self.blank()
        parts, shown = self.key()
        if parts > MAX_KEY_PARTS:
            return self.problem(start, f"the table header [{shown}] has {parts:,} parts")
        self.header, self.header_at = parts, start
        self.blank()
        close = "]]" if self.s.startswith("[[", start) else "]"
        if not self.s.startswith(close, self.i):
            raise _Unreadable
        self.i += len(close)
        return None

    def key_value(self) -> Problem | None:
        start = self.i
        parts, shown = self.key()
        if parts > MAX_KEY_PARTS:
            return self.problem(start, f'the key "{shown}" has {parts:,} parts')
        if self.header + parts > MAX_KEY_PARTS:
            line = self.s.count("\n", 0, self.header_at) + 1
            return self.problem(
                start,
                f'the key "{shown}" under the table header of line {line} makes a path of '
                f"{self.header + parts} parts",
            )
        self.expect_equals()
        return self.value()

    def value(self) -> Problem | None:
        """One value: a scalar or string, or an array or inline table with all it holds."""
        stack: list[str] = []
        while True:
            self.blank()
            c = self.s[self.i] if self.i < self.n else ""
            if c == "[":
                stack.append("[")
                self.i += 1
            elif c == "{":
                stack.append("{")
                self.i += 1
                problem = self.inline_key()
                if problem is not None:
                    return problem
                continue
            else:
                self.i = _VALUE_RUN.match(self.s, self.i).end()  # type: ignore[union-attr]
            # After a value, or inside an array: close what ends here.
            while stack:
                if stack[-1] == "[":
                    self.i = _ARRAY_RUN.match(self.s, self.i).end()  # type: ignore[union-attr]
                    c = self.s[self.i] if self.i < self.n else ""
                    if c == "]":
                        stack.pop()
                        self.i += 1
                        continue
                    if c in "[{":
                        break  # a nested value starts
                    raise _Unreadable
                self.blank()
                c = self.s[self.i] if self.i < self.n else ""
                if c == "}":
                    stack.pop()
                    self.i += 1
                elif c == ",":
                    self.i += 1
                    problem = self.inline_key()
                    if problem is not None:
                        return problem
                    break
                else:
                    raise _Unreadable
            else:
                return None

    def inline_key(self) -> Problem | None:
        """A key of an inline table (after ``{`` or ``,``), up to its ``=``; or ``}``."""
        self.blank()
        if self.s.startswith("}", self.i):
            return None  # the loop above closes it
        start = self.i
        parts, shown = self.key()
        if parts > MAX_KEY_PARTS:
            return self.problem(start, f'the key "{shown}" has {parts:,} parts')
        self.expect_equals()
        return None

    # -- pieces ----------------------------------------------------------------------------

    def key(self) -> tuple[int, str]:
        """The dotted key here: its number of parts and how it starts."""
        m = DOTTED_KEY.match(self.s, self.i)
        if m is None:
            raise _Unreadable
        self.i = m.end()
        text = m.group(0)
        dots = text.count(".")
        if dots and ('"' in text or "'" in text):
            dots -= sum(q.group(0).count(".") for q in QUOTED_PART.finditer(text))
        shown = text if len(text) <= 40 else text[:37] + "..."
        return dots + 1, _CONTROL_CHARS.sub("?", shown)

    def expect_equals(self) -> None:
        self.blank()
        if not self.s.startswith("=", self.i):
            raise _Unreadable
        self.i += 1

    def blank(self) -> None:
        self.i = _INLINE_BLANK.match(self.s, self.i).end()  # type: ignore[union-attr]

    def line_end(self) -> None:
        m = _LINE_END.match(self.s, self.i)
        if m is None:
            raise _Unreadable
        self.i = m.end()

    def problem(self, pos: int, what: str) -> Problem:
        line = self.s.count("\n", 0, pos) + 1
        return Problem(
            "",
            f"{what}; nodus accepts at most {MAX_KEY_PARTS}: no workload key is nested that "
            "deep (the deepest is 3, e.g. stages.requirements.gpu)",
            line=line,
        )


_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
