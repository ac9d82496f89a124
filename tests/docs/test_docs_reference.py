"""The reference pages tell the truth: docs/workload.md and docs/configuration.md.

docs/workload.md: every ```toml block is a workload. Unmarked blocks validate without a
problem; a block after ``<!-- invalid -->`` is rejected, and one after ``<!-- warning -->``
is valid with warnings, each printing exactly the ``train.toml:...`` lines of the ```text
block that follows it. Every key the rules know is named on the page, the placement table
matches the rules, and every name from another tool has its row.

docs/configuration.md: every ```toml block parses as a configuration with the loaders
nodus uses (``config.local()``, ``config.catalog()``, ``config.limits()``); a block after
``<!-- invalid -->`` is refused with the ``error:``/``hint:`` lines that follow it. Every
environment variable the page's table lists appears in the package's source, and every
``NODUS_*`` variable of the source is in that table.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import nodus_cli
from nodus_cli import config
from nodus_cli.errors import NodusError
from nodus_cli.hardware import gpus
from nodus_cli.run import launcher
from nodus_cli.workload import (
    FLAT_SHORTCUTS,
    NESTED_ONLY,
    REQUIREMENT_KEYS,
    RESERVED_ENV,
    STAGE_KEYS,
    TOP_LEVEL_KEYS,
    load_text,
)
from nodus_cli.workload.hints import FOREIGN_KEYS, MAP_FOREIGN_KEYS, UNSUPPORTED_KEYS
from nodus_cli.workload.model import MAP_KEYS
from paths import DOCS

WORKLOAD_PAGE = (DOCS / "workload.md").read_text("utf-8")
CONFIG_PAGE = (DOCS / "configuration.md").read_text("utf-8")
PACKAGE = Path(nodus_cli.__file__).resolve().parent
SOURCE = "\n".join(p.read_text("utf-8") for p in sorted(PACKAGE.rglob("*.py")))
SHOWN_AS = "train.toml"
CONFIG_SHOWN_AS = "~/.config/nodus/config.toml"

_FENCE = re.compile(r"^( *)```([a-z]*)\n(.*?)^\1```", re.S | re.M)
_MARK = re.compile(r"<!--\s*([a-z]+)\s*-->\s*$")
_SEPARATOR = re.compile(r"\|[-:| ]+\|")


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    line: int
    mark: str | None
    #: The body of the next code block when it is a ```text block (the quoted output).
    output: str | None

    @property
    def id(self) -> str:
        return f"line-{self.line}" + (f"-{self.mark}" if self.mark else "")


def blocks(page: str) -> list[Block]:
    found = []
    fences = list(_FENCE.finditer(page))
    for i, m in enumerate(fences):
        before = page[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        following = fences[i + 1] if i + 1 < len(fences) else None
        output = _body(following) if following and following.group(2) == "text" else None
        found.append(
            Block(
                m.group(2),
                _body(m),
                page.count("\n", 0, m.start()) + 1,
                mark.group(1) if mark else None,
                output,
            )
        )
    return found


def _body(fence: re.Match[str]) -> str:
    """A block's text, without the indentation of a block inside a list item."""
    indent = len(fence.group(1))
    return "".join(line[indent:] for line in fence.group(3).splitlines(keepends=True))


