"""Reading files: size limit, UTF-8, TOML syntax errors with lines, key -> line lookup."""

from __future__ import annotations

import os
import re
import textwrap
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodus_cli.workload import load_file, load_text
from nodus_cli.workload.keydepth import MAX_KEY_PARTS, check_depth
from nodus_cli.workload.lineindex import LineIndex, display_key
from nodus_cli.workload.tomlsource import (
    MAX_FILE_BYTES,
    LoadFailure,
    decode,
    parse,
    read_text,
)


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


def test_a_duplicate_deep_in_a_table_names_its_whole_key() -> None:
    result = load_text('[[stages]]\nname = "a"\n[stages.env]\nA.B = "1"\nA.B = "2"\n', "d.toml")
    (problem,) = result.errors
    assert (problem.loc, problem.line) == ("stages[0].env.A.B", 5)
    assert "set twice (lines 4 and 5)" in problem.message


# -- lines of elements, read on demand ----------------------------------------------------------


def test_lines_of_array_elements_in_any_order() -> None:
    text = "x = [\n" + "".join(f'  "e{i}",\n' for i in range(500)) + "]\ny = [[1, 2], [\n3]]\n"
    text += "z = [{ a = 1 }, { b = [\n 1, 2] }]\n"
    parse(text)
    index = LineIndex(text)
    assert index.line_of(("x", 400)) == 402
    assert index.line_of(("x", 3)) == 5
    assert index.line_of(("x", 499)) == 501
    assert index.line_of(("x", 500)) == 1  # past the end: the array's own line
    assert index.line_of(("y", 1, 0)) == 504
    assert index.line_of(("y", 0, 1)) == 503
    assert index.line_of(("z", 1, "b", 1)) == 506
    assert index.line_of(("z", 1, "b")) == 505
    assert index.line_of(("z", 0, "a")) == 505


def test_brackets_in_strings_and_comments_do_not_end_an_array() -> None:
    text = 'x = [\n  "]",  # ] [\n  \'[\',\n  """\n]\n""",\n  "last",\n]\ny = 1\n'
    parse(text)
    index = LineIndex(text)
    assert index.line_of(("x", 3)) == 7
    assert index.line_of(("y",)) == 9


# -- keys too deep for the parser ----------------------------------------------------------------


def deep(parts: int) -> str:
    return "a" + ".a" * (parts - 1)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (f"{deep(40_000)} = 1\n", 1, ['the key "a.a.a.a', "has 40,000 parts"]),
        (f'image = "i"\n\n[{deep(9)}]\n', 3, ["the table header [a.a.a", "has 9 parts"]),
        (f'image = "i"\n[[{deep(500)}]]\n', 2, ["the table header", "has 500 parts"]),
        (f"x = {{ b = 1, {deep(20)} = 2 }}\n", 1, ['the key "a.a.a', "has 20 parts"]),
        (f"x = [\n 1,\n {{ {deep(9)} = 1 }},\n]\n", 3, ["has 9 parts"]),
        (
            f"[{deep(5)}]\nok = 1\n{deep(4)} = 1\n",
            3,
            ["under the table header of line 1 makes a path of 9 parts"],
        ),
        (f'"a.b".{deep(9)} = 1\n', 1, ["has 10 parts"]),
        (f"a . b . {deep(7)} = 1\n", 1, ["has 9 parts"]),
    ],
)
def test_keys_deeper_than_the_limit_are_refused_before_parsing(
    text: str, line: int, words: list[str]
) -> None:
    result = load_text(text, "deep.toml")
    assert not result.valid
    (problem,) = result.errors
    assert (problem.loc, problem.line) == ("", line)
    assert problem.message.endswith(
        f"; nodus accepts at most {MAX_KEY_PARTS}: no workload key is nested that deep (the "
        "deepest is 3, e.g. stages.requirements.gpu)"
    )
    for word in words:
        assert word in problem.message, problem.message


@pytest.mark.parametrize(
    "text",
    [
        f"{deep(MAX_KEY_PARTS)} = 1\n",
        f"[{deep(MAX_KEY_PARTS)}]\n",
        f"[{deep(MAX_KEY_PARTS - 1)}]\nb = 1\n",
        f"x = {{ {deep(MAX_KEY_PARTS)} = 1 }}\n",
        # dots that are not key separators
        f'x = "{deep(500)}"\n',
        f"x = '{deep(500)}'\n",
        f"# {deep(500)} = 1\n[{deep(3)}] # [{deep(50)}]\n",
        f'x = """\n[{deep(50)}]\n{deep(50)} = 1\n"""\n',
        f"x = '''\n[{deep(50)}]\n'''\n",
        f'"{deep(50)}" = 1\n',
        f"'{deep(50)}' = 1\n",
        f'x = [\n  1.5, 2.5, # {deep(50)}\n  "{deep(50)}",\n]\n',
        f"x = 1979-05-27 07:32:00.999\ny = {' '.join(['1.5'] * 20)!r}\n",
        f'x = {{ a = "{deep(50)}", b = [1.5, 2.5] }}\n',
    ],
)
def test_keys_at_the_limit_and_dots_elsewhere_are_accepted(text: str) -> None:
    parse(text)  # raises LoadFailure when refused
    assert check_depth(text) is None


