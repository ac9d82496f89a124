"""Reading workload files: size limit, UTF-8, TOML syntax, and key -> line lookup.

``tomllib`` gives no positions, so :class:`LineIndex` rescans the text to find the
line of a dotted key. It only runs when a problem needs a line, which keeps
validating thousands of good files fast.

Every step is linear in the size of the file, whatever its shape, so a 1 MiB file
validates in well under two seconds: before ``tomllib`` parses, :func:`check_depth` refuses
keys and table headers of more than :data:`MAX_KEY_PARTS` parts (``tomllib``'s work grows
with the square of a key's depth; a 40,000-part dotted key takes it minutes), and the
cyclic garbage collector pauses while a document is parsed and normalized (the thousands
of tables a large file may declare otherwise make each collection rescan all of them).
"""

from __future__ import annotations

import bisect
import contextlib
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from nodus_cli import collector
from nodus_cli.errors import Problem

MAX_FILE_BYTES = 1024 * 1024
#: A dotted key, a table header, or a key under a header together with its header, has at
#: most this many parts. No workload key is deeper than 3 (``stages.requirements.gpu``).
MAX_KEY_PARTS = 8

Key = tuple[str | int, ...]

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)")
_TOML_END = re.compile(r"\s*\(at end of document\)")
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
    """Parse TOML, turning syntax errors into a problem with the line.

    Keys deeper than :data:`MAX_KEY_PARTS` are refused before ``tomllib`` reads them.
    """
    too_deep = check_depth(text)
    if too_deep is not None:
        raise LoadFailure(too_deep)
    control = _CONTROL.search(text)
    if control is not None:
        raise LoadFailure(_control_problem(text, control.start()))
    try:
        with collector.paused():
            return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LoadFailure(_syntax_problem(text, str(exc))) from None
    except (RecursionError, ValueError, MemoryError) as exc:
        # Nesting deeper than Python can follow, or an integer with too many digits.
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise LoadFailure(Problem("", f"TOML syntax error: {reason}")) from None


#: What TOML never allows, in a string or anywhere else: control characters but tab,
#: newline and a carriage return (checked by tomllib where it stands).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _control_problem(text: str, at: int) -> Problem:
    """A NUL byte or another control character, named as such (tomllib's words for it
    depend on where it stands: "expected newline" after a value)."""
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    char = text[at]
    what = "a NUL byte (\\0)" if char == "\0" else f"a control character (U+{ord(char):04X})"
    return Problem(
        "",
        f"TOML syntax error: column {column}: {what}, which TOML text never holds: is this a "
        "binary file, or was it damaged? Remove it",
        line=line,
    )


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
    import ast  # here: only a broken file pays for it

    try:
        parts = ast.literal_eval(match.group(0))
    except (ValueError, SyntaxError):
        return match.group(0)
    if not isinstance(parts, tuple) or not all(isinstance(p, str) for p in parts):
        return match.group(0)
    return f"`{'.'.join(parts)}`"


# -- the depth pre-scan ---------------------------------------------------------------------

_ML_BASIC = r'"""(?:[^"\\]++|\\[\s\S]|"(?!""))*+"""(?:"{0,2})'
_ML_LITERAL = r"'''[\s\S]*?'''(?:'{0,2})"
_BASIC = r'"(?:[^"\\\n]++|\\.)*+"'
_LITERAL = r"'[^'\n]*+'"
_STRING = f"{_ML_BASIC}|{_ML_LITERAL}|{_BASIC}|{_LITERAL}"
_KEY_PART_TEXT = rf"(?:[A-Za-z0-9_-]++|{_BASIC}|{_LITERAL})"
_DOTTED_KEY = re.compile(rf"{_KEY_PART_TEXT}(?:[ \t]*+\.[ \t]*+{_KEY_PART_TEXT})*+")
_QUOTED_PART = re.compile(f"{_BASIC}|{_LITERAL}")
_INLINE_BLANK = re.compile(r"[ \t]*+")
#: Between lines: whitespace, newlines and comments.
_LINES_BLANK = re.compile(r"(?:[ \t\r\n]++|#[^\n]*+)*+")
#: The rest of a line after a value or a header: whitespace and a comment.
_LINE_END = re.compile(r"[ \t\r]*+(?:#[^\n]*+)?+(?:\n|\Z)")
#: Inside an array: values, commas, newlines and comments, up to the next bracket or brace.
_ARRAY_RUN = re.compile(rf"(?:[^\"'#\[\]{{}}]++|{_STRING}|#[^\n]*+)*+")
#: One value of a key (a scalar or a string), up to what ends it on its line.
_VALUE_RUN = re.compile(rf"(?:[^\"'#\n\[\]{{}},]++|{_STRING})*+")


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
        m = _DOTTED_KEY.match(self.s, self.i)
        if m is None:
            raise _Unreadable
        self.i = m.end()
        text = m.group(0)
        dots = text.count(".")
        if dots and ('"' in text or "'" in text):
            dots -= sum(q.group(0).count(".") for q in _QUOTED_PART.finditer(text))
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


