"""Reading workload files: size limit, UTF-8, TOML syntax, and key -> line lookup.

``tomllib`` gives no positions, so :class:`LineIndex` rescans the text to find the
line of a dotted key. It only runs when a problem needs a line, which keeps
validating thousands of good files fast.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from nodus_cli.problems import Problem

MAX_FILE_BYTES = 1024 * 1024

Key = tuple[str | int, ...]

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)")
_TOML_END = re.compile(r"\s*\(at end of document\)")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR_END = re.compile(r"[,\]}#\n]")
_KEY_TUPLE = re.compile(r"\((?:'[^']*'|\"[^\"]*\")(?:, *(?:'[^']*'|\"[^\"]*\"))*,?\)")


class LoadFailure(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def _too_large(size: int) -> Problem:
    return Problem(
        "",
        f"the file is {size:,} bytes; workload files are limited to 1 MiB ({MAX_FILE_BYTES:,} "
        "bytes): is this really a workload file? Split it or move data out of it",
    )


def read_text(path: Path) -> str:
    """Read a workload file as UTF-8, refusing anything that cannot be one."""
    try:
        info = path.stat()
    except OSError as exc:
        raise LoadFailure(Problem("", f"cannot read the file: {exc.strerror or exc}")) from None
    if not stat.S_ISREG(info.st_mode):
        # A pipe or a device could block or never end: workload files are plain files.
        raise LoadFailure(Problem("", "is not a regular file: name a workload file (*.toml)"))
    size = info.st_size
    if size > MAX_FILE_BYTES:
        raise LoadFailure(_too_large(size))
    try:
        with path.open("rb") as handle:
            # Read one byte more than allowed: a file that grew since stat() is still refused.
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise LoadFailure(Problem("", f"cannot read the file: {exc.strerror or exc}")) from None
    return decode(data)


def decode(data: bytes) -> str:
    """UTF-8 bytes to text (a leading byte-order mark is allowed and dropped)."""
    if len(data) > MAX_FILE_BYTES:
        raise LoadFailure(_too_large(len(data)))
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise LoadFailure(
            Problem("", "the file is UTF-16 text; save it as UTF-8 (TOML files are UTF-8)", line=1)
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise LoadFailure(
            Problem(
                "",
                f"the file is not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}); "
                "save it as UTF-8",
                line=line,
            )
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def parse(text: str) -> dict[str, Any]:
    """Parse TOML, turning syntax errors into a problem with the line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LoadFailure(_syntax_problem(text, str(exc))) from None
    except (RecursionError, ValueError, MemoryError) as exc:
        # Nesting deeper than Python can follow, or an integer with too many digits.
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise LoadFailure(Problem("", f"TOML syntax error: {reason}")) from None


def _syntax_problem(text: str, message: str) -> Problem:
    line: int | None = None
    where = ""
    match = _TOML_POSITION.search(message)
    if match:
        line = int(match.group(1))
        where = f"column {match.group(2)}: "
    elif _TOML_END.search(message):
        line = max(1, text.count("\n") + (0 if text.endswith("\n") else 1))
        where = "at the end of the file: "
    reason = _TOML_END.sub("", _TOML_POSITION.sub("", message)).strip().rstrip(".")
    if reason.startswith("Cannot overwrite a value"):
        duplicate = _first_duplicate(text)
        if duplicate is not None:
            key, first, second = duplicate
            return Problem(
                display_key(key),
                f"TOML syntax error: set twice (lines {first} and {second}); keep one of them",
                line=second,
            )
    reason = _KEY_TUPLE.sub(_key_text, reason)
    if reason.startswith("Unterminated string"):
        reason += " (a closing quote is missing)"
    elif reason == "Illegal character '\\n'":
        reason = "the line ends inside a string: a closing quote is missing"
    elif reason.startswith("Cannot declare"):
        reason += ": declare each table once and put all its keys below it"
    elif reason.startswith("Cannot mutate immutable namespace"):
        reason += ": it is an inline table or a value, which cannot be extended later"
    return Problem("", f"TOML syntax error: {where}{reason[:1].lower()}{reason[1:]}", line=line)


