"""Reading workload files: size limit, UTF-8, TOML syntax, and key -> line lookup.

``tomllib`` gives no positions, so :class:`LineIndex` rescans the text to find the
line of a dotted key. It only runs when a problem needs a line, which keeps
validating thousands of good files fast.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from nodus_cli.problems import Problem

MAX_FILE_BYTES = 1024 * 1024

Key = tuple[str | int, ...]

_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class LoadFailure(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def read_text(path: Path) -> str:
    """Read a workload file as UTF-8, refusing anything that cannot be one."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise LoadFailure(Problem("", f"cannot read the file: {exc.strerror or exc}")) from None
    if size > MAX_FILE_BYTES:
        raise LoadFailure(
            Problem(
                "",
                f"the file is {size / 1024 / 1024:.1f} MiB; workload files are limited to 1 MiB "
                "(is this really a workload file?)",
            )
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LoadFailure(Problem("", f"cannot read the file: {exc.strerror or exc}")) from None
    return decode(data)


def decode(data: bytes) -> str:
    if len(data) > MAX_FILE_BYTES:
        raise LoadFailure(Problem("", "workload files are limited to 1 MiB"))
    try:
        return data.decode("utf-8")
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


def parse(text: str) -> dict[str, Any]:
    """Parse TOML, turning syntax errors into a problem with the line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_POSITION.search(message)
        line = int(match.group(1)) if match else None
        column = int(match.group(2)) if match else None
        reason = _TOML_POSITION.sub("", message).strip().rstrip(".")
        where = f"column {column}: " if column is not None else ""
        raise LoadFailure(
            Problem("", f"TOML syntax error: {where}{reason[:1].lower()}{reason[1:]}", line=line)
        ) from None
    except (RecursionError, ValueError) as exc:
        raise LoadFailure(Problem("", f"TOML syntax error: {exc}")) from None


class LineIndex:
    """Maps key paths such as ``("stages", 1, "requirements", "cpu")`` to 1-based lines."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._lines: dict[Key, int] | None = None

    def line_of(self, key: Key) -> int | None:
        if self._lines is None:
            self._lines = _scan(self._text)
        probe = key
        while probe:
            if probe in self._lines:
                return self._lines[probe]
            probe = probe[:-1]
        return None


def _parse_key(s: str, i: int) -> tuple[list[str], int]:
    """Parse a (possibly dotted, possibly quoted) key starting at ``s[i]``."""
    parts: list[str] = []
    n = len(s)
    while i < n:
        while i < n and s[i] in " \t":
            i += 1
        if i < n and s[i] in "\"'":
            quote = s[i]
            j = i + 1
            buf = []
            while j < n and s[j] != quote:
                if quote == '"' and s[j] == "\\" and j + 1 < n:
                    buf.append(s[j + 1])
                    j += 2
                    continue
                buf.append(s[j])
                j += 1
            parts.append("".join(buf))
            i = j + 1
        else:
            m = _BARE_KEY.match(s, i)
            if not m:
                break
            parts.append(m.group(0))
            i = m.end()
        while i < n and s[i] in " \t":
            i += 1
        if i < n and s[i] == ".":
            i += 1
            continue
        break
    return parts, i


def _scan(text: str) -> dict[Key, int]:
    lines: dict[Key, int] = {}
    array_counts: dict[Key, int] = {}
    prefix: Key = ()
    depth = 0  # open [ and { of values spanning lines
    in_multiline: str | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw
        if in_multiline is not None:
            end = line.find(in_multiline)
            if end < 0:
                continue
            line = line[end + 3 :]
            in_multiline = None
            if depth == 0:
                continue
        stripped = line.lstrip()
        if depth == 0 and stripped.startswith("["):
            is_array = stripped.startswith("[[")
            parts, _ = _parse_key(stripped, 2 if is_array else 1)
            resolved = _resolve(tuple(parts), array_counts)
            if is_array:
                index = array_counts.get(resolved, -1) + 1
                array_counts[resolved] = index
                prefix = (*resolved, index)
            else:
                prefix = resolved
            lines.setdefault(prefix, lineno)
            continue
        if depth == 0 and stripped and not stripped.startswith("#"):
            parts, pos = _parse_key(stripped, 0)
            if parts and pos < len(stripped) and stripped[pos] == "=":
                key = (*prefix, *parts)
                lines.setdefault(key, lineno)
                rest = stripped[pos + 1 :]
                _record_inline(rest, key, lineno, lines)
                stripped = rest
        depth, in_multiline = _track(stripped, depth)
    return lines


def _resolve(parts: Key, array_counts: dict[Key, int]) -> Key:
    """Insert array-of-tables indexes: ``stages.requirements`` -> ``stages.1.requirements``."""
    out: list[str | int] = []
    for part in parts:
        out.append(part)
        current = tuple(out)
        if current in array_counts:
            out.append(array_counts[current])
    return tuple(out)


def _record_inline(rest: str, key: Key, lineno: int, lines: dict[Key, int]) -> None:
    body = rest.strip()
    if not body.startswith("{"):
        return
    for piece in body[1:].split(","):
        parts, pos = _parse_key(piece, 0)
        if parts and pos < len(piece) and piece[pos] == "=":
            lines.setdefault((*key, *parts), lineno)


def _track(s: str, depth: int) -> tuple[int, str | None]:
    """Follow strings, comments and brackets to know whether a value continues."""
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "#":
            break
        if s.startswith('"""', i) or s.startswith("'''", i):
            delim = s[i : i + 3]
            end = s.find(delim, i + 3)
            if end < 0:
                return depth, delim
            i = end + 3
            continue
        if c in "\"'":
            j = i + 1
            while j < n and s[j] != c:
                j += 2 if (c == '"' and s[j] == "\\") else 1
            i = j + 1
            continue
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return depth, None


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
