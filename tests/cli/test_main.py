"""The entry point: ``nodus validate`` parsed without Typer gives exactly what the Typer
application gives (same output, same exit code), and hands anything else to Typer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from interpreter import python

GOOD = 'image = "img:1"\ncommand = "true"\noptimization = "balanced"\n'
BAD = 'image = "img:1"\ngpu_count = 3\n'


def nodus(*args: str, typer: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m nodus_cli ARGS``; with ``typer``, through the Typer application alone."""
    if typer:
        code = (
            "import sys; from nodus_cli.cli.app import app\n"
            "try:\n    app(args=sys.argv[1:], prog_name='nodus', standalone_mode=True)\n"
            "except SystemExit as e:\n    sys.exit(e.code)\n"
        )
        command = [sys.executable, "-c", code, *args]
    else:
        command = [sys.executable, "-m", "nodus_cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(GOOD)
    bad.write_text(BAD)
    return str(good), str(bad)


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--json"],
        ["--format", "github"],
        ["--format=json"],
        ["--strict"],
        ["--format", "text", "--strict"],
    ],
)
def test_the_fast_path_answers_exactly_as_typer(files: tuple[str, str], options: list[str]) -> None:
    for chosen in ([files[0]], [files[1]], list(files)):
        fast = nodus("validate", *options, *chosen)
        slow = nodus("validate", *options, *chosen, typer=True)
        assert (fast.returncode, fast.stdout, fast.stderr) == (
            slow.returncode,
            slow.stdout,
            slow.stderr,
        )


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
def test_what_the_fast_path_does_not_know_goes_to_typer(
    args: list[str], code: int, words: str
) -> None:
    done = nodus(*args)
    assert done.returncode == code
    assert words in done.stdout + done.stderr


def test_validate_loads_no_heavy_module(files: tuple[str, str]) -> None:
    code = (
        "import sys\nfrom nodus_cli.__main__ import main\n"
        f"main(['validate', {files[0]!r}])\n"
        "heavy = ('typer', 'click', 'rich', 'pydantic', 'docker', 'httpx', 'sqlite3')\n"
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
        ["plan", "{f}"],
        ["plan", "{f}", "--json"],
        ["plan", "--top", "2", "--wide", "{f}"],
        ["plan", "{f}", "--top=0", "--target", "catalog"],
        ["plan", "--target", "local", "{f}", "--json"],
        ["run", "--dry-run", "{f}", "--json"],
        ["run", "--dry-run", "--target=catalog", "--top", "1", "{f}"],
        ["run", "--dry-run", "--priority", "80", "--no-wait", "-e", "A=1", "{f}"],
        ["plan", "--", "{f}"],
    ],
)
def test_plan_and_run_without_typer_say_what_typer_says(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PLANNED)
    argv = [a.replace("{f}", str(path)) for a in args]
    fast, slow = nodus(*argv), nodus(*argv, typer=True)
    assert (fast.returncode, fast.stdout) == (slow.returncode, slow.stdout)
    assert "Traceback" not in fast.stderr


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
def test_a_plan_or_run_the_fast_path_does_not_know_goes_to_typer(
    tmp_path: Path, args: list[str], words: str
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PLANNED)
    done = nodus(*[a.replace("{f}", str(path)) for a in args])
    assert done.returncode == 2 and words in done.stderr


def test_plan_and_run_dry_run_never_import_typer(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PLANNED)
    code = (
        "import contextlib, io, sys\n"
        "from nodus_cli.__main__ import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    a = main(['plan', {str(path)!r}])\n"
        f"    b = main(['run', '--dry-run', '--target', 'catalog', {str(path)!r}])\n"
        "print(a, b, sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click')))\n"
    )
    done = python(code)
    assert done.stdout.strip().splitlines()[-1] == "0 0 []", done.stdout + done.stderr
