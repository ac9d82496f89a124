"""A request no node of a cluster can meet, refused before anything is submitted.

Every cluster target plans against its nodes and, when a stage fits none of them, refuses
the run in ``prepare`` with the same words: which stage, why (the planner's explanation),
the nearest fit, and each node the plan left out with the reason (the target's own
exclusions), and how to look at the nodes. Written once here so the targets say it alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from nodus_cli.errors import NotRunnable

if TYPE_CHECKING:
    from nodus_cli.planning.plan import Plan

__all__ = ["refuse_unplaceable"]


def refuse_unplaceable(
    plan: Plan, cluster: str, target: str, exclusions: Callable[[], list[str]]
) -> None:
    """Raise :class:`NotRunnable` for the first stage of ``plan`` no node can run: ``cluster``
    names the cluster in words ("the Slurm cluster"), ``target`` the ``--target`` name,
    ``exclusions`` gives one line per node left out and why (asked only when refusing)."""
    for sp in plan.stages:
        if sp.feasible:
            continue
        lines = exclusions()
        if sp.nearest:
            near = sp.nearest[0].offer
            gpus = f"{near.gpu_count}× {near.gpu}" if near.gpu else "no GPU"
            lines.insert(
                0,
                f"nearest fit: node {near.machine_id} ({gpus}, {near.vcpus:g} CPUs, "
                f"{near.memory_gb:.3g} GB)",
            )
        detail = "".join(f"\n  {line}" for line in lines)
        raise NotRunnable(
            f"no node of {cluster} can run stage {sp.name!r}: "
            f"{(sp.explanation or 'no eligible node').replace('configuration', 'node')}" + detail,
            hint=f"`nodus nodes --target {target}` shows what each node holds",
        )
