"""What a task reserves on a node, and what share of the node's price it pays.

Contract: :func:`memory_gb` is the one default of a task's memory (:data:`MEMORY_GB_PER_CPU`
per CPU when the stage sets no ``memory_gb``), used by the container limits of every
Docker target, the pending explanations of Swarm and the batch scripts of Slurm;
:func:`tasks_per_node` says how many tasks of some requirements one node holds at once
(whole GPUs, GPUs shared by memory, else CPUs); :func:`price_share` is the part of the
node's price one of them pays. Pure: the caller passes what the node holds.

Why one place: a task's price is what the driver's clock and the spending limits count,
and a limit that one target computes differently from another is a bill nobody can check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodus_cli.workload import Requirements

__all__ = ["MEMORY_GB_PER_CPU", "memory_gb", "price_share", "tasks_per_node"]

#: A task's memory when its stage sets no ``memory_gb``: this many GiB per CPU.
MEMORY_GB_PER_CPU = 2.0


def memory_gb(cpu: float, memory: float | None) -> float:
    """The GiB a task of ``cpu`` CPUs gets: ``memory`` when set, else the default."""
    return memory if memory else MEMORY_GB_PER_CPU * cpu


def tasks_per_node(
    req: Requirements, *, gpus: int, cpus: float, gpu_memory_gb: Sequence[float] = ()
) -> int:
    """How many tasks of ``req`` a node of ``gpus`` GPUs (each of ``gpu_memory_gb``, when
    known) and ``cpus`` CPUs holds at once: its GPUs divided by ``gpu_count``; GPUs shared
    by memory (``share_gpu`` with ``peak_memory_gb``), each GPU's memory divided by the
    peak; no GPU, its CPUs divided by ``cpu``. 0 for a GPU task that needs more GPUs
    than the node has."""
    if req.wants_gpu:
        if req.share_gpu and req.peak_memory_gb and gpu_memory_gb:
            return sum(int(m // req.peak_memory_gb) for m in gpu_memory_gb)
        return gpus // max(1, req.gpu_count)
    return max(1, int(cpus // req.cpu)) if req.cpu else 1


def price_share(
    price_per_hour: float,
    req: Requirements,
    *,
    gpus: int,
    cpus: float,
    gpu_memory_gb: Sequence[float] = (),
) -> float:
    """The share of a node's ``price_per_hour`` that one task of ``req`` pays: the price
    divided by the tasks the node holds at once (:func:`tasks_per_node`, at least 1)."""
    held = tasks_per_node(req, gpus=gpus, cpus=cpus, gpu_memory_gb=gpu_memory_gb)
    return price_per_hour / max(1, held)