_KEY_PART = re.compile(_KEY_PART_TEXT)


def _decode_basic(body: str) -> str:
    """The text of a basic string's body (between the quotes)."""
    if "\\" not in body:
        return body
    out: list[str] = []
    j, n = 0, len(body)
    while j < n:
        if body[j] == "\\" and j + 1 < n:
            out.append(_unescape(body, j))
            j += _escape_length(body, j)
        else:
            out.append(body[j])
            j += 1
    return "".join(out)


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
        self._scanner: _Scanner | None = None
        self._chunk = 64

    def line_of(self, key: Key) -> int | None:
        """The line of the key, else of the closest enclosing table or key that is in the file.

        The text is read as far as the key needs (problems come in the file's order, so
        a report of the first thousand problems of a large file reads the start of it),
        each further stretch twice as long as the last: reading it all costs one pass.
        """
        scanner = self._scanner
        if scanner is None:
            scanner = self._scanner = _Scanner(self._text)
        while True:
            found, complete = self._walk(scanner, key)
            if complete or scanner.done:
                return found
            with collector.paused():
                try:
                    scanner.run(self._chunk)
                except Exception:  # a lookup never breaks a report: keep what was found
                    scanner.done = True
            self._chunk *= 2

    @staticmethod
    def _walk(scanner: _Scanner, key: Key) -> tuple[int | None, bool]:
        """The line found for the key so far, and whether the whole key was found."""
        node = scanner.root
        found: int | None = None
        for part in key:
            child = node.children.get(part)
            if child is None and node.pending is not None and isinstance(part, int):
                # Read ahead (twice as far as read so far): asking for every element in
                # turn reads each once, in a few calls.
                ahead = max(part, 2 * node.pending[1], 64)
                with contextlib.suppress(Exception), collector.paused():
                    scanner.elements(node, ahead)
                child = node.children.get(part)
            if child is None:
                return found, False
            node = child
            if node.line is not None:
                found = node.line
        return found, True


class _Node:
    """One key of the document: its line, its children, and the latest array-of-tables index.

    No parent pointer: the tree has no cycles, so it is freed as soon as it is dropped.
    """

    __slots__ = ("array", "children", "line", "pending")

    def __init__(self, line: int | None = None) -> None:
        self.line = line
        self.children: dict[str | int, _Node] = {}
        self.array = -1
        #: An array value whose elements are read when a line is asked for: where the next
        #: element starts and its index (None once every element is known).
        self.pending: tuple[int, int] | None = None

    def child(self, part: str | int, line: int | None = None) -> _Node:
        """The child named ``part``; a new one gets ``line``."""
        found = self.children.get(part)
        if found is None:
            found = self.children[part] = _Node(line)
        return found

    def path_to(self, target: _Node) -> Key | None:
        """The key path from this node to ``target`` (a search: only for error messages)."""
        stack: list[tuple[_Node, Key]] = [(self, ())]
        while stack:
            node, path = stack.pop()
            if node is target:
                return path
            stack.extend((child, (*path, part)) for part, child in node.children.items())
        return None


