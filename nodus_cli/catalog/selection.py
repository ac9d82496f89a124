"""Which catalog is in use: the policy, in one place.

First match wins: ``--catalog FILE.csv`` (the ``path`` argument), ``NODUS_CATALOG``, the
catalog ``nodus catalog update`` stored under ``NODUS_HOME``
(:mod:`nodus_cli.catalog.store`), the embedded one (:mod:`nodus_cli.catalog.files`). This
module sits above both: neither the files nor the store know about the other.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from nodus_cli.catalog import store
from nodus_cli.catalog.files import embedded, load_user_catalog
from nodus_cli.catalog.model import Catalog

__all__ = ["load"]


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
        return stored.catalog
    return embedded()
