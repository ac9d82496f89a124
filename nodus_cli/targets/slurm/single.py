"""One task as one Slurm batch job, followed to its end in the cluster targets' loop.

Contract: :func:`follow` follows a submitted job (:class:`Submission`) through
:func:`nodus_cli.targets.cluster.following.follow`, one ``squeue`` a look
(:data:`~.arrays.POLL_SECONDS`): pending is ``queued`` with Slurm's reason in words
(said again only when the words change); ``--no-wait`` (:attr:`SingleHost.queue_jobs`
False) cancels a job Slurm has looked at and cannot start at once; running is
``started`` on its node with the GPUs its script wrote down, and its output file is
followed line by line (:func:`~nodus_cli.targets.cluster.logfiles.follow_file`); a job
that ran and went back to PENDING (preempted with ``PreemptMode=REQUEUE``, ``scontrol
requeue``) is cancelled and ends in words (:func:`~.arrays.requeued`, with who preempted
it once Slurm can say: up to :data:`~.arrays.PREEMPTION_SECONDS`) for ``--retries`` to
resubmit; a node drained (or lost) under a running job is said once (:func:`node_note`).
Once the job leaves the queue its end comes from ``sacct`` (which may lag: up to
:data:`~.arrays.ACCOUNTING_SECONDS`); a job that ran between two looks started all the
same. ``SlurmDown`` passes through to the caller.

:func:`queued`, :func:`accounted` and :func:`cancel` are the one way the target asks
``squeue``, ``sacct`` and ``scancel`` about one job.

Why apart from :mod:`.target`: following a job is its own concept; the target submits,
plans and settles.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nodus_cli.structs import replace
from nodus_cli.targets.base import Pending, Started, Task, TaskContext, TaskEnd, TaskState
from nodus_cli.targets.cluster import following
from nodus_cli.targets.cluster.following import Look
from nodus_cli.targets.cluster.logfiles import follow_file
from nodus_cli.targets.slurm import parse
from nodus_cli.targets.slurm.arrays import (
    ACCOUNTING_SECONDS,
    PENDING_STATES,
    POLL_SECONDS,
    PREEMPTION_SECONDS,
    preemption,
    requeued,
)
from nodus_cli.targets.slurm.commands import SlurmDown, SlurmRefused, slurm
from nodus_cli.targets.slurm.endings import work_root_unseen

if TYPE_CHECKING:
    from nodus_cli.workload import Stage

__all__ = [
    "NODE_SECONDS",
    "SingleHost",
    "Submission",
    "accounted",
    "cancel",
    "follow",
    "node_note",
    "queued",
]

#: How often a running job's node is looked at (drained, down: said in words).
NODE_SECONDS = 30.0
_STOPPED = "stopped by nodus (scancel)"


class Submission:
    """One submitted task: its job id, and whether nodus is stopping it."""

    def __init__(self) -> None:
        self.job_id: str | None = None
        self.stopping = False


class SingleHost(Protocol):
    """What :func:`follow` needs of the Slurm target."""

    #: False (``--no-wait``): a job Slurm cannot start at once is cancelled.
    queue_jobs: bool

    def work_root(self) -> Path:
        """The folder every node sees (``[slurm] work_root``)."""

    def started_on(self, task: Task, where: str, devices: Path) -> Started:
        """What a task that runs on node ``where`` holds (its GPUs from ``devices``)."""

    def pending_of(self, stage: Stage, job_id: str, reason: str) -> Pending:
        """Job ``job_id`` of ``stage`` pending for Slurm's ``reason``."""

    def end_of(self, task: Task, ended: parse.Ended, end_file: Path) -> TaskEnd:
        """How a job's accounting record reads, with its container's end from
        ``end_file``."""


def queued(job_id: str) -> parse.Queued | None:
    """Job ``job_id`` as ``squeue`` lists it (None: it left the queue)."""
    try:
        text = slurm("squeue", "-h", "-j", job_id, "-o", parse.QUEUE_FORMAT)
    except SlurmRefused:
        return None  # "Invalid job id": it left the queue
    found = parse.queued_jobs(text)
    return found[0] if found else None


def accounted(job_id: str) -> parse.Ended | None:
    """Job ``job_id``'s accounting record (None: ``sacct`` has none yet)."""
    try:
        text = slurm("sacct", "-n", "-P", "-X", "-j", job_id, "-o", parse.SACCT_FIELDS)
    except SlurmRefused:
        return None
    found = [j for j in parse.ended_jobs(text) if j.job_id == job_id]
    return found[-1] if found else None


def cancel(job_id: str) -> None:
    """``scancel`` job ``job_id`` (one already gone is no failure)."""
    with contextlib.suppress(SlurmRefused):
        slurm("scancel", job_id)


def node_note(job_id: str, name: str, ctx: TaskContext) -> str | None:
    """Say so when Slurm drained (or lost) node ``name`` under job ``job_id``; the
    words said (None: the node is fine, or Slurm cannot say)."""
    try:
        found = parse.nodes_of(slurm("scontrol", "show", "node", name, "--oneliner"))
    except (SlurmDown, SlurmRefused):
        return None
    if not found or found[0].usable:
        return None
    if "DRAIN" in found[0].state:
        said = (
            f"node {name} is {found[0].words}: drained under Slurm job {job_id}, which "
            "Slurm lets run to its end; no new job goes there until it is resumed "
            f"(scontrol update nodename={name} state=resume)"
        )
    else:
        said = f"node {name} is {found[0].words}: Slurm may end job {job_id} (NODE_FAIL)"
    ctx.say(said)
    return said


