"""The run policy, once for every target: a scripted target implements the real
:class:`~nodus_cli.targets.base.Target` interface and the driver runs it as it runs the
local engine or Swarm. Stage order and skipped stages, retries (same model and count,
only for the target's own failures), budget on one clock, signals, crash records,
fan-out (every item a task, failures that do not stop the others, ``parallel``)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nodus_cli.catalog import Offer
from nodus_cli.errors import NotRunnable
from nodus_cli.planning.plan import Plan, StagePlan
from nodus_cli.planning.planner import plan_workload
from nodus_cli.planning.ranking import no_history
from nodus_cli.records import RunStatus, RunStore, StageStatus
from nodus_cli.run import launcher
from nodus_cli.run.driver import RunEnd
from nodus_cli.run.sink import Progress
from nodus_cli.targets.base import (
    Cleanup,
    NodeInfo,
    Preparation,
    Started,
    Target,
    Task,
    TaskContext,
    TaskEnd,
    TaskState,
    WorkDir,
)
from nodus_cli.workload import Stage, Workload, load_text

Step = Callable[[Task, TaskContext, threading.Event], TaskEnd]


def exits(code: int, seconds: float = 0.0, text: str | None = None) -> Step:
    def step(task: Task, ctx: TaskContext, stop: threading.Event) -> TaskEnd:
        if text is not None:
            ctx.emit("stdout", text)
        if stop.wait(seconds):
            return TaskEnd(TaskState.STOPPED, 137, "stopped by nodus")
        return TaskEnd(TaskState.EXITED, code)

    return step


def fails(state: TaskState, message: str) -> Step:
    def step(task: Task, ctx: TaskContext, stop: threading.Event) -> TaskEnd:
        return TaskEnd(state, 1, message)

    return step


def crashes(exc: BaseException) -> Step:
    def step(task: Task, ctx: TaskContext, stop: threading.Event) -> TaskEnd:
        raise exc

    return step


@dataclass
class ScriptedTarget(Target):
    """Every task runs its script: the next step for its key (``stage`` or ``stage[i]``)."""

    name = "local"  # records say "local"; the policy does not look
    description = "the scripted machine"

    store: Any = None
    catalog: str | None = None
    scripts: dict[str, list[Step]] = field(default_factory=dict)
    default: Step = field(default_factory=lambda: exits(0))
    price: float = 0.0
    capacity_now: int = 4
    started_tasks: list[tuple[str, int, tuple[str, ...]]] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)
    running_now: int = 0
    most_at_once: int = 0
    released: list[tuple[bool, Path | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stops: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def offers(self, workload: Workload) -> tuple[Offer, ...]:
        return (
            Offer(
                "scripted", "box", "local", "H100", 8, 80.0, 64, 512.0, None, "x86_64", self.price
            ),
        )

    def prepare(self, workload: Workload, plan: Plan) -> Preparation:
        return Preparation(price_per_hour=self.price)

    def capacity(self, stage: Stage, plan: StagePlan) -> int:
        return self.capacity_now

    def run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        stop = threading.Event()
        with self._lock:
            self._stops[task.key] = stop
            script = self.scripts.get(task.key, [])
            step = script.pop(0) if script else self.default
            self.running_now += 1
            self.most_at_once = max(self.most_at_once, self.running_now)
        devices = task.previous_devices or (f"GPU-{task.key}-{task.attempt}",)
        ctx.submitted()
        ctx.started(Started(devices=devices, node="box", price_per_hour=self.price))
        self.started_tasks.append((task.key, task.attempt, devices))
        try:
            return step(task, ctx, stop)
        finally:
            with self._lock:
                self.running_now -= 1

    def stop_task(self, task: Task) -> None:
        self.stopped.append(task.key)
        with self._lock:
            stop = self._stops.get(task.key)
        if stop is not None:
            stop.set()

    def release(self, record: Any, succeeded: bool, copy_to: Path | None) -> WorkDir:
        self.released.append((succeeded, copy_to))
        return WorkDir("removed" if succeeded else "kept", None if succeeded else "/kept")

    def cleanup(self, run_id: str) -> Cleanup:
        self.cleaned.append(run_id)
        return Cleanup()

    def nodes(self) -> list[NodeInfo]:
        return []


class Shown:
    """A sink that keeps what it was shown."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, int | None, str, str]] = []
        self.status_lines: list[str] = []
        self.progresses: list[Progress] = []

    def output(self, stage: str, item: int | None, stream: str, text: str) -> None:
        self.lines.append((stage, item, stream, text))

    def status(self, text: str) -> None:
        self.status_lines.append(text)

    def progress(self, progress: Progress) -> None:
        self.progresses.append(progress)

    def close(self) -> None:
        pass


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore.open(tmp_path / "home")


