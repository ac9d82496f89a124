"""Machine IDs: what a supplier's machine type carries, from the embedded catalog.

A workload that names a machine ID where a GPU model belongs (``gpu = "p4d.24xlarge"``),
``nodus gpus p4d.24xlarge`` and a Swarm node labelled with its machine type are answered
from the embedded catalog: the GPU set-ups each machine ID comes with. Only the embedded
catalog: what a machine type is does not depend on which prices are in use.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from nodus_cli.catalog.files import embedded
from nodus_cli.catalog.model import Offer
from nodus_cli.hardware import gpus

__all__ = ["describe_machine", "find_machine", "machine_configurations"]


@cache
def _machines() -> dict[str, tuple[Offer, ...]]:
    """Embedded catalog offers by lower-case machine ID, one per distinct GPU set-up."""
    found: dict[str, dict[tuple[Any, ...], Offer]] = {}
    for offer in embedded().offers:
        setups = found.setdefault(offer.machine_id.lower(), {})
        key = (offer.supplier, offer.gpu, offer.gpu_count, offer.gpu_memory_gb)
        setups.setdefault(key, offer)
    return {k: tuple(v.values()) for k, v in found.items()}


def machine_configurations(machine_id: str) -> tuple[Offer, ...]:
    """The GPU set-ups a machine ID has in the embedded catalog (several for GCP's n1
    types, which take different attached GPUs); empty when unknown."""
    return _machines().get(machine_id.strip().lower(), ())


def find_machine(machine_id: str) -> Offer | None:
    """The offer of a machine ID (case-insensitive) when it has one GPU set-up, else None."""
    setups = machine_configurations(machine_id)
    return setups[0] if len(setups) == 1 else None


def describe_machine(machine_id: str) -> str | None:
    """For a machine ID written where a GPU model belongs: what it carries and how to
    write that (None when the catalog does not know the ID)."""
    setups = [o for o in machine_configurations(machine_id) if o.gpu is not None]
    if not setups:
        return None
    first = setups[0]
    if len(setups) == 1:
        family = gpus.table().get(first.gpu or "")
        memory = f", peak_memory_gb = {first.gpu_memory_gb:g}" if len(family.memory_gb) > 1 else ""
        return (
            f'"{machine_id}" is a machine ID ({first.supplier}), not a GPU model; it carries '
            f"{first.gpu_count}× {first.gpu} ({first.gpu_memory_gb:g} GB each): write "
            f'gpu = "{first.gpu}", gpu_count = {first.gpu_count}{memory}'
        )
    carried = ", ".join(
        f"{o.gpu_count}× {o.gpu} ({o.gpu_memory_gb:g} GB)"
        for o in sorted(setups, key=lambda o: (o.gpu or "", o.gpu_count))
    )
    return (
        f'"{machine_id}" is a machine ID ({first.supplier}), not a GPU model; it comes with '
        f'different GPUs attached: {carried}. Write the model and count, e.g. gpu = "{first.gpu}", '
        f"gpu_count = {first.gpu_count}"
    )
