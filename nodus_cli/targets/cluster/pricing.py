"""A node's GPU model and its price, as a cluster declares them.

Contract: :func:`gpu_model` reads the model a node's declaration names (a Swarm node's
``nodus.gpu`` label, a Slurm node's GRES type) through the one GPU table
(:mod:`nodus_cli.hardware.gpus`), never guessed: a memory variant (``a100_80gb``) names
its memory, a family (``h100``) its smallest; a name the table does not know is no
model. :func:`models_listed` tells a name that lists several models ("L4, T4") from one
that names none. :func:`node_price` is a node's price per hour: the one it declares
(a label, the configuration), else the catalog's price of the machine it says it is (the
row of its region when the catalog lists one, else the lowest), else not set, with where
it came from in words; :func:`price_notes` says it where a plan explains prices,
:func:`price_details` beside a node's figure in ``nodus nodes``,
:func:`unpriced_notes` before a run that may land where no price is set, and
:func:`priced_config` in the configuration a task's record keeps; :func:`number` reads a
declared figure (a label is text) or None.

"Not set" is not 0: a declared 0 is a node you do not pay for, while a node with no price
is priced 0 only because nothing better is known, and says so (:data:`NOT_SET`,
:attr:`NodePrice.known`) so that what shows it can say "price not set" and how to set one.

Why here: every cluster target names its nodes' GPUs and prices the same way, and a
model or a price read differently by two targets would plan one workload two ways.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nodus_cli import catalog
from nodus_cli.catalog import Offer
from nodus_cli.hardware import gpus
from nodus_cli.records.model import PRICE_KNOWN
from nodus_cli.structs import struct

if TYPE_CHECKING:
    from nodus_cli.planning.plan import Plan

__all__ = [
    "NOT_SET",
    "GpuModel",
    "NodePrice",
    "catalog_price",
    "gpu_model",
    "models_listed",
    "node_price",
    "number",
    "price_details",
    "price_notes",
    "priced_config",
    "unpriced_notes",
]

#: Nodes a note names before it counts the rest.
_NAMED = 5


@struct(frozen=True)
class GpuModel:
    """The GPU model a name declares (None: the table knows no such model) and the
    memory of one of its GPUs (None: unknown)."""

    name: str | None
    memory_gb: float | None


#: The source of a node's price when nothing declares one and the catalog has none.
NOT_SET = "not set"


@struct(frozen=True)
class NodePrice:
    """A node's price per hour and where it comes from, in words (:data:`NOT_SET`: 0)."""

    per_hour: float
    source: str

    @property
    def known(self) -> bool:
        """Whether something sets the price (a declared 0 is known; not set is not)."""
        return self.source != NOT_SET


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


def catalog_price(
    machine_id: str, catalog_path: str | None, region: str | None = None
) -> float | None:
    """The catalog price of the machine ``machine_id`` (any case) in ``region`` when the
    catalog lists it there, else its lowest; None: unlisted."""
    found = _catalog_row(machine_id, catalog_path, region)
    return found[0] if found is not None else None


def _catalog_row(
    machine_id: str, catalog_path: str | None, region: str | None
) -> tuple[float, bool] | None:
    """The price :func:`catalog_price` gives, and whether it is ``region``'s own."""
    rows = [
        (o.region, o.price_per_hour)
        for o in catalog.load(catalog_path).offers
        if o.machine_id.lower() == machine_id.lower()
    ]
    there = [price for where, price in rows if region and where == region]
    if there:
        return min(there), True
    return (min(price for _, price in rows), False) if rows else None


def node_price(
    declared: float | None,
    declared_by: str,
    machine_id: str | None = None,
    catalog_path: str | None = None,
    region: str | None = None,
) -> NodePrice:
    """A node's price: ``declared`` (not negative; ``declared_by`` says where), else the
    catalog price of ``machine_id`` (in ``region`` when listed there, else its lowest),
    else 0, :data:`NOT_SET`."""
    if declared is not None and declared >= 0:
        return NodePrice(declared, declared_by)
    if machine_id:
        found = _catalog_row(machine_id, catalog_path, region)
        if found is not None:
            source = f"catalog price of {machine_id}"
            if found[1]:
                source += f" in {region}"
            elif region:
                source += f" (its lowest: the catalog does not list it in {region})"
            return NodePrice(found[0], source)
    return NodePrice(0.0, NOT_SET)


def price_notes(prices: Sequence[tuple[str, NodePrice]], hint: str) -> list[str]:
    """What a plan says of its nodes' prices (each node's name and price): those that are
    the catalog's, by where they come from, and those not set, with how to set them
    (``hint``). A price the configuration or a label declares needs no word."""
    by_source: dict[str, list[str]] = {}
    for name, price in prices:
        if price.source.startswith("catalog") or not price.known:
            by_source.setdefault(price.source, []).append(name)
    notes = []
    for source, names in by_source.items():
        nodes = f"{'node' if len(names) == 1 else 'nodes'} {_listed(names)}"
        if source == NOT_SET:
            notes.append(
                f"price not set for {nodes}: $/h shows $0.00, and what a run there costs is "
                f"unknown (recorded as $0.00): {hint}"
            )
        else:
            notes.append(f"{nodes}: $/h is the {source}")
    return notes


def price_details(price: NodePrice, hint: str) -> dict[str, str]:
    """What ``nodus nodes`` shows of a node's price beside its figure: where it comes
    from (``price_source``) and, when none is set, how to set one (``price_hint``)."""
    return {"price_source": price.source, **({} if price.known else {"price_hint": hint})}


def priced_config(offer: Offer, price: NodePrice) -> dict[str, Any]:
    """The configuration a task's record keeps (``Started.config``): the node as an offer,
    where its price comes from, and whether one is set (a cost on a node whose price is
    not set is unknown, not 0: :data:`~nodus_cli.records.model.PRICE_KNOWN`)."""
    return {**offer._asdict(), "price_source": price.source, PRICE_KNOWN: price.known}


def unpriced_notes(plan: Plan, prices: Mapping[str, NodePrice], hint: str) -> tuple[str, ...]:
    """What a run says before it starts of the nodes the plan may place it on (its
    stages' candidates; ``prices`` by node name) whose price is not set: what it costs
    there is unknown."""
    names = dict.fromkeys(c.offer.machine_id for sp in plan.stages for c in sp.candidates)
    unpriced = [(n, prices[n]) for n in names if n in prices and not prices[n].known]
    return tuple(price_notes(unpriced, hint))


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown if len(names) <= _NAMED else f"{shown} and {len(names) - _NAMED} more"


def number(text: str | None) -> float | None:
    """A declared figure (a label's text) as a finite number; None when it is not one."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
