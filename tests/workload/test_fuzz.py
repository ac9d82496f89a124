"""No input, however broken, makes nodus raise: only structured problems come out."""

from __future__ import annotations

import datetime as dt
import math
import tempfile
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodus_cli.errors import Problem
from nodus_cli.workload import (
    LEGACY_OPTIMIZATION,
    REQUIREMENT_KEYS,
    STAGE_KEYS,
    TOP_LEVEL_KEYS,
    Result,
    load_file,
    load_text,
    normalize,
    to_toml,
)
from nodus_cli.workload.lineindex import LineIndex
from nodus_cli.workload.tomlsource import LoadFailure, decode

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KNOWN_KEYS = sorted(
    {*TOP_LEVEL_KEYS, *REQUIREMENT_KEYS, *STAGE_KEYS}
    | {"gpu_type", "num_gpus", "num_cpus", "memory_bytes", "gpus", "accelerators", "GPU"}
)
NAMES = [
    "H100",
    "nvidia h-100",
    "A100-80GB",
    "H100 SXM",
    "aws",
    "p4d.24xlarge",
    "n1-standard-8",
    "A6000",
    "H100:8",
    "8x A100",
    "any",
    "nvlink",
    "us",
    "us-east-1",
    "arm64",
    "",
    *LEGACY_OPTIMIZATION,
]

scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 1, 2, 3, 4, 8, 16, -1, 80, 2**62]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, 80.0]),
    st.text(max_size=20),
    st.sampled_from(NAMES),
    st.datetimes(timezones=st.none() | st.just(dt.UTC)),
    st.dates(),
    st.times(),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=12))


def _tables(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=6),
    )


values = st.recursive(scalars, _tables, max_leaves=20)
documents = st.dictionaries(keys, values, max_size=10)
stage_tables = st.dictionaries(st.sampled_from(list(STAGE_KEYS)) | keys, values, max_size=6)
shaped = st.fixed_dictionaries(
    {},
    optional={
        "image": st.sampled_from(["img:1", "", "a b"]) | scalars,
        "requirements": st.dictionaries(st.sampled_from(list(REQUIREMENT_KEYS)) | keys, values),
        "stages": st.lists(stage_tables, max_size=3) | values,
        "gpu": st.sampled_from(NAMES) | scalars,
        "gpu_count": scalars,
        "optimization": scalars,
        "env": st.dictionaries(st.text(max_size=8), values, max_size=3) | values,
        "command": st.lists(st.text(max_size=5), max_size=3) | values,
    },
)


def assert_structured(result: Result) -> None:
    assert isinstance(result, Result)
    assert all(isinstance(p, Problem) for p in result.problems)
    assert all(p.severity in ("error", "warning") for p in result.problems)
    assert all(p.line is None or p.line >= 1 for p in result.problems)
    for p in result.problems:  # one line per problem, whatever the file holds
        assert "\n" not in p.message and "\n" not in p.loc and "\r" not in p.message
    assert result.valid == (result.workload is not None)
    assert result.valid == (not result.errors)
    doc = result.as_json()
    assert set(doc) == {"path", "valid", "errors", "warnings", "workload"}
    if result.workload is not None:
        again = load_text(to_toml(result.workload))
        assert again.workload == result.workload, again.problems


def dumps(doc: dict[str, Any]) -> str | None:
    try:
        return tomli_w.dumps(doc)
    except (TypeError, ValueError):  # e.g. a top-level array tomli_w cannot write
        return None


@FAST
@given(documents)
def test_arbitrary_toml_documents(doc: dict[str, Any]) -> None:
    text = dumps(doc)
    if text is None:
        return
    assert_structured(load_text(text, "fuzz.toml"))


@FAST
@given(shaped)
def test_workload_shaped_documents(doc: dict[str, Any]) -> None:
    text = dumps(doc)
    if text is None:
        return
    assert_structured(load_text(text, "fuzz.toml"))
    assert_structured(normalize(doc))


@FAST
@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes) -> None:
    try:
        text = decode(data)
    except LoadFailure as failure:
        assert isinstance(failure.problem, Problem)
        return
    assert_structured(load_text(text))


@FAST
@given(st.text(alphabet=st.sampled_from("[]{}\"'=.,#\n ab1\\u"), max_size=80))
def test_toml_punctuation_soup(text: str) -> None:
    assert_structured(load_text(text))
    for key in [("a",), ("a", 0, "b"), ("stages", 1, "requirements")]:
        line = LineIndex(text).line_of(key)
        assert line is None or line >= 1


_DIR = Path(tempfile.mkdtemp(prefix="nodus-fuzz-"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | documents.map(lambda d: (dumps(d) or "").encode()))
def test_files_through_load_file_and_main(data: bytes) -> None:
    from nodus_cli.__main__ import main

    path = _DIR / "fuzz.toml"
    path.write_bytes(data)
    assert_structured(load_file(path))
    assert main(["validate", "--json", str(path)]) in (0, 1)
    assert main(["validate", str(path)]) in (0, 1)
    assert main(["validate", "--format", "github", str(path)]) in (0, 1)


# -- the keys of fan-out, data, ports and entrypoints -------------------------------------------

_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=12,
)
_path_part = st.text(alphabet="abcXYZ09_-. ", min_size=1, max_size=6).filter(
    lambda p: p.strip(" ") == p and p not in (".", "..")
)
_source = st.one_of(
    st.builds(lambda p: f"/{p}", _path_part),
    st.builds(lambda p: f"./{p}", _path_part),
    st.builds(lambda p: f"../{p}/x", _path_part),
    st.builds(lambda p: f"~/{p}", _path_part),
    st.sampled_from(["cache", "hf-cache", "v.1", "A_b"]),
)