def test_deep_keys_cost_linear_time() -> None:
    import time

    size = MAX_FILE_BYTES - 100
    shapes = [
        "a" + ".a" * (size // 2 - 8) + " = 1\n",
        "[a" + ".a" * (size // 2 - 8) + "]\n",
        "x = { a" + ".a" * (size // 2 - 16) + " = 1 }\n",
    ]
    for text in shapes:
        start = time.perf_counter()
        result = load_text(text)
        elapsed = time.perf_counter() - start
        assert not result.valid
        assert elapsed < 2, elapsed  # tomllib alone would take minutes


_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_KEY = re.compile(rf"{_PART}(?:[ \t]*\.[ \t]*{_PART})*")


def _parts(text: str) -> int:
    m = _KEY.match(text)
    assert m is not None, text
    return len(re.findall(_PART, m.group(0)))


def _reference_depth(text: str) -> int:
    """The deepest key path of a generated document, from its lines (independent of the
    pre-scan): every header and pair is on one line, the key first."""
    deepest, header = 0, 0
    for line in text.splitlines():
        if line.startswith("[t"):
            header = _parts(line[1:])
            deepest = max(deepest, header)
        elif line.startswith("p"):
            deepest = max(deepest, header + _parts(line))
        elif line.startswith("i"):
            inline = line[line.index("{") + 1 :].lstrip()
            deepest = max(deepest, header + 1, _parts(inline))
    return deepest


_BARE = st.sampled_from(["a", "b", "k-1", "x_y", "3"])
_QUOTED = st.sampled_from(['"q.r"', "'s.t'", '"[u]"', '"v\\"w"'])
_VALUES = [
    "1",
    '"a.b.c.d.e.f.g.h.i.j"',
    "'[x.y]'",
    "[1, # a.b.c.d.e.f.g.h.i\n 2,\n]",
    '[{ c = "]" }, [1, [2]]]',
    "1979-05-27 07:32:00",
    "3.14",
]


@st.composite
def _dotted(draw: st.DrawFn, depth: int) -> str:
    sep = draw(st.sampled_from([".", " . ", "\t.\t"]))
    return sep.join(draw(_BARE | _QUOTED) for _ in range(depth))


@st.composite
def _document(draw: st.DrawFn) -> str:
    lines = []
    for i in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["header", "pair", "inline"]))
        key = draw(_dotted(draw(st.integers(1, MAX_KEY_PARTS + 2))))
        if kind == "header":
            lines.append(f"[t{i}.{key}]")
        elif kind == "pair":
            value = draw(st.sampled_from([*_VALUES, '"""\n[a.b.c.d.e.f.g.h.i]\n"""']))
            lines.append(f"p{i}.{key} = {value}")
        else:
            lines.append(f"i{i} = {{ {key} = {draw(st.sampled_from(_VALUES[:3]))} }}")
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(_document())
def test_the_prescan_agrees_with_a_reference_on_generated_documents(text: str) -> None:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return  # e.g. the same key twice: not what this checks
    refused = check_depth(text)
    deepest = _reference_depth(text)
    assert (refused is not None) == (deepest > MAX_KEY_PARTS), (text, refused, deepest)


# -- lines the scanner used to miss -------------------------------------------------------------


def test_an_unknown_table_from_a_deep_header_has_its_line() -> None:
    result = load_text(f'image = "i"\n\n[{deep(MAX_KEY_PARTS - 1)}]\nx = 1\n', "w.toml")
    (problem,) = result.errors
    assert (problem.loc, problem.line) == ("a", 3)
    assert problem.message.startswith("unknown key")


def test_stage_requirements_without_stages_names_the_header_line() -> None:
    result = load_text('image = "i"\n\n[stages.requirements]\ncpu = 2\n', "w.toml")
    (problem,) = result.errors
    assert (problem.loc, problem.line) == ("stages", 3)
    assert "must be an array of tables" in problem.message


def test_the_garbage_collector_is_back_after_a_load() -> None:
    import gc

    assert gc.isenabled()
    load_text("[t]\nx = 1\n" * 100)
    assert gc.isenabled()
    gc.disable()
    try:
        load_text("[t]\nx = 1\n")
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()


def test_the_line_index_reads_only_as_far_as_asked() -> None:
    text = "".join(f"k{i} = 1\n" for i in range(100_000))
    index = LineIndex(text)
    assert index.line_of(("k10",)) == 11
    scanner = index._scanner
    assert scanner is not None and not scanner.done
    assert scanner.i < len(text) // 100  # a small stretch of the start
    assert index.line_of(("k99999",)) == 100_000
    assert index.line_of(("missing",)) is None
    assert scanner.done
