"""Inventories: what a plan was made against (SPEC section 4's ``catalog``, ``local`` and
``swarm``), and what the plan must say about it.

``catalog`` is the market (quotes only: the catalog in use), ``local`` this machine,
``swarm`` each node of the cluster. All of them are lists of
:class:`~nodus_cli.catalog.Offer`, so the planner ranks them the same way; the inventory
only says where the offers come from, and for a catalog how old its prices are. Who
gathers the offers is not planning's business: the API asks the catalog or a target and
hands the result in.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nodus_cli import config
from nodus_cli.catalog import USER_FILE, Catalog, Offer
from nodus_cli.structs import struct
from nodus_cli.text import plural

__all__ = ["Inventory"]


@struct(frozen=True)
class Inventory:
    name: str
    offers: tuple[Offer, ...]
    source: str | None = None
    #: The catalog the offers come from (``catalog`` target): its date, for staleness.
    catalog: Catalog | None = None

    def describe(self) -> str:
        where = f"{self.source}, " if self.source else ""
        return f"{where}{plural(len(self.offers), 'configuration')}"

    def stale_warning(self, now: datetime | None = None) -> str | None:
        """Words for catalog prices older than ``[catalog] max_age_days``, or None."""
        cat = self.catalog
        if cat is None:
            return None
        age = cat.age_days(now)
        limit = config.catalog().max_age_days
        if age is None or age <= limit:
            return None
        days = f"{age:.0f} day{'' if round(age) == 1 else 's'}" if age >= 1 else f"{age * 24:.1f} h"
        what = f"the prices in use ({cat.label}) are {days} old, more than max_age_days = {limit:g}"
        if cat.kind == USER_FILE:
            return (
                f"{what}: refresh {cat.path}, or drop {cat.chosen_by} and run "
                "`nodus catalog update` to fetch current prices"
            )
        return f"{what}: run `nodus catalog update` to fetch current prices"

    def catalog_json(self, now: datetime | None = None) -> dict[str, Any] | None:
        """The catalog planned against, as ``plan --json`` gives it (None: not a catalog)."""
        cat = self.catalog
        if cat is None:
            return None
        age = cat.age_days(now)
        limit = config.catalog().max_age_days
        return {
            "name": cat.name,
            "kind": cat.kind,
            "label": cat.label,
            "path": cat.path,
            "chosen_by": cat.chosen_by,
            "prices_as_of": cat.meta.get("prices_as_of"),
            "age_days": round(age, 3) if age is not None else None,
            "max_age_days": limit,
            "stale": age is not None and age > limit,
        }
