"""The records a run writes while it runs: a full disk is one problem, said once, and
the run goes on; a fan-out stage's tasks are written in batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus_cli.records import (
    GpuSample,
    RunStore,
    StageRecord,
    StageStatus,
    StoreError,
    TaskRecord,
)
from nodus_cli.run import recorder
from nodus_cli.run.recorder import Recorder
from nodus_cli.workload import Workload, load_text

FAN_OUT = """
name = "fan"
image = "img:1"
command = "echo {item}"
[[stages]]
name = "each"
[stages.map]
items = ["a", "b", "c"]
[[stages]]
name = "after"
[stages.map]
items = ["x"]
"""


class _Clock:
    """The recorder's monotonic clock, stopped at 1000 s (moved by hand)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    stopped = _Clock()
    monkeypatch.setattr(recorder, "time", stopped)
    return stopped


def _workload() -> Workload:
    result = load_text(FAN_OUT)
    assert result.workload is not None, result.problems
    return result.workload


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore.open(tmp_path / "home")


def test_a_refused_write_is_one_problem_and_the_run_goes_on(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = store.create_run(_workload(), "local", 1.0, None)
    records = Recorder(store, rec.id)

    def full(*args: object) -> None:
        raise StoreError("no space left on the disk holding the nodus records")

    monkeypatch.setattr(store, "update_cost", full)
    records.cost(1.0)
    records.cost(2.0)
    records.running()  # still written
    assert records.problems == ["no space left on the disk holding the nodus records"]
    assert store.get(rec.id).status == "running"


def test_tasks_wait_for_their_batch_and_a_forced_flush_writes_them(
    store: RunStore, clock: _Clock
) -> None:
    rec = store.create_run(_workload(), "local", 0.0, None)
    records = Recorder(store, rec.id)
    records.task(0, TaskRecord(0, "a", StageStatus.RUNNING))  # a stage's first: at once
    records.task(0, TaskRecord(1, "b", StageStatus.RUNNING))  # waits for the batch
    assert [t.status for t in store.tasks(rec.id, 0)] == ["running", "pending", "pending"]
    records.flush(force=True)
    assert [t.status for t in store.tasks(rec.id, 0)] == ["running", "running", "pending"]
    records.task(0, TaskRecord(2, "c", StageStatus.RUNNING))
    assert store.tasks(rec.id, 0)[2].status == "pending"
    clock.now += recorder.FLUSH_EVERY
    records.flush()  # the batch is due
    assert store.tasks(rec.id, 0)[2].status == "running"


def test_a_new_stage_writes_what_the_last_one_left_waiting(store: RunStore, clock: _Clock) -> None:
    rec = store.create_run(_workload(), "local", 0.0, None)
    records = Recorder(store, rec.id)
    records.task(0, TaskRecord(0, "a", StageStatus.SUCCEEDED))
    records.task(0, TaskRecord(2, "c", StageStatus.FAILED))  # waiting
    records.task(1, TaskRecord(0, "x", StageStatus.RUNNING))
    assert [t.status for t in store.tasks(rec.id, 0)] == ["succeeded", "pending", "failed"]
    assert [t.status for t in store.tasks(rec.id, 1)] == ["running"]
    records.stage(1, StageRecord("after", StageStatus.RUNNING, None))
    assert store.get(rec.id).stages[1].status == "running"


def test_gpu_samples_wait_for_the_batch_and_a_forced_flush_writes_them(
    store: RunStore, clock: _Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = store.create_run(_workload(), "local", 0.0, None)
    records = Recorder(store, rec.id)
    writes: list[int] = []
    add = store.add_gpu_samples

    def counted(run_id: str, samples: list[GpuSample]) -> None:
        writes.append(len(samples))
        add(run_id, samples)

    monkeypatch.setattr(store, "add_gpu_samples", counted)
    records.gpu_samples([GpuSample(1.0, "GPU-a", 50.0, 100.0)])  # the first: at once
    for t in (2.0, 3.0, 4.0):  # tasks ending within the batch's half second
        records.gpu_samples([GpuSample(t, "GPU-a", 50.0, 100.0)])
    assert writes == [1] and len(store.gpu_samples(rec.id)) == 1
    records.flush(force=True)
    assert writes == [1, 3]  # one rewrite of the run's samples for the batch
    assert [s.time for s in store.gpu_samples(rec.id)] == [1.0, 2.0, 3.0, 4.0]
