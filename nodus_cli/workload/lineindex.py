"""Key paths and the lines they stand on: which line of a workload file sets a key.

Contract: :class:`LineIndex` maps a key path such as ``("stages", 1, "requirements",
"cpu")`` to its 1-based line, or to the line of the closest enclosing table or key in the
file; :func:`first_duplicate` finds a key set twice, with both lines; :func:`display_key`
writes a path as a user reads it (``stages[1].requirements.cpu``). They read text that
``tomllib`` has accepted (or refused only for a duplicate), leniently: what they do not
understand ends the scan and keeps what was found.

Why a scanner of our own: ``tomllib`` gives no positions. The index only runs when a
problem needs a line, and reads only as far as the key asked for, which keeps validating
many good files cheap.
"""

from __future__ import annotations

import bisect
import contextlib
import re

from nodus_cli import collector
from nodus_cli.workload.tomlgrammar import DOTTED_KEY, KEY_PART, STRING

__all__ = ["Key", "LineIndex", "display_key", "first_duplicate"]

#: A key path: table and key names, and the indexes of array elements.
Key = tuple[str | int, ...]

_SCALAR_END = re.compile(r"[,\]}#\n]")


def display_key(key: Key) -> str:
    out = ""
    for part in key:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


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


def first_duplicate(text: str) -> tuple[Key, int, int] | None:
    """The first key set twice: its path and its two lines (None when there is none)."""
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
        m = DOTTED_KEY.match(self.s, self.i)
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
        for part in KEY_PART.finditer(text):
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
_BRACKETS_RUN = re.compile(rf"(?:[^\"'#\[\]]++|{STRING}|#[^\n]*+)*+")
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