def _key_text(match: re.Match[str]) -> str:
    """``('stages', 'requirements')`` in a tomllib message -> ```stages.requirements```."""
    try:
        parts = ast.literal_eval(match.group(0))
    except (ValueError, SyntaxError):
        return match.group(0)
    if not isinstance(parts, tuple) or not all(isinstance(p, str) for p in parts):
        return match.group(0)
    return f"`{'.'.join(parts)}`"


def _first_duplicate(text: str) -> tuple[Key, int, int] | None:
    try:
        scanner = _Scanner(text)
        scanner.run()
    except Exception:
        return None
    return scanner.duplicate


class LineIndex:
    """Maps key paths such as ``("stages", 1, "requirements", "cpu")`` to 1-based lines."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._lines: dict[Key, int] | None = None

    def line_of(self, key: Key) -> int | None:
        """The line of the key, else of the closest enclosing table or key that is in the file."""
        if self._lines is None:
            scanner = _Scanner(self._text)
            with contextlib.suppress(Exception):  # a position lookup never breaks a report
                scanner.run()
            self._lines = scanner.lines
        probe = key
        while probe:
            found = self._lines.get(probe)
            if found is not None:
                return found
            probe = probe[:-1]
        return None


class _Scanner:
    """Records the line of every key, table, array element and inline-table key.

    It reads text that ``tomllib`` has accepted, so it can be lenient: anything it
    does not understand ends the scan, keeping the lines found so far.
    """

    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.lines: dict[Key, int] = {}
        self.duplicate: tuple[Key, int, int] | None = None
        self._newlines = [m.start() for m in re.finditer("\n", text)]
        self._arrays: dict[Key, int] = {}

    def line(self, pos: int) -> int:
        return bisect.bisect_left(self._newlines, pos) + 1

    def record(self, key: Key, pos: int, value: bool = False) -> None:
        line = self.line(pos)
        if key in self.lines:
            if value and self.duplicate is None:
                self.duplicate = (key, self.lines[key], line)
            return
        self.lines[key] = line

    # -- the document ------------------------------------------------------------

    def run(self) -> None:
        prefix: Key = ()
        while True:
            self.skip_blank(newlines=True)
            if self.i >= self.n:
                return
            start = self.i
            if self.s.startswith("[[", self.i):
                self.i += 2
                parts = self.key()
                parent = self.resolve(parts[:-1])
                path = (*parent, *parts[-1:])
                index = self._arrays.get(path, -1) + 1
                self._arrays[path] = index
                self.record(path, start)
                prefix = (*path, index)
                self.record(prefix, start)
                self.skip_to_line_end()
            elif self.s[self.i] == "[":
                self.i += 1
                prefix = self.resolve(self.key())
                self.record(prefix, start)
                self.skip_to_line_end()
            else:
                self.key_value(prefix)
                self.skip_to_line_end()
            if self.i == start:  # no progress: text this scanner does not understand
                return

    def resolve(self, parts: Key) -> Key:
        """Insert array-of-tables indexes: ``stages.requirements`` -> ``stages.1.requirements``."""
        out: list[str | int] = []
        for part in parts:
            out.append(part)
            current = tuple(out)
            if current in self._arrays:
                out.append(self._arrays[current])
        return tuple(out)

    def key_value(self, prefix: Key) -> None:
        start = self.i
        parts = self.key()
        if not parts:
            return
        for depth in range(1, len(parts)):
            self.record((*prefix, *parts[:depth]), start)
        path = (*prefix, *parts)
        self.record(path, start, value=True)
        self.skip_blank(newlines=False)
        if self.i < self.n and self.s[self.i] == "=":
            self.i += 1
            self.skip_blank(newlines=False)
            self.value(path)

    # -- keys and values ------------------------------------------------------------

    def key(self) -> Key:
        parts: list[str | int] = []
        while self.i < self.n:
            self.skip_blank(newlines=False)
            c = self.s[self.i] if self.i < self.n else ""
            if c == '"':
                parts.append(self.basic_string())
            elif c == "'":
                end = self.s.find("'", self.i + 1)
                end = self.n if end < 0 else end
                parts.append(self.s[self.i + 1 : end])
                self.i = end + 1
            else:
                m = _BARE_KEY.match(self.s, self.i)
                if not m:
                    break
                parts.append(m.group(0))
                self.i = m.end()
            self.skip_blank(newlines=False)
            if self.i < self.n and self.s[self.i] == ".":
                self.i += 1
                continue
            break
        return tuple(parts)

    def value(self, path: Key) -> None:
        if self.i >= self.n:
            return
        c = self.s[self.i]
        if c == "[":
            self.array(path)
        elif c == "{":
            self.inline_table(path)
        elif self.s.startswith('"""', self.i) or self.s.startswith("'''", self.i):
            self.multiline_string()
        elif c == '"':
            self.basic_string()
        elif c == "'":
            end = self.s.find("'", self.i + 1)
            self.i = self.n if end < 0 else end + 1
        else:
            m = _SCALAR_END.search(self.s, self.i)
            self.i = m.start() if m else self.n

    def array(self, path: Key) -> None:
        self.i += 1  # [
        index = 0
        while self.i < self.n:
            self.skip_blank(newlines=True)
            if self.i >= self.n or self.s[self.i] == "]":
                self.i += 1
                return
            start = self.i
            self.record((*path, index), start)
            self.value((*path, index))
            self.skip_blank(newlines=True)
            if self.i < self.n and self.s[self.i] == ",":
                self.i += 1
            index += 1
            if self.i == start:
                raise ValueError("no progress in an array")

    def inline_table(self, path: Key) -> None:
        self.i += 1  # {
        while self.i < self.n:
            self.skip_blank(newlines=True)
            if self.i >= self.n or self.s[self.i] == "}":
                self.i += 1
                return
            start = self.i
            self.key_value(path)
            self.skip_blank(newlines=True)
            if self.i < self.n and self.s[self.i] == ",":
                self.i += 1
            if self.i == start:
                raise ValueError("no progress in an inline table")

    def basic_string(self) -> str:
        j = self.i + 1
        buf: list[str] = []
        while j < self.n and self.s[j] != '"':
            if self.s[j] == "\\" and j + 1 < self.n:
                buf.append(_unescape(self.s, j))
                j += _escape_length(self.s, j)
                continue
            buf.append(self.s[j])
            j += 1
        self.i = j + 1
        return "".join(buf)

    def multiline_string(self) -> None:
        delim = self.s[self.i : self.i + 3]
        j = self.i + 3
        while True:
            end = self.s.find(delim, j)
            if end < 0:
                self.i = self.n
                return
            if delim == '"""' and _escaped(self.s, end):
                j = end + 1
                continue
            # Up to two quotes may end the content right before the delimiter.
            while self.s.startswith(delim[0], end + 3) and end + 3 < self.n:
                end += 1
            self.i = end + 3
            return

    # -- whitespace and comments ----------------------------------------------------

    def skip_blank(self, newlines: bool) -> None:
        while self.i < self.n:
            c = self.s[self.i]
            if c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            elif c == "#" and newlines:
                end = self.s.find("\n", self.i)
                self.i = self.n if end < 0 else end + 1
            else:
                return

    def skip_to_line_end(self) -> None:
        end = self.s.find("\n", self.i)
        self.i = self.n if end < 0 else end + 1


_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


def _escape_length(s: str, j: int) -> int:
    kind = s[j + 1]
    if kind == "u":
        return 6
    if kind == "U":
        return 10
    return 2


def _unescape(s: str, j: int) -> str:
    kind = s[j + 1]
    if kind in ("u", "U"):
        digits = s[j + 2 : j + _escape_length(s, j)]
        try:
            return chr(int(digits, 16))
        except ValueError:
            return ""
    return _ESCAPES.get(kind, kind)


def _escaped(s: str, pos: int) -> bool:
    """Whether the character at ``pos`` is escaped by an odd run of backslashes."""
    count = 0
    k = pos - 1
    while k >= 0 and s[k] == "\\":
        count += 1
        k -= 1
    return count % 2 == 1


def display_key(key: Key) -> str:
    out = ""
    for part in key:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def load_document(text: str) -> dict[str, Any]:
    return parse(text)
