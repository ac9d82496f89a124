"""What a target reports of the GPUs a task held: a request is not proof of use.

A target that can sample its GPUs while a task runs (the local target, through
``nvidia-smi``) hands the driver a :class:`UsageReport` with the task's end; the driver
says which GPUs were used and warns about those that stayed idle, and the records keep
the report (``as_json``) and its samples over time (:mod:`nodus_cli.records.gpu_samples`).

A GPU counts as used when its utilization went above 1 % in any sample, or when its
memory in use rose by at least 256 MiB over what it held when the task started.
"""

from __future__ import annotations

from typing import Any

from nodus_cli.records.gpu_samples import GpuSample
from nodus_cli.structs import field, struct

__all__ = ["IDLE_UTILIZATION", "MEMORY_USE_MIB", "GpuPeak", "UsageReport"]

IDLE_UTILIZATION = 1.0  # percent: at or below this for the whole stage counts as unused
MEMORY_USE_MIB = 256.0  # memory in use must rise by this much to count as use


@struct
class GpuPeak:
    """The highest use of one GPU sampled while a task ran."""

    uuid: str
    samples: int = 0
    max_utilization: float = 0.0
    max_memory_used_mib: float = 0.0
    baseline_memory_mib: float | None = None

    @property
    def used(self) -> bool:
        if self.max_utilization > IDLE_UTILIZATION:
            return True
        base = self.baseline_memory_mib
        return base is not None and self.max_memory_used_mib - base >= MEMORY_USE_MIB


@struct
class UsageReport:
    """GPU use sampled while a task ran (``available``: whether it could be sampled)."""

    gpus: list[GpuPeak] = field(default_factory=list)
    available: bool = True
    #: Every reading (thinned as the records keep them); the records keep them apart
    #: from :meth:`as_json`, which holds the peaks.
    samples: list[GpuSample] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "sampled": self.available,
            "gpus": [
                {
                    "uuid": g.uuid,
                    "samples": g.samples,
                    "max_utilization": g.max_utilization,
                    "max_memory_used_mib": g.max_memory_used_mib,
                    "used": g.used,
                }
                for g in self.gpus
            ],
        }

    @property
    def used(self) -> list[str]:
        return [g.uuid for g in self.gpus if g.used]

    @property
    def idle(self) -> list[str]:
        """GPUs sampled at least once that never showed use."""
        return [g.uuid for g in self.gpus if g.samples and not g.used]

    @property
    def unsampled(self) -> list[str]:
        return [g.uuid for g in self.gpus if not g.samples]