class _Scanner:
    """Records the line of every key, table, array element and inline-table key.

    It reads text that ``tomllib`` has accepted, so it can be lenient: anything it
    does not understand ends the scan, keeping the lines found so far. Keys live in a
    tree (one node per key part), so recording a dotted key or a header costs its length,
    never the square of it.
    """

    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.root = _Node()
        self.table = self.root  # where the next key goes
        self.done = False  # the whole text is read
        self.duplicate: tuple[Key, int, int] | None = None
        self._newlines = [m.start() for m in re.finditer("\n", text)]

    def line(self, pos: int) -> int:
        return bisect.bisect_left(self._newlines, pos) + 1

    def record(self, node: _Node, line: int, value: bool = False) -> None:
        if node.line is None:
            node.line = line
        elif value and self.duplicate is None:
            self.duplicate = (self.root.path_to(node) or (), node.line, line)

    # -- the document ------------------------------------------------------------

    def run(self, statements: int | None = None) -> None:
        """Read ``statements`` more lines of keys and headers (all when None)."""
        table = self.table
        count = 0
        while statements is None or count < statements:
            count += 1
            self.skip_blank(newlines=True)
            if self.i >= self.n:
                self.done = True
                break
            start = self.i
            if self.s.startswith("[[", self.i):
                self.i += 2
                parts = self.key()
                line = self.line(start)
                node = self.resolve(parts[:-1], line).child(parts[-1]) if parts else self.root
                self.record(node, line)
                node.array += 1
                table = node.child(node.array)
                self.record(table, line)
                self.skip_to_line_end()
            elif self.s[self.i] == "[":
                self.i += 1
                table = self.resolve(self.key(), self.line(start))
                self.skip_to_line_end()
            else:
                self.key_value(table)
                self.skip_to_line_end()
            self.table = table
            if self.i == start:  # no progress: text this scanner does not understand
                self.done = True
                break
        self.table = table

    def resolve(self, parts: Key, line: int) -> _Node:
        """The table a header names, through the latest element of arrays of tables
        (``stages.requirements`` -> ``stages[1].requirements``); every table on the way
        that has no line yet gets this one."""
        node = self.root
        for part in parts:
            node = node.child(part)
            self.record(node, line)
            if node.array >= 0:
                node = node.child(node.array)
        return node

    def key_value(self, table: _Node) -> None:
        start = self.i
        parts = self.key()
        if not parts:
            return
        line = self.line(start)
        node = table
        for part in parts[:-1]:
            children = node.children
            found = children.get(part)
            if found is None:
                found = children[part] = _Node(line)
            elif found.line is None:
                found.line = line
            node = found
        node = node.child(parts[-1])
        self.record(node, line, value=True)
        self.skip_blank(newlines=False)
        if self.i < self.n and self.s[self.i] == "=":
            self.i += 1
            self.skip_blank(newlines=False)
            self.value(node)

    # -- keys and values ------------------------------------------------------------

    def key(self) -> Key:
        """The dotted key here (one regular expression; quoted parts decoded)."""
        self.skip_blank(newlines=False)
        m = _DOTTED_KEY.match(self.s, self.i)
        if m is None:
            return ()
        self.i = m.end()
        text = m.group(0)
        if '"' not in text and "'" not in text:
            if "." not in text:
                return (text,)
            if " " not in text and "\t" not in text:
                return tuple(text.split("."))
            return tuple(part.strip(" \t") for part in text.split("."))
        parts: list[str | int] = []
        for part in _KEY_PART.finditer(text):
            raw = part.group(0)
            if raw.startswith('"'):
                parts.append(_decode_basic(raw[1:-1]))
            elif raw.startswith("'"):
                parts.append(raw[1:-1])
            else:
                parts.append(raw)
        return tuple(parts)

    def value(self, node: _Node) -> None:
        if self.i >= self.n:
            return
        c = self.s[self.i]
        if c == "[":
            self.array(node)
        elif c == "{":
            self.inline_table(node)
        elif self.s.startswith('"""', self.i) or self.s.startswith("'''", self.i):
            self.multiline_string()
        elif c == '"':
            m = _BASIC_VALUE.match(self.s, self.i)
            self.i = m.end() if m else self.n
        elif c == "'":
            end = self.s.find("'", self.i + 1)
            self.i = self.n if end < 0 else end + 1
        else:
            m = _SCALAR_END.search(self.s, self.i)
            self.i = m.start() if m else self.n

    def array(self, node: _Node) -> None:
        """Skip an array (its elements are read on demand: :meth:`elements`)."""
        self.i += 1  # [
        node.pending = (self.i, 0)
        depth = 1
        while depth:
            m = _BRACKETS_RUN.match(self.s, self.i)
            self.i = m.end() if m else self.n
            if self.i >= self.n:
                return
            depth += 1 if self.s[self.i] == "[" else -1
            self.i += 1

    def elements(self, node: _Node, wanted: int) -> None:
        """Read the elements of an array value up to index ``wanted`` (or its end)."""
        if node.pending is None:
            return
        saved = self.i
        self.i, index = node.pending
        try:
            while self.i < self.n and index <= wanted:
                self.skip_blank(newlines=True)
                if self.i >= self.n or self.s[self.i] == "]":
                    node.pending = None
                    return
                start = self.i
                element = node.child(index)
                self.record(element, self.line(start))
                self.value(element)
                self.skip_blank(newlines=True)
                if self.i < self.n and self.s[self.i] == ",":
                    self.i += 1
                index += 1
                if self.i == start:
                    raise ValueError("no progress in an array")
            node.pending = (self.i, index) if self.i < self.n else None
        finally:
            self.i = saved

    def inline_table(self, node: _Node) -> None:
        self.i += 1  # {
        while self.i < self.n:
            self.skip_blank(newlines=True)
            if self.i >= self.n or self.s[self.i] == "}":
                self.i += 1
                return
            start = self.i
            self.key_value(node)
            self.skip_blank(newlines=True)
            if self.i < self.n and self.s[self.i] == ",":
                self.i += 1
            if self.i == start:
                raise ValueError("no progress in an inline table")

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


#: Inside an array: everything up to the next bracket (strings and comments skipped whole).
_BRACKETS_RUN = re.compile(rf"(?:[^\"'#\[\]]++|{_STRING}|#[^\n]*+)*+")
_BASIC_VALUE = re.compile(r'"(?:[^"\\\n]++|\\.)*+"')


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