def workload(text: str) -> Workload:
    result = load_text('name = "w"\nimage = "img:1"\ncommand = "true"\n' + text)
    assert result.workload is not None, result.problems
    return result.workload


THREE = """
[[stages]]
name = "a"
[[stages]]
name = "b"
gpu = "H100"
gpu_count = 2
[[stages]]
name = "c"
"""


def run(
    store: RunStore,
    target: ScriptedTarget,
    w: Workload,
    retries: int = 0,
    sink: Shown | None = None,
    **caller: Any,
) -> tuple[RunEnd, dict[str, Any]]:
    target.store = store
    plan = plan_workload(w, target.offers(w), target="local", history=no_history)
    launch = launcher.Launch(
        w, target, plan, target.prepare(w, plan), {s.name: dict(s.env) for s in w.stages}
    )
    record, outcome = launcher.execute(launch, store, retries=retries, sink=sink, **caller)
    return outcome, store.get(record.id, tasks=True).as_json(tasks=True)


# -- stages ----------------------------------------------------------------------------------


def test_stages_run_in_order_and_a_failure_skips_the_rest(store: RunStore) -> None:
    target = ScriptedTarget(scripts={"b": [exits(7)]})
    outcome, doc = run(store, target, workload(THREE))
    assert (outcome.status, outcome.exit_code) == (RunStatus.FAILED, 7)
    assert [k for k, _, _ in target.started_tasks] == ["a", "b"]
    assert [(s["name"], s["status"], s["exit_code"]) for s in doc["stages"]] == [
        ("a", "succeeded", 0),
        ("b", "failed", 7),
        ("c", "skipped", None),
    ]
    assert doc["message"] == "stage 'b' failed with exit code 7"
    assert target.released == [(False, None)] and target.cleaned == [doc["id"]]


def test_a_successful_run_removes_its_work_folder_and_records_every_stage(store: RunStore) -> None:
    target = ScriptedTarget()
    sink = Shown()
    outcome, doc = run(store, target, workload(THREE), sink=sink)
    assert outcome.status == RunStatus.SUCCEEDED and outcome.exit_code == 0
    assert [s["status"] for s in doc["stages"]] == ["succeeded"] * 3
    assert doc["stages"][1]["gpus"] == ["GPU-b-1"]
    assert target.released == [(True, None)]
    assert "stage b: succeeded (exit 0)" in " ".join(sink.status_lines)


def test_the_record_is_pending_until_a_task_runs(store: RunStore) -> None:
    seen: list[str] = []

    def look(task: Task, ctx: TaskContext, stop: threading.Event) -> TaskEnd:
        time.sleep(0.3)
        seen.append(store.list_runs(1)[0].status)
        return TaskEnd(TaskState.EXITED, 0)

    target = ScriptedTarget(scripts={"main": [look]})
    w = workload("")
    target.store = store
    record = store.create_run(w, "local", 0.0, None)
    assert record.status == RunStatus.PENDING
    plan = plan_workload(w, target.offers(w), target="local", history=no_history)
    launcher.execute(
        launcher.Launch(w, target, plan, Preparation(), {"main": {}}), store, record=record
    )
    assert seen == [RunStatus.RUNNING]


# -- retries ----------------------------------------------------------------------------------


def test_an_infrastructure_failure_is_retried_with_the_same_devices(store: RunStore) -> None:
    target = ScriptedTarget(
        scripts={"b": [fails(TaskState.INFRASTRUCTURE, "lost the engine"), exits(0)]}
    )
    sink = Shown()
    outcome, doc = run(store, target, workload(THREE), retries=2, sink=sink)
    assert outcome.status == RunStatus.SUCCEEDED
    b = [(attempt, devices) for key, attempt, devices in target.started_tasks if key == "b"]
    assert b == [(1, ("GPU-b-1",)), (2, ("GPU-b-1",))]  # same GPUs, same count
    assert doc["stages"][1]["attempts"] == 2
    said = " | ".join(sink.status_lines)
    assert "stage b: lost the engine; retrying with the same 2× H100 (attempt 2 of 3)" in said


@pytest.mark.parametrize(
    "state", [TaskState.EXITED, TaskState.OUT_OF_MEMORY, TaskState.KILLED, TaskState.CANNOT_START]
)
def test_what_is_not_the_targets_fault_is_never_retried(store: RunStore, state: TaskState) -> None:
    target = ScriptedTarget(scripts={"main": [fails(state, "no")]})
    outcome, doc = run(store, target, workload(""), retries=3)
    assert outcome.status == RunStatus.FAILED
    assert len(target.started_tasks) == 1 and doc["stages"][0]["attempts"] == 1


