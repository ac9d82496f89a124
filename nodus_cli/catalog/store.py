"""The catalog ``nodus catalog update`` keeps under ``NODUS_HOME``, and how it is replaced.

Layout (the folder 0700, every file 0600: prices and source URLs are the user's own)::

    NODUS_HOME/catalog/current.json        the commit point: which offers file is in use,
                                           whether the embedded catalog supplies the
                                           suppliers no source carries ("base"), and per
                                           source its URL, suppliers, format, fetched_at,
                                           checked_at, ETag/Last-Modified, rows (and where
                                           they sit in the offers file), refused rows
    NODUS_HOME/catalog/offers-<hash>.csv   the offers in the embedded catalog's columns,
                                           source after source

Replacing it (:func:`replace_catalog`): the offers are written to a temporary file in the
same folder, fsynced and renamed (``os.replace``) to a name of their own that nothing uses
yet; then ``current.json`` is written the same way. Its rename is the moment the new
catalog is in use, so any failure before it leaves the catalog in use untouched, byte for
byte; what an interrupted update leaves behind (a temporary or unreferenced offers file)
is removed by the next update.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from collections.abc import Iterator, Sequence
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

from nodus_cli import config
from nodus_cli.catalog.files import read_canonical, write_rows
from nodus_cli.catalog.model import Catalog, CatalogError, CatalogKind, Offer
from nodus_cli.catalog.rows import COLUMNS, Cells
from nodus_cli.structs import field, struct

FOLDER = "catalog"
CURRENT = "current.json"
#: Version of current.json's layout.
FORMAT = 1
#: ``base`` of current.json: the embedded catalog supplies every supplier no stored source
#: carries, or nothing does (``nodus catalog update --replace``; also a current.json
#: written before ``base`` existed, when an update replaced everything).
BASE_EMBEDDED = "embedded"
BASE_NONE = "none"


def folder() -> Path:
    return config.home() / FOLDER


def current_path() -> Path:
    return folder() / CURRENT


@struct
class StoredSource:
    """What current.json records of one source."""

    name: str
    url: str
    format: str
    suppliers: list[str]
    fetched_at: str
    checked_at: str
    etag: str | None = None
    last_modified: str | None = None
    rows: int = 0
    bad_rows: int = 0
    bad_row_examples: list[str] = field(default_factory=list)
    #: Configurations left out (not bad rows) by reason.
    skipped: dict[str, int] = field(default_factory=dict)
    #: "fetched" (200) or "not modified" (304: the previous rows were kept).
    last_result: str = "fetched"
    #: The file's data rows, and those no configuration came from.
    rows_read: int = 0
    rows_refused: int = 0
    configurations_refused: int = 0
    #: The refused rows by reason: reason, bad, configurations, rows, lines.
    refused: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.url,
            "format": self.format,
            "supplier": ", ".join(self.suppliers),
            "suppliers": list(self.suppliers),
            "fetched_at": self.fetched_at,
            "checked_at": self.checked_at,
            "etag": self.etag,
            "last_modified": self.last_modified,
            "rows": self.rows,
            "bad_rows": self.bad_rows,
            "bad_row_examples": list(self.bad_row_examples),
            "skipped": dict(self.skipped),
            "last_result": self.last_result,
            "rows_read": self.rows_read,
            "rows_used": self.rows_read - self.rows_refused,
            "rows_refused": self.rows_refused,
            "configurations_refused": self.configurations_refused,
            "refused": [dict(r) for r in self.refused],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> StoredSource:
        return cls(
            name=str(doc["name"]),
            url=str(doc["url"]),
            format=str(doc.get("format") or "?"),
            suppliers=[str(s) for s in doc.get("suppliers") or []],
            fetched_at=str(doc["fetched_at"]),
            checked_at=str(doc.get("checked_at") or doc["fetched_at"]),
            etag=doc.get("etag"),
            last_modified=doc.get("last_modified"),
            rows=int(doc.get("rows") or 0),
            bad_rows=int(doc.get("bad_rows") or 0),
            bad_row_examples=[str(x) for x in doc.get("bad_row_examples") or []],
            skipped={str(k): int(v) for k, v in (doc.get("skipped") or {}).items()},
            last_result=str(doc.get("last_result") or "fetched"),
            rows_read=int(doc.get("rows_read") or 0),
            rows_refused=int(doc.get("rows_refused") or 0),
            configurations_refused=int(doc.get("configurations_refused") or 0),
            refused=[dict(r) for r in doc.get("refused") or []],
        )


@struct(frozen=True)
class Stored:
    """The stored catalog: its sources and each source's offers."""

    catalog: Catalog
    sources: list[StoredSource]
    offers_by_source: dict[str, list[Offer]]
    #: BASE_EMBEDDED or BASE_NONE.
    base: str = BASE_NONE

    def cells(self, name: str) -> list[Cells]:
        """One source's rows as the offers file holds them (for a 304: kept as they are)."""
        at = 0
        for s in self.sources:
            if s.name == name:
                break
            at += s.rows
        else:
            return []
        with open(self.catalog.path, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader)
            order = [header.index(c) for c in COLUMNS]
            rows = list(reader)[at : at + s.rows]
        pick = itemgetter(*order)
        return [pick(r) for r in rows]


def _broken(path: Path, why: object) -> CatalogError:
    return CatalogError(
        f"the updated catalog {path} cannot be read: {why}",
        hint=f"run `nodus catalog update` again, or remove {folder()} to use the embedded catalog",
    )