def section(page: str, title: str) -> str:
    """The text of one ``## `` or ``### `` section, up to the next heading of its level or
    a higher one (a ``#`` line inside a code block is no heading)."""
    level = len(title) - len(title.lstrip("#"))
    lines = page[page.index(title + "\n") :].splitlines(keepends=True)[1:]
    fenced = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", line):
            return "".join(lines[:i])
    return "".join(lines)


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the markdown tables in ``text`` (not their headers), cells stripped."""
    lines = text.splitlines()
    rows = []
    for i, line in enumerate(lines):
        if not line.startswith("|") or _SEPARATOR.fullmatch(line):
            continue
        if i + 1 < len(lines) and _SEPARATOR.fullmatch(lines[i + 1]):
            continue  # a header
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def named(text: str) -> set[str]:
    """Every name written as `name` in ``text``."""
    return set(re.findall(r"`([^`\n]+)`", text))


# -- docs/workload.md ------------------------------------------------------------------------

WORKLOADS = [b for b in blocks(WORKLOAD_PAGE) if b.lang == "toml"]


def test_the_workload_page_has_examples_of_every_kind() -> None:
    marks = [b.mark for b in WORKLOADS]
    assert marks.count(None) >= 10
    assert marks.count("invalid") >= 10
    assert marks.count("warning") >= 2
    assert set(marks) <= {None, "invalid", "warning"}


@pytest.mark.parametrize("block", WORKLOADS, ids=[b.id for b in WORKLOADS])
def test_every_workload_example_says_what_nodus_says(block: Block, tmp_path: Path) -> None:
    (tmp_path / "inputs.txt").write_text("shard-0.jsonl\nshard-1.jsonl\n", encoding="utf-8")
    result = load_text(block.body, SHOWN_AS, default_name="train", base_dir=tmp_path)
    printed = [p.render(SHOWN_AS) for p in result.problems]
    if block.mark is None:
        assert result.valid, "\n".join(printed)
        assert printed == [], f"an unmarked example must have no warning:\n{printed}"
        return
    assert block.output is not None, "a marked example is followed by a ```text block"
    quoted = [line for line in block.output.splitlines() if line.startswith(SHOWN_AS)]
    assert printed == quoted
    if block.mark == "invalid":
        assert not result.valid
    else:
        assert result.valid
        assert result.warnings and not result.errors


def test_every_key_is_named_on_the_workload_page() -> None:
    keys = set(TOP_LEVEL_KEYS) | set(STAGE_KEYS) | set(REQUIREMENT_KEYS) | set(MAP_KEYS)
    missing = sorted(k for k in keys if f"`{k}`" not in WORKLOAD_PAGE)
    assert missing == []
    tables = ("requirements", "stages", "map", *MAP_KEYS)  # each has a section of its own
    for key in keys:
        assert f"### `{key}`" in WORKLOAD_PAGE or key in tables, key


def test_the_placement_table_matches_the_rules() -> None:
    rows = table_rows(section(WORKLOAD_PAGE, "## Where each key may stand"))
    places = {row[0].strip("`"): [cell == "yes" for cell in row[1:]] for row in rows}
    everything = set(TOP_LEVEL_KEYS) | set(STAGE_KEYS) | set(REQUIREMENT_KEYS) | set(MAP_KEYS)
    assert set(places) == everything
    for key, (top, nested, stage, stage_nested, in_map) in places.items():
        assert top == (key in TOP_LEVEL_KEYS), key
        assert nested == (key in REQUIREMENT_KEYS), key
        assert stage == (key in STAGE_KEYS), key
        assert stage_nested == (key in REQUIREMENT_KEYS), key
        assert in_map == (key in MAP_KEYS), key


def test_the_shortcut_section_names_the_shortcuts_and_the_nested_only_keys() -> None:
    text = section(WORKLOAD_PAGE, "## Flat shortcuts and the nested form")
    assert {f"`{k}`" for k in FLAT_SHORTCUTS + NESTED_ONLY} <= {f"`{k}`" for k in named(text)}


def test_every_name_from_another_tool_has_its_row() -> None:
    text = section(WORKLOAD_PAGE, "## Keys from other tools")
    rows = table_rows(text)
    written = {name for row in rows for name in named(row[0])}
    assert set(FOREIGN_KEYS) | set(UNSUPPORTED_KEYS) | set(MAP_FOREIGN_KEYS) <= written
    for name in written:  # and each is refused, the error at that very key
        table = "[map]\n" if name in MAP_FOREIGN_KEYS and name not in FOREIGN_KEYS else ""
        result = load_text(f'image = "x"\n{table}{name} = 1\n')
        at = f"map.{name}" if table else name
        assert any(p.loc == at and p.severity == "error" for p in result.problems), name


def test_the_environment_nodus_sets_is_the_reserved_names() -> None:
    rows = table_rows(section(WORKLOAD_PAGE, "## The environment nodus sets"))
    assert {row[0].strip("`") for row in rows} == set(RESERVED_ENV)


def test_the_gpu_names_the_page_accepts_are_models() -> None:
    text = section(WORKLOAD_PAGE, "### `gpu`")
    accepted = text.split("These are **not** model names")[0]
    spellings = re.findall(r'`"([^"`]+)"`', accepted)
    assert len(spellings) >= 15
    for spelling in spellings:
        assert gpus.table().lookup(spelling) is not None, spelling


def test_the_names_the_page_refuses_are_refused() -> None:
    text = section(WORKLOAD_PAGE, "### `gpu`").split("These are **not** model names")[1]
    refused = [s for row in table_rows(text) for s in re.findall(r'`"([^"`]+)"`', row[0])]
    assert len(refused) >= 15
    for spelling in refused:
        result = load_text(f'image = "x"\ngpu = "{spelling}"\n')
        assert not result.valid, spelling


def test_the_missing_variable_message_is_quoted_as_nodus_prints_it() -> None:
    text = section(WORKLOAD_PAGE, "### `env`")
    quoted = next(b.body for b in blocks(text) if "are not set" in b.body)
    workload = load_text('image = "x"\nenv = { HF_TOKEN = "${HF_TOKEN}" }\n').workload
    assert workload is not None
    with pytest.raises(NodusError) as caught:
        launcher.resolved_env(workload, {})
    printed = f"error: {caught.value.message}\nhint: {caught.value.hint}"
    assert [line.strip() for line in quoted.splitlines()] == [
        line.strip() for line in printed.splitlines()
    ]


# -- docs/configuration.md ---------------------------------------------------------------------

CONFIGS = [b for b in blocks(CONFIG_PAGE) if b.lang == "toml"]


def _load_all() -> dict[str, Any]:
    """Every section of ``config.SECTIONS`` as its reader (the function of its name) reads it."""
    return {name: getattr(config, name)() for name in config.SECTIONS}


def test_every_section_has_its_reader() -> None:
    for name in config.SECTIONS:
        assert callable(getattr(config, name, None)), f"config.{name}() reads [{name}]"


def test_the_configuration_page_has_examples() -> None:
    assert len([b for b in CONFIGS if b.mark is None]) >= 4
    assert len([b for b in CONFIGS if b.mark == "invalid"]) >= 2
    assert {b.mark for b in CONFIGS} <= {None, "invalid"}


@pytest.mark.parametrize("block", CONFIGS, ids=[b.id for b in CONFIGS])
def test_every_configuration_example_reads_as_nodus_reads_it(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(block.body, encoding="utf-8")
    monkeypatch.setenv("NODUS_CONFIG", str(path))
    if block.mark is None:
        loaded = _load_all()
        written = tomllib.loads(block.body)
        assert written and set(written) <= set(loaded)
        for name, keys in written.items():  # every value written is the value nodus uses
            for key, value in keys.items():
                used = getattr(loaded[name], key)
                if key == "sources":
                    used = [str(source) for source in used]
                if key == "work_root":
                    used = str(used)
                assert used == value, f"{name}.{key}"
        return
    with pytest.raises(NodusError) as caught:
        _load_all()
    printed = f"error: {caught.value.message}".replace(str(path), CONFIG_SHOWN_AS)
    if caught.value.hint:
        printed += f"\nhint: {caught.value.hint}".replace(str(path), CONFIG_SHOWN_AS)
    assert block.output is not None
    assert printed.splitlines() == block.output.splitlines()


def test_every_configuration_key_is_named() -> None:
    for name, keys in config.SECTIONS.items():
        assert f"### `[{name}]`" in CONFIG_PAGE, name
        for key in keys:
            assert f"`{key}`" in CONFIG_PAGE, key


def _listed_variables() -> set[str]:
    rows = table_rows(section(CONFIG_PAGE, "## Environment variables"))
    return {
        name for row in rows for name in named(row[0]) if re.fullmatch(r"[A-Z][A-Z0-9_]*", name)
    }


def test_every_listed_variable_is_read_in_the_source() -> None:
    listed = _listed_variables()
    assert len(listed) >= 20
    missing = sorted(v for v in listed if re.search(rf"\b{v}\b", SOURCE) is None)
    assert missing == []


def test_every_nodus_variable_of_the_source_is_listed() -> None:
    in_source = set(re.findall(r"\bNODUS_[A-Z0-9_]*[A-Z0-9]\b", SOURCE))
    assert {"NODUS_HOME", "NODUS_CONFIG", "NODUS_WORK_DIR"} <= in_source
    assert sorted(in_source - _listed_variables()) == []
    on_page = set(re.findall(r"\bNODUS_[A-Z0-9_]*[A-Z0-9]\b", CONFIG_PAGE))
    assert sorted(on_page - in_source) == []  # no variable the source never reads
