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

This module is the loop and the policy; the mechanisms it uses sit beside it: the
events tasks report (:mod:`.events`), the money clock (:mod:`.budget`), signal handling
(:mod:`.signals`), a stage's records (:mod:`.stage`), the writes to the run store
(:mod:`.recorder`), and where the output goes (:mod:`.sink`).
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Literal, assert_never

from nodus_cli.errors import EXIT_BUDGET, NodusError
from nodus_cli.lanes import Lanes
from nodus_cli.records import (
    RunRecord,
    RunStatus,
    RunStore,
    StageStatus,
    StoreError,
    now_iso,
)
from nodus_cli.run.budget import Allowance, BudgetClock
from nodus_cli.run.events import (
    Context,
    Event,
    TaskBegan,
    TaskEnded,
    TaskRaised,
    TaskSubmitted,
    TaskWaiting,
    items_job,
)
from nodus_cli.run.recorder import Recorder
from nodus_cli.run.signals import (
    Cancelled,
    defer_signals,
    install_signal_handlers,
    restore_signal_handlers,
)
from nodus_cli.run.sink import NullSink, Output, Sink
from nodus_cli.run.stage import StageEnd, StageRun, listed
from nodus_cli.structs import replace, struct
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
from nodus_cli.workload.duration import shown

__all__ = ["TICK", "RunEnd", "Runner"]

#: How often the loop wakes while tasks run: stop requests, cost records, progress.
TICK = 0.25


@struct(frozen=True)
class RunEnd:
    """How a run ended: its status, exit code, cost and what it left."""

    status: RunStatus
    exit_code: int
    cost: float
    message: str | None = None
    work_dir: WorkDir | None = None
    #: What could not be recorded (a full disk): the outcome above is still true.
    unrecorded: str | None = None


# -- the loop's own state ----------------------------------------------------------------

Halt = Literal["budget", "cancelled", "error"]
#: The exit code of a run that gave up waiting for GPUs (``wait_timeout``), as of one
#: that nothing can run (NotRunnable).
EXIT_GAVE_UP = 3


