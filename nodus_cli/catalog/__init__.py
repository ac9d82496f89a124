"""The market catalog: machine configurations with public hourly prices.

Which catalog is in use, first match wins: ``--catalog FILE.csv``, ``NODUS_CATALOG``, the
catalog ``nodus catalog update`` stored under ``NODUS_HOME``, the embedded one
(:func:`load`). ``from nodus_cli import catalog`` gives the names below; the modules, lowest
first (a module imports only those above it in this list):

- :mod:`~nodus_cli.catalog.model` — :class:`Offer`, :class:`Catalog`, :class:`CatalogError`;
- :mod:`~nodus_cli.catalog.rows` — the rules of a catalog row (:func:`check`), one for
  every file nodus reads, and the canonical GPU name and memory of a supplier's spelling;
- :mod:`~nodus_cli.catalog.formats` — the file formats ``nodus catalog update`` reads,
  behind one interface (``formats/nodus.py``; ``formats/skypilot/``, a package: reading
  the rows fast, what a row's machine is, GCP's hosts and GPUs);
- :mod:`~nodus_cli.catalog.files` — the embedded catalog, the files nodus writes and reads
  back, ``--catalog`` files;
- :mod:`~nodus_cli.catalog.store` — the catalog ``nodus catalog update`` keeps under
  ``NODUS_HOME``, replaced atomically;
- :mod:`~nodus_cli.catalog.selection` — which catalog is in use (above the files and the
  store, which do not know about each other);
- :mod:`~nodus_cli.catalog.machines` — machine IDs and the GPUs they carry;
- :mod:`~nodus_cli.catalog.sources` — the sources of ``nodus catalog update`` and fetching
  them (httpx, imported only there);
- :mod:`~nodus_cli.catalog.update` — ``nodus catalog update``: fetch, convert, check, store;
- :mod:`~nodus_cli.catalog.market` — what the catalog offers per GPU model (``nodus gpus``).

**A new catalog format** (another supplier's price file) is one module (or package) in
``nodus_cli/catalog/formats/`` with a ``FORMAT`` object (a ``name``, ``detect(header)`` and
``convert(text, supplier)``; the interface is :class:`nodus_cli.catalog.formats.Format`)
and one line in :data:`nodus_cli.catalog.formats.MODULES`. ``nodus catalog update``
recognises it by the file's first line, and its rows go through the same row rules, store
and reports as every other format's.
"""

from __future__ import annotations

from nodus_cli.catalog.files import embedded, embedded_path, load_user_catalog, read_canonical
from nodus_cli.catalog.machines import describe_machine, find_machine, machine_configurations
from nodus_cli.catalog.model import (
    EMBEDDED,
    HOST_SIZE_EXACT,
    HOST_SIZE_MINIMUM_VALUE,
    UPDATED,
    USER_FILE,
    Catalog,
    CatalogError,
    CatalogKind,
    Offer,
    whole,
)
from nodus_cli.catalog.rows import (
    COLUMNS,
    HOST_SIZE_MINIMUM,
    REQUIRED_COLUMNS,
    Cells,
    canonical_gpu,
    check,
    offer,
    parse_row,
)
from nodus_cli.catalog.selection import load

__all__ = [
    "COLUMNS",
    "EMBEDDED",
    "HOST_SIZE_EXACT",
    "HOST_SIZE_MINIMUM",
    "HOST_SIZE_MINIMUM_VALUE",
    "REQUIRED_COLUMNS",
    "UPDATED",
    "USER_FILE",
    "Catalog",
    "CatalogError",
    "CatalogKind",
    "Cells",
    "Offer",
    "canonical_gpu",
    "check",
    "describe_machine",
    "embedded",
    "embedded_path",
    "find_machine",
    "load",
    "load_user_catalog",
    "machine_configurations",
    "offer",
    "parse_row",
    "read_canonical",
    "whole",
]
