"""This machine as the local target's inventory: its CPUs, memory, disk, and one offer
per GPU model among the GPUs its driver reports (read by :mod:`nodus_cli.hardware.smi`,
the hardware layer, which the Swarm node setup reads too).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time

from nodus_cli import config
from nodus_cli.catalog import Offer
from nodus_cli.hardware.smi import LocalGpu, query_gpus

__all__ = ["cpu_count", "disk_gb", "memory_gb", "offers", "recent_gpus"]

#: This machine's GPUs as the driver listed them, by the environment nvidia-smi ran in,
#: and when (monotonic), trusted for :data:`_GPUS_FOR` seconds: a burst of GPU calls is as
#: many runs, each with a target of its own, and each ``nvidia-smi`` a process
#: (benchmarks/README.md, functions.py). A list with no GPU is never kept: its reason
#: (``smi.last_probe_note``) is the last probe's.
_GPUS: dict[int, tuple[float, list[LocalGpu]]] = {}
_GPUS_FOR = 5.0
#: One question to the driver at a time: the runs of a burst that find the list too old
#: wait for one answer instead of each asking.
_GPUS_ASKING = threading.Lock()


def recent_gpus() -> list[LocalGpu]:
    """This machine's GPUs as the driver listed them a moment ago, for a run to plan and
    claim with (as they are now, to look at them: :func:`query_gpus`)."""
    key = hash(tuple(sorted(os.environ.items())))
    with _GPUS_ASKING:
        known = _GPUS.get(key)
        if known is not None and time.monotonic() - known[0] < _GPUS_FOR:
            return list(known[1])
        found = query_gpus()
        if found:
            _GPUS.clear()  # one environment at a time, in practice
            _GPUS[key] = (time.monotonic(), found)
        return list(found)


def cpu_count() -> float:
    try:
        return float(len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return float(os.cpu_count() or 1)


def memory_gb() -> float:
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # pragma: no cover
        return 0.0
    return round(pages * size / 1024**3, 1)


def disk_gb(path: str = "/var/lib/docker") -> float:
    """Free disk where the engine keeps containers (else the root file system), in GB."""
    for probe in (path, "/"):
        try:
            return round(shutil.disk_usage(probe).free / 1024**3, 1)
        except OSError:
            continue
    return 0.0


def offers(local_gpus: list[LocalGpu] | None = None) -> tuple[Offer, ...]:
    """One offer per GPU model on this machine (a CPU-only offer when it has none).

    A model's offer lists how many GPUs of it this machine has and the smallest nominal
    memory among them, so every GPU the runner may hand out meets what was planned.
    """
    cfg = config.local()
    found = query_gpus() if local_gpus is None else local_gpus
    host = socket.gethostname()
    vcpus, memory, disk, arch = cpu_count(), memory_gb(), disk_gb(), _arch()

    def offer(gpu: str | None, count: int, gpu_memory: float) -> Offer:
        return Offer(
            supplier="local",
            machine_id=host,
            region=cfg.region,
            gpu=gpu,
            gpu_count=count,
            gpu_memory_gb=gpu_memory,
            vcpus=vcpus,
            memory_gb=memory,
            disk_gb=disk,
            arch=arch,
            price_per_hour=cfg.price_per_hour,
        )

    by_family: dict[str, list[LocalGpu]] = {}
    for gpu in found:
        if gpu.family is not None:
            by_family.setdefault(gpu.family, []).append(gpu)
    if not by_family:
        return (offer(None, 0, 0.0),)
    return tuple(
        offer(family, len(members), min(g.nominal_memory_gb for g in members))
        for family, members in sorted(by_family.items())
    )


def _arch() -> str:
    machine = os.uname().machine
    return "arm64" if machine in ("aarch64", "arm64") else "x86_64"
