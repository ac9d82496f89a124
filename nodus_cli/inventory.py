"""Inventories: the configurations a stage can be planned against (SPEC section 4).

``catalog`` is the market (quotes only), ``local`` is this machine, ``swarm`` is each
node of the cluster. All of them are lists of :class:`~nodus_cli.catalog.Offer`, so the
planner ranks them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodus_cli.catalog import Offer
from nodus_cli.planner import RuntimeLookup, no_history
from nodus_cli.problems import NodusError
from nodus_cli.workload import Workload


@dataclass(frozen=True, slots=True)
class Inventory:
    name: str
    offers: tuple[Offer, ...]

    def history(self, workload: Workload) -> RuntimeLookup:
        """Measured runtimes of this workload from the run records, when there are any."""
        from nodus_cli import records

        store = records.open_store(create=False)
        if store is None:
            return no_history
        return store.runtime_lookup(records.fingerprint(workload))


def for_target(target: str, catalog_path: str | None = None) -> Inventory:
    if target == "catalog":
        from nodus_cli import catalog

        return Inventory("catalog", catalog.load(catalog_path).offers)
    if target == "local":
        from nodus_cli import localhost

        return Inventory("local", localhost.offers())
    if target == "swarm":
        from nodus_cli import swarm

        return Inventory("swarm", swarm.offers(catalog_path))
    raise NodusError(f"unknown target {target!r}: use catalog, local or swarm", exit_code=2)
