"""The one run loop: every stage of a run, on any target, with one policy.

:class:`Runner` owns the policy; a :class:`~nodus_cli.targets.base.Target` only runs
one task and stops it when told. The policy, the same for every target:

- **Order.** Stages run in file order; a stage that does not succeed ends the run and
  the later ones are recorded ``skipped``.
- **Tasks.** A stage is one task; a fan-out stage (``[map]``) is one task per item, run
  at once as far as the target's capacity and ``parallel`` allow. One task failing does
  not stop the others; the stage fails when any task failed after its retries.
- **Budget, on one clock.** Cost accrues from the moment a task runs (the driver's
  monotonic clock) at the price the target reports for it. Before each task starts and
  while tasks run, the budget (and the spending limits) are checked; when the cost
  reaches it, nothing new starts, running tasks are stopped, and the run ends
  ``budget_exhausted`` (exit 4).
- **Retries.** ``retries`` re-runs a task that the *target* failed (engine lost, node
  gone), with the same GPU model and count; never a task that exited by itself, ran out
  of memory, or was killed from outside nodus (a decision, not a failure).
- **Signals.** SIGINT or SIGTERM stops every running task, removes what the run started
  and records it ``cancelled`` (exit 128 + the signal); a second signal during that
  clean-up is noted and changes nothing.
- **Records.** The record says ``pending`` until a task runs, then ``running``; each
  stage (and each task of a fan-out stage) is recorded as it starts and ends; a crash
  of nodus itself records the run ``failed`` with the reason, then re-raises.
- **Output.** Every line, and every status line, goes to the run's log (JSON lines) and
  to the sink (a terminal, or nothing for a background run).

Exit codes: the failing stage's own exit code (0 when every stage succeeded); 126/127
when a command cannot be started; 4 when the budget stopped it; 128 + signal when
cancelled; a :class:`~nodus_cli.errors.NodusError`'s own code when nodus cannot go on.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from nodus_cli.errors import EXIT_BUDGET, NodusError
from nodus_cli.records import (
    RunRecord,
    RunStatus,
    RunStore,
    StageRecord,
    StageStatus,
    StoreError,
    TaskRecord,
    now_iso,
)
from nodus_cli.records.logs import Stream
from nodus_cli.targets.base import (
    Item,
    Started,
    Target,
    TargetFailure,
    Task,
    TaskEnd,
    TaskState,
    WorkDir,
)
from nodus_cli.workload import Stage, Workload

#: How often the loop wakes while tasks run: stop requests, cost records, progress.
TICK = 0.25
#: How often the running cost is written to the records. Spending limits read it: other
#: runs see this run's cost at most this late, which bounds how far concurrent runs can
#: pass a limit together (nodus_cli.run.limits: 0.5 s here + 0.5 s there + TICK).
COST_EVERY = 0.5
#: Task records of a fan-out stage are written in batches at most this often.
FLUSH_EVERY = 0.5


class Cancelled(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException, so no ``except Exception`` eats it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True, slots=True)
class Outcome:
    status: RunStatus
    exit_code: int
    cost: float
    message: str | None = None
    work_dir: WorkDir | None = None
    #: What could not be recorded (a full disk): the outcome above is still true.
    unrecorded: str | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """A fan-out stage's tasks so far (for a progress bar)."""

    stage: str
    total: int
    done: int
    running: int
    failed: int
    elapsed: float
    cost: float

    @property
    def left(self) -> int:
        return self.total - self.done - self.failed - self.running


class Sink(Protocol):
    """Where a run's output is shown as it happens (the log gets it regardless)."""

    def output(self, stage: str, item: int | None, stream: Stream, text: str) -> None: ...

    def status(self, text: str) -> None: ...

    def progress(self, progress: Progress) -> None: ...

    def close(self) -> None: ...


class NullSink:
    """Shows nothing: a background run, or the Python API (the log keeps it all)."""

    def output(self, stage: str, item: int | None, stream: Stream, text: str) -> None:
        pass

    def status(self, text: str) -> None:
        pass

    def progress(self, progress: Progress) -> None:
        pass

    def close(self) -> None:
        pass


class Allowance(Protocol):
    """Spending limits across runs: how much run ``run_id`` may still spend, having spent
    ``run_cost``, and the words naming the limit (None: no limit applies)."""

    def left(self, run_id: str, run_cost: float) -> tuple[float, str] | None: ...