def read() -> Stored | None:
    """The stored catalog, or None when ``nodus catalog update`` never stored one."""
    meta_path = current_path()
    try:
        text = meta_path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _broken(meta_path, exc.strerror or exc) from None
    try:
        meta = json.loads(text)
        sources = [StoredSource.from_json(s) for s in meta["sources"]]
        offers_path = folder() / Path(str(meta["offers_file"])).name
        offers = read_canonical(offers_path)
    except FileNotFoundError as exc:
        raise _broken(meta_path, f"{exc.filename} is missing") from None
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise _broken(meta_path, exc) from None
    if len(offers) != sum(s.rows for s in sources):
        raise _broken(meta_path, f"{offers_path.name} does not hold the rows it records")
    by_source: dict[str, list[Offer]] = {}
    at = 0
    for s in sources:
        by_source[s.name] = list(offers[at : at + s.rows])
        at += s.rows
    checked = min((s.checked_at for s in sources), default=None)
    info = {
        "name": f"updated catalog, {len(sources)} source{'' if len(sources) == 1 else 's'}",
        "built_from": ", ".join(s.url for s in sources),
        "built_at": str(meta.get("updated_at") or "")[:10] or None,
        "updated_at": meta.get("updated_at"),
        "prices_as_of": checked[:10] if checked else None,
        "checked_at": checked,
        "as_of_note": "when nodus last fetched or confirmed (HTTP 304) each source's prices",
        "rows": len(offers),
        "dropped": meta.get("dropped") or {},
        "sources": [s.as_json() for s in sources],
        "user_catalog": True,
        "updated": True,
    }
    cat = Catalog(
        offers, str(offers_path), info, kind=CatalogKind.UPDATED, chosen_by="nodus catalog update"
    )
    base = BASE_EMBEDDED if meta.get("base") == BASE_EMBEDDED else BASE_NONE
    return Stored(cat, sources, by_source, base)


def read_quietly() -> Stored | None:
    """The stored catalog for an update to build on; None when it is missing or broken
    (an update replaces a broken one)."""
    try:
        return read()
    except CatalogError:
        return None


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Hold the catalog folder's lock: one update at a time per NODUS_HOME."""
    import fcntl

    base = folder()
    _private_dir(base)
    try:
        fd = os.open(base / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise CatalogError(
            f"cannot lock {base}: {exc.strerror or exc}",
            hint="set NODUS_HOME to a folder you can write to",
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# -- writing -----------------------------------------------------------------------------


def _private_dir(path: Path) -> None:
    """Create ``path`` (and a missing NODUS_HOME) 0700, or make a folder of ours 0700."""
    try:
        config.private_folder(path, path.parent)
    except FileExistsError:
        raise CatalogError(
            f"{path} exists and is not a folder",
            hint="set NODUS_HOME to a folder nodus can keep its state in",
        ) from None
    except OSError as exc:
        raise CatalogError(
            f"cannot create {path}: {exc.strerror or exc}",
            hint="set NODUS_HOME to a folder you can write to",
        ) from None


def _write_private(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` atomically: a 0600 temporary file in the same folder,
    fsynced, then renamed over ``target``."""
    import tempfile  # here: a plan only reads the catalog (start-up is felt in CI)

    fd, temp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder: the renames are still atomic
    finally:
        os.close(fd)


def replace_catalog(
    sources: Sequence[tuple[StoredSource, Sequence[Cells]]],
    dropped: dict[str, int],
    updated_at: str,
    supplied_by: str = BASE_EMBEDDED,
) -> Path:
    """Store these sources' rows (canonical text) as the catalog in use, the embedded
    catalog supplying the other suppliers unless ``supplied_by`` is BASE_NONE; return the
    offers file. Atomic: until the final rename of current.json the catalog in use is
    untouched."""
    base = folder()
    _private_dir(base)
    import hashlib

    data = write_rows(chain.from_iterable(rows for _, rows in sources))
    name = f"offers-{hashlib.sha256(data).hexdigest()[:16]}.csv"
    records = []
    total = 0
    for source, rows in sources:
        source.rows = len(rows)
        total += len(rows)
        records.append(source.as_json())
    meta = {
        "format": FORMAT,
        "offers_file": name,
        "updated_at": updated_at,
        "rows": total,
        "dropped": {k: v for k, v in dropped.items() if v},
        "base": supplied_by,
        "sources": records,
    }
    try:
        _write_private(base / name, data)
        _write_private(base / CURRENT, (json.dumps(meta, indent=2) + "\n").encode("utf-8"))
    except OSError as exc:
        raise CatalogError(
            f"cannot write the updated catalog in {base}: {exc.strerror or exc}",
            hint="the catalog in use was left as it was; free some space or fix the "
            "folder's permissions, then run `nodus catalog update` again",
        ) from None
    _fsync_dir(base)
    _clean(base, keep=name)
    return base / name


def _clean(base: Path, keep: str) -> None:
    """Remove offers files no longer in use and temporary files of interrupted updates."""
    try:
        entries = list(base.iterdir())
    except OSError:
        return
    for entry in entries:
        stale = entry.name.startswith(".tmp-") or (
            entry.name.startswith("offers-") and entry.name.endswith(".csv")
        )
        if stale and entry.name != keep:
            with contextlib.suppress(OSError):
                entry.unlink()
