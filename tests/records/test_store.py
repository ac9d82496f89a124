"""The run store (SQLite under NODUS_HOME): what is recorded and read back, the folder's
privacy, versions, and its failures in words."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from records_support import long_history, make_offer, make_workload

from nodus_cli import records
from nodus_cli.errors import NodusError
from nodus_cli.records import RunStatus, RunStore, StageRecord, StageStatus, StoreError, queries
from nodus_cli.records.store import PAGE


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore.open(tmp_path / "home")


def test_a_run_is_recorded_with_its_stages(store: RunStore) -> None:
    w = make_workload()
    rec = store.create_run(w, "local", 2.0, "rec.toml")
    assert rec.status == RunStatus.PENDING
    assert [s.status for s in store.get(rec.id).stages] == ["pending", "pending"]
    store.set_running(rec.id)
    assert store.get(rec.id).status == RunStatus.RUNNING
    store.save_stage(
        rec.id,
        0,
        StageRecord(
            "prep",
            StageStatus.SUCCEEDED,
            0,
            started_at="2025-01-01T00:00:00+00:00",
            ended_at="2025-01-01T00:00:10+00:00",
            runtime_seconds=10.0,
            cost=0.0056,
            config=make_offer(None, 0).as_json(),
            attempts=1,
        ),
    )
    store.finish_run(rec.id, RunStatus.FAILED, 3, 0.0056, "stage 'train' failed")
    got = store.get(rec.id)
    doc = got.as_json()
    assert doc["status"] == "failed" and doc["exit_code"] == 3
    assert doc["workload"] == "rec" and doc["target"] == "local"
    assert doc["budget"] == 5.0 and doc["price_per_hour"] == 2.0
    assert doc["fingerprint"] == records.fingerprint(w)
    assert doc["ended_at"] is not None
    # a finished run has no stage left pending
    assert [(s["name"], s["status"]) for s in doc["stages"]] == [
        ("prep", "succeeded"),
        ("train", "skipped"),
    ]
    assert doc["stages"][0]["configuration"]["machine_id"] == "box"
    assert got.workload_json == w.as_json()


def test_ids_are_found_by_unique_prefix(store: RunStore) -> None:
    w = make_workload()
    a = store.create_run(w, "local", 0.0, None, run_id="20250101-000000-aaaaaa")
    store.create_run(w, "local", 0.0, None, run_id="20250101-000000-aaabbb")
    assert store.get("20250101-000000-aaaaaa").id == a.id
    assert store.get("20250101-000000-aaaa").id == a.id
    with pytest.raises(NodusError, match="matches several runs"):
        store.get("20250101-000000-aaa")
    with pytest.raises(NodusError, match="no run") as caught:
        store.get("nope")
    assert caught.value.exit_code == 2
    with pytest.raises(NodusError, match="no run"):
        store.get("2025%")  # no SQL wildcards


def test_runs_are_listed_newest_first(store: RunStore) -> None:
    w = make_workload()
    ids = [store.create_run(w, "local", 0.0, None).id for _ in range(3)]
    assert [r.id for r in store.list_runs()] == ids[::-1]
    assert len(store.list_runs(limit=2)) == 2


def test_runs_are_read_a_page_at_a_time_as_they_are_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = long_history(tmp_path / "home", 2 * PAGE + 7)
    store = RunStore.open(tmp_path / "home")
    pages: list[int] = []
    real = queries.recent

    def counted(db: sqlite3.Connection, limit: int, *rest: Any) -> Any:
        found = real(db, limit, *rest)
        pages.append(len(found[0]))
        return found

    monkeypatch.setattr(queries, "recent", counted)
    listing = store.iter_runs()
    assert next(listing).id == ids[0]
    assert pages == [PAGE]  # one page read, not the history
    rest = list(listing)
    assert [r.id for r in rest] == ids[1:]  # newest first, runs of one second included
    assert pages == [PAGE, PAGE, 7]
    assert [len(r.stages) for r in rest] == [2] * len(rest)
    assert [r.id for r in store.iter_runs(PAGE + 1)] == ids[: PAGE + 1]
    assert pages[3:] == [PAGE, 1]
    assert [r.id for r in store.list_runs(3)] == ids[:3]


def test_a_filtered_listing_pages_past_an_offset_without_losing_or_repeating_a_run(
    tmp_path: Path,
) -> None:
    # The dashboard's filters and offset and the long listing's pages are one query: a
    # filter that keeps every other run, started past an offset, over three pages.
    ids = long_history(tmp_path / "home", 2 * PAGE + 7)
    kept = set(ids[::2])
    with sqlite3.connect(tmp_path / "home" / "runs.sqlite3") as db:
        db.executemany(
            "UPDATE runs SET status = ? WHERE id = ?",
            [("failed" if i not in kept else "succeeded", i) for i in ids],
        )
    store = RunStore.open(tmp_path / "home")
    wanted = [i for i in ids if i in kept]
    listed = [r.id for r in store.iter_runs(status="succeeded", offset=3)]
    assert listed == wanted[3:]
    assert [r.id for r in store.list_runs(2, 5, status="failed")] == [
        i for i in ids if i not in kept
    ][5:7]


def test_a_running_stage_of_an_ended_run_takes_the_runs_end(store: RunStore) -> None:
    w = make_workload()
    rec = store.create_run(w, "local", 0.0, None)
    store.save_stage(
        rec.id, 1, StageRecord("train", StageStatus.RUNNING, None, gpu_uuids=["GPU-a"])
    )
    store.finish_run(rec.id, RunStatus.CANCELLED, 130, 0.0)
    assert [s.status for s in store.get(rec.id).stages] == ["skipped", "cancelled"]


def test_a_queued_stage_of_an_ended_run_ends_and_stops_naming_its_holders(
    store: RunStore,
) -> None:
    w = make_workload()
    rec = store.create_run(w, "local", 0.0, None)
    waiting = "queued, 1st in line (held by container happy_cohen, not started by nodus, since"
    store.save_stage(rec.id, 0, StageRecord("prep", StageStatus.QUEUED, None, message=waiting))
    store.finish_run(rec.id, RunStatus.CANCELLED, None, 0.0, "its nodus process ended")
    prep, train = store.get(rec.id).stages
    assert (prep.status, train.status) == ("cancelled", "skipped")
    assert prep.ended_at is not None
    assert prep.message == "not started: it waited for GPUs when the run ended cancelled"


def test_the_supervisor_is_claimed_with_its_host_and_start_time(store: RunStore) -> None:
    rec = store.create_run(make_workload(), "local", 0.0, None)
    store.claim(rec.id, os.getpid())
    got = store.get(rec.id)
    assert got.pid == os.getpid() and got.host == records.hostname()
    assert got.pid_start is not None and records.process_alive(os.getpid(), got.pid_start)
    assert not records.process_alive(os.getpid(), got.pid_start + 1)  # a recycled pid
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not records.process_alive(dead.pid, None)


def test_the_state_folder_is_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = RunStore.open(home)
    rec = store.create_run(make_workload(), "local", 0.0, None)
    log = store.log_writer(rec.id)
    log.write("main", None, "stdout", "secret")
    log.close()
    work = store.work_dir(rec.id)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(home) == 0o700 and mode(home / "logs") == 0o700 and mode(work.parent) == 0o700
    assert mode(home / "runs.sqlite3") == 0o600
    assert mode(home / "logs" / f"{rec.id}.jsonl") == 0o600


def test_a_background_supervisors_stderr_file_is_private(tmp_path: Path) -> None:
    store = RunStore.open(tmp_path / "home")
    umask = os.umask(0o022)  # what a user's shell usually has
    try:
        with store.stderr_file("20250101-000000-abcdef") as handle:
            handle.write(b"a traceback\n")
    finally:
        os.umask(umask)
    path = store.stderr_path("20250101-000000-abcdef")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == b"a traceback\n"


def test_a_run_that_never_started_is_forgotten_with_its_files(tmp_path: Path) -> None:
    store = RunStore.open(tmp_path / "home")
    kept = store.create_run(make_workload(), "local", 0.0, None)
    gone = store.create_run(make_workload(), "local", 0.0, None)
    log = store.log_writer(gone.id)
    log.write(None, None, "nodus", "error: refused")
    log.close()
    store.stderr_file(gone.id).close()
    store.forget(gone.id)
    assert [r.id for r in store.list_runs()] == [kept.id]
    assert store.log_ids() == []
    assert not store.stderr_path(gone.id).exists()
    with sqlite3.connect(store.db_path) as db:
        left = db.execute("SELECT count(*) FROM stages WHERE run_id=?", (gone.id,)).fetchone()
    assert left == (0,)


def test_an_existing_open_state_folder_is_made_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    RunStore.open(home).create_run(make_workload(), "local", 0.0, None)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


_OPEN_AT_ONCE = """
import sys, time
from pathlib import Path
from nodus_cli.records import RunStore
start, folders = float(sys.argv[1]), sys.argv[2:]
for k, folder in enumerate(folders):
    while time.time() < start + 0.15 * k:
        pass
    store = RunStore.open(Path(folder))
    store.spending("2000")
    store.close()
