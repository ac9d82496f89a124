"""``nodus runs``, ``nodus logs`` and ``nodus stop`` on recorded runs, at a terminal's width:
records written through the store (no engine needed: the runs have ended)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from records_support import make_workload

from nodus_cli.records import RunStatus, RunStore


def nodus(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_")}
    env.update(NODUS_HOME=str(home), NO_COLOR="1", COLUMNS="80")
    return subprocess.run(
        [sys.executable, "-m", "nodus_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def ended(home: Path, output: dict[str, str] | None) -> str:
    store = RunStore.open(home)
    try:
        run = store.create_run(make_workload(), "local", 0.0, None)
        store.finish_run(run.id, RunStatus.SUCCEEDED, 0, 0.0, output=output)
        return run.id
    finally:
        store.close()


@pytest.mark.parametrize(
    ("output", "shown"),
    [
        ({"kind": "removed"}, "work directory: removed"),
        ({"kind": "kept", "path": "/srv/work/x"}, "work directory: kept /srv/work/x"),
    ],
)
def test_one_run_at_80_columns_has_no_trailing_space(
    home: Path, output: dict[str, str], shown: str
) -> None:
    run_id = ended(home, output)
    done = nodus(home, "runs", run_id)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert shown in lines
    assert [line for line in lines if line != line.rstrip()] == []
    assert all(len(line) <= 80 for line in lines)
