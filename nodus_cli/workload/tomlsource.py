"""Reading workload files: size limit, UTF-8, TOML syntax, each failure as one problem.

Contract: :func:`read_text` and :func:`decode` give the text of a file of at most
:data:`MAX_FILE_BYTES` that is UTF-8, and :func:`parse` its TOML document; anything else
raises :class:`LoadFailure`, whose problem says what is wrong, on which line, and how to
fix it (never ``tomllib``'s words alone). The line of a key (``tomllib`` gives no
positions) is :mod:`.lineindex`'s business, the refusal of keys too deep to parse
:mod:`.keydepth`'s.

Every step is linear in the size of the file, whatever its shape (benchmarks/README.md,
``validate_pathological.py``): before ``tomllib`` parses, :func:`~.keydepth.check_depth`
refuses keys and table headers of more than :data:`~.keydepth.MAX_KEY_PARTS` parts
(``tomllib``'s work grows with the square of a key's depth), and the cyclic garbage
collector pauses while a document is parsed (the thousands of tables a large file may
declare otherwise make each collection rescan all of them).
"""

from __future__ import annotations

import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from nodus_cli import collector
from nodus_cli.errors import Problem
from nodus_cli.workload.keydepth import check_depth
from nodus_cli.workload.lineindex import display_key, first_duplicate

__all__ = ["MAX_FILE_BYTES", "LoadFailure", "decode", "parse", "read_text"]

MAX_FILE_BYTES = 1024 * 1024

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)")
_TOML_END = re.compile(r"\s*\(at end of document\)")
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

    Keys deeper than :data:`~.keydepth.MAX_KEY_PARTS` are refused before ``tomllib`` reads them.
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
        duplicate = first_duplicate(text)
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
    import ast  # lazy, for start-up: only a broken file pays for it

    try:
        parts = ast.literal_eval(match.group(0))
    except (ValueError, SyntaxError):
        return match.group(0)
    if not isinstance(parts, tuple) or not all(isinstance(p, str) for p in parts):
        return match.group(0)
    return f"`{'.'.join(parts)}`"