# -- the loop's own state ----------------------------------------------------------------

Halt = Literal["budget", "cancelled", "error"]


@dataclass(slots=True)
class _Running:
    task: Task
    started: float | None = None  # monotonic, when the target said it runs
    rate: float = 0.0  # USD per hour
    info: Started | None = None
    submitted_at: str | None = None


@dataclass(slots=True)
class _Stage:
    """One stage under way: its record, and its tasks' records for a fan-out stage."""

    index: int
    stage: Stage
    record: StageRecord
    tasks: dict[int, TaskRecord] = field(default_factory=dict)
    dirty: dict[int, TaskRecord] = field(default_factory=dict)
    flushed: float = 0.0
    t0: float = 0.0
    failed: list[int] = field(default_factory=list)
    succeeded: int = 0
    cost: float = 0.0


class _Context:
    """What a task is handed (:class:`~nodus_cli.targets.base.TaskContext`)."""

    def __init__(self, runner: Runner, task: Task) -> None:
        self.runner = runner
        self.task = task

    def say(self, message: str) -> None:
        self.runner.say(message, self.task.stage.name, self._item)

    def emit(self, stream: Literal["stdout", "stderr"], text: str) -> None:
        self.runner.emit(self.task.stage.name, self._item, stream, text)

    def submitted(self, note: str | None = None) -> None:
        self.runner.events.put(("submitted", self.task, note))

    def waiting(self, message: str) -> None:
        self.runner.events.put(("waiting", self.task, message))

    def started(self, info: Started) -> None:
        self.runner.events.put(("started", self.task, (info, time.monotonic())))

    @property
    def _item(self) -> int | None:
        return self.task.item.index if self.task.item is not None else None


