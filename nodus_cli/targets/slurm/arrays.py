"""A fan-out stage on Slurm as ONE job array, followed item by item.

Contract: :class:`ArrayRun` submits every item of a stage with one ``sbatch
--array=0-(N-1)%parallel`` (the GPUs, CPUs, memory and limits of each array task exactly
as for a single job: :meth:`ArrayHost.job_options`), then follows the whole array with
one ``squeue`` per look (and one ``sacct`` when some of it left the queue), and reports
each item through its own :class:`~nodus_cli.targets.base.ItemContext`: submitted with
its array task's job id (``JOBID_INDEX``, recorded as the item's ``job_id``), waiting
with Slurm's reason in words (an item held back by ``parallel``,
``JobArrayTaskLimit``, or by the array's own running tasks waits its turn, not for
capacity), started on its node with the GPUs
it was given, its output lines from its own file, and its end from ``sacct``.

The items are written into the run's folder (``items/STAGE/INDEX``, one file
each); the script reads its own by ``SLURM_ARRAY_TASK_ID`` (:func:`.script.batch_script`).
A job Slurm requeues (preemption with ``PreemptMode=REQUEUE``, ``scontrol requeue``)
is cancelled and ends the item as an infrastructure failure in words
(:data:`REQUEUED`): the driver's ``--retries`` then resubmits it with the same model and
count, and nothing reruns behind nodus's back.

:func:`settle_items` reads how an array's items ended when the nodus process that
followed them died (:meth:`.target.SlurmTarget.settle`).

Why apart from :mod:`.target`: one submission for many items is its own loop (who is
pending, who runs, who ended) over Slurm's array ids; the single job's loop stays short.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nodus_cli.records import TaskRecord
from nodus_cli.structs import replace
from nodus_cli.targets.base import (
    ItemContext,
    Pending,
    Started,
    Task,
    TaskEnd,
    TaskState,
)
from nodus_cli.targets.cluster.logfiles import follow_file
from nodus_cli.targets.cluster.settling import items_failure, record_end
from nodus_cli.targets.slurm import parse
from nodus_cli.targets.slurm.commands import SlurmDown, SlurmRefused, environ, slurm
from nodus_cli.targets.slurm.endings import work_root_unseen

if TYPE_CHECKING:
    from nodus_cli.workload import Stage

__all__ = [
    "ACCOUNTING_SECONDS",
    "ARRAY_SACCT_FIELDS",
    "DOWN_LOOKS",
    "PENDING_STATES",
    "POLL_SECONDS",
    "THROTTLED",
    "ArrayHost",
    "ArrayRun",
    "array_words",
    "look_up",
    "requeued",
    "settle_items",
]

#: How often the array (or a single job) is looked at while it waits or runs.
POLL_SECONDS = 0.5
#: How long ``sacct`` may lag behind a job that left the queue.
ACCOUNTING_SECONDS = 30.0
#: ``sacct`` of an array's tasks: as :data:`.parse.SACCT_FIELDS`, with ``JobID``
#: (``123_4``) where a single job's ``JobIDRaw`` is its id.
ARRAY_SACCT_FIELDS = "JobID,JobName,State,ExitCode,ElapsedRaw,NodeList"
#: Looks in a row that the controller does not answer before the items still followed
#: end as failures of the cluster (a single job ends at the first, as before).
DOWN_LOOKS = 3
#: Squeue's states of a job that waits to run.
PENDING_STATES = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")
#: Pending reasons that are the array's own ``parallel`` limit, not waiting for capacity.
THROTTLED = ("JobArrayTaskLimit", "None")


def requeued(job_id: str) -> TaskEnd:
    """A job Slurm put back in its queue after it ran: not the workload's failure."""
    return TaskEnd(
        TaskState.INFRASTRUCTURE,
        1,
        f"Slurm requeued job {job_id} after it started (preempted for a job of higher "
        "priority, or requeued by an administrator); nodus cancelled the requeued job so "
        "that --retries resubmits it with the same GPU model and count",
    )


