"""A fan-out stage on Slurm as job arrays (one, unless it has more items than the
cluster's ``MaxArraySize``), followed item by item.

Contract: :class:`ArrayRun` submits the items of a stage with ``sbatch
--array=0-(N-1)%parallel`` (the GPUs, CPUs, memory and limits of each array task exactly
as for a single job: :meth:`ArrayHost.job_options`), then follows its arrays with one
``squeue`` per look (and one ``sacct`` when some of them left the queue), and reports
each item through its own :class:`~nodus_cli.targets.base.ItemContext`: submitted with
its array task's job id (``JOBID_INDEX``, recorded as the item's ``job_id``), waiting
with Slurm's reason in words (an item held back by ``parallel``,
``JobArrayTaskLimit``, or by the stage's own running tasks waits its turn, not for
capacity), started on its node with the GPUs
it was given, its output lines from its own file, and its end from ``sacct``.

A stage of more items than ``MaxArraySize`` (``scontrol show config``, read once per
target: Slurm refuses an array index at or above it) is several arrays of at most that
many tasks, each numbered from 0: the script adds the index of the array's first item
(each array has its own script), so every item keeps its own ``NODUS_ITEM_INDEX`` and
``NODUS_ITEM_COUNT``, and its job id is its array's (``52_3`` for item 13 of arrays of
10). ``parallel`` holds across them by submitting, not by dividing: an array can run at
most ``min(throttle, its items not ended)`` tasks at once, a number that only falls, so
the next array is submitted (with the room left as its ``%throttle``) once the ones
before leave room, and the room that frees later raises the throttle of an array whose
items wait behind it (``scontrol update ArrayTaskThrottle``, oldest first:
:func:`shares`). Dividing ``parallel`` between arrays would need one task per array at
least (more than ``parallel`` when it is smaller than their number) and would leave the
share of an array that has ended unused. Without ``parallel`` every array is submitted
at once.

The items are written into the run's folder (``items/STAGE/INDEX``, one file
each); the script reads its own by its index (:func:`.script.batch_script`); its output
is ``STAGE.array.JOBID_INDEX.out`` (Slurm names it, by the array task's job id).
A job Slurm requeues (preemption with ``PreemptMode=REQUEUE``, ``scontrol requeue``)
is cancelled and ends the item as an infrastructure failure in words (:func:`requeued`;
who preempted it, when Slurm did, from :func:`preemption`, asked again at each look
until Slurm can say, up to :data:`PREEMPTION_SECONDS`): the driver's ``--retries``
then resubmits it with the same model and count, and nothing reruns behind nodus's
back. An item told to stop before its array was
submitted ends there, never submitted, and so does one waiting for its array after
``--no-wait`` found that Slurm could not start the stage at once.

:func:`settle_items` reads how an array's items ended when the nodus process that
followed them died (:meth:`.target.SlurmTarget.settle`); the items of an array it never
submitted are failed, not run.

Why apart from :mod:`.target`: one submission for many items is its own loop (who is
pending, who runs, who ended) over Slurm's array ids; the single job's loop stays short.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from itertools import takewhile
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nodus_cli.records import TaskRecord
from nodus_cli.structs import replace, struct
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
    "PREEMPTION_SECONDS",
    "THROTTLED",
    "ArrayHost",
    "ArrayRun",
    "Preemption",
    "array_words",
    "cluster_array_size",
    "index_ranges",
    "look_up",
    "preemption",
    "requeued",
    "settle_items",
    "shares",
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
#: How long after a requeue nodus asks Slurm again why it happened (:class:`Preemption`)
#: before it ends the task with what Slurm could say.
PREEMPTION_SECONDS = 15.0
#: Pending reasons that are the array's own ``parallel`` limit, not waiting for capacity.
THROTTLED = ("JobArrayTaskLimit", "None")


def requeued(job_id: str, preempted_by: str | None = None) -> TaskEnd:
    """A job Slurm put back in its queue after it ran: not the workload's failure;
    ``preempted_by``: who preempted it, in words (:func:`preemption`), when Slurm did."""
    why = (
        f"Slurm job {job_id} was preempted by {preempted_by} and requeued"
        if preempted_by is not None
        else f"Slurm requeued job {job_id} after it started (preempted for a job of higher "
        "priority, or requeued by an administrator)"
    )
    return TaskEnd(
        TaskState.INFRASTRUCTURE,
        1,
        f"{why}; nodus cancelled the requeued job so that --retries resubmits it with the "
        "same GPU model and count",
    )


@struct(frozen=True)
class Preemption:
    """What Slurm can say so far of why it requeued a job (:func:`preemption`).

    ``by``: who preempted it, in words (``job 7 (train) of alice``; "a job of higher
    priority" while none has started in its place), None when it was not preempted (an
    administrator requeued it) or Slurm cannot say. ``known``: Slurm's answer is whole:
    accounting holds the requeued run and, for a preemption, a job has started in its
    place. Until then a caller asks again, up to :data:`PREEMPTION_SECONDS` after the
    requeue: slurmdbd records a run after the controller ends it, and the preemptor starts
    only once the preempted job has left its node."""

    known: bool
    by: str | None


def preemption(job_id: str) -> Preemption:
    """Why Slurm requeued job ``job_id``, as far as it can say now (:class:`Preemption`):
    from the job's runs in accounting and the jobs that started on its node since."""
    try:
        runs = slurm("sacct", "-D", "-n", "-P", "-X", "-j", job_id, "-o", parse.RUNS_FIELDS)
        run = parse.requeued_run(runs, job_id)
        if run is None or not run.preempted:
            return Preemption(known=run is not None, by=None)
        text = slurm("squeue", "-h", "-w", run.node, "-t", "R,CF", "-o", parse.NODE_JOBS_FORMAT)
    except (SlurmDown, SlurmRefused):
        return Preemption(known=False, by=None)
    since = [j for j in parse.node_jobs(text) if j.start >= run.end and j.job_id != job_id]
    if not since:
        return Preemption(known=False, by="a job of higher priority")
    return Preemption(
        known=True, by=", ".join(f"job {j.job_id} ({j.name}) of {j.user}" for j in since)
    )


