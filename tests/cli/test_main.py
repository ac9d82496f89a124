"""The entry point: every command line goes to the one parser (the Typer application),
which explains what it does not accept; what the commands raise is a message and an exit
code, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from interpreter import python

GOOD = 'image = "img:1"\ncommand = "true"\noptimization = "balanced"\n'
BAD = 'image = "img:1"\ngpu_count = 3\n'


def nodus(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m nodus_cli ARGS``."""
    command = [sys.executable, "-m", "nodus_cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(GOOD)
    bad.write_text(BAD)
    return str(good), str(bad)


def test_paths_after_a_double_dash(tmp_path: Path) -> None:
    odd = tmp_path / "-odd.toml"
    odd.write_text(GOOD)
    done = nodus("validate", "--", str(odd))
    assert done.returncode == 0 and "-odd.toml" in done.stdout


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["validate", "--help"], 0, "Check workload files"),
        (["validate", "--bogus", "x.toml"], 2, "No such option"),
        (["validate"], 2, "Missing argument"),
        (["validate", "--format", "yaml", "x.toml"], 2, "yaml"),
    ],
)
def test_what_the_parser_does_not_accept_it_explains(
    args: list[str], code: int, words: str
) -> None:
    done = nodus(*args)
    assert done.returncode == code
    assert words in done.stdout + done.stderr


def test_validate_loads_no_heavy_module(files: tuple[str, str]) -> None:
    code = (
        "import sys\nfrom nodus_cli.__main__ import main\n"
        f"main(['validate', {files[0]!r}])\n"
        "heavy = ('pydantic', 'docker', 'httpx', 'sqlite3', 'starlette', 'uvicorn')\n"
        "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)\n"
    )
    done = python(code)
    assert done.stderr.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    "args",
    [
        ["logs", "{big}"],
        ["stop", "{big}"],
        ["gpus", "{big}"],
        ["gpus", "--supplier", "{big}"],
        ["run", "--wait-timeout", "{big}", "{file}"],
        ["run", "--env", "{big}", "{file}"],
    ],
)
def test_an_echoed_argument_is_clipped_whatever_its_size(
    tmp_path: Path, files: tuple[str, str], args: list[str]
) -> None:
    big = "Z" * 100_000 + "END"
    given = [a.format(big=big, file=files[0]) for a in args]
    env = {"NODUS_HOME": str(tmp_path / "home"), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "nodus_cli", *given],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    out = done.stdout + done.stderr
    assert len(out) < 2000, (args, len(out), out[:300])  # each was 100,000 bytes and more
    assert "Z" * 130 + "…" + "Z" * 63 + "END" in out  # its start and its end, clipped between
    assert "Traceback" not in out


PLANNED = 'name = "p"\nimage = "img:1"\ncommand = "true"\n[requirements]\ncpu = 2\n'


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "{f}", "--json"],
        ["plan", "--top", "2", "--wide", "{f}"],
        ["plan", "{f}", "--top=0", "--target", "catalog"],
        ["run", "--dry-run", "--target=catalog", "--top", "1", "{f}", "--json"],
        ["run", "--dry-run", "--priority", "80", "--no-wait", "-e", "A=1", "{f}", "--json"],
        ["plan", "--json", "--", "{f}"],
    ],
)
def test_plan_and_run_in_their_usual_forms(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PLANNED)
    done = nodus(*[a.replace("{f}", str(path)) for a in args])
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    if "--json" in args:
        assert '"stages"' in done.stdout
    else:
        assert "planned against" in done.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["plan", "{f}", "--top", "-1"], "--top"),
        (["run", "{f}", "--retries", "11"], "--retries"),
        (["run", "{f}", "--priority", "101"], "--priority"),
        (["plan", "{f}", "--target", "mars"], "--target"),
        (["plan", "{f}", "{f}"], "unexpected extra argument"),
        (["plan", "{f}", "--unknown"], "No such option"),
        (["plan"], "Missing argument"),
    ],
)
def test_a_plan_or_run_the_parser_does_not_accept_it_explains(
    tmp_path: Path, args: list[str], words: str
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PLANNED)
    done = nodus(*[a.replace("{f}", str(path)) for a in args])
    assert done.returncode == 2 and words in done.stderr


def test_the_collector_runs_for_the_command_as_it_did_before() -> None:
    # Paused only while the application is imported: a foreground run lasts hours.
    code = (
        "import contextlib, gc, io\n"
        "from nodus_cli.__main__ import main\n"
        "seen = []\n"
        "import nodus_cli.cli.commands.validate as v\n"
        "v.run = lambda *a, **k: seen.append(gc.isenabled()) or 0\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['validate', 'x.toml'])\n"
        "print(seen, gc.isenabled())\n"
    )
    assert python(code).stdout.strip().splitlines()[-1] == "[True] True"