@st.composite
def _mounts(draw: st.DrawFn, prefix: str) -> list[str]:
    count = draw(st.integers(0, 3))
    mode = st.sampled_from(["", ":ro", ":rw"])
    return [f"{draw(_source)}:/{prefix}{i}/{draw(_path_part)}{draw(mode)}" for i in range(count)]


@st.composite
def _ports(draw: st.DrawFn, base: int) -> list[int | str]:
    out: list[int | str] = []
    for i in range(draw(st.integers(0, 3))):
        host = base + i
        form = draw(st.sampled_from(["int", "pair", "ip", "ipv6", "udp"]))
        inside = draw(st.integers(1, 65535))
        out.append(
            {
                "int": host,
                "pair": f"{host}:{inside}",
                "ip": f"127.0.0.1:{host}:{inside}",
                "ipv6": f"[::1]:{host}:{inside}/tcp",
                "udp": f"{host}:{inside}/udp",
            }[form]
        )
    return out


_env = st.dictionaries(
    st.sampled_from(["A", "HF_HOME", "HF_TOKEN", "API_KEY", "X_1"]),
    st.one_of(
        _text.filter(lambda t: "$" not in t),
        st.sampled_from(["${HF_TOKEN}", "${A:-x}", "$$5", "a${B}c", "${C:-}", ""]),
    ),
    max_size=3,
)


@st.composite
def _run_keys(draw: st.DrawFn, prefix: str, port_base: int) -> dict[str, Any]:
    table: dict[str, Any] = {}
    fan_out = draw(st.booleans())
    if draw(st.booleans()):
        table["entrypoint"] = draw(st.lists(_text, max_size=3))
        table["command"] = draw(st.lists(_text, min_size=1, max_size=3))
    elif draw(st.booleans()):
        table["command"] = draw(_text.filter(lambda t: t.strip()) | st.lists(_text, min_size=1))
    mounts = draw(_mounts(prefix))
    if mounts:
        table["mounts"] = mounts
    if not fan_out:
        ports = draw(_ports(port_base))
        if ports:
            table["ports"] = ports
    else:
        spec: dict[str, Any] = {
            "items": draw(st.lists(_text | st.integers(0, 10**6), min_size=1, max_size=5))
        }
        if draw(st.booleans()):
            spec["parallel"] = draw(st.integers(1, 1000))
        table["map"] = spec
    env = draw(_env)
    if env:
        table["env"] = env
    if draw(st.booleans()):
        table["share_gpu"] = True
        table["peak_memory_gb"] = draw(st.sampled_from([1, 8, 20.5]))
    return table


@st.composite
def _valid_workloads(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {"image": "img:1"}
    if draw(st.booleans()):
        doc["output_dir"] = draw(st.sampled_from(["out", "/abs/out", "~/runs", "a/../b"]))
    if not draw(st.booleans()):
        doc.update(draw(_run_keys("top", 1000)))
        return doc
    # Stages: the top level holds only what every stage may take without a conflict.
    top = draw(_run_keys("top", 1000))
    for key in ("map", "share_gpu", "peak_memory_gb", "ports"):
        top.pop(key, None)
    if isinstance(top.get("command"), str):
        top.pop("command")  # a stage's entrypoint would refuse an inherited string
    doc.update(top)
    doc["stages"] = []
    for i in range(draw(st.integers(1, 3))):
        stage = draw(_run_keys(f"s{i}", 2000 + 10 * i))
        entrypoint = "entrypoint" in top or "entrypoint" in stage
        if entrypoint and isinstance(stage.get("command"), str):
            stage["command"] = [stage["command"]]
        doc["stages"].append({"name": f"s{i}", **stage})
    return doc


@FAST
@given(_valid_workloads())
def test_workloads_with_every_new_key_are_valid_and_written_again(doc: dict[str, Any]) -> None:
    text = tomli_w.dumps(doc)
    result = load_text(text, "fuzz.toml", base_dir=_DIR)
    assert result.valid, (text, result.problems)
    assert_structured(result)  # to_toml, normalized again: the same workload
    again = normalize(doc, base_dir=_DIR)  # the API's documents: the same rules
    assert again.workload == result.workload


_NEW_KEYS = ["mounts", "ports", "entrypoint", "map", "output_dir", "share_gpu"]


@FAST
@given(
    st.fixed_dictionaries(
        {"image": st.just("img:1")},
        optional={
            key: values | st.sampled_from(["a:/b", "8080:80", "/x", 0, True, ""])
            for key in _NEW_KEYS
        },
    )
)
def test_arbitrary_values_of_the_new_keys(doc: dict[str, Any]) -> None:
    text = dumps(doc)
    if text is None:
        return
    assert_structured(load_text(text, "fuzz.toml", base_dir=_DIR))
    assert_structured(normalize(doc, base_dir=_DIR))
