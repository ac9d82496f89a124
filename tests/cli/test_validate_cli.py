"""``nodus validate`` end to end: exit codes, text, --json, --format github, colour, folders."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from interpreter import python
from paths import FAKES, REPO

from nodus_cli.cli.commands.validate import annotation, human
from nodus_cli.errors import Problem
from nodus_cli.workload import Result

FAKE_BIN = FAKES / "bin"
Nodus = Callable[..., subprocess.CompletedProcess[str]]
Writer = Callable[..., Path]

GOOD = 'image = "img:1"\ngpu = "H100"\ngpu_count = 8\n'
WARNED = 'image = "img:1"\noptimization = "fastest"\n'
BAD = 'image = "img:1"\ngpu = "A100-80GB"\n[requirements]\ngpu_count = 3\n'


# -- exit codes -------------------------------------------------------------------------------


def test_exit_0_when_all_files_are_valid(nodus: Nodus, tmp_workload: Writer) -> None:
    path = tmp_workload(GOOD, "good.toml")
    done = nodus("validate", path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"✓ {path}", "1 file: 1 valid, 0 invalid"]
    assert done.stderr == ""


def test_warnings_still_exit_0(nodus: Nodus, tmp_workload: Writer) -> None:
    path = tmp_workload(WARNED, "warned.toml")
    done = nodus("validate", path)
    assert done.returncode == 0
    assert f"{path}:2: warning: optimization: " in done.stdout
    assert "1 file: 1 valid, 0 invalid (0 errors, 1 warning)" in done.stdout


def test_exit_1_when_any_file_is_invalid(nodus: Nodus, tmp_workload: Writer) -> None:
    good = tmp_workload(GOOD, "good.toml")
    bad = tmp_workload(BAD, "bad.toml")
    done = nodus("validate", good, bad)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert (
        f'{bad}:2: error: gpu: "A100-80GB" names a memory variant, not a model: '
        'write gpu = "A100" with peak_memory_gb = 80'
    ) in lines
    assert any(line.startswith(f"{bad}:4: error: requirements.gpu_count: ") for line in lines)
    assert f"✓ {good}" in lines
    assert lines[-1] == "2 files: 1 valid, 1 invalid (2 errors, 0 warnings)"
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("validate",),
        ("validate", "--no-such-option", "x.toml"),
        ("validate", "does-not-exist.toml"),
        ("validate", "--format", "xml", "x.toml"),
    ],
)
def test_exit_2_for_a_wrong_invocation(nodus: Nodus, tmp_path: Path, args: tuple[str, ...]) -> None:
    done = nodus(*args, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stderr.strip()


def test_exit_2_for_a_missing_path_names_it(nodus: Nodus, tmp_path: Path) -> None:
    done = nodus("validate", tmp_path / "nope.toml")
    assert done.returncode == 2
    assert "nope.toml: no such file or folder" in done.stderr


def test_exit_2_for_a_folder_without_workloads(nodus: Nodus, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "pyproject.toml").write_text("[project]\n")
    done = nodus("validate", tmp_path / "empty")
    assert done.returncode == 2
    assert "no workload files (*.toml) in this folder" in done.stderr


# -- folders ----------------------------------------------------------------------------------


def test_folders_are_searched_recursively_skipping_tool_files_and_hidden_paths(
    nodus: Nodus, tmp_path: Path
) -> None:
    files = {
        "a.toml": GOOD,
        "sub/b.toml": GOOD,
        "sub/deeper/c.toml": WARNED,
        "pyproject.toml": "[project]\nname = 'x'\n",
        "sub/pyproject.toml": "[tool.ruff]\n",
        "Cargo.toml": "[package]\n",
        ".hidden/x.toml": "broken = = =",
        ".dotfile.toml": "broken = = =",
        "sub/.git/y.toml": "broken = = =",
        "notes.txt": "not toml",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    done = nodus("validate", ".", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    paths = [f["path"] for f in json.loads(done.stdout)["files"]]
    assert paths == ["a.toml", "sub/b.toml", "sub/deeper/c.toml"]


def test_a_file_named_explicitly_is_always_validated(nodus: Nodus, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    done = nodus("validate", "pyproject.toml", cwd=tmp_path)
    assert done.returncode == 1
    assert "pyproject.toml:1: error: project: unknown key" in done.stdout


def test_a_file_named_twice_is_validated_once(nodus: Nodus, tmp_workload: Writer) -> None:
    path = tmp_workload(GOOD)
    done = nodus("validate", path, path, "--json")
    assert len(json.loads(done.stdout)["files"]) == 1


# -- --json (SPEC 3.1) -----------------------------------------------------------------------


def test_json_shape_is_exactly_spec_3_1(nodus: Nodus, tmp_workload: Writer) -> None:
    good = tmp_workload(GOOD, "good.toml")
    bad = tmp_workload(BAD, "bad.toml")
    warned = tmp_workload(WARNED, "warned.toml")
    done = nodus("validate", "--json", good, bad, warned)
    assert done.returncode == 1
    assert done.stderr == ""
    doc = json.loads(done.stdout)  # one JSON document and nothing else on stdout
    assert list(doc) == ["version", "valid", "files"] and doc["version"] == 1
    assert doc["valid"] is False
    entries = {Path(f["path"]).name: f for f in doc["files"]}
    for entry in doc["files"]:
        assert list(entry) == ["path", "valid", "errors", "warnings", "workload"]
        for item in entry["errors"] + entry["warnings"]:
            assert list(item) == ["loc", "line", "message"]

    bad_entry = entries["bad.toml"]
    assert bad_entry["path"] == str(bad)
    assert bad_entry["valid"] is False and bad_entry["workload"] is None
    assert [(e["loc"], e["line"]) for e in bad_entry["errors"]] == [
        ("gpu", 2),
        ("requirements.gpu_count", 4),
    ]

    warned_entry = entries["warned.toml"]
    assert warned_entry["valid"] is True and warned_entry["errors"] == []
    assert warned_entry["warnings"][0]["loc"] == "optimization"
    assert warned_entry["warnings"][0]["line"] == 2
    assert warned_entry["workload"]["optimization"] == "automatic"

    workload = entries["good.toml"]["workload"]
    assert workload == {
        "name": "good",
        "image": "img:1",
        "command": None,
        "model": None,
        "budget": None,
        "optimization": "automatic",
        "output_dir": None,
        "priority": 50,
        "wait_timeout": None,
        "requirements": {
            "gpu": "H100",
            "gpu_count": 8,
            "peak_memory_gb": None,
            "gpu_interconnect": "any",
            "cpu": 1.0,
            "memory_gb": None,
            "disk_gb": None,
            "location": None,
            "max_price_per_hour": None,
            "arch": None,
            "share_gpu": False,
        },
        "stages": [
            {
                "name": "main",
                "image": "img:1",
                "command": None,
                "requirements": workload["requirements"],
                "entrypoint": None,
                "mounts": [],
                "ports": [],
                "map": None,
                "shell": False,
            }
        ],
    }


def test_json_all_valid_and_no_gpu(nodus: Nodus, tmp_workload: Writer) -> None:
    path = tmp_workload('image = "i"\ncommand = "echo hi"\n')
    done = nodus("validate", path, "--json")
    assert done.returncode == 0
    doc = json.loads(done.stdout)
    assert doc["valid"] is True
    workload = doc["files"][0]["workload"]
    assert workload["requirements"]["gpu_count"] == 0
    assert workload["command"] == ["/bin/sh", "-c", "echo hi"]


def test_json_for_unreadable_and_syntax_errors_has_line_or_null(
    nodus: Nodus, tmp_workload: Writer
) -> None:
    syntax = tmp_workload('image = "i"\n\ngpu = \n', "syntax.toml")
    binary = tmp_workload(b'image = "i"\nname = "\xff"\n', "binary.toml")
    big = tmp_workload("#" * (1024 * 1024 + 10) + "\n", "big.toml")
    done = nodus("validate", "--json", syntax, binary, big)
    assert done.returncode == 1
    files = json.loads(done.stdout)["files"]
    assert [(f["errors"][0]["loc"], f["errors"][0]["line"]) for f in files] == [
        ("", 3),
        ("", 2),
        ("", None),
    ]
    assert "TOML syntax error" in files[0]["errors"][0]["message"]
    assert "not UTF-8" in files[1]["errors"][0]["message"]
    assert "limited to 1 MiB" in files[2]["errors"][0]["message"]


# -- text output ------------------------------------------------------------------------------


def test_text_output_for_broken_files(nodus: Nodus, tmp_workload: Writer) -> None:
    syntax = tmp_workload('image = "i"\ncommand = ["a",\n', "syntax.toml")
    binary = tmp_workload(b"\x00\xff\xfe garbage", "binary.toml")
    done = nodus("validate", syntax, binary)
    assert done.returncode == 1
    assert f"{syntax}:2: error: TOML syntax error: " in done.stdout
    assert f"{binary}:1: error: the file is not UTF-8 text" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_an_echoed_key_or_value_is_clipped_whatever_its_size(
    nodus: Nodus, tmp_workload: Writer
) -> None:
    key = "k" * 600_000 + "END"  # a 1 MiB file at most
    value = "v" * 200_000
    path = tmp_workload(
        f'{key} = 1\nimage = "i"\ncommand = "c"\noptimization = "{value}"\n'
        f'[map]\nover = "{value}"\n',
        "huge.toml",
    )
    for args in (("validate",), ("validate", "--json"), ("plan",)):
        done = nodus(*args, path)
        assert done.returncode == 1, done.stderr
        out = done.stdout + done.stderr
        assert len(out) < 3000, (args, len(out))  # was 1,000,283 bytes for the key alone
    lines = nodus("validate", path).stdout.splitlines()
    assert lines[0].startswith(f"{path}:1: error: {'k' * 79}…{'k' * 37}END: unknown key")
    assert lines[1].startswith(f'{path}:4: error: optimization: "{"v" * 61}..." is not an accepted')
    assert lines[2].startswith(f'{path}:6: error: map.over: cannot read "{"v" * 61}..." (')


def test_a_nul_byte_is_named_as_such(nodus: Nodus, tmp_workload: Writer) -> None:
    path = tmp_workload(b'image = "i"\x00\ncommand = "c"\n', "nul.toml")
    done = nodus("validate", path)
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        f"{path}:1: error: TOML syntax error: column 12: a NUL byte (\\0), which TOML text "
        "never holds: is this a binary file, or was it damaged? Remove it"
    )
    assert "expected newline" not in done.stdout


def test_the_summary_counts_what_the_more_line_leaves_out(
    nodus: Nodus, tmp_workload: Writer
) -> None:
    path = tmp_workload(
        'image = "i"\n' + "".join(f"unknown_{i} = 1\n" for i in range(5000)), "many.toml"
    )
    lines = nodus("validate", path).stdout.splitlines()
    assert lines[-2].startswith(f"{path}: error: 4,000 more errors not shown: ")
    assert lines[-1] == "1 file: 0 valid, 1 invalid (5,000 errors, 0 warnings)"
    planned = nodus("plan", path)
    assert f"{path} is not a valid workload (5,000 problems):" in planned.stderr


def test_no_colour_without_a_terminal_and_with_no_color(nodus: Nodus, tmp_workload: Writer) -> None:
    bad = tmp_workload(BAD)
    plain = nodus("validate", bad, env={"NO_COLOR": None, "FORCE_COLOR": None})
    assert "\x1b[" not in plain.stdout
    forced = nodus("validate", bad, env={"FORCE_COLOR": "1", "NO_COLOR": None})
    assert "\x1b[" in forced.stdout  # colour is on when forced ...
    both = nodus("validate", bad, env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert "\x1b[" not in both.stdout + both.stderr  # ... and NO_COLOR always wins
    assert both.stdout == plain.stdout


def test_human_rendering_with_colour() -> None:
    result = Result("a.toml", None, [Problem("gpu", "bad", "error", 2)])
    assert human([result]) == (
        "a.toml:2: error: gpu: bad\n1 file: 0 valid, 1 invalid (1 error, 0 warnings)\n"
    )
    coloured = human([result], colour=True)
    assert "\x1b[1;31merror\x1b[0m" in coloured


# -- --format github ---------------------------------------------------------------------------


def test_github_annotations(nodus: Nodus, tmp_workload: Writer) -> None:
    bad = tmp_workload(BAD, "bad.toml")
    warned = tmp_workload(WARNED, "warned.toml")
    done = nodus("validate", "--format", "github", bad, warned)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == (
        f"::error file={bad},line=2,title=nodus%3A gpu::gpu: "
        '"A100-80GB" names a memory variant, not a model: write gpu = "A100" with '
        "peak_memory_gb = 80"
    )
    assert lines[1].startswith(f"::error file={bad},line=4,title=nodus%3A requirements.gpu_count::")
    assert lines[2].startswith(f"::warning file={warned},line=2,title=nodus%3A optimization::")
    assert lines[-1] == "2 files: 1 valid, 1 invalid (2 errors, 1 warning)"


def test_github_annotations_are_escaped() -> None:
    problem = Problem("env.A", "100% bad\r\nreally: yes, no", "error", 7)
    line = annotation("dir,x/a:b%.toml", problem)
    assert line == (
        "::error file=dir%2Cx/a%3Ab%25.toml,line=7,title=nodus%3A env.A"
        "::env.A: 100%25 bad%0D%0Areally: yes, no"
    )
    no_line = annotation("a.toml", Problem("", "TOML syntax error: x"))
    assert no_line == "::error file=a.toml,title=nodus::TOML syntax error: x"


def test_github_format_for_an_unreadable_file(nodus: Nodus, tmp_workload: Writer) -> None:
    binary = tmp_workload(b'image = "i"\n\xff\n', "c.toml")
    done = nodus("validate", binary, "--format", "github")
    assert done.stdout.splitlines()[0].startswith(f"::error file={binary},line=2,title=nodus::")


# -- start-up cost ------------------------------------------------------------------------------


def test_validate_imports_neither_docker_httpx_pydantic_nor_the_catalog(
    tmp_workload: Writer,
) -> None:
    path = tmp_workload(textwrap.dedent(GOOD))
    code = textwrap.dedent(
        f"""
        import sys
        from nodus_cli.__main__ import main
        code = main(["validate", {str(path)!r}])
        heavy = sorted(
            m for m in sys.modules
            if m.split(".")[0] in ("docker", "httpx", "pydantic", "pydantic_core", "requests")
            or m in ("nodus_cli.catalog", "nodus_cli.planning.planner", "nodus_cli.workload.schema")
        )
        print(code, heavy)
        """
    )
    done = python(code)
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stdout + done.stderr


@pytest.mark.parametrize(
    "args",
    [["--help"], ["validate"], ["plan"], ["plan", "--json"], ["plan", "--target", "local"]],
)
def test_help_validate_and_plan_never_import_the_docker_sdk(
    tmp_workload: Writer, args: list[str]
) -> None:
    # The Docker SDK (and requests under it) is imported only to reach an engine.
    path = tmp_workload(textwrap.dedent(GOOD))
    argv = args if args == ["--help"] else [*args, str(path)]
    code = textwrap.dedent(
        f"""
        import contextlib, io, sys
        from nodus_cli.__main__ import main
        with contextlib.redirect_stdout(io.StringIO()):
            code = main({argv!r})
        print(code, sorted(m for m in sys.modules if m.split(".")[0] in ("docker", "requests")))
        """
    )
    # --target local asks the stand-in nvidia-smi: a machine without the GPUs it needs, so
    # there is nothing to ask the engine. (With them, the plan asks the engine who holds
    # them: `nodus run` would wait for them.)
    path_var = f"{FAKE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path_var, "NODUS_FAKE_GPUS": "l4x1"}
    done = python(code, env)
    # (--target local on that machine: no eligible configuration, exit 3.)
    expected = "3 []" if "local" in args else "0 []"
    assert done.stdout.strip().splitlines()[-1] == expected, done.stdout + done.stderr


def test_main_returns_the_exit_code(
    tmp_workload: Writer, capsys: pytest.CaptureFixture[str]
) -> None:
    from nodus_cli.__main__ import main

    assert main(["validate", str(tmp_workload(GOOD))]) == 0
    assert main(["validate", str(tmp_workload(BAD, "bad.toml"))]) == 1
    capsys.readouterr()


# -- pre-commit hook ----------------------------------------------------------------------------


def _hook() -> dict[str, str]:
    """The single hook of .pre-commit-hooks.yaml (flat keys; no YAML library needed)."""
    text = (REPO / ".pre-commit-hooks.yaml").read_text()
    hook: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        key, _, value = line.lstrip("- ").partition(":")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        hook[key.strip()] = value
    return hook


def test_pre_commit_hook_definition() -> None:
    import re

    from nodus_cli.workload.validation import NOT_WORKLOADS

    hook = _hook()
    assert hook["id"] == "nodus-validate"
    assert hook["entry"] == "nodus validate"
    assert hook["language"] == "python"
    files, exclude = re.compile(hook["files"]), re.compile(hook["exclude"])

    def checked(path: str) -> bool:
        return files.search(path) is not None and exclude.search(path) is None

    # By default: TOML files under a workloads/ (or workload/) folder, and *.nodus.toml.
    for path in (
        "workloads/train.toml",
        "workloads/gpu/train.toml",
        "ml/workloads/train.toml",
        "workload/a.toml",
        "train.nodus.toml",
        "jobs/train.nodus.toml",
    ):
        assert checked(path), path
    # Other TOML files are never workloads to the hook (they were rejected before).
    for path in (
        "uv.toml",
        "hparams.toml",
        "configs/hparams.toml",
        "train.toml",
        "workloads/train.toml.bak",
        "myworkloads/x.toml",
        "workloads/.hidden.toml",
        "workloads/pyproject.toml",
        "workloads/uv.toml",
    ):
        assert not checked(path), path
    excluded = ["pyproject.toml", "sub/pyproject.toml", ".hidden/x.toml", ".ruff.toml"]
    excluded += [name for name in NOT_WORKLOADS if name.endswith(".toml")]
    for path in excluded:
        assert exclude.search(path), path


# -- --strict and --format json ------------------------------------------------------------------


def test_strict_makes_warnings_fail(nodus: Nodus, tmp_workload: Writer) -> None:
    warned = tmp_workload(WARNED, "warned.toml")
    good = tmp_workload(GOOD, "good.toml")
    relaxed = nodus("validate", warned, good)
    assert relaxed.returncode == 0
    done = nodus("validate", "--strict", warned, good)
    assert done.returncode == 1, done.stdout
    lines = done.stdout.splitlines()
    assert f"{warned}:2: warning: optimization: " in done.stdout
    assert f"✗ {warned}" in lines and f"✓ {good}" in lines
    assert lines[-1] == (
        "2 files: 2 valid, 0 invalid (0 errors, 1 warning); --strict: warnings count as errors"
    )


def test_strict_without_warnings_passes(nodus: Nodus, tmp_workload: Writer) -> None:
    good = tmp_workload(GOOD, "good.toml")
    done = nodus("validate", "--strict", good)
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1] == "1 file: 1 valid, 0 invalid"
    bad = tmp_workload(BAD, "bad.toml")
    assert nodus("validate", "--strict", bad).returncode == 1


def test_strict_json_and_github(nodus: Nodus, tmp_workload: Writer) -> None:
    warned = tmp_workload(WARNED, "warned.toml")
    done = nodus("validate", "--strict", "--json", warned)
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert doc["valid"] is False  # the verdict follows --strict ...
    assert doc["files"][0]["valid"] is True  # ... the file itself is valid, with its workload
    assert doc["files"][0]["workload"]["name"] == "warned"
    relaxed = json.loads(nodus("validate", "--json", warned).stdout)
    assert relaxed["valid"] is True
    github_out = nodus("validate", "--strict", "--format", "github", warned)
    assert github_out.returncode == 1
    assert github_out.stdout.splitlines()[0].startswith(f"::warning file={warned},line=2,")
    assert github_out.stdout.splitlines()[-1].endswith("; --strict: warnings count as errors")


def test_format_json_is_json(nodus: Nodus, tmp_workload: Writer) -> None:
    good = tmp_workload(GOOD, "good.toml")
    by_format = nodus("validate", "--format", "json", good)
    by_flag = nodus("validate", "--json", good)
    assert by_format.returncode == by_flag.returncode == 0
    assert by_format.stdout == by_flag.stdout
    assert json.loads(by_format.stdout)["valid"] is True
    # --json wins over another --format: one JSON document on stdout, as documented
    both = nodus("validate", "--json", "--format", "github", good)
    assert json.loads(both.stdout)["files"][0]["path"] == str(good)


def test_help_lists_strict_and_the_formats(nodus: Nodus) -> None:
    done = nodus("validate", "--help", env={"COLUMNS": "200"})
    assert done.returncode == 0
    assert "--strict" in done.stdout and "Warnings count as errors" in done.stdout
    assert "json" in done.stdout and "github" in done.stdout


def test_the_stage_warning_says_what_to_do(nodus: Nodus, tmp_workload: Writer) -> None:
    path = tmp_workload('image = "i"\ngpu = "H100"\n[[stages]]\nname = "a"\n', "staged.toml")
    done = nodus("validate", path)
    assert done.returncode == 0
    assert (
        f'{path}:2: warning: gpu: gpu = "H100" at the top level reaches no stage: with '
        '[[stages]], each stage asks for its own GPU; add gpu = "H100" to the stages that need '
        "it (as a stage key or in [stages.requirements]) or remove it here"
    ) in done.stdout.splitlines()
    assert nodus("validate", "--strict", path).returncode == 1


def test_new_keys_in_the_json_workload(nodus: Nodus, tmp_workload: Writer, tmp_path: Path) -> None:
    path = tmp_workload(
        'image = "i"\nentrypoint = ["python"]\ncommand = ["x.py"]\n'
        'mounts = ["./data:/data:ro"]\noutput_dir = "out"\n[env]\nHF_TOKEN = "${HF_TOKEN}"\n'
        '[map]\nitems = ["a", "b"]\nparallel = 2\n',
        "keys.toml",
    )
    done = nodus("validate", "--json", path)
    assert done.returncode == 0, done.stdout
    workload = json.loads(done.stdout)["files"][0]["workload"]
    assert "env" not in workload  # CI logs never echo the environment
    assert workload["output_dir"] == str(tmp_path / "out")
    stage = workload["stages"][0]
    assert stage["entrypoint"] == ["python"] and stage["shell"] is False
    assert stage["mounts"] == [
        {
            "source": str(tmp_path / "data"),
            "target": "/data",
            "read_only": True,
            "type": "bind",
            "written": "./data:/data:ro",
            "where": f"{path}:4: mounts[0]",
        }
    ]
    assert stage["map"] == {"items": ["a", "b"], "over": None, "parallel": 2}
