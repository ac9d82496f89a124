"""How records map onto rows: what the store writes of a stage, a task or a run is what
it reads back, field by field."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from records_support import make_offer, make_workload

from nodus_cli.records import RunStatus, RunStore, StageRecord, StageStatus, TaskRecord
from nodus_cli.records.rows import RUNS, STAGES, TASKS
from nodus_cli.structs import replace

FAN_OUT = """
name = "fan"
image = "nodus-test/busybox:1"
command = "echo {item}"
[[stages]]
name = "each"
[stages.map]
items = ["a", "b", "c"]
"""


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore.open(tmp_path / "home")


def test_every_field_of_a_stage_is_read_back_as_written(store: RunStore) -> None:
    rec = store.create_run(make_workload(), "local", 2.0, None)
    written = StageRecord(
        "train",
        StageStatus.FAILED,
        3,
        started_at="2025-01-01T00:00:00+00:00",
        ended_at="2025-01-01T00:00:10+00:00",
        runtime_seconds=10.5,
        cost=0.25,
        config=make_offer().as_json(),
        gpu_uuids=["GPU-a", "GPU-b"],
        attempts=2,
        gpu_report={"sampled": True, "gpus": []},
        message="out of memory",
        node="node-1",
    )
    store.save_stage(rec.id, 1, written)
    assert store.get(rec.id).stages[1] == written


def test_a_stage_never_started_reads_back_empty_not_null(store: RunStore) -> None:
    rec = store.create_run(make_workload(), "local", 0.0, None)
    stage = store.get(rec.id).stages[0]
    assert (stage.cost, stage.gpu_uuids, stage.attempts, stage.config) == (0.0, [], 0, None)
    assert stage.gpu_report is None and stage.task_counts == {}


def test_the_configuration_key_is_written_for_the_runtime_measurements(store: RunStore) -> None:
    rec = store.create_run(make_workload(), "local", 0.0, None)
    store.save_stage(rec.id, 0, StageRecord("prep", StageStatus.RUNNING, None))
    offer = make_offer(None, 0)
    store.save_stage(
        rec.id, 1, StageRecord("train", StageStatus.RUNNING, None, config=offer.as_json())
    )
    with sqlite3.connect(store.db_path) as db:
        keys = db.execute("SELECT idx, config_key FROM stages ORDER BY idx").fetchall()
    assert keys == [(0, None), (1, "local|box|-|0")]


def test_every_field_of_a_task_is_read_back_as_written(store: RunStore) -> None:
    rec = store.create_run(make_workload(FAN_OUT), "local", 0.0, None)
    written = TaskRecord(
        1,
        "b",
        StageStatus.SUCCEEDED,
        0,
        started_at="2025-01-01T00:00:00+00:00",
        ended_at="2025-01-01T00:00:02+00:00",
        runtime_seconds=2.0,
        cost=0.01,
        devices=["GPU-a"],
        node="node-2",
        attempts=1,
        message="ok",
    )
    store.save_tasks(rec.id, 0, [written])
    assert store.tasks(rec.id, 0) == [TaskRecord(0, "a"), written, TaskRecord(2, "c")]
    got = store.get(rec.id, tasks=True).stages[0]
    assert got.tasks == store.tasks(rec.id, 0)
    assert got.task_counts == {"pending": 2, "succeeded": 1}


def test_every_field_of_a_run_is_read_back_as_written(store: RunStore) -> None:
    rec = store.create_run(make_workload(), "local", 2.0, "rec.toml")
    got = store.get(rec.id)
    assert replace(got, stages=[]) == replace(rec, stages=[])
    assert got.status == RunStatus.PENDING and not got.cleanup_pending


@pytest.mark.parametrize("table", [RUNS, STAGES, TASKS], ids=lambda t: t.name)
def test_each_declared_column_is_a_column_of_its_table(store: RunStore, table: object) -> None:
    assert isinstance(table, type(RUNS))
    with sqlite3.connect(store.db_path) as db:
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table.name})")}
    assert {c.name for c in table.columns} | set(table.key) <= have


def test_a_table_is_a_class_of_its_own_not_a_tuple() -> None:
    assert not isinstance(RUNS, tuple)
    assert ("runs", RUNS.columns, RUNS.key, RUNS.make) != RUNS
    assert repr(RUNS) == "Table('runs')"
    assert TASKS.update.startswith("UPDATE tasks SET ")
    assert TASKS.update.endswith(" WHERE run_id=? AND stage_idx=? AND idx=?")
