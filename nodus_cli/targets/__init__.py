"""Targets: where tasks run. One driver (:mod:`nodus_cli.run.driver`) runs every target.

:data:`REGISTRY` maps a target's name to the class that implements
:class:`~nodus_cli.targets.base.Target`, as ``"module:Class"`` so that choosing a target
imports only that target (the local target never loads the Swarm code, and neither loads
the Docker SDK before it connects). A new target is one module and one line here: the
``--target`` choices, their completion and the hints that list the targets
(:func:`choices`, from each target's ``description``) are read from it.
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


def _class(where: str) -> type[Target]:
    module, _, attribute = where.partition(":")
    cls: type[Target] = getattr(importlib.import_module(module), attribute)
    return cls


def owns_jobs(name: str) -> bool:
    """Whether the target called ``name`` runs jobs that outlive nodus
    (:attr:`~nodus_cli.targets.base.Target.owns_jobs`); False for an unknown name."""
    where = REGISTRY.get(name)
    if where is None:
        return False
    return bool(_class(where).owns_jobs)


def choices() -> str:
    """Every target as a hint names it, from the registry and each target's
    ``description``: ``--target local (this machine), ... or --target slurm (...)``.
    Imports every target: for a message, never on a command's way."""
    said = [f"--target {name} ({_class(where).description})" for name, where in REGISTRY.items()]
    return said[0] if len(said) == 1 else ", ".join(said[:-1]) + " or " + said[-1]


def get(
    name: str, store: RunStore, catalog: str | None = None, pulls: Pulls | None = None
) -> Target:
    """An instance of the target called ``name`` (UsageError for an unknown name);
    ``pulls`` shows its image pulls (default: a line on stderr)."""
    where = REGISTRY.get(name)
    if where is None:
        raise UsageError(
            f"unknown target {name!r}: nodus runs on {', '.join(REGISTRY)}", hint=choices()
        )
    target = _class(where)(store, catalog)
    if pulls is not None:
        target.pulls = pulls
    return target
