"""Catalog files: the embedded catalog, the files nodus writes, and ``--catalog`` files.

- The embedded catalog (``data/catalog.csv``) is built by ``tools/build_catalog.py`` from
  the sourced ``tools/catalog/offers.csv`` of the source repository; ``catalog_meta.json``
  records its sources (repository, path, commit), the date its prices are as of and a short
  name. It is read once per process.
- Files nodus writes (the embedded catalog, the one ``nodus catalog update`` stores) hold
  rows already checked, as canonical text in :data:`~nodus_cli.catalog.rows.COLUMNS` order
  (:func:`write_rows`); they are read back without the checks (:func:`read_canonical`),
  since start-up cost matters: ``nodus plan`` is interactive.
- A user catalog (``--catalog FILE.csv``, ``NODUS_CATALOG``) has the SPEC section 4
  columns (:mod:`nodus_cli.catalog.formats.nodus`) and goes through the row rules of every
  catalog (:func:`nodus_cli.catalog.rows.check`): supplier GPU spellings are canonicalized
  on load the way the embedded catalog was built, and every bad row is reported with its
  line number.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from nodus_cli import data
from nodus_cli.catalog.model import (
    HOST_SIZE_MINIMUM_VALUE,
    Catalog,
    CatalogError,
    CatalogKind,
    Offer,
    Origin,
)
from nodus_cli.catalog.rows import COLUMNS, REQUIRED_COLUMNS, Cells, offer
from nodus_cli.text import plural

__all__ = [
    "embedded",
    "embedded_path",
    "load_user_catalog",
    "origins_of",
    "read_canonical",
    "write_rows",
]

#: Bad rows a user catalog's error quotes (the rest are counted).
BAD_ROWS_SHOWN = 20


def embedded_path() -> Path:
    return data.FOLDER / "catalog.csv"


@cache
def embedded() -> Catalog:
    """The catalog that ships with nodus, read once per process."""
    path = embedded_path()
    try:
        offers = read_canonical(path)
        meta = json.loads((data.FOLDER / "catalog_meta.json").read_text("utf-8"))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise CatalogError(
            f"the embedded catalog {path} cannot be read: {exc}",
            hint="reinstall nodus, or pass --catalog FILE.csv",
        ) from None
    where = {
        str(
            src.get("supplier")
        ): f"{src.get('repo')}@{str(src.get('commit'))[:12]} {src.get('path')}"
        for src in meta.get("sources") or []
    }
    origins = origins_of(offers, lambda supplier: ("embedded", where.get(supplier, str(path))))
    return Catalog(offers, str(path), meta, origins=origins)


def origins_of(
    offers: Iterable[Offer], source_of: Callable[[str], tuple[str, str]]
) -> tuple[Origin, ...]:
    """Per supplier of ``offers`` (in name order), its rows and where they come from."""
    counts = Counter(o.supplier for o in offers)
    return tuple(Origin(s, n, *source_of(s)) for s, n in sorted(counts.items()))


def read_canonical(path: Path) -> tuple[Offer, ...]:
    """The offers of a file nodus wrote itself (its columns found by name). Raises
    ValueError, KeyError, IndexError or OSError on a file it did not write."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = csv.reader(handle)
        header = next(rows)
        col = [header.index(c) for c in COLUMNS]
        s, m, r, g, n, gm, v, mem, d, a, p, sp, h = col
        return tuple(
            Offer(
                row[s],
                row[m],
                row[r],
                row[g] or None,
                int(row[n] or 0),
                float(row[gm] or 0),
                float(row[v] or 0),
                float(row[mem] or 0),
                float(row[d]) if row[d] else None,
                row[a] or "x86_64",
                float(row[p]),
                float(row[sp]) if row[sp] else None,
                row[h] == HOST_SIZE_MINIMUM_VALUE,
            )
            for row in rows
            if row
        )


def write_rows(rows: Iterable[Cells]) -> bytes:
    """Rows (canonical text) as a file nodus reads back with :func:`read_canonical`."""
    rows = list(rows)
    body = "\n".join(map(",".join, rows))
    # The csv module quotes a cell only when it holds a comma, a quote or a line break;
    # when no cell does (the whole text says so at once), joining the cells is its output.
    width = len(COLUMNS) - 1
    if (
        body.count(",") == width * len(rows)
        and '"' not in body
        and "\r" not in body
        and body.count("\n") == max(len(rows) - 1, 0)
    ):
        text = ",".join(COLUMNS) + "\n" + body + ("\n" if rows else "")
        return text.encode("utf-8")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(rows)
    return out.getvalue().encode("utf-8")


def load_user_catalog(path: Path) -> Catalog:
    """A catalog file with the SPEC section 4 columns; every bad row is reported by line.

    Rows with no on-demand price (spot only) are left out and counted in
    ``meta["dropped"]``; extra columns are ignored.
    """
    # Here: a plan on the embedded or updated catalog reads nodus's own rows, unchecked.
    from nodus_cli.catalog import formats
    from nodus_cli.catalog.formats import NO_ON_DEMAND_PRICE, FormatError
    from nodus_cli.catalog.formats import nodus as nodus_format

    columns = ",".join(REQUIRED_COLUMNS)
    try:
        body = path.read_bytes()
    except OSError as exc:
        raise CatalogError(
            f"{path}: cannot read the catalog: {exc.strerror or exc}",
            hint="check the path given to --catalog or NODUS_CATALOG",
        ) from None
    try:
        converted = nodus_format.FORMAT.convert(body.decode("utf-8-sig"), "")
    except UnicodeDecodeError as exc:
        raise CatalogError(
            f"{path}: not a readable CSV file: {exc}", hint="columns: " + columns
        ) from None
    except FormatError as exc:
        where = f"{path}:{exc.line}" if exc.line == 1 else str(path)
        hint = (
            "the first line names the columns: " + columns
            if exc.line == 1
            else "columns: " + columns
        )
        raise CatalogError(f"{where}: {exc.message}", hint=hint) from None
    checked = formats.check(converted)
    bad = checked.bad
    if bad:
        shown = "\n".join(f"{path}:{r.line}: {r.reason}" for r in bad[:BAD_ROWS_SHOWN])
        more = f"\n... and {len(bad) - BAD_ROWS_SHOWN} more" if len(bad) > BAD_ROWS_SHOWN else ""
        raise CatalogError(
            f"the catalog {path} has {plural(len(bad), 'bad row')}:\n{shown}{more}",
            hint=f"fix or remove these rows (columns: {columns})",
        )
    dropped = sum(1 for r in checked.refused if r.reason == NO_ON_DEMAND_PRICE)
    try:
        modified = datetime.fromtimestamp(path.stat().st_mtime, UTC).date().isoformat()
    except OSError:
        modified = None
    meta: dict[str, Any] = {
        "name": path.name,
        "built_from": str(path),
        "built_at": modified,
        "prices_as_of": modified,
        "as_of_note": "the day the file was last modified",
        "rows": len(checked.rows),
        "dropped": {NO_ON_DEMAND_PRICE: dropped} if dropped else {},
        "sources": [],
        "user_catalog": True,
    }
    offers = tuple(map(offer, checked.rows))
    origins = origins_of(offers, lambda supplier: (path.name, str(path)))
    return Catalog(
        offers, str(path), meta, kind=CatalogKind.USER_FILE, chosen_by="--catalog", origins=origins
    )
