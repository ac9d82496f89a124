"""A node's GPU model and its price, as a cluster declares them.

Contract: :func:`gpu_model` reads the model a node's declaration names (a Swarm node's
``nodus.gpu`` label, a Slurm node's GRES type) through the one GPU table
(:mod:`nodus_cli.hardware.gpus`), never guessed: a memory variant (``a100_80gb``) names
its memory, a family (``h100``) its smallest; a name the table does not know is no
model. :func:`models_listed` tells a name that lists several models ("L4, T4") from one
that names none. :func:`node_price` is a node's price per hour: the one it declares
(a label, the configuration), else the catalog's price of the machine it says it is,
else 0 (not set), with where it came from in words; :func:`number` reads a declared
figure (a label is text) or None.

Why here: every cluster target names its nodes' GPUs and prices the same way, and a
model or a price read differently by two targets would plan one workload two ways.
"""

from __future__ import annotations

import math
import re

from nodus_cli import catalog
from nodus_cli.hardware import gpus
from nodus_cli.structs import struct

__all__ = [
    "GpuModel",
    "NodePrice",
    "catalog_price",
    "gpu_model",
    "models_listed",
    "node_price",
    "number",
]


@struct(frozen=True)
class GpuModel:
    """The GPU model a name declares (None: the table knows no such model) and the
    memory of one of its GPUs (None: unknown)."""

    name: str | None
    memory_gb: float | None


@struct(frozen=True)
class NodePrice:
    """A node's price per hour and where it comes from, in words ("not set": 0)."""

    per_hour: float
    source: str


def gpu_model(name: str | None) -> GpuModel:
    """The model ``name`` declares: a memory variant's (``a100_80gb``: A100, 80 GB), else
    a family's (``h100``: H100, the smallest memory it comes in); else no model."""
    if not name:
        return GpuModel(None, None)
    table = gpus.table()
    variant = table.variant(name)
    if variant is not None and variant.memory_gb:
        return GpuModel(variant.family.name, variant.memory_gb)
    family = variant.family if variant is not None else table.lookup(name)
    if family is None:
        return GpuModel(None, None)
    return GpuModel(family.name, family.nominal_memory(None))


def models_listed(name: str) -> list[str]:
    """The GPU models a name lists ("L4, T4", "L4/T4"), when every part is one; else []."""
    parts = [p for p in re.split(r"[,;/+&\s]+", name) if p]
    found = [gpus.table().lookup(p) for p in parts]
    if len(parts) < 2 or any(f is None for f in found):
        return []
    return list(dict.fromkeys(f.name for f in found if f is not None))


def catalog_price(machine_id: str, catalog_path: str | None) -> float | None:
    """The lowest catalog price of the machine ``machine_id`` (any case); None: unlisted."""
    prices = [
        o.price_per_hour
        for o in catalog.load(catalog_path).offers
        if o.machine_id.lower() == machine_id.lower()
    ]
    return min(prices) if prices else None


def node_price(
    declared: float | None,
    declared_by: str,
    machine_id: str | None = None,
    catalog_path: str | None = None,
) -> NodePrice:
    """A node's price: ``declared`` (not negative; ``declared_by`` says where), else the
    catalog price of ``machine_id``, else 0 ("not set")."""
    if declared is not None and declared >= 0:
        return NodePrice(declared, declared_by)
    if machine_id:
        found = catalog_price(machine_id, catalog_path)
        if found is not None:
            return NodePrice(found, f"catalog price of {machine_id}")
    return NodePrice(0.0, "not set")


def number(text: str | None) -> float | None:
    """A declared figure (a label's text) as a finite number; None when it is not one."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