class ArrayHost(Protocol):
    """What :class:`ArrayRun` needs of the Slurm target."""

    #: False (``--no-wait``): an item Slurm cannot start at once is cancelled.
    queue_jobs: bool

    def work_root(self) -> Path:
        """The folder every node sees (``[slurm] work_root``)."""

    def array_size(self) -> int:
        """How many tasks one job array may have (:func:`cluster_array_size`, read once)."""

    def job_options(self, stage: Stage) -> list[str]:
        """The ``sbatch`` options of one job of ``stage`` (GRES, CPUs, memory, limits)."""

    def started_on(self, task: Task, where: str, devices: Path) -> Started:
        """What a task that runs on node ``where`` holds (its GPUs from ``devices``)."""

    def pending_of(self, stage: Stage, job_id: str, reason: str) -> Pending:
        """Job ``job_id`` of ``stage`` pending for Slurm's ``reason``: its kind, words,
        who it waits for."""

    def script(
        self, task: Task, work_dir: Path, devices: Path, end: Path, items: Path, offset: int
    ) -> str:
        """An array's batch script (:func:`.script.batch_script` with the target's
        container runtime): each task reads item ``offset`` plus its array index from
        ``items``, writes its GPUs to ``devices.INDEX`` and its container's end to
        ``end.INDEX``."""

    def end_of(self, task: Task, ended: parse.Ended, end_file: Path) -> TaskEnd:
        """How a job's accounting record reads for the driver, with what its script wrote
        of its container's end to ``end_file``."""


class _Array:
    """One ``sbatch --array`` of the stage: its job id, the item index of its task 0 and
    its ``%throttle`` (its item count when it has none)."""

    def __init__(self, job_id: str, offset: int, throttle: int) -> None:
        self.job_id = job_id
        self.offset = offset
        self.throttle = throttle


class _Item:
    """One array task as followed: its context, its array, whether it ran, its output
    offset."""

    def __init__(self, task: Task, ctx: ItemContext, array: _Array) -> None:
        assert task.item is not None  # a fan-out stage's tasks
        self.task = task
        self.ctx = ctx
        self.array = array
        self.job_id = f"{array.job_id}_{task.item.index - array.offset}"
        self.running = False
        self.said = ""
        self.offset = 0
        self.gone_at: float | None = None  # when it left the queue (monotonic)
        self.end: TaskEnd | None = None  # decided before sacct (--no-wait)
        self.requeued_at: float | None = None  # when Slurm put it back in its queue after it ran
        self.stopping = False


def shares(parallel: int, arrays: Sequence[tuple[int, int]]) -> tuple[list[int], int]:
    """``parallel`` across a stage's arrays, each ``(throttle, items not ended)``, oldest
    first: the throttle each may have now (raised, oldest first, where its items wait
    behind it and there is room) and the room left for an array not submitted yet. An
    array runs at most ``min(throttle, items not ended)`` tasks at once, which only
    falls, so what these add up to never exceeds ``parallel``."""
    room = parallel - sum(min(throttle, left) for throttle, left in arrays)
    raised = []
    for throttle, left in arrays:
        more = max(0, min(room, left - throttle))
        raised.append(throttle + more)
        room -= more
    return raised, max(0, room)