class Runner:
    """Runs one recorded, prepared workload on one target; see the module docstring."""

    def __init__(
        self,
        target: Target,
        store: RunStore,
        record: RunRecord,
        workload: Workload,
        plan: Any,
        env: Mapping[str, Mapping[str, str]],
        *,
        retries: int = 0,
        sink: Sink | None = None,
        allowance: Allowance | None = None,
        copy_to: Path | None = None,
        masks: Mapping[str, str] | None = None,
    ) -> None:
        self.target = target
        self.store = store
        self.record = record
        self.workload = workload
        self.plan = plan
        self.env = env
        self.retries = retries
        self.sink: Sink = sink or NullSink()
        self.allowance = allowance
        self.copy_to = copy_to
        # Values taken from the host never reach the log: each shows as its ${NAME}.
        self.masks = sorted((masks or {}).items(), key=lambda m: -len(m[0]))
        self.events: queue.Queue[tuple[str, Task, Any]] = queue.Queue()
        self.cost = 0.0  # of ended tasks; running ones are added by cost_now()
        self.running: dict[str, _Running] = {}
        self._halt: Halt | None = None
        self._stage: _Stage | None = None  # the stage under way
        self._halt_reason: str | None = None
        self._fatal: BaseException | None = None
        self._is_running = False
        self._cost_saved = 0.0
        self._cost_written = record.cost  # what the record holds: a free run is not rewritten
        self._stop_checked = 0.0
        self._log = store.log_writer(record.id)
        self._write = threading.RLock()  # re-entrant: a signal may land mid-write
        self._problems: list[str] = []

    # -- output ----------------------------------------------------------------------

    def _masked(self, text: str) -> str:
        for value, template in self.masks:
            if value in text:
                text = text.replace(value, template)
        return text

    def emit(self, stage: str, item: int | None, stream: Stream, text: str) -> None:
        with self._write:
            self._log.write(stage, item, stream, self._masked(text) if self.masks else text)
            with contextlib.suppress(OSError, ValueError):
                self.sink.output(stage, item, stream, text)

    def say(self, message: str, stage: str | None = None, item: int | None = None) -> None:
        with self._write:
            self._log.write(stage, item, "nodus", self._masked(message) if self.masks else message)
            with contextlib.suppress(OSError, ValueError):
                self.sink.status(message)

    # -- the run ---------------------------------------------------------------------

    def execute(self) -> Outcome:
        previous = install_signal_handlers()
        try:
            try:
                outcome = self._stages()
                defer_signals()
            except Cancelled as exc:
                defer_signals()  # a second Ctrl-C must not interrupt the clean-up
                outcome = self._cancelled(exc)
            except BaseException as exc:
                defer_signals()
                self._halt = "error"
                self._stop_running()
                message = exc.message if isinstance(exc, NodusError) else f"nodus stopped: {exc!r}"
                code = exc.exit_code if isinstance(exc, NodusError) else 1
                self.say(f"run failed: {message}")
                self._end(Outcome(RunStatus.FAILED, code, self.cost_now(), message))
                raise
            return self._end(outcome)
        finally:
            restore_signal_handlers(previous)
            self._log.close()
            with contextlib.suppress(OSError, ValueError):
                self.sink.close()

    def _stages(self) -> Outcome:
        self.target.begin(self.record, self.workload, self.plan)
        for idx, stage in enumerate(self.workload.stages):
            spent = self._over_budget()
            if spent is not None:
                why = f"{spent} before stage {stage.name!r}"
                self.say(why)
                return Outcome(RunStatus.BUDGET_EXHAUSTED, EXIT_BUDGET, self.cost_now(), why)
            status, code, message = self._run_stage(idx, stage)
            if self._fatal is not None:
                raise self._fatal
            if status == StageStatus.SUCCEEDED:
                continue
            if status == StageStatus.BUDGET_EXHAUSTED:
                return Outcome(RunStatus.BUDGET_EXHAUSTED, EXIT_BUDGET, self.cost_now(), message)
            if status == StageStatus.CANCELLED:
                # Stopped from outside while it ran (`nodus stop` on another host).
                return Outcome(RunStatus.CANCELLED, code, self.cost_now(), message)
            return Outcome(RunStatus.FAILED, code or 1, self.cost_now(), message)
        return Outcome(RunStatus.SUCCEEDED, 0, self.cost_now())

    def _cancelled(self, exc: Cancelled) -> Outcome:
        self._halt = "cancelled"
        name = signal.Signals(exc.signum).name
        by = "`nodus stop`" if self._stop_was_requested() else name
        self._halt_reason = f"cancelled by {by}"
        self._stop_running()  # _end() then removes whatever is left
        self.say(f"cancelled by {by}: stopped and removed the run's tasks")
        return Outcome(
            RunStatus.CANCELLED,
            128 + exc.signum,
            self.cost_now(),
            f"cancelled by {by}; the run's tasks were removed",
        )

    def _end(self, outcome: Outcome) -> Outcome:
        """Release the work folder, remove leftovers, record the outcome."""
        work: WorkDir | None = None
        try:
            work = self.target.release(
                self.record, outcome.status == RunStatus.SUCCEEDED, self.copy_to
            )
        except (TargetFailure, NodusError, OSError) as exc:
            self._problems.append(f"the work directory could not be released: {exc}")
        if work is not None and work.kind == "copied":
            self.say(f"outputs copied to {work.path}")
        elif work is not None and work.kind == "kept":
            self.say(f"work directory kept: {work.path}" + (f" ({work.note})" if work.note else ""))
        cleanup_pending = False
        try:
            left = self.target.cleanup(self.record.id)
            cleanup_pending = not left.complete
        except (TargetFailure, NodusError, OSError) as exc:
            cleanup_pending = True
            self._problems.append(f"what the run left could not be removed yet ({exc})")
        if not self._log.complete:
            self._problems.append(f"the run's log is incomplete: {self._log.problem}")
        unrecorded = None
        try:
            self.store.finish_run(
                self.record.id,
                outcome.status,
                outcome.exit_code,
                outcome.cost,
                outcome.message,
                output=work.as_json() if work is not None and work.kind != "none" else None,
            )
            if cleanup_pending:
                self.store.set_cleanup_pending(self.record.id, True)
        except StoreError as exc:
            unrecorded = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
            self._problems.append(
                f"the outcome ({outcome.status}, exit {outcome.exit_code}) could not be "
                f"recorded: {unrecorded}"
            )
        for problem in self._problems:
            self.sink.status(f"warning: {problem}")
        return replace(outcome, work_dir=work, unrecorded=unrecorded)

    # -- one stage -------------------------------------------------------------------

    def _tasks(self, idx: int, stage: Stage) -> list[Task]:
        env = self.env.get(stage.name, stage.env)
        base = Task(self.record.id, self.workload.name, stage, idx, env)
        if stage.map is None:
            return [base]
        count = len(stage.map.items)
        return [
            replace(base, item=Item(i, value, count)) for i, value in enumerate(stage.map.items)
        ]

    def _run_stage(self, idx: int, stage: Stage) -> tuple[StageStatus, int, str | None]:
        tasks = self._tasks(idx, stage)
        state = _Stage(idx, stage, StageRecord(stage.name, StageStatus.PENDING, None))
        state.t0 = time.monotonic()
        self._stage = state
        if stage.map is not None:
            state.tasks = {
                t.item.index: TaskRecord(t.item.index, t.item.value) for t in tasks if t.item
            }
        cap = 1
        if stage.map is not None:
            stage_plan = next(sp for sp in self.plan.stages if sp.name == stage.name)
            limit = stage.map.parallel or len(tasks)
            cap = max(1, min(limit, self.target.capacity(stage, stage_plan)))
            self.say(f"stage {stage.name}: {len(tasks)} items, up to {cap} at once", stage.name)
        waiting: deque[Task] = deque(tasks)
        ends: dict[int, TaskEnd] = {}
        while waiting or self.running:
            while waiting and len(self.running) < cap and self._halt is None:
                spent = self._over_budget()
                if spent is not None:
                    self._start_halt("budget", spent)
                    break
                self._launch(waiting.popleft(), state)
            if not self.running:
                break
            self._wait_event(state, waiting, ends)
            self._check(state)
        self._flush(state, force=True)
        return self._stage_result(state, ends, len(tasks))

    def _launch(self, task: Task, state: _Stage) -> None:
        self.running[task.key] = _Running(task)

        def work() -> None:
            try:
                end = self.target.run_task(task, _Context(self, task))
                self.events.put(("end", task, end))
            except BaseException as exc:  # carried to the main thread, which decides
                self.events.put(("error", task, exc))

        threading.Thread(target=work, name=f"nodus-task-{task.key}", daemon=True).start()

    def _wait_event(self, state: _Stage, waiting: deque[Task], ends: dict[int, TaskEnd]) -> None:
        try:
            kind, task, payload = self.events.get(timeout=self._tick())
        except queue.Empty:
            return
        while True:
            self._handle(kind, task, payload, state, waiting, ends)
            try:
                kind, task, payload = self.events.get_nowait()
            except queue.Empty:
                return

    def _tick(self) -> float:
        """Wake at the latest when the budget would be reached, else every TICK."""
        rate = sum(r.rate for r in self.running.values() if r.started is not None)
        left = self._money_left()
        if left is None or rate <= 0:
            return TICK
        return max(0.01, min(TICK, left[0] / rate * 3600))

    def _handle(
        self,
        kind: str,
        task: Task,
        payload: Any,
        state: _Stage,
        waiting: deque[Task],
        ends: dict[int, TaskEnd],
    ) -> None:
        run = self.running.get(task.key)
        if run is None:
            return
        if kind == "submitted":
            run.submitted_at = now_iso()
            if task.item is None:
                rec = state.record
                rec.started_at = rec.started_at or run.submitted_at
                rec.attempts = task.attempt
                rec.config = rec.config or self._planned(task.stage)
                if payload:
                    rec.message = payload
                self._save_stage(state)
            elif state.record.started_at is None:
                state.record.started_at = run.submitted_at
                self._save_stage(state)
        elif kind == "waiting":
            if task.item is None:
                state.record.message = payload
                self._save_stage(state)
            else:
                state.tasks[task.item.index].message = payload
                self._dirty(state, task)
            self.say(payload, task.stage.name)
        elif kind == "started":
            info, at = payload
            run.started, run.rate, run.info = at, info.price_per_hour, info
            if not self._is_running:
                self._is_running = True
                self._store(self.store.set_running, self.record.id)
            self._on_started(task, info, state)
        elif kind == "end":
            self.running.pop(task.key, None)
            self._on_end(task, run, payload, state, waiting, ends)
        elif kind == "error":
            self.running.pop(task.key, None)
            if self._fatal is None:
                self._fatal = payload
                self._start_halt("error", str(payload))

    def _planned(self, stage: Stage) -> dict[str, Any] | None:
        """The configuration the plan chose for a stage (its record's until it runs)."""
        for sp in self.plan.stages:
            if sp.name == stage.name and sp.selected is not None:
                config: dict[str, Any] = sp.selected.offer.as_json()
                return config
        return None

    def _on_started(self, task: Task, info: Started, state: _Stage) -> None:
        if task.item is None:
            rec = state.record
            rec.status = StageStatus.RUNNING
            rec.started_at = rec.started_at or now_iso()
            rec.gpu_uuids = list(info.devices)
            rec.node = info.node
            rec.config = info.config or rec.config
            rec.attempts = task.attempt
            if info.node and self.target.name != "local":
                rec.message = f"running on node {info.node}"
            self._save_stage(state)
            return
        if state.record.status == StageStatus.PENDING:
            state.record.status = StageStatus.RUNNING
            state.record.config = info.config
            self._save_stage(state)
        t = state.tasks[task.item.index]
        t.status = StageStatus.RUNNING
        t.started_at = now_iso()
        t.devices = list(info.devices)
        t.node = info.node
        t.attempts = task.attempt
        self._dirty(state, task)
        self._show_progress(state)

    def _on_end(
        self,
        task: Task,
        run: _Running,
        end: TaskEnd,
        state: _Stage,
        waiting: deque[Task],
        ends: dict[int, TaskEnd],
    ) -> None:
        runtime = time.monotonic() - run.started if run.started is not None else 0.0
        cost = runtime / 3600 * run.rate
        self.cost += cost
        state.cost += cost
        label = _label(task)
        if (
            end.state == TaskState.INFRASTRUCTURE
            and task.attempt <= self.retries
            and self._halt is None
        ):
            count = task.stage.requirements.gpu_count
            model = run.info.config.get("gpu") if run.info and run.info.config else None
            same = (
                f"the same {count}× {model or task.stage.requirements.gpu or 'GPU'}"
                if count
                else "no GPU"
            )
            self.say(
                f"{label}: {end.message}; retrying with {same} "
                f"(attempt {task.attempt + 1} of {self.retries + 1})",
                task.stage.name,
            )
            devices = run.info.devices if run.info is not None else ()
            waiting.appendleft(replace(task, attempt=task.attempt + 1, previous_devices=devices))
            if task.item is None:
                state.record.cost += cost
            return
        status = self._status_of(end)
        message = end.message
        if end.state == TaskState.STOPPED and self._halt_reason:
            message = self._halt_reason
        if task.item is None:
            rec = state.record
            rec.status = status
            rec.exit_code = end.exit_code
            rec.ended_at = now_iso()
            rec.runtime_seconds = runtime if run.started is not None else None
            rec.cost += cost
            rec.attempts = task.attempt
            rec.gpu_report = end.gpu_use.as_json() if end.gpu_use is not None else None
            rec.message = message if status != StageStatus.SUCCEEDED else rec.message
            self._save_stage(state)
            ran = f" in {runtime:.1f}s" if run.started is not None else ""
            why = f": {message}" if message and status != StageStatus.SUCCEEDED else ""
            self.say(f"{label}: {status} (exit {end.exit_code}){ran}{why}", task.stage.name)
            ends[0] = end
            return
        index = task.item.index
        t = state.tasks[index]
        t.status = status
        t.exit_code = end.exit_code
        t.ended_at = now_iso()
        t.runtime_seconds = runtime if run.started is not None else None
        t.cost = cost
        t.attempts = task.attempt
        t.message = message if status != StageStatus.SUCCEEDED else None
        ends[index] = end
        if status == StageStatus.SUCCEEDED:
            state.succeeded += 1
        if status == StageStatus.FAILED:
            state.failed.append(index)
            why = f": {message}" if message else ""
            self.say(
                f"{label} ({_clip(task.item.value)}): failed (exit {end.exit_code}){why}",
                task.stage.name,
                index,
            )
        self._dirty(state, task)
        self._show_progress(state)

    def _status_of(self, end: TaskEnd) -> StageStatus:
        if end.state == TaskState.STOPPED:
            if self._halt == "budget":
                return StageStatus.BUDGET_EXHAUSTED
            if self._halt == "cancelled":
                return StageStatus.CANCELLED
            return StageStatus.FAILED
        if end.state == TaskState.EXITED and end.exit_code == 0:
            return StageStatus.SUCCEEDED
        return StageStatus.FAILED

    def _stage_result(
        self, state: _Stage, ends: dict[int, TaskEnd], total: int
    ) -> tuple[StageStatus, int, str | None]:
        stage = state.stage
        if self._fatal is not None:
            return StageStatus.FAILED, 1, str(self._fatal)
        if stage.map is None:
            rec = state.record
            if rec.status == StageStatus.PENDING:  # never launched: the budget or a stop
                rec.status = (
                    StageStatus.BUDGET_EXHAUSTED if self._halt == "budget" else StageStatus.SKIPPED
                )
                rec.message = self._halt_reason
                self._save_stage(state)
            code = rec.exit_code if rec.exit_code is not None else 1
            if rec.status == StageStatus.SUCCEEDED:
                return rec.status, 0, None
            if rec.status == StageStatus.BUDGET_EXHAUSTED:
                return rec.status, EXIT_BUDGET, f"stage {stage.name!r} stopped: {self._halt_reason}"
            text = f"stage {stage.name!r} failed with exit code {code}"
            if rec.message:
                text += f": {rec.message}"
            return rec.status, code, text
        # A fan-out stage: every task ran (or the budget/stop ended them).
        counts: dict[StageStatus, int] = {}
        for t in state.tasks.values():
            counts[t.status] = counts.get(t.status, 0) + 1
        done = counts.get(StageStatus.SUCCEEDED, 0)
        failed = sorted(state.failed)
        elapsed = time.monotonic() - state.t0
        rec = state.record
        rec.ended_at = now_iso()
        rec.runtime_seconds = elapsed
        rec.cost = state.cost
        message: str | None
        if self._halt == "budget":
            rec.status = StageStatus.BUDGET_EXHAUSTED
            code = EXIT_BUDGET
            message = (
                f"stage {stage.name!r} stopped: {self._halt_reason} ({done} of {total} items done)"
            )
        elif failed:
            rec.status = StageStatus.FAILED
            first = failed[0]
            code = ends[first].exit_code or 1
            shown = ", ".join(str(i) for i in failed[:10]) + (", ..." if len(failed) > 10 else "")
            message = (
                f"stage {stage.name!r}: {len(failed)} of {total} items failed (items {shown}; "
                f"item {first} exited with {code})"
            )
        else:
            rec.status = StageStatus.SUCCEEDED
            code = 0
            message = None
        rec.exit_code = code
        rec.message = message
        self._save_stage(state)
        self._say_usage(state, ends)
        self.say(
            f"stage {stage.name}: {done} of {total} items succeeded"
            + (f", {len(failed)} failed" if failed else "")
            + f" in {elapsed:.1f}s",
            stage.name,
        )
        return rec.status, code, message

    def _say_usage(self, state: _Stage, ends: dict[int, TaskEnd]) -> None:
        """A fan-out stage's GPU use in one line: a request is not proof of use."""
        sampled = [e.gpu_use for e in ends.values() if e.gpu_use and e.gpu_use.available]
        if not sampled:
            return
        idle = [i for i, e in sorted(ends.items()) if e.gpu_use and e.gpu_use.idle]
        if idle:
            shown = ", ".join(str(i) for i in idle[:10]) + (", ..." if len(idle) > 10 else "")
            self.say(
                f"warning: stage {state.stage.name}: {len(idle)} of {len(sampled)} items left "
                f"their GPU idle (items {shown}): a request is not proof of use; check that the "
                "program sees it (CUDA_VISIBLE_DEVICES, the framework's device)",
                state.stage.name,
            )
        else:
            self.say(f"stage {state.stage.name}: every item used its GPU", state.stage.name)

    # -- budget, limits, stops -------------------------------------------------------

    def cost_now(self) -> float:
        now = time.monotonic()
        return self.cost + sum(
            (now - r.started) / 3600 * r.rate
            for r in self.running.values()
            if r.started is not None
        )

    def _money_left(self) -> tuple[float, str] | None:
        """What the run may still spend and the words for the limit that decides."""
        cost = self.cost_now()
        found: list[tuple[float, str]] = []
        budget = self.workload.budget
        if budget is not None:
            found.append((budget - cost, f"the run's cost reached its budget ${budget:,.2f}"))
        if self.allowance is not None:
            limit = self.allowance.left(self.record.id, cost)
            if limit is not None:
                found.append(limit)
        return min(found, key=lambda f: f[0]) if found else None

    def _over_budget(self) -> str | None:
        left = self._money_left()
        if left is None:
            return None
        # Only a price makes a budget bite: a free target never reaches it.
        return left[1] if left[0] <= 0 else None

    def _check(self, state: _Stage) -> None:
        now = time.monotonic()
        if self._halt is None:
            spent = self._over_budget()
            if spent is not None and self.running:
                self._start_halt("budget", spent)
        if now - self._cost_saved >= COST_EVERY:
            self._cost_saved = now
            cost = self.cost_now()
            if cost != self._cost_written:
                self._cost_written = cost
                self._store(self.store.update_cost, self.record.id, cost)
        if now - self._stop_checked >= 1.0 and self._halt is None:
            self._stop_checked = now
            if self._stop_was_requested():
                # `nodus stop` signals this process; where no signal can reach (another
                # host, a thread), the request in the records does the same.
                raise Cancelled(signal.SIGTERM)
        self._flush(state)
        self._show_progress(state)

    def _start_halt(self, why: Halt, reason: str) -> None:
        if self._halt is not None:
            return
        self._halt = why
        self._halt_reason = reason
        if why == "budget" and self.running:
            rate = sum(r.rate for r in self.running.values())
            self.say(f"{reason} (at ${rate:,.2f}/h); stopping the running tasks")
        self._stop_tasks()

    def _stop_tasks(self) -> None:
        for run in list(self.running.values()):
            with contextlib.suppress(TargetFailure, NodusError, OSError):
                self.target.stop_task(run.task)

    def _stop_running(self, timeout: float = 60.0) -> None:
        """Stop every running task and wait for them to end, recording each."""
        self._stop_tasks()
        deadline = time.monotonic() + timeout
        state = self._stage
        while self.running and time.monotonic() < deadline:
            try:
                kind, task, payload = self.events.get(timeout=0.2)
            except queue.Empty:
                continue
            if kind == "started":
                self._stop_tasks()  # it was being created as the stop came
            if state is not None:
                self._handle(kind, task, payload, state, deque(), {})
            elif kind in ("end", "error"):
                self.running.pop(task.key, None)
        if state is not None:
            self._flush(state, force=True)

    def _stop_was_requested(self) -> bool:
        try:
            return self.store.stop_requested(self.record.id)
        except NodusError:
            return False

    # -- records -----------------------------------------------------------------------

    def _save_stage(self, state: _Stage) -> None:
        self._store(self.store.save_stage, self.record.id, state.index, state.record)

    def _dirty(self, state: _Stage, task: Task) -> None:
        assert task.item is not None
        state.dirty[task.item.index] = state.tasks[task.item.index]
        self._flush(state)

    def _flush(self, state: _Stage, force: bool = False) -> None:
        if not state.dirty:
            return
        now = time.monotonic()
        if not force and now - state.flushed < FLUSH_EVERY and len(state.dirty) < 500:
            return
        state.flushed = now
        batch = list(state.dirty.values())
        state.dirty.clear()
        self._store(self.store.save_tasks, self.record.id, state.index, batch)

    def _store(self, write: Callable[..., None], *args: Any) -> None:
        """A record write; a full disk is reported once and the run goes on."""
        try:
            write(*args)
        except StoreError as exc:
            if exc.message not in self._problems:
                self._problems.append(exc.message)

    def _show_progress(self, state: _Stage) -> None:
        """Counts kept as tasks end, never recounted: a stage may hold 100,000 items."""
        if state.stage.map is None:
            return
        running = sum(1 for r in self.running.values() if r.started is not None)
        with contextlib.suppress(OSError, ValueError):
            self.sink.progress(
                Progress(
                    state.stage.name,
                    len(state.tasks),
                    state.succeeded,
                    running,
                    len(state.failed),
                    time.monotonic() - state.t0,
                    self.cost_now(),
                )
            )


def _label(task: Task) -> str:
    if task.item is None:
        return f"stage {task.stage.name}"
    return f"stage {task.stage.name} item {task.item.index}"


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- signals ---------------------------------------------------------------------------

_deferred: list[int] = []
_installed = threading.local()


def _raise_cancelled(signum: int, frame: object) -> None:
    raise Cancelled(signum)


def _remember(signum: int, frame: object) -> None:
    _deferred.append(signum)


def install_signal_handlers() -> dict[int, Any]:
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, _raise_cancelled)
    return previous


def defer_signals() -> None:
    """From here on a signal is noted, not raised: clean-up and records must complete."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _remember)


def restore_signal_handlers(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM are noted, not raised (a launcher's own clean-up)."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {int(s): signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        defer_signals()
    try:
        yield
    finally:
        restore_signal_handlers(previous)
