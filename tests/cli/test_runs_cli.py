"""``nodus runs``, ``nodus logs`` and ``nodus stop`` on recorded runs, at a terminal's width:
records written through the store (no engine needed: the runs have ended)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from records_support import long_history, make_workload

from nodus_cli.cli.commands import runs
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


# -- long listings ---------------------------------------------------------------------------


def test_a_long_listing_in_json_is_the_one_document_it_always_was(home: Path) -> None:
    ids = long_history(home, runs.LOOK_AHEAD + 50)
    done = nodus(home, "runs", "--json", "--top", "100000")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [r["id"] for r in document["runs"]] == ids
    assert document["version"] == 1
    assert done.stdout == json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    empty = nodus(home.parent / "empty", "runs", "--json")
    assert empty.stdout == '{\n  "version": 1,\n  "runs": []\n}\n'


def test_a_listing_longer_than_the_look_ahead_fits_the_terminal_and_lists_every_run(
    home: Path,
) -> None:
    ids = long_history(home, runs.LOOK_AHEAD + 50)
    done = nodus(home, "runs", "--top", str(runs.LOOK_AHEAD + 10))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    listed = [line.split()[0] for line in lines[1:-1]]
    assert listed == ids[: runs.LOOK_AHEAD + 10]
    assert all(len(line) <= 80 and line == line.rstrip() for line in lines)
    wide = nodus(home, "runs", "--top", "100000", "--wide").stdout.splitlines()
    assert wide[0].split()[:3] == ["id", "workload", "target"]
    assert [line.split()[0] for line in wide[1:]] == ids


class _Counted(io.TextIOBase):
    """A stdout that only counts what it is given (it holds none of it)."""

    written = 0

    def write(self, text: str) -> int:
        self.written += len(text)
        return len(text)


def _peak(home: Path, top: int, as_json: bool, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("NODUS_HOME", str(home))
    out = _Counted()
    monkeypatch.setattr(sys, "stdout", out)
    tracemalloc.start()
    try:
        assert runs.list_runs(top, as_json) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        monkeypatch.undo()


@pytest.mark.parametrize("as_json", [False, True])
def test_a_long_listing_is_printed_in_bounded_memory(
    home: Path, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    long_history(home, 8 * runs.LOOK_AHEAD)
    _peak(home, 10, as_json, monkeypatch)  # what a first listing loads once
    short = _peak(home, 2 * runs.LOOK_AHEAD, as_json, monkeypatch)
    long = _peak(home, 8 * runs.LOOK_AHEAD, as_json, monkeypatch)
    # Four times the runs: held whole, about four times the memory; streamed, the same.
    assert long < 1.3 * short, (short, long)