def test_retries_run_out(store: RunStore) -> None:
    infra = fails(TaskState.INFRASTRUCTURE, "node gone")
    target = ScriptedTarget(scripts={"main": [infra, infra, infra]})
    outcome, doc = run(store, target, workload(""), retries=1)
    assert outcome.status == RunStatus.FAILED and len(target.started_tasks) == 2
    assert "node gone" in doc["stages"][0]["message"]


# -- budget --------------------------------------------------------------------------------


def test_the_budget_stops_running_tasks_on_the_drivers_clock(store: RunStore) -> None:
    target = ScriptedTarget(price=3600.0, scripts={"a": [exits(0, 30)]})  # $1 a second
    w = workload("budget = 0.5\n" + THREE)
    started = time.monotonic()
    outcome, doc = run(store, target, w)
    took = time.monotonic() - started
    assert (outcome.status, outcome.exit_code) == (RunStatus.BUDGET_EXHAUSTED, 4)
    assert took < 5 and target.stopped == ["a"]
    assert 0.45 <= doc["cost"] <= 1.2
    assert [s["status"] for s in doc["stages"]] == ["budget_exhausted", "skipped", "skipped"]


def test_a_spent_budget_starts_no_further_stage(store: RunStore) -> None:
    target = ScriptedTarget(price=3600.0, scripts={"a": [exits(0, 0.6)]})
    outcome, doc = run(store, target, workload("budget = 0.5\n" + THREE))
    assert outcome.status == RunStatus.BUDGET_EXHAUSTED
    assert [k for k, _, _ in target.started_tasks] == ["a"]
    assert "the run's cost reached its budget $0.50" in doc["message"]


def test_a_free_target_never_reaches_a_budget(store: RunStore) -> None:
    target = ScriptedTarget(price=0.0, scripts={"main": [exits(0, 0.3)]})
    outcome, _ = run(store, target, workload("budget = 0.0001\n"))
    assert outcome.status == RunStatus.SUCCEEDED


# -- signals and crashes ---------------------------------------------------------------------


def test_a_signal_stops_every_task_and_records_cancelled(store: RunStore) -> None:
    target = ScriptedTarget(price=3600.0, scripts={"a": [exits(0, 30)]})
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    outcome, doc = run(store, target, workload(THREE))
    assert (outcome.status, outcome.exit_code) == (RunStatus.CANCELLED, 130)
    assert target.stopped == ["a"] and target.cleaned == [doc["id"]]
    assert [s["status"] for s in doc["stages"]] == ["cancelled", "skipped", "skipped"]
    # one code for the run and its stage, though the engine killed the task (137)
    assert doc["stages"][0]["exit_code"] == 130
    assert doc["stages"][0]["cost"] > 0.3  # the time it ran is paid for
    assert doc["message"] == "cancelled by SIGINT; the run's tasks were removed"


def test_a_stop_request_in_the_records_cancels_like_sigterm(store: RunStore) -> None:
    target = ScriptedTarget(scripts={"main": [exits(0, 30)]})
    w = workload("")

    def ask() -> None:
        time.sleep(0.4)
        store.request_stop(store.list_runs(1)[0].id)

    threading.Thread(target=ask).start()
    outcome, doc = run(store, target, w)
    assert (outcome.status, outcome.exit_code) == (RunStatus.CANCELLED, 143)
    assert "cancelled by `nodus stop`" in doc["message"]
    assert doc["stages"][0]["exit_code"] == 143


def test_a_stop_asked_by_a_caller_in_this_process_is_recorded_in_its_words(
    store: RunStore,
) -> None:
    target = ScriptedTarget(scripts={"main": [exits(0, 30)]})
    asked: list[str] = []

    def ask() -> None:
        time.sleep(0.4)
        asked.append("call.cancel()")
        store.request_stop(store.list_runs(1)[0].id)

    threading.Thread(target=ask).start()
    outcome, doc = run(store, target, workload(""), stopped_by=lambda: asked[0] if asked else None)
    assert (outcome.status, outcome.exit_code) == (RunStatus.CANCELLED, 143)
    assert doc["message"] == "cancelled by call.cancel(); the run's tasks were removed"


def test_a_crash_of_nodus_is_recorded_then_raised(store: RunStore) -> None:
    target = ScriptedTarget(scripts={"b": [crashes(RuntimeError("boom"))]})
    with pytest.raises(RuntimeError, match="boom"):
        run(store, target, workload(THREE))
    (record,) = store.list_runs(1)
    assert record.status == RunStatus.FAILED and "boom" in (record.message or "")
    assert [s.status for s in record.stages] == [
        StageStatus.SUCCEEDED,
        StageStatus.FAILED,
        StageStatus.SKIPPED,
    ]
    assert target.cleaned == [record.id]


