"""Reading files: size limit, UTF-8, TOML syntax errors with lines, key -> line lookup."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from nodus_cli.tomlsource import (
    MAX_FILE_BYTES,
    LineIndex,
    LoadFailure,
    decode,
    display_key,
    parse,
    read_text,
)
from nodus_cli.workload import load_file, load_text


def failure(call: object, *args: object) -> LoadFailure:
    with pytest.raises(LoadFailure) as info:
        call(*args)  # type: ignore[operator]
    return info.value


# -- size and encoding ------------------------------------------------------------------------


def test_a_file_over_1_mib_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_bytes(b"# " + b"x" * MAX_FILE_BYTES + b"\n")
    result = load_file(path)
    assert not result.valid
    (problem,) = result.errors
    assert problem.loc == "" and problem.line is None
    assert problem.message.startswith("the file is 1,048,579 bytes; workload files are limited")
    assert "1 MiB (1,048,576 bytes)" in problem.message


def test_a_file_of_exactly_1_mib_is_read(tmp_path: Path) -> None:
    path = tmp_path / "edge.toml"
    head = b'image = "i"\n'
    path.write_bytes(head + b"#" * (MAX_FILE_BYTES - len(head) - 1) + b"\n")
    assert path.stat().st_size == MAX_FILE_BYTES
    assert load_file(path).valid


def test_decode_refuses_more_than_1_mib() -> None:
    assert "limited to 1 MiB" in failure(decode, b"a" * (MAX_FILE_BYTES + 1)).problem.message


def test_non_utf8_bytes_name_the_line() -> None:
    problem = failure(decode, b'image = "i"\nname = "caf\xe9"\n').problem
    assert problem.line == 2
    assert problem.message == ("the file is not UTF-8 text (byte 0xe9 at line 2); save it as UTF-8")


def test_utf16_is_named() -> None:
    data = 'image = "i"\n'.encode("utf-16")
    assert "UTF-16" in failure(decode, data).problem.message


def test_a_byte_order_mark_is_accepted() -> None:
    assert decode(b'\xef\xbb\xbfimage = "i"\n') == 'image = "i"\n'


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_pipes_are_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    assert "is not a regular file" in load_file(fifo).errors[0].message


def test_unreadable_paths(tmp_path: Path) -> None:
    result = load_file(tmp_path / "missing.toml")
    assert "cannot read the file" in result.errors[0].message
    assert failure(read_text, tmp_path / "missing.toml").problem.loc == ""


# -- syntax errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('image = "i"\ngpu = \n', 2, ["TOML syntax error: column 7: invalid value"]),
        ('image = "i"\n\n[requirements\ncpu = 1\n', 3, ["TOML syntax error"]),
        ('image = "i"\nname = "x\n', 2, ["TOML syntax error", "a closing quote is missing"]),
        ('image = "i"\nname = """x\n', 2, ["TOML syntax error", "a closing quote is missing"]),
        ('image = "i"\ncommand = [\n"a",\n', 3, ["TOML syntax error: at the end of the file"]),
        ('image = "i"\nname = "a"\nname = "b"\n', 3, ["set twice (lines 2 and 3)", "keep one"]),
        ("[a]\nx = 1\n[a]\n", 3, ["cannot declare `a` twice"]),
        ("x = 1979-13-27\n", 1, ["TOML syntax error"]),
    ],
)
def test_toml_syntax_errors_name_the_line(text: str, line: int, words: list[str]) -> None:
    result = load_text(text, "bad.toml")
    assert not result.valid
    (problem,) = result.errors
    assert problem.line == line, problem
    for word in words:
        assert word in problem.message, problem.message
    assert "(at line" not in problem.message and "('" not in problem.message


def test_deep_nesting_is_a_syntax_error_not_a_crash() -> None:
    problem = failure(parse, "x = " + "[" * 100_000 + "]" * 100_000).problem
    assert problem.message.startswith("TOML syntax error")


# -- lines of keys ----------------------------------------------------------------------------

DOCUMENT = textwrap.dedent(
    """\
    # a comment with [brackets] and = signs
    name = "x"   # trailing
    "quoted key" = 1
    dotted.key.deep = 2
    inline = { a = 1, b = { c = 2 } }
    text = \"\"\"
    [not_a_table]
    fake = 1
    \"\"\"
    literal = '''
    [[nor_this]]
    '''
    array = [
      1,
      { name = "in-array" },
      [2, 3],
    ]

    [requirements]
    cpu = 1

    [[stages]]
    name = "a"
    [stages.requirements]
    gpu = "x"

    [[stages]]
    name = "b"
    [stages.requirements]
    gpu = "y"
    [stages.env]
    K = "v"
    """
)


@pytest.mark.parametrize(
    ("key", "line"),
    [
        (("name",), 2),
        (("quoted key",), 3),
        (("dotted", "key", "deep"), 4),
        (("dotted",), 4),
        (("inline", "a"), 5),
        (("inline", "b", "c"), 5),
        (("text",), 6),
        (("literal",), 10),
        (("array",), 13),
        (("array", 1), 15),
        (("array", 1, "name"), 15),
        (("array", 2, 1), 16),
        (("requirements",), 19),
        (("requirements", "cpu"), 20),
        (("stages",), 22),
        (("stages", 0), 22),
        (("stages", 0, "name"), 23),
        (("stages", 0, "requirements", "gpu"), 25),
        (("stages", 1), 27),
        (("stages", 1, "name"), 28),
        (("stages", 1, "requirements"), 29),
        (("stages", 1, "requirements", "gpu"), 30),
        (("stages", 1, "env", "K"), 32),
        # keys that are not in the file fall back to the closest enclosing one
        (("stages", 1, "image"), 27),
        (("requirements", "memory_gb"), 19),
        (("not_there",), None),
        (("not_a_table",), None),
        (("nor_this",), None),
    ],
)
def test_line_index(key: tuple[str | int, ...], line: int | None) -> None:
    parse(DOCUMENT)  # the document is valid TOML
    assert LineIndex(DOCUMENT).line_of(key) == line


def test_line_index_counts_only_newlines() -> None:
    # Characters that str.splitlines() treats as line breaks are not TOML newlines.
    text = 'a = "x\u2028y\x85z" # \u2029\nb = 1\n'
    parse(text)
    assert LineIndex(text).line_of(("b",)) == 2


def test_line_index_with_crlf_and_escapes() -> None:
    text = 'a = "q\\"uote"\r\n"b\\u0041" = 1\r\n[t]\r\nc = """x\\"""\r\n"""\r\nd = 2\r\n'
    parse(text)
    index = LineIndex(text)
    assert index.line_of(("bA",)) == 2
    assert index.line_of(("t", "d")) == 6


def test_line_index_never_fails() -> None:
    assert LineIndex("= = [[[ {{{ '''").line_of(("a",)) is None
    assert LineIndex("").line_of(("a", 1)) is None


def test_display_key() -> None:
    assert display_key(("stages", 1, "requirements", "cpu")) == "stages[1].requirements.cpu"
    assert display_key(("command", 0)) == "command[0]"
    assert display_key(()) == ""