def index_ranges(indices: Sequence[int]) -> str:
    """``--array``'s list of ``indices`` (ascending): ``0-3,5,7-9``."""
    parts: list[str] = []
    first = last = indices[0]
    for index in [*indices[1:], None]:
        if index is not None and index == last + 1:
            last = index
            continue
        parts.append(str(first) if first == last else f"{first}-{last}")
        if index is not None:
            first = last = index
    return ",".join(parts)


class ArrayRun:
    """Every item of one fan-out stage as job arrays; :meth:`run` until all ended."""

    def __init__(
        self, host: ArrayHost, tasks: Sequence[Task], contexts: Sequence[ItemContext]
    ) -> None:
        self.host = host
        self.tasks = list(tasks)
        self.contexts = list(contexts)
        self.stage = tasks[0].stage
        self._arrays: list[_Array] = []
        #: Items not submitted yet, by index (in order).
        self._waiting: dict[int, tuple[Task, ItemContext]] = {}
        for task, ctx in zip(self.tasks, self.contexts, strict=True):
            assert task.item is not None  # a fan-out stage's tasks
            self._waiting[task.item.index] = (task, ctx)
        self._items: dict[int, _Item] = {}
        self._lock = threading.Lock()
        #: Items told to stop while their array was being submitted.
        self._early: set[int] = set()
        #: ``--no-wait``: why Slurm could not start the stage at once (its items not
        #: submitted yet end with these words).
        self._refused: str | None = None

    def _key(self) -> str:
        return self.stage.name

    def _write(self, run_dir: Path) -> None:
        """Write every item, one file each, where the arrays' tasks read them."""
        items = run_dir / "items" / self._key()
        items.mkdir(parents=True, exist_ok=True)
        for task in self.tasks:
            assert task.item is not None  # a fan-out stage's tasks
            (items / str(task.item.index)).write_text(task.item.value)

    def submit(
        self, run_dir: Path, work_dir: Path, indices: Sequence[int], throttle: int
    ) -> _Array:
        """Write its script and ``sbatch`` the items ``indices`` (ascending, fewer than
        ``MaxArraySize`` apart) as one array, at most ``throttle`` at once; the array."""
        first = self.tasks[0]
        offset = indices[0]
        script = run_dir / f"{self._key()}.array.{offset}.sh"
        devices = run_dir / f"{self._key()}.array.devices"
        end = run_dir / f"{self._key()}.array.end"
        items = run_dir / "items" / self._key()
        script.write_text(self.host.script(first, work_dir, devices, end, items, offset))
        limit = f"%{throttle}" if throttle < len(indices) else ""
        env = first.environment(str(work_dir))
        env.pop("NODUS_ITEM", None)  # the script sets each task's own
        env.pop("NODUS_ITEM_INDEX", None)
        out = slurm(
            "sbatch",
            "--parsable",
            f"--job-name=nodus-{first.run_id}-{self._key()}",
            f"--array={index_ranges([i - offset for i in indices])}{limit}",
            f"--output={run_dir / f'{self._key()}.array.%A_%a.out'}",
            f"--chdir={run_dir}",
            *self.host.job_options(self.stage),
            str(script),
            env=environ(env),
        )
        return _Array(out.strip().split(";")[0], offset, min(throttle, len(indices)))

    def run(self, run_dir: Path, work_dir: Path, parallel: int) -> None:
        """Submit as ``parallel`` allows, follow every item until each has ended
        (reported)."""
        self._write(run_dir)
        size = max(1, self.host.array_size())
        silent = 0
        while True:
            self._submit_more(run_dir, work_dir, parallel, size)
            with self._lock:
                if not self._items and not self._waiting:
                    return
            try:
                self._look(run_dir)
                silent = 0
            except SlurmDown as exc:
                silent += 1  # not answering this time: ask again, a few times
                if silent >= DOWN_LOOKS:
                    self._lost(f"the Slurm controller: {exc}")
            with self._lock:
                if not self._items and not self._waiting:
                    return
            time.sleep(POLL_SECONDS)

    def _submit_more(self, run_dir: Path, work_dir: Path, parallel: int, size: int) -> None:
        """Raise the throttles and submit the next arrays, as far as ``parallel`` leaves
        room (:func:`shares`)."""
        with self._lock:
            left = {id(a): 0 for a in self._arrays}
            for item in self._items.values():
                left[id(item.array)] += 1
            arrays = [(a, a.throttle, left[id(a)]) for a in self._arrays]
        raised, room = shares(parallel, [(t, n) for _, t, n in arrays])
        for (array, throttle, _), want in zip(arrays, raised, strict=True):
            if want > throttle:
                with contextlib.suppress(SlurmRefused, SlurmDown):  # room again next look
                    slurm(
                        "scontrol", "update", f"JobId={array.job_id}", f"ArrayTaskThrottle={want}"
                    )
                    array.throttle = want
        while room > 0:
            with self._lock:
                if not self._waiting:
                    return
                end = next(iter(self._waiting)) + size  # the waiting are in order
                chunk = list(takewhile(end.__gt__, self._waiting))
                taken = {i: self._waiting.pop(i) for i in chunk}
                refused = self._refused
            if refused is not None:
                for index, (_, ctx) in taken.items():
                    ctx.ended(
                        TaskEnd(TaskState.KILLED, 3, f"{refused}; item {index} not submitted")
                    )
                continue
            try:
                array = self.submit(run_dir, work_dir, chunk, room)
            except (SlurmDown, SlurmRefused) as exc:
                words = f"Slurm refused the job array: {exc}"
                kind = TaskState.CANNOT_START
                if isinstance(exc, SlurmDown):
                    words, kind = f"the Slurm controller: {exc}", TaskState.INFRASTRUCTURE
                for _, ctx in taken.values():
                    ctx.ended(TaskEnd(kind, 1, words))
                continue
            room -= array.throttle
            self._follow(array, taken)

    def _follow(self, array: _Array, taken: dict[int, tuple[Task, ItemContext]]) -> None:
        """Follow the items of ``array``, just submitted; cancel those told to stop while
        it was."""
        with self._lock:
            self._arrays.append(array)
            early = []
            for index, (task, ctx) in taken.items():
                item = self._items[index] = _Item(task, ctx, array)
                ctx.submitted(
                    f"submitted as Slurm job {item.job_id} (array {array.job_id})",
                    job_id=item.job_id,
                )
                if index in self._early:
                    item.stopping = True
                    early.append(item)
        for item in early:
            self._cancel(item.job_id)

    def _lost(self, words: str) -> None:
        """Every item still followed, or not submitted yet, ends as a failure of the
        cluster (``words``)."""
        with self._lock:
            left = [item.ctx for item in self._items.values()]
            left += [ctx for _, ctx in self._waiting.values()]
            self._items, self._waiting = {}, {}
        for ctx in left:
            ctx.ended(TaskEnd(TaskState.INFRASTRUCTURE, 1, words))

    def stop(self, index: int) -> None:
        """Stop item ``index`` now, from any thread (one not submitted yet ends at once;
        one being submitted, as soon as it is)."""
        with self._lock:
            item = self._items.get(index)
            waiting = self._waiting.pop(index, None) if item is None else None
            if item is None and waiting is None:
                self._early.add(index)
                return
            if item is not None:
                item.stopping = True
        if waiting is not None:
            waiting[1].ended(
                TaskEnd(TaskState.STOPPED, 143, "stopped by nodus before it was submitted")
            )
        elif item is not None:
            self._cancel(item.job_id)

    def _cancel(self, job_id: str) -> None:
        with contextlib.suppress(SlurmRefused, SlurmDown):
            slurm("scancel", job_id)

    def _queue(self) -> list[parse.Queued]:
        """What ``squeue`` holds of the arrays whose items are followed (one call; one per
        array when Slurm refuses the list)."""
        with self._lock:
            ids = sorted({item.array.job_id for item in self._items.values()}, key=int)
        if not ids:
            return []
        found: list[parse.Queued] = []
        for group in [ids] if len(ids) == 1 else [ids, *([i] for i in ids)]:
            try:
                text = slurm("squeue", "-h", "-r", "-j", ",".join(group), "-o", parse.QUEUE_FORMAT)
            except SlurmRefused:
                continue  # "Invalid job id": it left the queue
            found += parse.queued_jobs(text)
            if group is ids:
                break
        return found

    def _look(self, run_dir: Path) -> None:
        queued = {j.job_id: j for j in self._queue()}
        now = time.monotonic()
        gone: list[_Item] = []
        pending: Pending | None = None  # the stage waits as one: read once a look
        # While some of the stage runs, the rest wait their turn behind it (as the items
        # a driver has not launched yet): only a stage none of which runs waits for
        # capacity, is `queued`, and is what --no-wait refuses.
        turn = any(j.state not in PENDING_STATES for j in queued.values())
        with self._lock:
            followed = sorted(self._items.items())
        for index, item in followed:
            state = queued.get(item.job_id)
            if state is None:
                item.gone_at = item.gone_at or now
                gone.append(item)
                continue
            out = run_dir / f"{self._key()}.array.{item.job_id}.out"
            devices = run_dir / f"{self._key()}.array.devices.{index}"
            if state.state in PENDING_STATES:
                if item.running:  # it ran, and Slurm put it back in the queue
                    self._cancel(item.job_id)
                    item.requeued_at = now
                    continue
                if state.reason in THROTTLED or item.stopping or turn:
                    continue
                if pending is None:
                    pending = self.host.pending_of(self.stage, item.job_id, state.reason)
                words = pending.words
                if not self.host.queue_jobs:
                    self._cancel(item.job_id)
                    refused = f"--no-wait: Slurm could not start job {item.job_id} at once: {words}"
                    with self._lock:
                        self._refused = self._refused or (
                            f"--no-wait: Slurm could not start stage {self._key()!r} at once: "
                            f"{words}"
                        )
                    item.end = item.end or TaskEnd(TaskState.KILLED, 3, f"{refused}; cancelled it")
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
        arrays = ",".join(sorted({item.array.job_id for item in gone}, key=int))
        try:
            text = slurm("sacct", "-n", "-P", "-X", "-j", arrays, "-o", ARRAY_SACCT_FIELDS)
        except SlurmRefused:
            text = ""
        accounted = {j.job_id: j for j in parse.ended_jobs(text)}
        for item in gone:
            assert item.task.item is not None
            index = item.task.item.index
            found = accounted.get(item.job_id)
            late = item.gone_at is not None and now - item.gone_at > ACCOUNTING_SECONDS
            decided = item.end is not None or item.requeued_at is not None
            if not decided and (found is None or not found.finished) and not late:
                continue  # sacct lags behind the queue: ask again next time
            why = None
            if item.requeued_at is not None and not item.stopping:
                why = preemption(item.job_id)
                if not why.known and now - item.requeued_at < PREEMPTION_SECONDS:
                    continue  # Slurm cannot say yet why: ask again next time
            out = run_dir / f"{self._key()}.array.{item.job_id}.out"
            devices = run_dir / f"{self._key()}.array.devices.{index}"
            if not item.running and found is not None and found.node not in ("", "None assigned"):
                item.ctx.started(self.host.started_on(item.task, found.node, devices))
            follow_file(out, item.offset, item.ctx, final=True)
            if item.stopping:
                end = TaskEnd(TaskState.STOPPED, 143, "stopped by nodus (scancel)")
            elif why is not None:  # said once it left the queue: who took its place ran
                end = requeued(item.job_id, why.by)
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