def test_a_refusal_while_running_keeps_its_exit_code(store: RunStore) -> None:
    target = ScriptedTarget(scripts={"b": [crashes(NotRunnable("GPUs taken meanwhile"))]})
    with pytest.raises(NotRunnable):
        run(store, target, workload(THREE))
    (record,) = store.list_runs(1)
    assert record.exit_code == 3 and record.message == "GPUs taken meanwhile"


# -- fan-out ----------------------------------------------------------------------------------

MAP = """
[map]
items = ["a", "b", "c", "d", "e", "f"]
"""


def test_every_item_is_a_task_and_a_failure_does_not_stop_the_others(store: RunStore) -> None:
    target = ScriptedTarget(scripts={"main[2]": [exits(5)]}, default=exits(0, 0.1))
    sink = Shown()
    outcome, doc = run(store, target, workload(MAP), sink=sink)
    assert (outcome.status, outcome.exit_code) == (RunStatus.FAILED, 5)
    tasks = doc["stages"][0]["tasks"]
    assert [(t["index"], t["item"], t["status"]) for t in tasks] == [
        (0, "a", "succeeded"),
        (1, "b", "succeeded"),
        (2, "c", "failed"),
        (3, "d", "succeeded"),
        (4, "e", "succeeded"),
        (5, "f", "succeeded"),
    ]
    assert doc["stages"][0]["items"] == {"succeeded": 5, "failed": 1}
    assert "1 of 6 items failed" in doc["message"]
    assert sink.progresses[-1].done == 5 and sink.progresses[-1].failed == 1


def test_tasks_run_at_once_up_to_capacity_and_parallel(store: RunStore) -> None:
    target = ScriptedTarget(default=exits(0, 0.2), capacity_now=4)
    run(store, target, workload(MAP))
    assert target.most_at_once == 4
    target = ScriptedTarget(default=exits(0, 0.2), capacity_now=4)
    run(store, target, workload(MAP + "parallel = 2\n"))
    assert target.most_at_once == 2


def test_retries_apply_per_task(store: RunStore) -> None:
    infra = fails(TaskState.INFRASTRUCTURE, "engine lost")
    target = ScriptedTarget(scripts={"main[1]": [infra, exits(0)]})
    outcome, doc = run(store, target, workload(MAP), retries=1)
    assert outcome.status == RunStatus.SUCCEEDED
    assert doc["stages"][0]["tasks"][1]["attempts"] == 2
    assert all(t["attempts"] == 1 for i, t in enumerate(doc["stages"][0]["tasks"]) if i != 1)


def test_each_item_is_told_to_the_caller_as_it_ends_after_its_retries(store: RunStore) -> None:
    infra = fails(TaskState.INFRASTRUCTURE, "engine lost")
    target = ScriptedTarget(
        scripts={"main[0]": [exits(0, 1.0)], "main[1]": [infra, exits(3)]}, default=exits(0)
    )
    told: list[tuple[int, StageStatus, str | None]] = []
    run(store, target, workload(MAP), retries=1, item_ended=lambda *item: told.append(item))
    assert sorted(i for i, _, _ in told) == [0, 1, 2, 3, 4, 5]  # once each, retried or not
    assert told[-1] == (0, StageStatus.SUCCEEDED, None)  # the slow one, last
    assert dict((i, s) for i, s, _ in told)[1] == StageStatus.FAILED


def test_the_budget_covers_every_task(store: RunStore) -> None:
    target = ScriptedTarget(price=3600.0, default=exits(0, 30), capacity_now=2)
    outcome, doc = run(store, target, workload("budget = 1.0\n" + MAP))
    assert (outcome.status, outcome.exit_code) == (RunStatus.BUDGET_EXHAUSTED, 4)
    tasks = doc["stages"][0]["tasks"]
    assert sorted(t["status"] for t in tasks) == ["budget_exhausted"] * 2 + ["skipped"] * 4
    assert 0.9 <= doc["cost"] <= 1.6  # two tasks at $1/s each until $1 was spent


def test_item_output_carries_its_index(store: RunStore) -> None:
    target = ScriptedTarget(default=exits(0, 0, "hello"))
    sink = Shown()
    run(store, target, workload(MAP), sink=sink)
    assert sorted(i for _, i, _, _ in sink.lines) == [0, 1, 2, 3, 4, 5]