class ArrayHost(Protocol):
    """What :class:`ArrayRun` needs of the Slurm target."""

    #: False (``--no-wait``): an item Slurm cannot start at once is cancelled.
    queue_jobs: bool

    def work_root(self) -> Path:
        """The folder every node sees (``[slurm] work_root``)."""

    def job_options(self, stage: Stage) -> list[str]:
        """The ``sbatch`` options of one job of ``stage`` (GRES, CPUs, memory, limits)."""

    def started_on(self, task: Task, where: str, devices: Path) -> Started:
        """What a task that runs on node ``where`` holds (its GPUs from ``devices``)."""

    def pending_of(self, stage: Stage, job_id: str, reason: str) -> Pending:
        """Job ``job_id`` of ``stage`` pending for Slurm's ``reason``: its kind, words,
        who it waits for."""

    def script(self, task: Task, work_dir: Path, devices: Path, end: Path, items: Path) -> str:
        """The array's batch script (:func:`.script.batch_script` with the target's
        container runtime): each task reads its item from ``items``, writes its GPUs to
        ``devices.INDEX`` and its container's end to ``end.INDEX``."""

    def end_of(self, task: Task, ended: parse.Ended, end_file: Path) -> TaskEnd:
        """How a job's accounting record reads for the driver, with what its script wrote
        of its container's end to ``end_file``."""


class _Item:
    """One array task as followed: its context, whether it ran, its output offset."""

    def __init__(self, task: Task, ctx: ItemContext, job_id: str) -> None:
        self.task = task
        self.ctx = ctx
        self.job_id = job_id
        self.running = False
        self.said = ""
        self.offset = 0
        self.gone_at: float | None = None  # when it left the queue (monotonic)
        self.end: TaskEnd | None = None  # decided before sacct (requeued, --no-wait)
        self.stopping = False


