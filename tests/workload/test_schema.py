"""schemas/workload.schema.json: generated from the model, checked in, never stale."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from typing import Any

import pytest
from paths import REPO

from nodus_cli.workload import (
    REQUIREMENT_KEYS,
    STAGE_KEYS,
    TOP_LEVEL_KEYS,
    load_file,
    load_text,
    schema,
)

SCHEMA_FILE = REPO / "schemas" / "workload.schema.json"
REGENERATE = "run python -m nodus_cli.workload.schema > schemas/workload.schema.json"


def test_the_checked_in_schema_is_up_to_date() -> None:
    assert SCHEMA_FILE.exists(), REGENERATE
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema.render(), REGENERATE


def test_the_module_prints_the_schema() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodus_cli.workload.schema"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout == schema.render()


def test_without_pydantic_the_module_says_how_to_install_it() -> None:
    # pydantic is a test dependency, not nodus's: the generator alone needs it.
    blocked = (
        "import runpy, sys; sys.modules['pydantic'] = None; "
        "runpy.run_module('nodus_cli.workload.schema', run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'pydantic>=2.6'" in done.stderr
    assert "pip install -e '.[test]'" in done.stderr


def test_pydantic_is_not_a_dependency_of_nodus() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    assert not [d for d in project["dependencies"] if d.startswith("pydantic")]
    assert [d for d in project["optional-dependencies"]["test"] if d.startswith("pydantic")]


def test_schema_header() -> None:
    doc = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert doc["$id"]
    assert doc["title"] == "nodus workload file"
    assert doc["type"] == "object"


def test_schema_keys_are_the_workload_keys() -> None:
    doc = schema.schema()
    defs = doc["$defs"]
    assert set(doc["properties"]) == set(TOP_LEVEL_KEYS)
    assert set(defs["Requirements"]["properties"]) == set(REQUIREMENT_KEYS)
    assert set(defs["Stage"]["properties"]) == set(STAGE_KEYS)
    for table in (doc, defs["Requirements"], defs["Stage"]):
        assert table["additionalProperties"] is False
    assert defs["Stage"]["required"] == ["name"]


def test_every_property_is_described() -> None:
    doc = schema.schema()
    tables = [doc, doc["$defs"]["Requirements"], doc["$defs"]["Stage"]]
    for table in tables:
        for name, prop in table["properties"].items():
            assert prop.get("description"), f"{name} has no description"


def test_toml_has_no_null() -> None:
    assert '"null"' not in schema.render()


# -- a tiny structural check (no jsonschema dependency) ----------------------------------------


def conforms(value: Any, node: dict[str, Any], root: dict[str, Any]) -> bool:
    """Every keyword of ``node`` holds for ``value`` (the keywords this schema uses)."""
    if "$ref" in node:
        name = node["$ref"].removeprefix("#/$defs/")
        if not conforms(value, root["$defs"][name], root):
            return False
    if "anyOf" in node and not any(conforms(value, option, root) for option in node["anyOf"]):
        return False
    if "oneOf" in node and sum(conforms(value, option, root) for option in node["oneOf"]) != 1:
        return False
    if "required" in node and "type" not in node:
        return isinstance(value, dict) and all(key in value for key in node["required"])
    if "const" in node and value != node["const"]:
        return False
    if "enum" in node and not any(value == e and type(value) is type(e) for e in node["enum"]):
        return False
    kind = node.get("type")
    if kind == "object":
        return isinstance(value, dict) and _object(value, node, root)
    if kind == "array":
        return (
            isinstance(value, list)
            and node.get("minItems", 0) <= len(value) <= node.get("maxItems", len(value))
            and all(conforms(v, node.get("items", {}), root) for v in value)
        )
    if kind == "string":
        return (
            isinstance(value, str)
            and node.get("minLength", 0) <= len(value) <= node.get("maxLength", len(value))
            and ("pattern" not in node or re.search(node["pattern"], value) is not None)
        )
    if kind in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if kind == "integer" and not isinstance(value, int):
            return False
        if "minimum" in node and not value >= node["minimum"]:
            return False
        if "maximum" in node and not value <= node["maximum"]:
            return False
        return "exclusiveMinimum" not in node or value > node["exclusiveMinimum"]
    if kind == "boolean":
        return isinstance(value, bool)
    return True


def _object(value: dict[str, Any], node: dict[str, Any], root: dict[str, Any]) -> bool:
    if any(key not in value for key in node.get("required", [])):
        return False
    properties = node.get("properties", {})
    patterns = node.get("patternProperties", {})
    for key, item in value.items():
        if key in properties:
            if not conforms(item, properties[key], root):
                return False
            continue
        matched = [p for p in patterns if re.search(p, key)]
        if matched:
            if not all(conforms(item, patterns[p], root) for p in matched):
                return False
        elif node.get("additionalProperties") is False:
            return False
    return True


VALID = [
    'image = "i"\n',
    'image = "i"\ngpu = "H100"\ngpu_count = 8\npeak_memory_gb = 80\n',
    'image = "i"\ncommand = "x"\nenv = { A = "1", N = 2 }\nbudget = 5\nmodel = "m"\nname = "n"\n',
    'image = "i"\n[requirements]\ncpu = 0.5\nmemory_gb = 0\noptimization = ""\narch = "arm64"\n',
    'image = "i"\n[requirements]\nlocation = "us"\nmax_price_per_hour = 3\n',
    'image = "i"\ngpu_interconnect = "any"\n',
    '[[stages]]\nname = "a"\nimage = "x"\ngpu = "L4"\n[stages.requirements]\ndisk_gb = 10\n',
    # the keys of fan-out, data, ports, entrypoint and environment templates
    'image = "i"\nmounts = ["/data:/data:ro", "hf-cache:/root/.cache/huggingface"]\n',
    'image = "i"\nports = [8000, "8080:80", "127.0.0.1:9000:90/udp", "[::1]:7000:70"]\n',
    'image = "i"\nentrypoint = []\ncommand = ["x"]\n',
    'image = "i"\nentrypoint = ["python", "-u"]\ncommand = ["train.py"]\n',
    'image = "i"\noutput_dir = "/tmp/nodus-schema-out"\n',
    'image = "i"\n[map]\nitems = ["a", 1]\nparallel = 4\n',
    'image = "i"\nshare_gpu = true\npeak_memory_gb = 10\n',
    'image = "i"\n[requirements]\nshare_gpu = false\ncpu = 0.01\nmemory_gb = 0.006\n',
    'image = "i"\nenv = { HF_TOKEN = "${HF_TOKEN}", D = "${X:-y}", P = "$$" }\n',
    'image = "i"\n[[stages]]\nname = "s"\nmounts = ["/a:/a"]\nports = [1]\n'
    'entrypoint = ["sh"]\nshare_gpu = true\npeak_memory_gb = 8\n',
    'image = "i"\n[[stages]]\nname = "s"\n[stages.map]\nitems = ["x"]\n',
]
INVALID = [
    'image = "i"\ngpu_type = "H100"\n',
    'image = "i"\ngpu_count = 3\n',
    'image = "i"\ngpu_count = 8.0\n',
    'image = "i"\ngpu_interconnect = "nvlink"\n',
    'image = "i"\noptimization = ""\n',
    'image = "i"\noptimization = "cheapest"\n',
    'image = "i"\npeak_memory_gb = 0\n',
    'image = "i"\ncpu = 4\n',
    'image = "i"\n[requirements]\ncpu = -1\n',
    'image = "i"\n[requirements]\nmemory_gb = true\n',
    'image = "i"\n[requirements]\nimage = "x"\n',
    'image = "i"\nbudget = 0\n',
    'image = "i"\ncommand = []\n',
    'image = "i"\nstages = []\n',
    'image = "i"\n[[stages]]\ncommand = "x"\n',
    'image = "i"\n[[stages]]\nname = "a"\nbudget = 1\n',
    'image = "i"\nenv = { "1A" = "x" }\n',
    'image = "i"\nmounts = "/a:/a"\n',
    'image = "i"\nmounts = ["/a:relative"]\n',
    'image = "i"\nmounts = ["/a:/a:z"]\n',
    'image = "i"\nmounts = [{ source = "/a", target = "/a" }]\n',
    'image = "i"\nports = [0]\n',
    'image = "i"\nports = [70000]\n',
    'image = "i"\nports = [true]\n',
    'image = "i"\nports = ["8000-8010"]\n',
    'image = "i"\nports = ["80/sctp"]\n',
    'image = "i"\nentrypoint = "python"\n',
    'image = "i"\noutput_dir = ""\n',
    'image = "i"\n[map]\nitems = []\n',
    'image = "i"\n[map]\nparallel = 2\n',
    'image = "i"\n[map]\nitems = ["a"]\nover = "x"\n',
    'image = "i"\n[map]\nitems = ["a"]\nparallel = 0\n',
    'image = "i"\n[map]\nitems = ["a"]\nworkers = 2\n',
    'image = "i"\nshare_gpu = "true"\npeak_memory_gb = 10\n',
    'image = "i"\n[requirements]\ncpu = 0.001\n',
    'image = "i"\n[requirements]\nmemory_gb = 0.001\n',
    'image = "i"\n[[stages]]\nname = "a"\noutput_dir = "x"\n',
]


@pytest.mark.parametrize("text", VALID)
def test_valid_workloads_conform(text: str) -> None:
    assert load_text(text).valid
    assert conforms(tomllib.loads(text), schema.schema(), schema.schema())


@pytest.mark.parametrize("text", INVALID)
def test_invalid_shapes_do_not_conform(text: str) -> None:
    assert not load_text(text).valid
    assert not conforms(tomllib.loads(text), schema.schema(), schema.schema())


EXAMPLES = sorted((REPO / "examples").rglob("*.toml")) if (REPO / "examples").is_dir() else []


def test_every_example_conforms_to_the_schema() -> None:
    root = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    for path in EXAMPLES:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
        assert conforms(doc, root, root), f"{path.relative_to(REPO)} does not match the schema"
        result = load_file(path)
        assert result.valid, f"{path.relative_to(REPO)}: {result.errors}"


def test_the_new_keys_are_described_for_editors() -> None:
    doc = schema.schema()
    top, defs = doc["properties"], doc["$defs"]
    stage, reqs, fan_out = (
        defs["Stage"]["properties"],
        defs["Requirements"]["properties"],
        defs["Map"],
    )
    for table in (top, stage):
        assert "SOURCE:TARGET[:ro|:rw]" in table["mounts"]["description"]
        assert '"8080:80"' in table["ports"]["description"]
        assert "[] clears it" in table["entrypoint"]["description"]
        assert "${NAME:-default}" in table["env"]["description"]
        assert "items" in table["map"]["description"] and "over" in table["map"]["description"]
        assert table["map"]["$ref"] == "#/$defs/Map"
        assert "floor(D / peak_memory_gb)" in table["share_gpu"]["description"]
    assert "$$ is a literal $" in top["env"]["description"]
    assert "/bin/sh -c" in top["command"]["description"]
    assert "RUN_ID" in top["output_dir"]["description"]
    assert "output_dir" not in stage
    assert "share_gpu" in reqs
    assert fan_out["oneOf"] == [{"required": ["items"]}, {"required": ["over"]}]
    assert fan_out["properties"]["items"]["maxItems"] == 100_000
    assert fan_out["properties"]["parallel"]["minimum"] == 1


def test_the_docstring_tells_how_editors_find_the_schema() -> None:
    assert "#:schema ../schemas/workload.schema.json" in (schema.__doc__ or "")
