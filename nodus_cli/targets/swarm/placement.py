"""Where a task goes on Swarm: the nodes a stage may use, how many of its tasks they hold,
and the constraints that pin a task to its node or keep it off the others.

nodus chooses the node of a stage (the plan's selected offer is a node: its machine id is
the node's key) and pins the stage's task there. It does not schedule a fan-out stage: its
tasks go unpinned, kept off the nodes the plan found ineligible by constraints, and Swarm
spreads them over the rest, reserving their GPUs as generic resources. Everything here is
pure: the nodes (as :func:`~nodus_cli.targets.swarm.nodes.list_nodes` saw them) are passed
in, and nothing calls the manager.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodus_cli.errors import NotRunnable
from nodus_cli.targets.cluster.resources import tasks_per_node
from nodus_cli.targets.swarm.api import LABEL_GPU, LABEL_GPU_MEMORY
from nodus_cli.targets.swarm.nodes import Node

if TYPE_CHECKING:
    from nodus_cli.planning.plan import Plan, StagePlan
    from nodus_cli.targets.docker.containers import ContainerSpec
    from nodus_cli.workload import Requirements, Stage, Workload

__all__ = [
    "by_id",
    "by_key",
    "capacity",
    "constraints_for",
    "eligible",
    "excluded",
    "sharing",
    "slots",
    "stage_node",
    "stage_plan",
]


def by_key(nodes: list[Node], key: str) -> Node:
    """The node a plan names (its host name, or host name and id); refused when gone."""
    for n in nodes:
        if n.key == key:
            return n
    raise NotRunnable(f"node {key} is no longer in the cluster")


def by_id(nodes: list[Node], node_id: str | None) -> Node | None:
    """The node of a Swarm node id (a task's ``NodeID``), if it is among ``nodes``."""
    for n in nodes:
        if n.id == node_id:
            return n
    return None


def eligible(plan: StagePlan) -> set[str]:
    """The keys of the nodes that can run the stage: the plan's candidates."""
    return {c.offer.machine_id for c in plan.candidates}


def excluded(nodes: list[Node], plan: StagePlan) -> list[Node]:
    """The nodes a fan-out stage's tasks must never go to: all but the eligible ones."""
    keys = eligible(plan)
    return [n for n in nodes if n.key not in keys]


def stage_plan(plan: Plan, stage: Stage) -> StagePlan:
    return next(p for p in plan.stages if p.name == stage.name)


def stage_node(plan: Plan, nodes: list[Node], stage: Stage) -> Node:
    """The node the plan chose for a stage (not fan-out: its tasks are Swarm's to place)."""
    for sp in plan.stages:
        if sp.name == stage.name and sp.selected is not None:
            return by_key(nodes, sp.selected.offer.machine_id)
    raise NotRunnable(f"stage {stage.name!r} has no node")


def slots(node: Node, req: Requirements) -> int:
    """How many tasks of these requirements ``node`` holds at once (its GPUs, else CPUs:
    :func:`~nodus_cli.targets.cluster.resources.tasks_per_node`).

    0 for a GPU task that needs more GPUs than the node declares."""
    return tasks_per_node(req, gpus=node.gpus, cpus=node.cpus)


def capacity(nodes: list[Node], stage: Stage, plan: StagePlan) -> int:
    """Tasks of a fan-out stage to submit at once: what the usable eligible nodes hold."""
    keys = eligible(plan)
    total = sum(slots(n, stage.requirements) for n in nodes if n.usable and n.key in keys)
    return max(1, total)


def sharing(plan: Plan, workload: Workload) -> dict[str, list[Stage]]:
    """The stages that share a work folder, by the key of their node: two or more placed
    on one node (a fan-out stage's tasks never share one)."""
    by_node: dict[str, list[Stage]] = {}
    for sp, stage in zip(plan.stages, workload.stages, strict=True):
        if sp.selected is not None and stage.map is None:
            by_node.setdefault(sp.selected.offer.machine_id, []).append(stage)
    return {key: stages for key, stages in by_node.items() if len(stages) >= 2}


def constraints_for(spec: ContainerSpec, node: Node | None, excluded: list[Node]) -> list[str]:
    """Pinned to ``node``; or, unpinned, never on the ``excluded`` nodes."""
    found: list[str] = []
    if node is not None:
        found.append(f"node.id=={node.id}")
        if spec.gpu_count:
            found.append(f"node.labels.{LABEL_GPU}=={node.labels.get(LABEL_GPU, node.gpu)}")
            if LABEL_GPU_MEMORY in node.labels:
                found.append(f"node.labels.{LABEL_GPU_MEMORY}=={node.labels[LABEL_GPU_MEMORY]}")
    found.extend(f"node.id!={n.id}" for n in excluded)
    return found