class ArrayRun:
    """Every item of one fan-out stage as one job array; :meth:`run` until all ended."""

    def __init__(
        self, host: ArrayHost, tasks: Sequence[Task], contexts: Sequence[ItemContext]
    ) -> None:
        self.host = host
        self.tasks = list(tasks)
        self.contexts = list(contexts)
        self.stage = tasks[0].stage
        self.array_id: str | None = None
        self._items: dict[int, _Item] = {}
        self._lock = threading.Lock()
        #: Items told to stop before the array was submitted.
        self._early: set[int] = set()

    def _key(self) -> str:
        return self.stage.name

    def submit(self, run_dir: Path, work_dir: Path, parallel: int) -> str:
        """Write the items and the script, ``sbatch`` the array; its job id."""
        first = self.tasks[0]
        items = run_dir / "items" / self._key()
        items.mkdir(parents=True, exist_ok=True)
        for task in self.tasks:
            assert task.item is not None  # a fan-out stage's tasks
            (items / str(task.item.index)).write_text(task.item.value)
        script = run_dir / f"{self._key()}.array.sh"
        devices = run_dir / f"{self._key()}.array.devices"
        end = run_dir / f"{self._key()}.array.end"
        script.write_text(self.host.script(first, work_dir, devices, end, items))
        count = len(self.tasks)
        throttle = f"%{parallel}" if parallel < count else ""
        env = first.environment(str(work_dir))
        env.pop("NODUS_ITEM", None)  # the script sets each task's own
        env.pop("NODUS_ITEM_INDEX", None)
        out = slurm(
            "sbatch",
            "--parsable",
            f"--job-name=nodus-{first.run_id}-{self._key()}",
            f"--array=0-{count - 1}{throttle}",
            f"--output={run_dir / f'{self._key()}.array.%a.out'}",
            f"--chdir={run_dir}",
            *self.host.job_options(self.stage),
            str(script),
            env=environ(env),
        )
        return out.strip().split(";")[0]

    def run(self, run_dir: Path, work_dir: Path, parallel: int) -> None:
        """Submit, then follow every item until each has ended (reported)."""
        try:
            self.array_id = self.submit(run_dir, work_dir, parallel)
        except (SlurmDown, SlurmRefused) as exc:
            words = f"Slurm refused the job array: {exc}"
            kind = TaskState.CANNOT_START
            if isinstance(exc, SlurmDown):
                words, kind = f"the Slurm controller: {exc}", TaskState.INFRASTRUCTURE
            for ctx in self.contexts:
                ctx.ended(TaskEnd(kind, 1, words))
            return
        with self._lock:
            for task, ctx in zip(self.tasks, self.contexts, strict=True):
                assert task.item is not None
                job = f"{self.array_id}_{task.item.index}"
                self._items[task.item.index] = _Item(task, ctx, job)
                ctx.submitted(f"submitted as Slurm job {job} (array {self.array_id})", job_id=job)
            early = [self._items[i] for i in sorted(self._early) if i in self._items]
            for item in early:
                item.stopping = True
        for item in early:
            self._cancel(item.job_id)
        silent = 0
        while self._items:
            try:
                self._look(run_dir)
                silent = 0
            except SlurmDown as exc:
                silent += 1  # not answering this time: ask again, a few times
                if silent >= DOWN_LOOKS:
                    self._lost(f"the Slurm controller: {exc}")
            if self._items:
                time.sleep(POLL_SECONDS)

    def _lost(self, words: str) -> None:
        """Every item still followed ends as a failure of the cluster (``words``)."""
        with self._lock:
            left, self._items = list(self._items.values()), {}
        for item in left:
            item.ctx.ended(TaskEnd(TaskState.INFRASTRUCTURE, 1, words))

    def stop(self, index: int) -> None:
        """Stop item ``index`` now, from any thread (before the array is submitted: as
        soon as it is)."""
        with self._lock:
            item = self._items.get(index)
            if item is None:
                self._early.add(index)
                return
            item.stopping = True
        self._cancel(item.job_id)

    def _cancel(self, job_id: str) -> None:
        with contextlib.suppress(SlurmRefused, SlurmDown):
            slurm("scancel", job_id)

    def _look(self, run_dir: Path) -> None:
        assert self.array_id is not None
        try:
            text = slurm("squeue", "-h", "-r", "-j", self.array_id, "-o", parse.QUEUE_FORMAT)
        except SlurmRefused:
            text = ""  # "Invalid job id": the whole array left the queue
        queued = {j.job_id: j for j in parse.queued_jobs(text)}
        now = time.monotonic()
        gone: list[_Item] = []
        pending: Pending | None = None  # the array waits as one: read once a look
        # While some of the array runs, the rest wait their turn behind it (as the items
        # a driver has not launched yet): only an array none of which runs waits for
        # capacity, is `queued`, and is what --no-wait refuses.
        turn = any(j.state not in PENDING_STATES for j in queued.values())
        for index, item in sorted(self._items.items()):
            state = queued.get(item.job_id)
            if state is None:
                item.gone_at = item.gone_at or now
                gone.append(item)
                continue
            out = run_dir / f"{self._key()}.array.{index}.out"
            devices = run_dir / f"{self._key()}.array.devices.{index}"
            if state.state in PENDING_STATES:
                if item.running:  # it ran, and Slurm put it back in the queue
                    self._cancel(item.job_id)
                    item.end = item.end or requeued(item.job_id)
                    continue
                if state.reason in THROTTLED or item.stopping or turn:
                    continue
                if pending is None:
                    pending = self.host.pending_of(self.stage, item.job_id, state.reason)
                words = pending.words
                if not self.host.queue_jobs:
                    self._cancel(item.job_id)
                    item.end = item.end or TaskEnd(
                        TaskState.KILLED,
                        3,
                        f"--no-wait: Slurm could not start job {item.job_id} at once: "
                        f"{words}; cancelled it",
                    )
                    continue
                if words != item.said:
                    item.said = words
                    item.ctx.waiting(replace(pending, words=f"Slurm job {item.job_id}: {words}"))
                continue
            if not item.running and state.state == "RUNNING":
                item.running = True
                item.ctx.started(self.host.started_on(item.task, state.nodes, devices))
            item.offset = follow_file(out, item.offset, item.ctx)
        if gone:
            self._settle(gone, run_dir, now)

    def _settle(self, gone: list[_Item], run_dir: Path, now: float) -> None:
        assert self.array_id is not None
        try:
            text = slurm("sacct", "-n", "-P", "-X", "-j", self.array_id, "-o", ARRAY_SACCT_FIELDS)
        except SlurmRefused:
            text = ""
        accounted = {j.job_id: j for j in parse.ended_jobs(text)}
        for item in gone:
            assert item.task.item is not None
            index = item.task.item.index
            found = accounted.get(item.job_id)
            late = item.gone_at is not None and now - item.gone_at > ACCOUNTING_SECONDS
            if item.end is None and (found is None or not found.finished) and not late:
                continue  # sacct lags behind the queue: ask again next time
            out = run_dir / f"{self._key()}.array.{index}.out"
            devices = run_dir / f"{self._key()}.array.devices.{index}"
            if not item.running and found is not None and found.node not in ("", "None assigned"):
                item.ctx.started(self.host.started_on(item.task, found.node, devices))
            follow_file(out, item.offset, item.ctx, final=True)
            if item.stopping:
                end = TaskEnd(TaskState.STOPPED, 143, "stopped by nodus (scancel)")
            elif item.end is not None:
                end = item.end
            elif found is None:
                end = TaskEnd(
                    TaskState.INFRASTRUCTURE,
                    1,
                    f"Slurm job {item.job_id} left no accounting record",
                )
            else:
                ends = run_dir / f"{self._key()}.array.end.{index}"
                unseen = work_root_unseen(found, run_dir, self.host.work_root(), out, devices)
                end = unseen or self.host.end_of(item.task, found, ends)
            with self._lock:
                self._items.pop(index, None)
            item.ctx.ended(end)


