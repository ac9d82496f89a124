"""Why Swarm keeps a task pending, in the words of the workload's requirements.

Swarm's own reason (the task status's ``Err``, e.g. "no suitable node (insufficient
resources on 2 nodes)") names neither the requirement nor a node, and often there is none
at all: the task just waits. :func:`explain` says which requirement the task's node does
not meet now (GPUs declared, GPUs, CPUs or memory free) and the largest matching capacity
the cluster has, e.g. "the largest matching capacity is 1 free of 4 on nodus-w1", or that
the node is down, drained or gone; for a fan-out task (placed by Swarm, pinned nowhere),
how many matching GPUs are free. Swarm's reason, when it gives one, is quoted as well.

Pure: the caller lists the nodes as they are now (their free resources net of what
running tasks reserve) and passes them in; an empty list (the manager did not answer)
still gives an explanation, from the node as the plan saw it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodus_cli.targets.base import Pending, PendingKind
from nodus_cli.targets.cluster.resources import memory_gb
from nodus_cli.targets.swarm.api import GPU_KIND
from nodus_cli.text import plural

if TYPE_CHECKING:
    from nodus_cli.targets.swarm.nodes import Node
    from nodus_cli.workload import Stage

__all__ = ["explain"]

_GIVE_UP = "Ctrl-C to give up."
#: After an explanation of resources that other tasks hold.
_RELEASED = f" It starts when they are released; {_GIVE_UP}"


def explain(stage: Stage, node: Node | None, err: str | None, nodes: list[Node]) -> Pending:
    """Why ``stage``'s task, pinned to ``node`` (None: a fan-out task), is not running.

    ``err`` is Swarm's reason, if any; ``nodes`` the cluster's nodes now."""
    req = stage.requirements
    current = {n.id: n for n in nodes}
    head = f"stage {stage.name}: submitted, none running"
    said = f" (Swarm: {err})" if err else ""
    if node is None:
        usable = [n for n in current.values() if n.usable]
        if req.wants_gpu:
            free = sum(n.free_gpus for n in usable if n.gpu == (req.gpu or n.gpu))
            return Pending(
                PendingKind.RESOURCES,
                f"{head}{said}: every node that can run it is busy "
                f"({plural(free, 'matching GPU')} "
                "free now); tasks start as others finish." + _RELEASED,
            )
        return Pending(
            PendingKind.SCHEDULING, f"{head}{said}: waiting for Swarm to place it." + _RELEASED
        )
    here = current.get(node.id, node)
    if node.id not in current and current:
        return Pending(
            PendingKind.NODE_UNAVAILABLE, f"{head}{said}: node {node.key} has left the cluster"
        )
    if not here.usable:
        return Pending(
            PendingKind.NODE_UNAVAILABLE,
            f"{head}{said}: node {here.key} is {here.state}"
            + (f" ({here.availability})" if here.availability != "active" else "")
            + f"; it runs when the node is ready and active again. {_GIVE_UP}",
        )
    pool = list(current.values()) or [here]
    if req.wants_gpu:
        matching = [
            n
            for n in pool
            if n.usable
            and n.gpu == here.gpu
            and (req.peak_memory_gb is None or (n.gpu_memory_gb or 0) >= req.peak_memory_gb)
        ]
        if here.gpus < req.gpu_count:
            declared = (
                f"declares {here.gpus} {GPU_KIND} generic resources"
                if here.gpus
                else f"declares no {GPU_KIND} generic resources"
            )
            return Pending(
                PendingKind.OTHER,
                f"{head}{said}: it reserves {req.gpu_count} {GPU_KIND} and node {here.key} "
                f"{declared} (dockerd's node-generic-resources); it cannot start there "
                f"until the node declares its GPUs (`nodus swarm init-node`). {_GIVE_UP}",
            )
        if here.free_gpus < req.gpu_count:
            best = max(matching, key=lambda n: (n.free_gpus, n.gpus), default=here)
            return Pending(
                PendingKind.RESOURCES,
                f"{head}{said}: it needs {req.gpu_count} free {here.gpu} "
                f"{'GPU' if req.gpu_count == 1 else 'GPUs'} and no "
                f"node has them now; the largest matching capacity is {best.free_gpus} free "
                f"of {best.gpus} on {best.key} (the rest are reserved by other tasks)." + _RELEASED,
            )
    if here.free_cpus < req.cpu:
        best = max(pool, key=lambda n: n.free_cpus)
        return Pending(
            PendingKind.RESOURCES,
            f"{head}{said}: it reserves {req.cpu:g} CPUs and {here.key} has "
            f"{here.free_cpus:g} free now; the largest free is {best.free_cpus:g} on "
            f"{best.key}." + _RELEASED,
        )
    memory = memory_gb(req.cpu, req.memory_gb)
    if here.free_memory_gb < memory:
        best = max(pool, key=lambda n: n.free_memory_gb)
        return Pending(
            PendingKind.RESOURCES,
            f"{head}{said}: it reserves {memory:g} GB of memory and {here.key} has "
            f"{here.free_memory_gb:g} GB free now; the largest free is "
            f"{best.free_memory_gb:g} GB on {best.key}." + _RELEASED,
        )
    return Pending(
        PendingKind.SCHEDULING,
        f"{head}{said}: waiting for Swarm to place it on {here.key}. {_GIVE_UP}",
    )
