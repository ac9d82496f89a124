"""A run whose supervisor died, settled from what the scheduler says: the same record
updates and the same words on every cluster whose jobs outlive nodus (``owns_jobs``).

The target finds each job's end (``sacct``, a pod's status); these write it onto the
stage's or item's record, and sum a fan-out stage's items into the stage's end, so that a
settled run reads alike on Slurm and Kubernetes.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodus_cli.records import RunRecord, RunStatus, StageRecord, StageStatus, TaskRecord
from nodus_cli.targets.base import Settled, TaskEnd, TaskState

__all__ = ["end_words", "items_failure", "record_end", "settled_run"]


def record_end(
    rec: StageRecord | TaskRecord, end: TaskEnd, seconds: float, price_per_hour: float
) -> bool:
    """Write a job's ``end`` after ``seconds`` of running, at ``price_per_hour``, onto its
    stage's or item's record (changed in place); whether it succeeded."""
    ok = end.state == TaskState.EXITED and end.exit_code == 0
    rec.status = StageStatus.SUCCEEDED if ok else StageStatus.FAILED
    rec.exit_code = end.exit_code
    rec.runtime_seconds = float(seconds)
    rec.cost = seconds / 3600 * price_per_hour
    rec.message = None if ok else end.message
    return ok


def items_failure(stage: str, items: Sequence[TaskRecord], lost: str) -> tuple[int, str] | None:
    """None when every item of fan-out stage ``stage`` succeeded; else the stage's exit
    code and its message, naming the first failed item (``lost``: the words for an item
    the dead process never recorded as submitted)."""
    failed = [t for t in items if t.status == StageStatus.FAILED]
    failed += [t for t in items if t.status.active]
    if not failed:
        return None
    first = failed[0]
    code = first.exit_code or 1
    why = first.message or (lost if first.status.active else f"exited with {code}")
    return code, (
        f"stage {stage!r}: {len(failed)} of {len(items)} items failed (item {first.index}: {why})"
    )


def end_words(end: TaskEnd) -> str:
    """How a job ended, in a few words: its message, else its exit code, else completed."""
    return end.message or (f"exited with {end.exit_code}" if end.exit_code else "completed")


def settled_run(
    record: RunRecord,
    stages: dict[int, StageRecord],
    tasks: dict[int, list[TaskRecord]],
    last: tuple[bool, int | None, str] | None,
    submitted: str,
    submit: str,
) -> Settled:
    """The end of ``record``, whose supervisor died, once every job it submitted has ended:
    ``stages`` and ``tasks`` as settled, ``last`` how the last of them ended (succeeded,
    exit code, words; None: it submitted nothing). ``submitted`` says what it never did
    then ("submitted a Slurm job"), ``submit`` the verb for the stages it never got to."""
    later = [
        s.name
        for i, s in enumerate(record.stages)
        if s.status.active and s.job_id is None and i not in stages
    ]
    who = f"its nodus process ({record.pid})" if record.pid else "its nodus process"
    if last is None:
        return Settled(RunStatus.FAILED, None, f"{who} ended before it {submitted}", stages)
    ok, code, how = last
    said = f"{who} ended; {how}"
    if ok and not later:
        return Settled(RunStatus.SUCCEEDED, 0, said, stages, tasks)
    if later:
        said += f"; not run: {', '.join(later)} (nodus was not there to {submit} them)"
    return Settled(RunStatus.FAILED, code or 1, said, stages, tasks)
