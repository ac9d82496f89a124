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


def test_a_damaged_log_line_is_a_warning_not_output(home: Path) -> None:
    run_id = ended(home, None)
    (home / "logs" / f"{run_id}.jsonl").write_text(
        '{"time": "t", "stage": "main", "item": null, "stream": "stdout", "text": "kept"}\n'
        '{"time": "t", "stage": "main", "te\n'
    )
    done = nodus(home, "logs", run_id)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "main | kept",
        f"nodus: warning: a damaged line of the log {run_id}.jsonl (not a log entry), left "
        """out of the output: '{"time": "t", "stage": "main", "te'""",
    ]


def test_stop_of_an_unknown_run_is_an_error_with_a_hint(home: Path) -> None:
    run_id = ended(home, None)
    done = nodus(home, "stop", "nope")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: no run 'nope'",
        "hint: `nodus runs` lists the recorded runs",
    ]
    both = nodus(home, "stop", run_id, "nope")
    assert both.returncode == 2
    assert both.stderr.splitlines() == [
        f"nodus: run {run_id} is not running: it ended succeeded",
        "error: no run 'nope'",
        "hint: `nodus runs` lists the recorded runs",
    ]


def test_rerun_checks_the_environment_before_it_says_anything(home: Path) -> None:
    store = RunStore.open(home)
    try:
        workload = make_workload(
            'name = "tok"\nimage = "nodus-test/busybox:1"\ncommand = "true"\n'
            'env = { TOKEN = "${NODUS_TEST_UNSET_TOKEN}" }\n'
        )
        run = store.create_run(workload, "local", 0.0, None)
        store.finish_run(run.id, RunStatus.SUCCEEDED, 0, 0.0)
    finally:
        store.close()
    done = nodus(home, "rerun", run.id)
    assert done.returncode == 1
    assert "re-running" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "error: the workload takes values from this environment that are not set:"
    assert "NODUS_TEST_UNSET_TOKEN" in lines[1]
    assert lines[-1] == (
        f"hint: export them, then `nodus rerun {run.id}` again: a recorded run takes them from "
        "the environment it runs in (their values are never stored)"
    )
    assert "default" not in done.stderr  # nothing to edit: the workload is the record's
