"""What a run record holds: the run, its stages and, for a fan-out stage, every task.

Statuses are closed vocabularies (:class:`RunStatus`, :class:`StageStatus`); ``as_json``
gives the documented shapes of ``nodus runs --json`` (docs/json.md).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from nodus_cli.structs import field, struct

#: The key of a stage's configuration that is false when the price of the node it ran on
#: was not set (a cluster node nothing prices): its cost, recorded as 0, is unknown.
PRICE_KNOWN = "price_known"


class RunStatus(StrEnum):
    #: Recorded and submitted, not yet running (a detached run starting, a pending task).
    PENDING = "pending"
    #: Waiting for GPUs other runs hold (in line on this machine, or pending on Swarm).
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    BUDGET_EXHAUSTED = "budget_exhausted"

    @property
    def active(self) -> bool:
        return self in ACTIVE_RUN


#: A run in one of these has not ended: someone supervises it (or should).
ACTIVE_RUN = frozenset({RunStatus.PENDING, RunStatus.QUEUED, RunStatus.RUNNING})


class StageStatus(StrEnum):
    #: Not running yet: not reached, or submitted and not yet placed.
    PENDING = "pending"
    #: Waiting for GPUs other runs hold.
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    BUDGET_EXHAUSTED = "budget_exhausted"
    #: Never started: an earlier stage ended the run.
    SKIPPED = "skipped"

    @property
    def active(self) -> bool:
        return self in (StageStatus.PENDING, StageStatus.QUEUED, StageStatus.RUNNING)


@struct
class TaskRecord:
    """One task of a fan-out stage: the command run for one item."""

    index: int
    item: str
    status: StageStatus = StageStatus.PENDING
    exit_code: int | None = None
    started_at: str | None = None
    ended_at: str | None = None
    runtime_seconds: float | None = None
    cost: float = 0.0
    devices: list[str] = field(default_factory=list)
    node: str | None = None
    attempts: int = 0
    message: str | None = None
    #: The scheduler's job (Slurm's job id) when the target owns its jobs.
    job_id: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "item": self.item,
            "status": str(self.status),
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "runtime_seconds": self.runtime_seconds,
            "cost": round(self.cost, 6),
            "devices": list(self.devices),
            "node": self.node,
            "attempts": self.attempts,
            "message": self.message,
            "job_id": self.job_id,
        }


@struct
class StageRecord:
    """What the records hold of one stage of a run: status, times, exit code, cost."""

    name: str
    status: StageStatus
    exit_code: int | None
    started_at: str | None = None
    ended_at: str | None = None
    runtime_seconds: float | None = None
    cost: float = 0.0
    config: dict[str, Any] | None = None
    gpu_uuids: list[str] = field(default_factory=list)
    attempts: int = 0
    gpu_report: dict[str, Any] | None = None
    message: str | None = None
    #: The node a Swarm stage ran on.
    node: str | None = None
    #: The scheduler's job (Slurm's job id) when the target owns its jobs.
    job_id: str | None = None
    #: Tasks of a fan-out stage (empty otherwise); read only when asked for.
    tasks: list[TaskRecord] = field(default_factory=list)
    #: Per-status counts of a fan-out stage's tasks.
    task_counts: dict[str, int] = field(default_factory=dict)

    @property
    def cost_known(self) -> bool:
        """False when it ran on a node whose price was not set (:data:`PRICE_KNOWN`)."""
        return (self.config or {}).get(PRICE_KNOWN) is not False

    def as_json(self, tasks: bool = False) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "status": str(self.status),
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "runtime_seconds": self.runtime_seconds,
            "cost": round(self.cost, 6),
            "cost_known": self.cost_known,
            "configuration": self.config,
            "gpus": self.gpu_uuids,
            "node": self.node,
            "attempts": self.attempts,
            "gpu_usage": self.gpu_report,
            "message": self.message,
            "job_id": self.job_id,
        }
        if self.task_counts:
            doc["items"] = dict(self.task_counts)
        if tasks and self.tasks:
            doc["tasks"] = [t.as_json() for t in self.tasks]
        return doc


@struct
class RunRecord:
    """What the records hold of one run: its workload, target, status, stages and cost."""

    id: str
    workload: str
    fingerprint: str
    target: str
    status: RunStatus
    exit_code: int | None
    started_at: str
    ended_at: str | None
    cost: float
    price_per_hour: float
    budget: float | None
    file: str | None
    workload_json: dict[str, Any]
    pid: int | None
    message: str | None
    #: The host whose process supervises the run, and that process's start time (ticks
    #: since boot), so a recycled pid is not mistaken for it.
    host: str | None = None
    pid_start: int | None = None
    #: Where the work directory's contents went: {"kind": "copied"|"kept"|"removed", "path"}.
    output: dict[str, Any] | None = None
    #: The run ended but what it left on the target could not all be removed yet.
    cleanup_pending: bool = False
    stop_requested: bool = False
    stages: list[StageRecord] = field(default_factory=list)

    @property
    def cost_known(self) -> bool:
        """False when a stage ran on a node whose price was not set: ``cost`` leaves it out."""
        return all(s.cost_known for s in self.stages)

    def as_json(self, tasks: bool = False) -> dict[str, Any]:
        return {
            "id": self.id,
            "workload": self.workload,
            "target": self.target,
            "status": str(self.status),
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "cost": round(self.cost, 6),
            "cost_known": self.cost_known,
            "fingerprint": self.fingerprint,
            "price_per_hour": self.price_per_hour,
            "budget": self.budget,
            "message": self.message,
            "output": self.output,
            "stages": [s.as_json(tasks=tasks) for s in self.stages],
        }
