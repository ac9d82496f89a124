# ruff: noqa: F811 - the fixtures imported from test_runner are test parameters here
"""A target that submits a fan-out stage's items together (``runs_items``, a Slurm job
array): the driver hands them to one ``run_items`` and keeps its policy per item.

The scripted target of :mod:`test_runner` runs each item's script in a thread of its
``run_items`` (as a scheduler runs an array's tasks) and reports each end through the
item's context; a retry is a ``run_task`` of that item again.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from test_runner import MAP, ScriptedTarget, exits, fails, run, store, workload  # noqa: F401 - fixture

from nodus_cli.records import RunStatus, RunStore
from nodus_cli.targets.base import ItemContext, TargetFailure, Task, TaskState
from nodus_cli.workload import Stage


@dataclass
class ArrayTarget(ScriptedTarget):
    """Every fan-out stage is one submission; ``forget``: items it never ends."""

    submissions: list[tuple[list[str], int]] = field(default_factory=list)
    single: list[tuple[str, int]] = field(default_factory=list)
    forget: set[str] = field(default_factory=set)

    def runs_items(self, stage: Stage) -> bool:
        return True

    def run_items(
        self, tasks: Sequence[Task], contexts: Sequence[ItemContext], parallel: int
    ) -> None:
        self.submissions.append(([t.key for t in tasks], parallel))
        threads = [
            threading.Thread(target=self._item, args=(task, ctx))
            for task, ctx in zip(tasks, contexts, strict=True)
            if task.key not in self.forget
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _item(self, task: Task, ctx: ItemContext) -> None:
        ctx.ended(ScriptedTarget.run_task(self, task, ctx))

    def run_task(self, task: Task, ctx: ItemContext) -> object:  # type: ignore[override]
        self.single.append((task.key, task.attempt))
        return super().run_task(task, ctx)


def test_every_item_goes_to_one_submission_and_each_ends_on_its_own(store: RunStore) -> None:
    target = ArrayTarget(scripts={"main[2]": [exits(5)]}, default=exits(0, 0.05))
    outcome, doc = run(store, target, workload(MAP + "parallel = 2\n"))
    assert target.submissions == [([f"main[{i}]" for i in range(6)], 2)]
    assert target.single == []
    assert (outcome.status, outcome.exit_code) == (RunStatus.FAILED, 5)
    tasks = doc["stages"][0]["tasks"]
    assert [t["status"] for t in tasks] == ["succeeded"] * 2 + ["failed"] + ["succeeded"] * 3
    assert "1 of 6 items failed" in doc["message"]


def test_an_item_the_target_failed_is_retried_on_its_own_with_the_same_devices(
    store: RunStore,
) -> None:
    infra = fails(TaskState.INFRASTRUCTURE, "Slurm requeued it")
    target = ArrayTarget(scripts={"main[1]": [infra, exits(0)]})
    outcome, doc = run(store, target, workload(MAP), retries=1)
    assert outcome.status == RunStatus.SUCCEEDED
    assert target.single == [("main[1]", 2)]
    assert doc["stages"][0]["tasks"][1]["attempts"] == 2


def test_an_item_the_target_never_ends_fails_the_run_instead_of_hanging(
    store: RunStore,
) -> None:
    target = ArrayTarget(forget={"main[4]"})
    with pytest.raises(TargetFailure, match=r"did not say how main\[4\] ended"):
        run(store, target, workload(MAP))
    (record,) = store.list_runs()
    assert record.status == RunStatus.FAILED
    assert "did not say how main[4] ended" in (record.message or "")


def test_the_budget_stops_every_item_of_the_submission(store: RunStore) -> None:
    target = ArrayTarget(price=3600.0, default=exits(0, 30))
    outcome, doc = run(store, target, workload("budget = 1.0\n" + MAP))
    assert (outcome.status, outcome.exit_code) == (RunStatus.BUDGET_EXHAUSTED, 4)
    assert sorted(target.stopped) == [f"main[{i}]" for i in range(6)]
    assert {t["status"] for t in doc["stages"][0]["tasks"]} == {"budget_exhausted"}
