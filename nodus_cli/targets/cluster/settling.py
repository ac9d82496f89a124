"""A run whose supervisor died, settled from what the scheduler says: the same record
updates and the same words on every cluster whose jobs outlive nodus (``owns_jobs``).

The target finds each job's end (``sacct``, a pod's status); these write it onto the
stage's or item's record, and sum a fan-out stage's items into the stage's end, so that a
settled run reads alike on Slurm and Kubernetes.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodus_cli.records import StageRecord, StageStatus, TaskRecord
from nodus_cli.targets.base import TaskEnd, TaskState

__all__ = ["items_failure", "record_end"]


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