def cluster_array_size() -> int:
    """How many tasks one job array may have on this cluster (``MaxArraySize``, from
    ``scontrol show config``; Slurm's default when it does not answer)."""
    try:
        return parse.max_array_size(slurm("scontrol", "show", "config"))
    except (SlurmDown, SlurmRefused):
        return parse.MAX_ARRAY_SIZE


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
    message, and the run's words; None while one of them is still queued or running. An
    item whose id the dead process had not recorded yet is found by its array's (the one
    whose first item is the nearest below it, less than ``MaxArraySize`` away); one of an
    array it never submitted is failed, not run."""
    #: Each array's job id by the index of its first item.
    arrays: dict[int, str] = {}
    for t in items:
        if t.job_id and "_" in t.job_id:
            array, _, task = t.job_id.partition("_")
            if task.isdigit():
                arrays.setdefault(t.index - int(task), array)
    unrecorded = [t for t in items if t.job_id is None and t.status.active]
    size = cluster_array_size() if unrecorded and arrays else 0
    for t in unrecorded:
        offset = max((o for o in arrays if o <= t.index), default=None)
        if offset is not None and t.index - offset < size:
            t.job_id = f"{arrays[offset]}_{t.index - offset}"
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
    shown = sorted(set(arrays.values()), key=int)
    jobs = f"Slurm job array {', '.join(shown)}" if arrays else "its Slurm jobs"
    failure = items_failure(
        stage, items, "nodus ended before it submitted it to Slurm (or recorded its job)"
    )
    if failure is None:
        return True, 0, None, f"{jobs} went on: {len(items)} of {len(items)} items succeeded"
    code, message = failure
    return False, code, message, f"{jobs} went on: {message}"