@struct
class _Running:
    """A task the driver has submitted, and what it knows of it so far."""

    task: Task
    started: float | None = None  # monotonic, when the target said it runs
    rate: float = 0.0  # USD per hour
    info: Started | None = None
    submitted_at: str | None = None
    #: Since when it waits for capacity (monotonic), and why, as the target last said.
    queued_at: float | None = None
    queued_for: str | None = None
    #: It waited past the workload's wait_timeout and was stopped for that.
    gave_up: bool = False


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
        item_ended: Callable[[int, StageStatus, str | None], None] | None = None,
        stopped_by: Callable[[], str | None] | None = None,
    ) -> None:
        self.target = target
        self.store = store
        self.record = record
        self.workload = workload
        self.plan = plan
        self.env = env
        self.retries = retries
        self.copy_to = copy_to
        #: Told each item of a fan-out as it ends for good (after its retries): a caller
        #: that waits for items one by one (a map of a function) need not wait for all.
        self.item_ended = item_ended
        #: Who asked for the stop, in the words of a caller in this process
        #: (``call.cancel()``); None: the records' request, `nodus stop`, or a signal.
        self.stopped_by = stopped_by
        self.output = Output(store.log_writer(record.id), sink or NullSink(), masks)
        self.records = Recorder(store, record.id)
        # (SimpleQueue: in C, without Queue's locks and condition for every hand-off)
        self.events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._lanes = Lanes("nodus-task")
        self.running: dict[str, _Running] = {}
        # Handed the cost the record holds, so a free run's record is never rewritten.
        self.money = BudgetClock(record.id, workload.budget, allowance, self.running, record.cost)
        self._halt: Halt | None = None
        self._stage: StageRun | None = None  # the stage under way
        self._halt_reason: str | None = None
        #: A cancelled run's exit code (128 + the signal), its stopped tasks' too: one code
        #: for the run and its stages, whatever signal the engine used on the containers.
        self._halt_code: int | None = None
        self._fatal: BaseException | None = None
        self._is_running = False
        self._is_queued = False
        self._stop_checked = 0.0

    # -- output ----------------------------------------------------------------------

    def say(self, message: str, stage: str | None = None, item: int | None = None) -> None:
        self.output.say(message, stage, item)

    # -- the run ---------------------------------------------------------------------

    def execute(self) -> RunEnd:
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
                if isinstance(exc, NodusError) and not self.began:
                    raise  # refused before anything ran: the launcher leaves nothing of it
                message = exc.message if isinstance(exc, NodusError) else f"nodus stopped: {exc!r}"
                code = exc.exit_code if isinstance(exc, NodusError) else 1
                self.say(f"run failed: {message}")
                self._end(RunEnd(RunStatus.FAILED, code, self.money.cost_now(), message))
                raise
            return self._end(outcome)
        finally:
            restore_signal_handlers(previous)
            self.output.close()

    def _stages(self) -> RunEnd:
        self.target.begin(self.record, self.workload, self.plan)
        for idx, stage in enumerate(self.workload.stages):
            spent = self.money.exhausted()
            if spent is not None:
                why = f"{spent} before stage {stage.name!r}"
                self.say(why)
                return RunEnd(RunStatus.BUDGET_EXHAUSTED, EXIT_BUDGET, self.money.cost_now(), why)
            result = self._run_stage(idx, stage)
            if self._fatal is not None:
                raise self._fatal
            status, code, message = result.status, result.exit_code, result.message
            if status == StageStatus.SUCCEEDED:
                continue
            if status == StageStatus.BUDGET_EXHAUSTED:
                return RunEnd(
                    RunStatus.BUDGET_EXHAUSTED, EXIT_BUDGET, self.money.cost_now(), message
                )
            if status == StageStatus.CANCELLED:
                # Stopped from outside while it ran (`nodus stop` on another host).
                return RunEnd(RunStatus.CANCELLED, code, self.money.cost_now(), message)
            return RunEnd(RunStatus.FAILED, code or 1, self.money.cost_now(), message)
        return RunEnd(RunStatus.SUCCEEDED, 0, self.money.cost_now())

    def _cancelled(self, exc: Cancelled) -> RunEnd:
        self._halt, self._halt_code = "cancelled", 128 + exc.signum
        name = signal.Signals(exc.signum).name
        asked = self.stopped_by() if self.stopped_by is not None else None
        by = asked or ("`nodus stop`" if self._stop_was_requested() else name)
        self._halt_reason = f"cancelled by {by}"
        self._stop_running()  # _end() then removes whatever is left
        self.say(f"cancelled by {by}: stopped and removed the run's tasks")
        return RunEnd(
            RunStatus.CANCELLED,
            128 + exc.signum,
            self.money.cost_now(),
            f"cancelled by {by}; the run's tasks were removed",
        )

    @property
    def began(self) -> bool:
        """Whether a task of the run began (before that, a refusal leaves nothing)."""
        return self._is_running

    def _end(self, outcome: RunEnd) -> RunEnd:
        """Release the work folder, remove leftovers, record the outcome."""
        problems = list(self.records.problems)  # those of the writes while it ran come first
        work: WorkDir | None = None
        try:
            work = self.target.release(
                self.record, outcome.status == RunStatus.SUCCEEDED, self.copy_to
            )
        except (TargetFailure, NodusError, OSError) as exc:
            problems.append(f"the work directory could not be released: {exc}")
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
            problems.append(f"what the run left could not be removed yet ({exc})")
        log = self.output.log
        if not log.complete:
            problems.append(f"the run's log is incomplete: {log.problem}")
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
            problems.append(
                f"the outcome ({outcome.status}, exit {outcome.exit_code}) could not be "
                f"recorded: {unrecorded}"
            )
        for problem in problems:
            self.output.sink.status(f"warning: {problem}")
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

    def _run_stage(self, idx: int, stage: Stage) -> StageEnd:
        tasks = self._tasks(idx, stage)
        state = StageRun(idx, stage, tasks, self.records)
        self._stage = state
        cap, waiting = 1, deque(tasks)
        if stage.map is not None and self.target.runs_items(stage):
            cap, waiting = self._launch_items(stage.map.parallel or len(tasks), tasks), deque()
        elif stage.map is not None:
            stage_plan = next(sp for sp in self.plan.stages if sp.name == stage.name)
            limit = stage.map.parallel or len(tasks)
            cap = max(1, min(limit, self.target.capacity(stage, stage_plan)))
            self.say(f"stage {stage.name}: {len(tasks)} items, up to {cap} at once", stage.name)
        while waiting or self.running:
            while waiting and len(self.running) < cap and self._halt is None:
                spent = self.money.exhausted()
                if spent is not None:
                    self._start_halt("budget", spent)
                    break
                self._launch(waiting.popleft(), state)
            if not self.running:
                break
            self._wait_event(state, waiting)
            self._check(state)
        self.records.flush(force=True)
        return self._stage_result(state, len(tasks))

    def _launch(self, task: Task, state: StageRun) -> None:
        self.running[task.key] = _Running(task)

        def work() -> Callable[[], None]:
            threading.current_thread().name = f"nodus-task-{task.key}"
            try:
                end = self.target.run_task(task, Context(task, self.output, self.events))
                event: Event = TaskEnded(task, end)
            except BaseException as exc:  # carried to the main thread, which decides
                event = TaskRaised(task, exc)
            # Put once the lane is idle: the next task the driver gives then takes it.
            return partial(self.events.put, event)

        self._lanes.run(work)  # a fan-out's tasks share a few threads, and their connections

    def _launch_items(self, cap: int, tasks: list[Task]) -> int:
        """Every item to ``run_items`` (one job array; ``cap``: its ``parallel``): each ends
        as its own event, the policy stays per item; a retry waits until fewer are open."""
        name = tasks[0].stage.name
        self.say(f"stage {name}: {len(tasks)} items as one submission, up to {cap} at once", name)
        self.running.update((task.key, _Running(task)) for task in tasks)
        self._lanes.run(items_job(self.target, tasks, self.output, self.events, cap))
        return cap

    def _wait_event(self, state: StageRun, waiting: deque[Task]) -> None:
        try:
            # Wake at the latest when the budget would be reached, else every TICK.
            event = self.events.get(timeout=self.money.next_check(TICK))
        except queue.Empty:
            return
        while True:
            self._handle(event, state, waiting)
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return

    def _handle(self, event: Event, state: StageRun, waiting: deque[Task]) -> None:
        task = event.task
        run = self.running.get(task.key)
        if run is None:
            return
        match event:
            case TaskSubmitted(note=note, job_id=job_id):
                run.submitted_at = now_iso()
                # (a fan-out item's record takes no configuration: not built per item)
                planned = self._planned(task.stage) if task.item is None else None
                state.submitted(task, run.submitted_at, planned, note, job_id)
            case TaskWaiting(pending=pending):
                message = pending.words
                run.queued_at = run.queued_at or time.monotonic()
                run.queued_for = message
                state.waiting(task, message)
                if not self._is_running and not self._is_queued:
                    self._is_queued = True
                    self.records.queued()
                self.say(message, task.stage.name)
            case TaskBegan(info=info, at=at):
                run.started, run.rate, run.info = at, info.price_per_hour, info
                if run.queued_at is not None:
                    self._admit(run)
                if not self._is_running:
                    self._is_running = True
                    self.records.running()
                elsewhere = bool(info.node) and self.target.name != "local"
                state.began(task, info, f"running on node {info.node}" if elsewhere else None)
                self._show_progress(state)
            case TaskEnded(end=end):
                self.running.pop(task.key, None)
                self._on_end(task, run, end, state, waiting)
            case TaskRaised(error=error):
                self.running.pop(task.key, None)
                if self._fatal is None:
                    self._fatal = error
                    self._start_halt("error", str(error))
            case _:
                assert_never(event)

    def _planned(self, stage: Stage) -> dict[str, Any] | None:
        """The configuration the plan chose for a stage (its record's until it runs)."""
        for sp in self.plan.stages:
            if sp.name == stage.name and sp.selected is not None:
                config: dict[str, Any] = sp.selected.offer.as_json()
                return config
        return None

    def _on_end(
        self,
        task: Task,
        run: _Running,
        end: TaskEnd,
        state: StageRun,
        waiting: deque[Task],
    ) -> None:
        charge = self.money.charge(run)
        runtime, cost = charge.runtime, charge.cost
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
            state.retried(task, cost)
            return
        status = self._status_of(end)
        message = end.message
        if end.state == TaskState.STOPPED and self._halt_reason:
            message = self._halt_reason
        if end.state == TaskState.STOPPED and self._halt == "cancelled" and self._halt_code:
            end = replace(end, exit_code=self._halt_code)
        if run.gave_up and run.started is None and end.state == TaskState.STOPPED:
            status, end = StageStatus.FAILED, replace(end, exit_code=EXIT_GAVE_UP)
            message = self._gave_up_words(run)
        state.ended(task, end, status, runtime if run.started is not None else None, cost, message)
        if task.item is not None and self.item_ended is not None:
            self.item_ended(task.item.index, status, message)
        if task.item is None:
            ran = f" in {runtime:.1f}s" if run.started is not None else ""
            why = f": {message}" if message and status != StageStatus.SUCCEEDED else ""
            self.say(f"{label}: {status} (exit {end.exit_code}){ran}{why}", task.stage.name)
            return
        if status == StageStatus.FAILED:
            why = f": {message}" if message else ""
            self.say(
                f"{label} ({_clip(task.item.value)}): failed (exit {end.exit_code}){why}",
                task.stage.name,
                task.item.index,
            )
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

    def _stage_result(self, state: StageRun, total: int) -> StageEnd:
        stage, ends = state.stage, state.ends
        if self._fatal is not None:
            return StageEnd(StageStatus.FAILED, 1, str(self._fatal))
        if stage.map is None:
            rec = state.record
            if rec.status == StageStatus.PENDING:  # never launched: the budget or a stop
                rec.status = (
                    StageStatus.BUDGET_EXHAUSTED if self._halt == "budget" else StageStatus.SKIPPED
                )
                rec.message = self._halt_reason
                state.save()
            code = rec.exit_code if rec.exit_code is not None else 1
            if rec.status == StageStatus.SUCCEEDED:
                return StageEnd(rec.status, 0)
            if rec.status == StageStatus.BUDGET_EXHAUSTED:
                why = f"stage {stage.name!r} stopped: {self._halt_reason}"
                return StageEnd(rec.status, EXIT_BUDGET, why)
            text = f"stage {stage.name!r} failed with exit code {code}"
            if rec.message:
                text += f": {rec.message}"
            return StageEnd(rec.status, code, text)
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
            shown = listed(failed)
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
        state.save()
        self._say_usage(state)
        self.say(
            f"stage {stage.name}: {done} of {total} items succeeded"
            + (f", {len(failed)} failed" if failed else "")
            + f" in {elapsed:.1f}s",
            stage.name,
        )
        return StageEnd(rec.status, code, message)

    def _say_usage(self, state: StageRun) -> None:
        said = state.gpu_use_words()
        if said is not None:
            self.say(said, state.stage.name)

    # -- budget, limits, stops -------------------------------------------------------

    def _check(self, state: StageRun) -> None:
        now = time.monotonic()
        if self._halt is None:
            spent = self.money.exhausted()
            if spent is not None and self.running:
                self._start_halt("budget", spent)
        self._give_up_waiting(now)
        cost = self.money.to_record()
        if cost is not None:
            self.records.cost(cost)
        if now - self._stop_checked >= 1.0 and self._halt is None:
            self._stop_checked = now
            if self._stop_was_requested():
                # `nodus stop` signals this process; where no signal can reach (another
                # host, a thread), the request in the records does the same.
                raise Cancelled(signal.SIGTERM)
        self.records.flush()
        self._show_progress(state)

    def _give_up_waiting(self, now: float) -> None:
        """A task queued longer than the workload's ``wait_timeout`` is stopped: it ends
        ``failed`` (exit 3) with what it waited for; time queued never counts as cost."""
        limit = self.workload.wait_timeout
        if limit is None:
            return
        for run in list(self.running.values()):
            waited = now - run.queued_at if run.queued_at is not None else 0.0
            if run.started is None and not run.gave_up and waited >= limit:
                run.gave_up = True
                with contextlib.suppress(TargetFailure, NodusError, OSError):
                    self.target.stop_task(run.task)

    def _gave_up_words(self, run: _Running) -> str:
        limit = self.workload.wait_timeout or 0.0
        waited = run.queued_for or "capacity"
        return f"gave up after waiting {shown(limit)} (wait_timeout) for: {waited}"

    def _admit(self, run: _Running) -> None:
        """A task that waited in the queue starts: the spending limits are checked again
        now (they were when it queued), so a limit reached meanwhile stops it at once."""
        if self._halt is None:
            spent = self.money.exhausted(fresh=True)
            if spent is not None:
                self._start_halt("budget", spent)

    def _start_halt(self, why: Halt, reason: str) -> None:
        if self._halt is not None:
            return
        self._halt = why
        self._halt_reason = reason
        if why == "budget" and self.running:
            rate = self.money.rate()
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
                event = self.events.get(timeout=0.2)
            except queue.Empty:
                continue
            if isinstance(event, TaskBegan):
                self._stop_tasks()  # it was being created as the stop came
            if state is not None:
                self._handle(event, state, deque())
            elif isinstance(event, TaskEnded | TaskRaised):
                self.running.pop(event.task.key, None)
        if state is not None:
            self.records.flush(force=True)

    def _stop_was_requested(self) -> bool:
        try:
            return self.store.stop_requested(self.record.id)
        except NodusError:
            return False

    def _show_progress(self, state: StageRun) -> None:
        """Counts kept as tasks end, never recounted: a stage may hold 100,000 items."""
        if state.stage.map is None:
            return
        running = sum(1 for r in self.running.values() if r.started is not None)
        self.output.progress(state.progress(running, self.money.cost_now()))


def _label(task: Task) -> str:
    if task.item is None:
        return f"stage {task.stage.name}"
    return f"stage {task.stage.name} item {task.item.index}"


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
