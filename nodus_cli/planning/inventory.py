"""Inventories: the configurations a stage can be planned against (SPEC section 4).

``catalog`` is the market (quotes only: the catalog in use, see :func:`catalog.load`),
``local`` is this machine, ``swarm`` is each node of the cluster. All of them are lists of
:class:`~nodus_cli.catalog.Offer`, so the planner ranks them the same way, under the same
configured price ceiling (``[limits] max_price_per_hour``, applied by the planner).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from nodus_cli.catalog import Catalog, Offer
from nodus_cli.errors import NodusError
from nodus_cli.planning.planner import RuntimeLookup, no_history
from nodus_cli.workload import Workload


@dataclass(frozen=True, slots=True)
class Inventory:
    name: str
    offers: tuple[Offer, ...]
    source: str | None = None
    #: The catalog the offers come from (``catalog`` target): its date, for staleness.
    catalog: Catalog | None = None

    def describe(self) -> str:
        where = f"{self.source}, " if self.source else ""
        n = len(self.offers)
        return f"{where}{n} configuration{'' if n == 1 else 's'}"

    def history(self, workload: Workload) -> RuntimeLookup:
        """Measured runtimes of this workload from the run records, when there are any.

        A missing or unreadable store means no measurements (ranking by hourly price),
        never a failed plan; the records module is only imported when a store exists.
        """
        from nodus_cli import config

        if not (config.home() / "runs.sqlite3").is_file():
            return no_history
        from nodus_cli import records

        try:
            store = records.open_store(create=False)
            return records.runtime_lookup(store, records.fingerprint(workload))
        except (NodusError, sqlite3.Error, OSError):
            return no_history


def for_target(target: str, catalog_path: str | None = None) -> Inventory:
    if target == "catalog":
        from nodus_cli import catalog

        cat = catalog.load(catalog_path)
        return Inventory("catalog", cat.offers, cat.label, cat)
    if target == "local":
        from nodus_cli.targets.local import machine

        return Inventory("local", machine.offers(), "this machine")
    if target == "swarm":
        from nodus_cli.targets import swarm

        return Inventory("swarm", swarm.offers(catalog_path), "the Swarm cluster's ready nodes")
    raise NodusError(f"unknown target {target!r}: use catalog, local or swarm", exit_code=2)
