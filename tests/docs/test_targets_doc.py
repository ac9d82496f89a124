"""A third target is one module and one registry line (docs/targets.md): the documented
``process`` target, taken from the page as written, registered and driven by the same
driver as local and Swarm, through the command line and the Python API."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from interpreter import python
from paths import REPO

from process_target import PAGE, registered  # noqa: F401 - the fixture


def nodus(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodus_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def test_a_third_target_runs_stages_fanout_and_stop(
    registered: dict[str, str], tmp_path: Path
) -> None:
    work = tmp_path / "w.toml"
    work.write_text(
        'image = "unused"\n'
        '[[stages]]\nname = "one"\ncommand = ["sh", "-c", "echo first $NODUS_STAGE"]\n'
        '[[stages]]\nname = "two"\ncommand = ["sh", "-c", "echo item $NODUS_ITEM"]\n'
        '[stages.map]\nitems = ["a", "b", "c"]\n'
    )
    plan = nodus(registered, tmp_path, "plan", str(work), "--target", "process", "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["target"] == "process"
    done = nodus(registered, tmp_path, "run", str(work), "--target", "process")
    assert done.returncode == 0, done.stderr
    assert "one | first one" in done.stdout
    assert sorted(ln for ln in done.stdout.splitlines() if "| item" in ln) == [
        "two[0] | item a",
        "two[1] | item b",
        "two[2] | item c",
    ]
    (run,) = json.loads(nodus(registered, tmp_path, "runs", "--json").stdout)["runs"]
    assert run["target"] == "process" and run["status"] == "succeeded"

    slow = tmp_path / "slow.toml"
    slow.write_text('image = "unused"\ncommand = ["sh", "-c", "echo up; sleep 60"]\n')
    started = nodus(registered, tmp_path, "run", str(slow), "--target", "process", "--detach")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    stopped = nodus(registered, tmp_path, "stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    record = json.loads(nodus(registered, tmp_path, "runs", run_id, "--json").stdout)
    assert record["status"] == "cancelled"


def test_the_python_api_takes_the_new_target(registered: dict[str, str], tmp_path: Path) -> None:
    code = (
        "from nodus_cli import Client\n"
        "with Client(target='process') as c:\n"
        "    run = c.run(image='unused', command=['sh', '-c', 'echo via-api'])\n"
        "    print(run.wait(timeout=60).status, run.logs().strip())\n"
    )
    done = python(code, registered, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["succeeded", "via-api"]