def _ended(job_id: str) -> parse.Ended | None:
    """The accounting record of a job that left the queue, once ``sacct`` has its end
    (at most :data:`~.arrays.ACCOUNTING_SECONDS` later: then whatever it has)."""
    deadline = time.monotonic() + ACCOUNTING_SECONDS
    while True:
        found = accounted(job_id)
        if found is not None and found.finished:
            return found
        if time.monotonic() > deadline:
            return found
        time.sleep(POLL_SECONDS)


def _ran(ended: parse.Ended | None) -> bool:
    return ended is not None and ended.node not in ("", "None assigned")


class _OutputFile:
    """The job's output file as the follow loop reads it: what was written since the
    last look, at each look; the rest (an unterminated last line) at the end."""

    def __init__(self, path: Path, ctx: TaskContext) -> None:
        self.path = path
        self.ctx = ctx
        self.offset = 0

    def start(self) -> None:
        """Nothing to open: the file is read at each look."""

    def poll(self) -> None:
        self.offset = follow_file(self.path, self.offset, self.ctx)

    def finish(self, complete: bool) -> None:
        self.offset = follow_file(self.path, self.offset, self.ctx, final=complete)


class _Job:
    """A submitted job as the follow loop asks about it
    (:class:`~nodus_cli.targets.cluster.following.Job`): a look is its ``squeue`` line
    (a :class:`~.parse.Queued`), or, once it left the queue, its ``sacct`` record (a
    :class:`~.parse.Ended`, or None)."""

    def __init__(
        self, host: SingleHost, task: Task, ctx: TaskContext, job: Submission, run_dir: Path
    ) -> None:
        assert job.job_id is not None
        self.host = host
        self.task = task
        self.ctx = ctx
        self.job = job
        self.job_id: str = job.job_id
        self.run_dir = run_dir
        key = task.key.replace("[", "-").replace("]", "")
        self.out = run_dir / f"{key}.{task.attempt}.out"
        self.devices = run_dir / f"{key}.{task.attempt}.devices"
        self.end_file = run_dir / f"{key}.{task.attempt}.end"
        self.said = ""
        self.node_said: str | None = None
        self.looked = time.monotonic()

    @property
    def stopping(self) -> bool:
        return self.job.stopping

    def look(self) -> Look:
        state = queued(self.job_id)
        if state is not None and state.state in PENDING_STATES:
            return Look(started=False, ended=False, doc=state)
        if state is not None and state.state in ("RUNNING", "COMPLETING"):
            if time.monotonic() - self.looked > NODE_SECONDS:
                self.looked = time.monotonic()
                self.node_said = self.node_said or node_note(self.job_id, state.nodes, self.ctx)
            return Look(started=True, ended=False, doc=state)
        ended = _ended(self.job_id)
        return Look(started=_ran(ended), ended=True, doc=ended)

    def pending(self, now: Look, waited: float) -> Pending | TaskEnd | None:
        state: parse.Queued = now.doc
        pending = self.host.pending_of(self.task.stage, self.job_id, state.reason)
        if not self.host.queue_jobs and state.reason != "None":  # "None": not looked at yet
            cancel(self.job_id)
            return TaskEnd(
                TaskState.KILLED,
                3,
                f"--no-wait: Slurm could not start job {self.job_id} at once: "
                f"{pending.words}; cancelled it",
            )
        if pending.words == self.said:
            return None
        self.said = pending.words
        return replace(pending, words=f"Slurm job {self.job_id}: {pending.words}")

    def started(self, now: Look) -> Started:
        where = now.doc.nodes if isinstance(now.doc, parse.Queued) else now.doc.node
        return self.host.started_on(self.task, where, self.devices)

    def output(self, now: Look) -> _OutputFile:
        return _OutputFile(self.out, self.ctx)

    def ended(self, now: Look) -> TaskEnd:
        if isinstance(now.doc, parse.Queued):  # it ran, and Slurm put it back in its queue
            cancel(self.job_id)
            why = preemption(self.job_id)
            deadline = time.monotonic() + PREEMPTION_SECONDS
            while not why.known and not self.job.stopping and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)  # Slurm cannot say yet why: ask again
                why = preemption(self.job_id)
            return self.stopped() if self.job.stopping else requeued(self.job_id, why.by)
        if self.job.stopping:
            return TaskEnd(TaskState.STOPPED, 143, _STOPPED)
        ended: parse.Ended | None = now.doc
        if ended is None:
            return TaskEnd(
                TaskState.INFRASTRUCTURE, 1, f"Slurm job {self.job_id} left no accounting record"
            )
        if _ran(ended) and not self.node_said:
            node_note(self.job_id, ended.node, self.ctx)
        unseen = work_root_unseen(
            ended, self.run_dir, self.host.work_root(), self.out, self.devices
        )
        return unseen or self.host.end_of(self.task, ended, self.end_file)

    def stopped(self) -> TaskEnd:
        with contextlib.suppress(SlurmDown):
            cancel(self.job_id)
        return TaskEnd(TaskState.STOPPED, 143, _STOPPED)


def follow(
    host: SingleHost, task: Task, ctx: TaskContext, job: Submission, run_dir: Path
) -> TaskEnd:
    """Follow submitted ``job`` of ``task`` (its files in ``run_dir``) to its end (see
    the module)."""
    return following.follow(
        _Job(host, task, ctx, job, run_dir), ctx, interval=lambda _: POLL_SECONDS
    )