print("ok")
"""


def test_a_new_state_folder_opened_by_several_processes_at_once(tmp_path: Path) -> None:
    # Parallel CI jobs that share a NODUS_HOME each open it first: the one that creates the
    # records must not trip the others ("database is locked", "duplicate column name").
    folders = [str(tmp_path / f"home{k}") for k in range(12)]
    start = time.time() + 1.0  # every process started and imported by then
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_AT_ONCE, str(start), *folders],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.strip() == "ok", err
    for folder in folders:
        with sqlite3.connect(Path(folder) / "runs.sqlite3") as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert db.execute("PRAGMA user_version").fetchone()[0] == records.schema.SCHEMA_VERSION


def test_records_of_the_first_version_are_brought_up_to_date(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with sqlite3.connect(home / "runs.sqlite3") as db:
        db.executescript(records.schema._SCHEMA)
        db.execute("PRAGMA user_version=1")
    store = RunStore.open(home)
    try:
        run = store.create_run(make_workload(), "local", 0.0, None)
        store.claim(run.id, os.getpid())  # a version-2 column: host and process start
        assert store.get(run.id).pid == os.getpid()
    finally:
        store.close()
    with sqlite3.connect(home / "runs.sqlite3") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == records.schema.SCHEMA_VERSION
        assert {"host", "pid_start", "stop_requested"} <= {
            row[1] for row in db.execute("PRAGMA table_info(runs)")
        }
        assert "runs_by_start" in {row[1] for row in db.execute("PRAGMA index_list(runs)")}


def test_records_of_the_second_version_get_the_index_listings_read_by(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with sqlite3.connect(home / "runs.sqlite3") as db:
        db.executescript(records.schema._SCHEMA + records.schema._MIGRATE_2)
        db.execute("PRAGMA user_version=2")
    RunStore.open(home).close()
    with sqlite3.connect(home / "runs.sqlite3") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == records.schema.SCHEMA_VERSION
        plan = db.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM runs ORDER BY started_at DESC, rowid DESC"
        ).fetchall()
        assert "runs_by_start" in str(plan)


def test_a_damaged_database_is_named_with_how_to_set_it_aside(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "runs.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError) as caught:
        RunStore.open(home)
    assert "is damaged" in caught.value.message and "internal error" not in caught.value.message
    assert caught.value.hint is not None and "mv " in caught.value.hint
    assert "writable folder" not in caught.value.hint


def test_an_emptied_database_beside_run_logs_is_damaged_not_new(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = RunStore.open(home)
    rec = store.create_run(make_workload(), "local", 0.0, None)
    log = store.log_writer(rec.id)
    log.write("main", None, "stdout", "kept")
    log.close()
    store.close()
    for extra in ("-wal", "-shm"):
        (home / f"runs.sqlite3{extra}").unlink(missing_ok=True)
    (home / "runs.sqlite3").write_bytes(b"")
    with pytest.raises(StoreError) as caught:
        RunStore.open(home)
    db = home / "runs.sqlite3"
    assert caught.value.message == (
        f"the run records database {db} is damaged (it is empty (0 bytes), but "
        f"{home / 'logs'} holds the logs of 1 recorded run)"
    )
    assert caught.value.hint is not None and f"mv {db} {db}.damaged" in caught.value.hint
    with pytest.raises(StoreError, match="is damaged"):
        RunStore.open(home, create=False)  # read-only paths see it too
    assert db.stat().st_size == 0  # nothing was made over it


def test_a_new_database_another_process_fills_meanwhile_is_not_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three first calls at once in a new folder: while one store looks at the 0-byte
    database another creates it, records a run and writes its log. Not damaged."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "runs.sqlite3").write_bytes(b"")  # a first store made it, not committed yet
    counted = RunStore.log_ids
    raced: list[str] = []
    looks: list[RunStore] = []

    def racing(self: RunStore) -> list[str]:
        if not looks:  # the other process's whole first run, between two looks
            looks.append(self)
            other = RunStore(home)
            other._prepare()
            rec = other.create_run(make_workload(), "local", 0.0, None)
            log = other.log_writer(rec.id)
            log.write("main", None, "stdout", "first")
            log.close()
            raced.append(rec.id)
        return counted(self)

    monkeypatch.setattr(RunStore, "log_ids", racing)
    store = RunStore.open(home)
    assert [r.id for r in store.list_runs()] == raced


def test_an_empty_database_in_a_folder_without_logs_is_new(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "runs.sqlite3").write_bytes(b"")  # the moment between creation and first commit
    assert RunStore.open(home).list_runs() == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only folders")
def test_a_read_only_home_still_lists_its_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = RunStore.open(home)
    rec = store.create_run(make_workload(), "local", 0.0, None)
    store.close()
    home.chmod(0o500)
    try:
        again = RunStore.open(home)
        assert again.read_only and [r.id for r in again.list_runs()] == [rec.id]
        with pytest.raises(StoreError, match="read-only"):
            again.create_run(make_workload(), "local", 0.0, None)
    finally:
        home.chmod(0o700)


def test_a_full_disk_is_named_as_such() -> None:
    from nodus_cli.records.store import _explain

    error = _explain(sqlite3.OperationalError("database or disk is full"), Path("/h/runs.sqlite3"))
    assert error.message == "no space left on the disk holding the nodus records (/h/runs.sqlite3)"
    assert error.hint is not None and "free some space" in error.hint


def test_a_disk_io_error_on_a_full_disk_names_the_disk_as_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite cannot grow a WAL database's shared-memory file on a full disk: it says "disk
    # I/O error" (SQLITE_IOERR_SHMSIZE). The free space tells which it is.
    from nodus_cli.records import store as module

    path = tmp_path / "runs.sqlite3"
    error = sqlite3.OperationalError("disk I/O error")
    monkeypatch.setattr(module, "_free_bytes", lambda folder: 0)
    assert module._explain(error, path).message == (
        f"no space left on the disk holding the nodus records ({path})"
    )
    monkeypatch.setattr(module, "_free_bytes", lambda folder: 10 * 1024**3)
    assert "disk I/O error" in module._explain(error, path).message


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    env = {**os.environ, "NODUS_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nodus_cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    return run


def test_runs_and_logs_without_any_run(
    cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    done = cli("runs", "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == {"version": 1, "runs": []}
    assert "no runs recorded yet" in cli("runs").stdout
    missing = cli("logs", "20250101-000000-abcdef")
    assert missing.returncode == 2
    assert "no run '20250101-000000-abcdef'" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert cli("rerun", "nope").returncode == 2
    newest = cli("logs")
    assert newest.returncode == 2 and "no run recorded yet" in newest.stderr


def test_records_of_version_2_gain_the_job_ids_and_keep_them(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with sqlite3.connect(home / "runs.sqlite3") as db:
        db.executescript(records.schema._SCHEMA)
        db.executescript(records.schema._MIGRATE_2)
        db.execute("PRAGMA user_version=2")
    store = RunStore.open(home)
    try:
        run = store.create_run(make_workload(), "slurm", 0.0, None)
        stage = store.get(run.id).stages[1]
        assert stage.job_id is None
        stage.job_id = "4242"
        store.save_stage(run.id, 1, stage)
        again = store.get(run.id).stages[1]
        assert again.job_id == "4242" and again.as_json()["job_id"] == "4242"
    finally:
        store.close()
    with sqlite3.connect(home / "runs.sqlite3") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == records.schema.SCHEMA_VERSION
        for table in ("stages", "tasks"):
            assert "job_id" in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
