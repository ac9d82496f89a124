"""What the run records key runtime measurements by: a workload's fingerprint and a
configuration's key.

Contract: :func:`fingerprint` is the same for two workloads exactly when each stage runs
the same thing (so a measurement of one holds for the other); :func:`config_key` is the
same for two offers of one machine type in any region. Both are plain strings, stored
with every run and stage.

Why a module of its own: the store writes these keys and the runtime history looks
measurements up by them; kept below both, neither has to import the other's module.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodus_cli.catalog import Offer
    from nodus_cli.workload import Workload

__all__ = ["config_key", "config_key_of", "fingerprint", "machine_key"]

#: Requirements that change how long a stage takes; money and place limits do not.
_RUNTIME_REQUIREMENTS = ("gpu", "gpu_count", "peak_memory_gb", "cpu", "memory_gb", "share_gpu")


def fingerprint(workload: Workload) -> str:
    """What identifies "this workload" for runtime measurements: what each stage runs.

    The name, the budget, price limits, location and disk are left out: changing them does
    not change how long a stage takes, so it must not throw the measurements away.
    """
    doc = []
    for s in workload.stages:
        stage: dict[str, Any] = {
            "name": s.name,
            "image": s.image,
            "command": s.command,
            "env": s.env,
            "requirements": {
                k: getattr(s.requirements, k)
                for k in _RUNTIME_REQUIREMENTS
                if k != "share_gpu" or s.requirements.share_gpu
            },
        }
        if s.entrypoint is not None:
            stage["entrypoint"] = s.entrypoint
        if s.map is not None:
            stage["items"] = len(s.map.items)
        if s.function is not None:  # what a function stage runs is the function
            stage["function"] = s.function.name
        doc.append(stage)
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_key(offer: Offer) -> str:
    """Runtimes compare across regions of one machine type, not across machine types."""
    return f"{offer.supplier}|{offer.machine_id}|{offer.gpu or '-'}|{offer.gpu_count}"


def config_key_of(config: dict[str, Any]) -> str:
    """:func:`config_key` of a configuration saved as JSON (``Offer.as_json``)."""
    return (
        f"{config.get('supplier')}|{config.get('machine_id')}|{config.get('gpu') or '-'}|"
        f"{config.get('gpu_count') or 0}"
    )


def machine_key(offer: Offer) -> str:
    """The key a CPU-only stage is recorded under on this machine, whatever GPUs it has.

    A local run of a CPU-only workload does not ask the driver for GPUs, so it records
    the machine without them; ``nodus plan --target local`` on a machine with GPUs lists
    the machine with its GPUs. Within one workload fingerprint a stage is either a GPU
    stage or not, so a GPU-less record of the same machine is that stage's runtime there.
    """
    return f"{offer.supplier}|{offer.machine_id}|-|0"
