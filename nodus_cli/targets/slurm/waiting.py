"""Why a Slurm job waits: Slurm's pending reason as a typed :class:`Pending`, in words,
with who it waits for.

Contract: :func:`pending` reads one job's reason: ``Resources`` names the running jobs
that hold the nodes it may run on (:func:`held_by`), ``Priority`` the pending jobs ahead
of it in its partition (:func:`ahead`: a higher priority, or the same and submitted first,
as Slurm orders them) and its place in line; ``QOS*``/``AssocGrp*`` the limit.
A ``squeue`` that fails leaves the reason in words without names: who is ahead is an
extra, never a reason to fail a run. One reading for a single job and for an array.

Why apart: the words and the lookups are shared by the single job and the job array,
and the target module stays within its length.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from nodus_cli.targets.base import Pending, PendingKind
from nodus_cli.targets.slurm import parse
from nodus_cli.targets.slurm.commands import SlurmDown, SlurmRefused, slurm

__all__ = ["ahead", "ahead_of", "held_by", "pending", "pending_kind", "pending_words"]

#: How many jobs the words name (the rest are counted).
NAMED = 5

_REASONS = {
    "Resources": "waiting for GPUs: the nodes that have them are busy with other jobs",
    "Priority": "waiting behind jobs of higher priority in Slurm's queue",
    "ReqNodeNotAvail": "waiting: the nodes it can run on are unavailable (drained or down)",
    "Dependency": "waiting for the job it depends on",
    "JobHeldUser": "held by its user (scontrol release JOBID lets it go)",
    "JobHeldAdmin": "held by an administrator",
    "BeginTime": "waiting for its begin time",
    "None": "submitted; Slurm has not scheduled it yet",
}

#: Slurm's pending reasons by the kind of wait they are (the rest: by prefix, else other).
_KINDS = {
    "Resources": PendingKind.RESOURCES,
    "Priority": PendingKind.PRIORITY,
    "ReqNodeNotAvail": PendingKind.NODE_UNAVAILABLE,
    "JobHeldUser": PendingKind.HELD,
    "JobHeldAdmin": PendingKind.HELD,
    "None": PendingKind.SCHEDULING,
}


def pending_kind(reason: str) -> PendingKind:
    """The kind of wait Slurm's pending ``reason`` is (``QOS*``, ``AssocGrp*``: a limit)."""
    if reason.startswith(("QOSMax", "QOSGrp", "AssocGrp", "AssocMax")):
        return PendingKind.LIMIT
    return _KINDS.get(reason, PendingKind.OTHER)


def _listed(jobs: Sequence[str]) -> str:
    named = ", ".join(jobs[:NAMED])
    return named + (f" and {len(jobs) - NAMED} more" if len(jobs) > NAMED else "")


def pending_words(reason: str, holders: Sequence[str] = ()) -> str:
    """Slurm's pending reason in words; ``holders``: the jobs it waits for (who holds
    the GPUs for ``Resources``, who is ahead for ``Priority``)."""
    if reason.startswith(("QOSMax", "QOSGrp")):
        said = f"waiting: a limit of its QOS is reached ({reason})"
    elif reason.startswith("AssocGrp") or reason.startswith("AssocMax"):
        said = f"waiting: a limit of its account is reached ({reason})"
    elif reason == "Priority" and holders:
        count = f"{len(holders)} job{'s' if len(holders) != 1 else ''}"
        return (
            f"waiting behind {count} of higher priority in Slurm's queue (Priority): "
            f"{_listed(holders)}"
        )
    else:
        said = _REASONS.get(reason, f"pending ({reason})")
        if reason != "None" and reason in _REASONS:
            said += f" ({reason})"
    return f"{said}; held by {_listed(holders)}" if holders else said


def held_by(nodes: Collection[str]) -> tuple[str, ...]:
    """The running jobs on ``nodes``: ``job 12 (train) on gpu-a``."""
    try:
        text = slurm("squeue", "-h", "-t", "RUNNING", "-o", parse.QUEUE_FORMAT)
    except (SlurmDown, SlurmRefused):
        return ()
    jobs = parse.queued_jobs(text)
    return tuple(f"job {j.job_id} ({j.name}) on {j.nodes}" for j in jobs if j.nodes in nodes)


def ahead(jobs: Sequence[parse.Waiting], job_id: str) -> list[parse.Waiting]:
    """The pending ``jobs`` Slurm considers before job ``job_id`` (for an array task,
    before its array) in its partition, first first: a higher priority, or the same and
    submitted before it. Empty when ``jobs`` do not hold it."""
    number = parse.Waiting(job_id, 0, "", "", "").number
    mine = next((j for j in jobs if j.number == number), None)
    if mine is None:
        return []
    first = sorted(jobs, key=lambda j: (-j.priority, j.number))
    return [
        j
        for j in first
        if j.number != number
        and j.partition == mine.partition
        and (j.priority, -j.number) > (mine.priority, -number)
    ]


def ahead_of(job_id: str) -> tuple[str, ...]:
    """The jobs :func:`ahead` of job ``job_id`` now: ``job 40 (train) by alice``."""
    try:
        text = slurm("squeue", "-h", "-t", "PD", "-o", parse.WAITING_FORMAT)
    except (SlurmDown, SlurmRefused):
        return ()
    found = ahead(parse.waiting_jobs(text), job_id)
    return tuple(f"job {j.job_id} ({j.name}) by {j.user}" for j in found)


def pending(reason: str, job_id: str, nodes: Collection[str]) -> Pending:
    """Job ``job_id`` pending for ``reason``, that may run on ``nodes``: the kind, the
    words, who it waits for and, behind others of higher priority, its place in line."""
    holders: tuple[str, ...] = ()
    position = None
    if reason == "Resources":
        holders = held_by(nodes)
    elif reason == "Priority":
        holders = ahead_of(job_id)
        position = len(holders) + 1 if holders else None
    return Pending(pending_kind(reason), pending_words(reason, holders), holders, position)
