"""Reconcile for a target whose scheduler owns the jobs (``owns_jobs``, as Slurm's): a run
whose supervisor died is asked about (``settle``), never cleaned up, and its end recorded
as the target tells it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from records_support import make_workload

from nodus_cli import targets
from nodus_cli.catalog import Offer
from nodus_cli.functions.layout import CallFolder
from nodus_cli.records import RunRecord, RunStatus, RunStore, StageStatus
from nodus_cli.run.reconcile import reconcile
from nodus_cli.structs import replace
from nodus_cli.targets.base import (
    Cleanup,
    NodeInfo,
    Preparation,
    Settled,
    Target,
    Task,
    TaskContext,
    TaskEnd,
)
from nodus_cli.workload import FunctionCall, Workload

#: What the next ``settle`` answers, and what ``cleanup`` was asked for.
ANSWER: list[Settled | None] = []
CLEANED: list[str] = []


class OwnedTarget(Target):
    name: ClassVar[str] = "owned"
    description: ClassVar[str] = "a scheduler that owns its jobs"
    owns_jobs: ClassVar[bool] = True

    def offers(self, workload: Workload) -> tuple[Offer, ...]:
        return ()

    def prepare(self, workload: Workload, plan: object) -> Preparation:  # type: ignore[override]
        return Preparation()

    def run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        raise NotImplementedError

    def stop_task(self, task: Task) -> None:
        pass

    def cleanup(self, run_id: str) -> Cleanup:
        CLEANED.append(run_id)
        return Cleanup([f"job of {run_id}"])

    def settle(self, record: RunRecord) -> Settled | None:
        return ANSWER[-1]

    def nodes(self) -> list[NodeInfo]:
        return []


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunStore]:
    monkeypatch.setitem(targets.REGISTRY, "owned", f"{__name__}:OwnedTarget")
    ANSWER.clear()
    CLEANED.clear()
    store = RunStore.open(tmp_path / "home")
    yield store
    store.close()


def _orphan(store: RunStore, workload: Workload | None = None) -> RunRecord:
    """A running run whose supervisor is gone, its first stage submitted as job 7."""
    run = store.create_run(workload or make_workload(), "owned", 3.6, None)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.claim(run.id, dead.pid)
    store.set_running(run.id)
    stage = store.get(run.id).stages[0]
    stage.status = StageStatus.RUNNING
    stage.job_id = "7"
    store.save_stage(run.id, 0, stage)
    return store.get(run.id)


def test_a_job_still_running_is_left_alone_and_nothing_is_cancelled(store: RunStore) -> None:
    run = _orphan(store)
    ANSWER.append(None)
    assert reconcile(store) == []
    assert store.get(run.id).status == RunStatus.RUNNING
    assert CLEANED == []


def test_a_job_that_ended_is_recorded_as_the_scheduler_says(store: RunStore) -> None:
    run = _orphan(store)
    stage = run.stages[0]
    stage.status = StageStatus.FAILED
    stage.exit_code = 4
    stage.cost = 0.5
    ANSWER.append(Settled(RunStatus.FAILED, 4, "job 7 went on: exited with 4", {0: stage}))
    said = reconcile(store)
    assert said == [f"run {run.id}: job 7 went on: exited with 4"]
    ended = store.get(run.id)
    assert (ended.status, ended.exit_code, ended.cost) == (RunStatus.FAILED, 4, 0.5)
    assert ended.stages[0].job_id == "7" and ended.stages[0].exit_code == 4
    assert ended.stages[1].status == StageStatus.SKIPPED
    assert CLEANED == []


def test_a_function_runs_call_folder_goes_once_its_end_is_recorded_not_before(
    store: RunStore,
) -> None:
    # Its caller is gone: nobody will read the outcome, and values can be 1 GiB.
    workload = make_workload()
    first = replace(workload.stages[0], command=None, function=FunctionCall("m.f", "c1", "3.11"))
    run = _orphan(store, replace(workload, stages=[first]))
    folder = CallFolder(store.root, "c1")
    folder.create()
    folder.create_item(0)
    ANSWER.append(None)
    reconcile(store)
    assert folder.exists()  # the job still runs: its outcome may yet be read by nobody
    stage = run.stages[0]
    stage.status = StageStatus.SUCCEEDED
    ANSWER.append(Settled(RunStatus.SUCCEEDED, 0, "job 7 went on: completed", {0: stage}))
    reconcile(store)
    assert store.get(run.id).status == RunStatus.SUCCEEDED
    assert not folder.exists()
