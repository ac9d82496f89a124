"""The catalog's doors of the Python API: what the catalog offers (``gpus``, ``market``),
which catalog is in use and why (``catalog_in_use``), and refreshing its prices from their
sources (``catalog_sources``, ``update_catalog``). :class:`~nodus_cli.api.client.Client`
has these methods (it is a :class:`CatalogDoors`); ``nodus gpus`` and ``nodus catalog``
render what they return.

Why a module of its own: the catalog is a concept apart from running (no records, no
target); its methods are kept whole here so that the client's module stays about runs.

Imports stand inside the methods that need them: the package docstring says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_cli.errors import NodusError
from nodus_cli.structs import struct

if TYPE_CHECKING:
    from nodus_cli.catalog import Catalog
    from nodus_cli.catalog.market import Market
    from nodus_cli.catalog.sources import Source
    from nodus_cli.catalog.update import UpdateProgress, UpdateResult

__all__ = ["CatalogDoors", "CatalogInUse"]


@struct(frozen=True)
class CatalogInUse:
    """The catalog in use, and what to say about it (``nodus catalog``)."""

    catalog: Catalog
    #: How old its prices may be before a plan warns (``[catalog] max_age_days``).
    max_age_days: float
    #: How old its prices are, in days (None: not known).
    age_days: float | None
    #: Its suppliers whose vCPU and memory are minimums, not sizes, and why.
    host_size_minimum: dict[str, str]
    #: Where ``nodus catalog update`` keeps the catalog it stored.
    folder: Path

    @property
    def stale(self) -> bool:
        """Whether its prices are older than ``max_age_days``."""
        return self.age_days is not None and self.age_days > self.max_age_days


class CatalogDoors:
    """The catalog methods of :class:`~nodus_cli.api.client.Client`."""

    @property
    def catalog(self) -> str | None:
        """The catalog file it plans with (None: the catalog in use)."""
        raise NotImplementedError

    def catalog_in_use(self) -> CatalogInUse:
        """Which catalog is in use (``catalog``, else ``NODUS_CATALOG``, else the one
        :meth:`update_catalog` stored, else the embedded one), and how old its prices are."""
        from nodus_cli import catalog, config
        from nodus_cli.catalog import store

        cat = catalog.load(self.catalog)
        suppliers = {o.supplier for o in cat.offers}
        minimums = {s: why for s, why in catalog.HOST_SIZE_MINIMUM.items() if s in suppliers}
        max_age = config.catalog().max_age_days
        return CatalogInUse(cat, max_age, cat.age_days(), minimums, store.folder())

    def catalog_sources(self, given: Sequence[str] | None = None) -> list[Source]:
        """The price sources an update fetches: ``given`` (URLs, paths from the working
        folder, ``NAME=URL``), else ``[catalog] sources`` in config.toml. NodusError (exit
        2) names a source that is not one, or says there are none."""
        from nodus_cli import config
        from nodus_cli.catalog import sources as catalog_sources

        if given:
            entries = []
            for text in given:
                try:
                    entries.append(config.parse_source(text))  # a path: from the working folder
                except ValueError as exc:
                    raise NodusError(f"SOURCE {text!r}: {exc}", exit_code=2) from None
        else:
            entries = list(config.catalog().sources)
        if not entries:
            raise NodusError(
                "no sources to update from: give SOURCE URLs, or list them in [catalog] "
                f"sources in {config.config_path()}",
                exit_code=2,
                hint='e.g. sources = ["https://raw.githubusercontent.com/skypilot-org/'
                'skypilot-catalog/master/catalogs/v7/aws/vms.csv"]',
            )
        return catalog_sources.resolve(entries)

    def update_catalog(
        self,
        sources: Sequence[Source] | None = None,
        *,
        timeout: float | None = None,
        retries: int = 3,
        replace: bool = False,
        reporter: UpdateProgress | None = None,
    ) -> UpdateResult:
        """Fetch current prices from ``sources`` (default: :meth:`catalog_sources`) and make
        them the catalog in use, all or nothing: each source refreshes the suppliers it
        carries, or with ``replace`` they become the whole catalog. ``timeout``: seconds one
        source may take, retries included (default: ``[catalog] timeout``). A source that
        fails raises :class:`~nodus_cli.catalog.sources.SourceError` naming it, and the
        catalog in use stays as it was."""
        from nodus_cli import config
        from nodus_cli.catalog import update

        chosen = self.catalog_sources() if sources is None else list(sources)
        seconds = config.catalog().timeout if timeout is None else timeout
        return update.update(
            chosen, timeout=seconds, retries=retries, reporter=reporter, replace=replace
        )

    def gpus(self, name: str | None = None) -> list[dict[str, Any]]:
        """The GPU models with their offers and lowest prices in the catalog."""
        from nodus_cli.catalog import market

        return market.gpu_summaries(name, catalog_path=self.catalog)

    def market(
        self,
        name: str | None = None,
        *,
        supplier: str | None = None,
        location: str | None = None,
        count: int | None = None,
    ) -> Market:
        """What the catalog offers: every GPU model cheapest per GPU-hour first, or one
        model's offers (``name``), filtered by supplier, location and GPU count."""
        from nodus_cli.catalog import market

        return market.survey(name, supplier, location, count, self.catalog)