def look_up(job_ids: Sequence[str]) -> tuple[set[str], dict[str, parse.Ended]]:
    """Which of ``job_ids`` (jobs ``123``, array tasks ``123_4``) Slurm still queues or
    runs, and the accounting record of each: one ``squeue`` per job and one ``sacct``."""
    if not job_ids:
        return set(), {}
    wanted = set(job_ids)
    queued: set[str] = set()
    for job in sorted({j.split("_")[0] for j in job_ids}):
        try:
            text = slurm("squeue", "-h", "-r", "-j", job, "-o", parse.QUEUE_FORMAT)
        except SlurmRefused:
            continue  # "Invalid job id": it left the queue
        queued |= {q.job_id for q in parse.queued_jobs(text)} & wanted
    jobs = ",".join(sorted({j.split("_")[0] for j in job_ids}))
    try:
        text = slurm("sacct", "-n", "-P", "-X", "-j", jobs, "-o", ARRAY_SACCT_FIELDS)
    except SlurmRefused:
        text = ""
    accounted = {e.job_id: e for e in parse.ended_jobs(text) if e.job_id in wanted}
    return queued, accounted


def array_words(job_ids: Sequence[str | None]) -> str | None:
    """What Slurm's queue holds of a fan-out stage's jobs (its items' ``job_ids``), in
    words: ``Slurm job array 41: 2 running, 3 pending (Resources)``; None: none of them."""
    arrays = sorted({j.split("_")[0] for j in job_ids if j})
    if not arrays:
        return None
    wanted = {j for j in job_ids if j}
    counts: dict[str, int] = {}
    reasons: set[str] = set()
    for array in arrays:
        try:
            text = slurm("squeue", "-h", "-r", "-j", array, "-o", parse.QUEUE_FORMAT)
        except SlurmRefused:
            continue  # "Invalid job id": it left the queue
        for job in parse.queued_jobs(text):
            if job.job_id in wanted:
                state = "pending" if job.state in PENDING_STATES else job.state.lower()
                counts[state] = counts.get(state, 0) + 1
                if state == "pending" and job.reason not in THROTTLED:
                    reasons.add(job.reason)
    jobs = f"Slurm job array {', '.join(arrays)}"
    if not counts:
        return f"{jobs} has ended"
    said = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    return f"{jobs}: {said}" + (f" ({', '.join(sorted(reasons))})" if reasons else "")


def settle_items(
    stage: str, items: list[TaskRecord], price: float, end_of: Callable[[parse.Ended], TaskEnd]
) -> tuple[bool, int, str | None, str] | None:
    """A fan-out stage's items whose supervisor died, as Slurm ended them (``items``
    changed in place; ``price`` per hour): whether the stage succeeded, its exit code and
    message, and the run's words; None while one of them is still queued or running."""
    arrays = {t.job_id.split("_")[0] for t in items if t.job_id and "_" in t.job_id}
    for t in items:  # an item whose id the dead process had not recorded yet
        if len(arrays) == 1 and t.job_id is None and t.status.active:
            t.job_id = f"{next(iter(arrays))}_{t.index}"
    open_ = [t for t in items if t.status.active and t.job_id is not None]
    queued, accounted = look_up([t.job_id for t in open_ if t.job_id is not None])
    if queued:
        return None
    for t in open_:
        found = accounted.get(t.job_id or "")
        if found is None or not found.finished:
            return None
        record_end(t, end_of(found), found.elapsed_seconds, price)
        t.node = t.node or found.node
    jobs = f"Slurm job array {', '.join(sorted(arrays))}" if arrays else "its Slurm jobs"
    failure = items_failure(stage, items, "nodus ended before it recorded its Slurm job")
    if failure is None:
        return True, 0, None, f"{jobs} went on: {len(items)} of {len(items)} items succeeded"
    code, message = failure
    return False, code, message, f"{jobs} went on: {message}"
