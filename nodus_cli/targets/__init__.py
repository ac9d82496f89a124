"""Targets: where tasks run. One driver (:mod:`nodus_cli.run.driver`) runs every target.

:data:`REGISTRY` maps a target's name to the class that implements
:class:`~nodus_cli.targets.base.Target`, as ``"module:Class"`` so that choosing a target
imports only that target (the local target never loads the Swarm code, and neither loads
the Docker SDK before it connects). A new target is one module and one line here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from nodus_cli.errors import UsageError

if TYPE_CHECKING:
    from nodus_cli.records import RunStore
    from nodus_cli.targets.base import Pulls, Target

#: Plain names, so that reading the registry (every ``--target`` option does) imports no
#: target code at all.
REGISTRY: dict[str, str] = {
    "local": "nodus_cli.targets.local:LocalTarget",
    "swarm": "nodus_cli.targets.swarm:SwarmTarget",
    "slurm": "nodus_cli.targets.slurm:SlurmTarget",
    "kubernetes": "nodus_cli.targets.kubernetes:KubernetesTarget",
}


def names() -> list[str]:
    return list(REGISTRY)


def owns_jobs(name: str) -> bool:
    """Whether the target called ``name`` runs jobs that outlive nodus
    (:attr:`~nodus_cli.targets.base.Target.owns_jobs`); False for an unknown name."""
    where = REGISTRY.get(name)
    if where is None:
        return False
    module, _, attribute = where.partition(":")
    return bool(getattr(importlib.import_module(module), attribute).owns_jobs)


def get(
    name: str, store: RunStore, catalog: str | None = None, pulls: Pulls | None = None
) -> Target:
    """An instance of the target called ``name`` (UsageError for an unknown name);
    ``pulls`` shows its image pulls (default: a line on stderr)."""
    where = REGISTRY.get(name)
    if where is None:
        raise UsageError(
            f"unknown target {name!r}: nodus runs on {', '.join(REGISTRY)}",
            hint="--target local (this machine), --target swarm (a Docker Swarm cluster), "
            "--target slurm (a Slurm cluster, from its login node) or --target kubernetes "
            "(a Kubernetes cluster, from your kubeconfig)",
        )
    module, _, attribute = where.partition(":")
    cls: type[Target] = getattr(importlib.import_module(module), attribute)
    target = cls(store, catalog)
    if pulls is not None:
        target.pulls = pulls
    return target
