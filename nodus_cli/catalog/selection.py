"""Which catalog is in use: the policy, in one place.

First match wins: ``--catalog FILE.csv`` (the ``path`` argument), ``NODUS_CATALOG``, the
catalog ``nodus catalog update`` stored under ``NODUS_HOME``
(:mod:`nodus_cli.catalog.store`), the embedded one (:mod:`nodus_cli.catalog.files`). This
module sits above both: neither the files nor the store know about the other.

A stored catalog holds the suppliers its sources carry. The embedded catalog supplies
every other supplier, unless the update that stored it replaced them all
(``nodus catalog update --replace``): :func:`updated`.
"""

from __future__ import annotations

import os
from pathlib import Path

from nodus_cli.catalog import store
from nodus_cli.catalog.files import embedded, load_user_catalog, origins_of
from nodus_cli.catalog.model import Catalog
from nodus_cli.structs import replace

__all__ = ["load", "updated"]


def load(path: str | None = None) -> Catalog:
    """The catalog in use: ``path`` (``--catalog``), else ``NODUS_CATALOG``, else the one
    ``nodus catalog update`` stored under ``NODUS_HOME``, else the embedded one."""
    if path:
        return replace(load_user_catalog(Path(path)), chosen_by="--catalog")
    env = os.environ.get("NODUS_CATALOG")
    if env:
        return replace(load_user_catalog(Path(env)), chosen_by="NODUS_CATALOG")
    stored = store.read()
    if stored is not None:
        return updated(stored)
    return embedded()


def updated(stored: store.Stored) -> Catalog:
    """A stored catalog as it is used: its sources' offers, and, unless it replaced them
    all, the embedded catalog's offers of every supplier no source carries."""
    cat = stored.catalog
    where = {
        supplier: (source.name, source.url)
        for source in stored.sources
        for supplier in source.suppliers
    }
    offers = cat.offers
    meta = dict(cat.meta)
    if stored.base == store.BASE_EMBEDDED:
        base = embedded()
        carried = {o.supplier for o in offers}
        kept = tuple(o for o in base.offers if o.supplier not in carried)
        if kept:
            offers = offers + kept
            base_where = {o.supplier: o.where for o in base.origins}
            for supplier in {o.supplier for o in kept}:
                where[supplier] = ("embedded", base_where.get(supplier, base.path))
            # The prices in use are as old as the oldest of them: the embedded ones too.
            day = base.as_of
            if day is not None and (cat.as_of is None or day < cat.as_of):
                meta["prices_as_of"] = day.isoformat()
                meta["checked_at"] = None
                meta["as_of_note"] = (
                    "the embedded catalog's date: it supplies the suppliers no source carries"
                )
        meta["embedded_suppliers"] = sorted({o.supplier for o in kept})
    meta["rows"] = len(offers)
    origins = origins_of(offers, lambda supplier: where.get(supplier, ("?", "?")))
    return replace(cat, offers=offers, meta=meta, origins=origins)
