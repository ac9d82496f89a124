"""``nodus catalog update``: fetch every source, check its rows, replace the stored catalog.

All or nothing: every source is fetched (:mod:`nodus_cli.catalog.sources`), recognised by
its first line as one of the formats (:mod:`nodus_cli.catalog.formats`), converted, and
each of its rows checked by the row rules every catalog goes through
(:func:`nodus_cli.catalog.rows.check`). Every refused row is reported with the source,
the line and the reason, and left out; refusals are not fatal unless a source gives
nothing usable. A source that answers 304 (not modified) keeps the rows it gave last time.

**What a source replaces.** A source refreshes the suppliers it carries, and nothing else:
the suppliers of the other stored sources, and those of the embedded catalog no source
carries, stay in use as they are (a stored source loses the suppliers a new one now
carries). With ``replace`` the catalog in use becomes exactly the sources given. Either
way the update says, before the new catalog is in use, which suppliers it replaces and
removes (:meth:`UpdateProgress.changing`). Two sources of one update may not carry the same
supplier.

Only when every source succeeded does the result replace the stored catalog
(:func:`nodus_cli.catalog.store.replace_catalog`, atomic); any failure (a source that
fails after its retries or its time, a malformed file, a download cut short, nothing
usable) raises :class:`~nodus_cli.catalog.sources.SourceError` naming the source, and the
catalog in use stays as it was, byte for byte.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nodus_cli import collector
from nodus_cli.catalog import formats
from nodus_cli.catalog import sources as catalog_sources
from nodus_cli.catalog import store as catalog_store
from nodus_cli.catalog.files import embedded
from nodus_cli.catalog.formats import NO_ON_DEMAND_PRICE, Checked, FormatError, Refused
from nodus_cli.catalog.model import Offer
from nodus_cli.catalog.rows import REQUIRED_COLUMNS, Cells, offer
from nodus_cli.catalog.selection import updated
from nodus_cli.catalog.sources import Fetched, Source, SourceError, Validators
from nodus_cli.catalog.store import StoredSource
from nodus_cli.structs import field, struct

if TYPE_CHECKING:
    import httpx

__all__ = [
    "RefusedRows",
    "SourceResult",
    "SupplierChange",
    "UpdateProgress",
    "UpdateResult",
    "parse",
    "refused_rows",
    "update",
]

#: Bad rows kept word for word per source (the rest are counted).
BAD_ROWS_KEPT = 20

# A row's supplier (its first cell), for C loops over a source's rows (a big file has
# tens of thousands).
_SUPPLIER = itemgetter(0)


class UpdateProgress(catalog_sources.FetchProgress, Protocol):
    """Progress of an update: the fetch's, each source's outcome, and what the new catalog
    changes (said before it is in use)."""

    def done(self, result: SourceResult) -> None: ...

    def changing(self, changes: Sequence[SupplierChange]) -> None: ...


@struct(frozen=True)
class RefusedRows:
    """The rows of a source refused for one reason."""

    reason: str
    #: True: rows that break a rule of their cells; False: left out by a rule.
    bad: bool
    configurations: int
    lines: tuple[int, ...]

    @property
    def rows(self) -> int:
        return len(self.lines)

    def as_json(self) -> dict[str, object]:
        return {
            "reason": self.reason,
            "bad": self.bad,
            "configurations": self.configurations,
            "rows": self.rows,
            "lines": list(self.lines),
        }


def refused_rows(refused: Iterable[Refused]) -> list[RefusedRows]:
    """Refusals by reason (bad rows first, then by the number of rows)."""
    groups: dict[tuple[str, bool], tuple[int, list[int]]] = {}
    for r in refused:
        count, lines = groups.get((r.reason, r.bad), (0, []))
        lines.extend(r.lines)
        groups[(r.reason, r.bad)] = (count + 1, lines)
    found = [
        RefusedRows(reason, bad, count, tuple(sorted(lines)))
        for (reason, bad), (count, lines) in groups.items()
    ]
    return sorted(found, key=lambda g: (not g.bad, -g.rows, g.reason))


@struct
class SourceResult:
    source: Source
    stored: StoredSource
    #: The checked rows, as canonical text (``rows.COLUMNS``).
    rows: list[Cells]
    format: str
    bad_rows: list[str] = field(default_factory=list)
    bad_count: int = 0
    dropped: int = 0
    attempts: int = 1
    size: int = 0
    #: Every refused row, by reason.
    refused: list[RefusedRows] = field(default_factory=list)

    @property
    def offers(self) -> list[Offer]:
        return [offer(c) for c in self.rows]

    @property
    def rows_read(self) -> int:
        return self.stored.rows_read

    @property
    def rows_refused(self) -> int:
        return self.stored.rows_refused

    @property
    def configurations_refused(self) -> int:
        return self.stored.configurations_refused

    def as_json(self) -> dict[str, object]:
        doc = self.stored.as_json()
        doc.update(
            {
                "rows": len(self.rows),
                "bad_rows": self.bad_count,
                "bad_row_examples": self.bad_rows,
                "dropped": {NO_ON_DEMAND_PRICE: self.dropped} if self.dropped else {},
                "attempts": self.attempts,
                "bytes": self.size,
            }
        )
        return doc


@struct(frozen=True)
class SupplierChange:
    """What an update does to one supplier of the catalog in use."""

    supplier: str
    #: Where its offers came from before (a source's name, ``embedded``), None: nowhere.
    before: str | None
    before_rows: int
    #: Where they come from now; None: the supplier is removed.
    after: str | None
    after_rows: int

    @property
    def removed(self) -> bool:
        return self.after is None

    def as_json(self) -> dict[str, object]:
        return {
            "supplier": self.supplier,
            "before": {"source": self.before, "rows": self.before_rows} if self.before else None,
            "after": {"source": self.after, "rows": self.after_rows} if self.after else None,
        }


@struct
class UpdateResult:
    path: Path
    results: list[SourceResult]
    updated_at: str
    #: The suppliers whose offers the update replaced, added or removed.
    changes: list[SupplierChange] = field(default_factory=list)
    #: The stored sources kept from before (not given to this update).
    kept: list[str] = field(default_factory=list)
    #: Whether the embedded catalog supplies the suppliers no source carries.
    embedded_rest: bool = True

    @property
    def rows(self) -> int:
        return sum(len(r.rows) for r in self.results)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def parse(source: Source, body: bytes) -> Checked:
    """A fetched file's rows, checked; SourceError when no format reads it or it gives
    nothing usable."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(
            source,
            f"source {source} is not a UTF-8 text file (byte {exc.start}): not a catalog",
            hint=_format_hint(),
        ) from None
    end = text.find("\n")
    first = text if end < 0 else text[:end]
    try:
        header = [h.strip() for h in next(csv.reader([first]), [])]
    except csv.Error:
        header = []
    found = formats.detect(header)
    if found is None:
        looks = " (it looks like an HTML page)" if first.lstrip().startswith("<") else ""
        raise SourceError(
            source,
            f"source {source} is neither a nodus catalog nor a SkyPilot vms.csv{looks}: "
            f"its first line is {first[:120]!r}",
            hint=_format_hint(),
        )
    try:
        checked = formats.check(found.convert(text, source.name))
    except FormatError as exc:
        raise SourceError(source, f"source {source}: {exc.message}", hint=_format_hint()) from None
    if not checked.rows:
        why = [f"{n} {reason}" for reason, n in sorted(_reasons(checked.refused).items())]
        detail = f" ({', '.join(why)})" if why else " (no rows)"
        bad = checked.bad
        first_bad = f"\n{_bad_line(source, bad[0])}" if bad else ""
        raise SourceError(
            source, f"source {source} gave nothing usable{detail}{first_bad}", hint=_format_hint()
        )
    return checked


def _reasons(refused: Iterable[Refused]) -> Counter[str]:
    """Refused configurations by reason ("bad row" for every bad one)."""
    return Counter("bad row" if r.bad else r.reason for r in refused)


def _bad_line(source: Source, refused: Refused) -> str:
    return f"{source.name} {source.where}:{refused.line}: {refused.reason}"


def _format_hint() -> str:
    return (
        "a source is a CSV with the columns " + ",".join(REQUIRED_COLUMNS) + ", or a "
        "SkyPilot catalog vms.csv; the catalog in use was left as it was"
    )


def update(
    sources: Sequence[Source],
    *,
    timeout: float = catalog_sources.DEFAULT_TIMEOUT,
    retries: int = catalog_sources.DEFAULT_RETRIES,
    backoff: float = catalog_sources.DEFAULT_BACKOFF,
    reporter: UpdateProgress | None = None,
    replace: bool = False,
) -> UpdateResult:
    """Fetch, check and store ``sources`` as the catalog in use (all or nothing): each
    refreshes the suppliers it carries, or with ``replace`` they become the whole
    catalog. ``timeout`` bounds each source, every attempt and pause included."""
    shown: UpdateProgress = reporter or catalog_sources.Silent()
    with catalog_store.locked(), collector.paused():
        previous = catalog_store.read_quietly()
        results: list[SourceResult] = []
        http: httpx.Client | None = None
        try:
            for source in sources:
                if http is None and source.path is None:
                    http = catalog_sources.client()
                results.append(_one(http, source, previous, timeout, retries, backoff, shown))
                shown.done(results[-1])
        finally:
            if http is not None:
                http.close()
        plan = _plan(previous, results, replace)
        shown.changing(plan.changes)
        updated_at = now_iso()
        dropped = sum(r.dropped for r in results)
        path = catalog_store.replace_catalog(
            plan.sources,
            {NO_ON_DEMAND_PRICE: dropped},
            updated_at,
            catalog_store.BASE_EMBEDDED if plan.embedded_rest else catalog_store.BASE_NONE,
        )
    return UpdateResult(path, results, updated_at, plan.changes, plan.kept, plan.embedded_rest)


@struct
class _Plan:
    sources: list[tuple[StoredSource, Sequence[Cells]]]
    changes: list[SupplierChange]
    kept: list[str]
    embedded_rest: bool


def _plan(
    previous: catalog_store.Stored | None, results: Sequence[SourceResult], replace: bool
) -> _Plan:
    """The stored catalog an update makes: its sources' rows, the kept part of the stored
    sources it was not given, whether the embedded catalog supplies the rest; and what that
    changes, supplier by supplier."""
    carried: dict[str, str] = {}
    for r in results:
        for supplier in sorted(set(map(_SUPPLIER, r.rows))):
            other = carried.setdefault(supplier, r.source.name)
            if other != r.source.name:
                raise SourceError(
                    r.source,
                    f"sources {other} and {r.source.name} both carry the supplier {supplier!r}: "
                    "a supplier comes from one source",
                    hint="leave one of them out, or give the supplier another name in your "
                    "file; the catalog in use was left as it was",
                )
    planned: list[tuple[StoredSource, Sequence[Cells]]] = [(r.stored, r.rows) for r in results]
    kept: list[str] = []
    given = {r.source.name for r in results}
    if previous is not None and not replace:
        for source in previous.sources:
            if source.name in given:
                continue
            left = [row for row in previous.cells(source.name) if row[0] not in carried]
            if not left:
                continue  # every supplier it carried comes from a new source now
            record = StoredSource.from_json(source.as_json())
            record.suppliers = sorted(set(map(_SUPPLIER, left)))
            planned.append((record, left))
            kept.append(source.name)
    embedded_rest = not replace and (
        previous is None or previous.base == catalog_store.BASE_EMBEDDED
    )
    before = _supplied(previous)
    after: dict[str, tuple[str, int]] = {}
    for record, rows in planned:
        for supplier, n in Counter(map(_SUPPLIER, rows)).items():
            after[supplier] = (record.name, n)
    if embedded_rest:
        for supplier, n in Counter(o.supplier for o in embedded().offers).items():
            after.setdefault(supplier, (catalog_sources.EMBEDDED_NAME, n))
    changes = []
    for supplier in sorted(set(before) | set(after)):
        old, new = before.get(supplier), after.get(supplier)
        if old == new:
            continue
        changes.append(
            SupplierChange(
                supplier,
                old[0] if old else None,
                old[1] if old else 0,
                new[0] if new else None,
                new[1] if new else 0,
            )
        )
    return _Plan(planned, changes, kept, embedded_rest)


def _supplied(previous: catalog_store.Stored | None) -> dict[str, tuple[str, int]]:
    """Supplier -> (where its offers come from, how many) in the catalog an update
    replaces: the stored one with the embedded rest, or the embedded one."""
    cat = updated(previous) if previous is not None else embedded()
    return {o.supplier: (o.source, o.rows) for o in cat.origins}


def _one(
    http: httpx.Client | None,
    source: Source,
    previous: catalog_store.Stored | None,
    timeout: float,
    retries: int,
    backoff: float,
    reporter: UpdateProgress,
) -> SourceResult:
    before = None
    kept = None
    if previous is not None:
        before = next(
            (s for s in previous.sources if s.name == source.name and s.url == source.url), None
        )
        kept = previous.offers_by_source.get(source.name) if before is not None else None
    validators = (
        Validators(before.etag, before.last_modified) if before is not None and kept else None
    )
    fetched: Fetched = catalog_sources.fetch(
        http,
        source,
        validators,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        progress=reporter,
    )
    checked_at = now_iso()
    if fetched.status == 304 and before is not None and kept:
        stored = StoredSource.from_json(before.as_json())
        stored.checked_at = checked_at
        stored.etag = fetched.etag or before.etag
        stored.last_modified = fetched.last_modified or before.last_modified
        stored.last_result = "not modified"
        return SourceResult(
            source,
            stored,
            previous.cells(source.name) if previous is not None else [],
            stored.format,
            bad_rows=list(before.bad_row_examples),
            bad_count=before.bad_rows,
            attempts=fetched.attempts,
            refused=[
                RefusedRows(
                    str(g["reason"]), bool(g["bad"]), int(g["configurations"]), tuple(g["lines"])
                )
                for g in before.refused
            ],
        )
    if fetched.status == 304:
        raise SourceError(
            source,
            f"source {source} answered 304 (not modified) to a request that asked for the "
            "whole file",
            hint="the server is misbehaving; try again later",
        )
    checked = parse(source, fetched.body)
    bad = checked.bad
    reasons = _reasons(r for r in checked.refused if not r.bad)
    dropped = reasons.pop(NO_ON_DEMAND_PRICE, 0)
    groups = refused_rows(checked.refused)
    stored = StoredSource(
        name=source.name,
        url=source.url,
        format=checked.format,
        suppliers=sorted(set(map(_SUPPLIER, checked.rows))),
        fetched_at=checked_at,
        checked_at=checked_at,
        etag=fetched.etag,
        last_modified=fetched.last_modified,
        rows=len(checked.rows),
        bad_rows=len(bad),
        bad_row_examples=[_bad_line(source, r) for r in bad[:BAD_ROWS_KEPT]],
        skipped=dict(reasons),
        last_result="fetched",
        rows_read=checked.rows_read,
        rows_refused=checked.rows_refused,
        configurations_refused=len(checked.refused),
        refused=[g.as_json() for g in groups],
    )
    return SourceResult(
        source,
        stored,
        checked.rows,
        checked.format,
        bad_rows=list(stored.bad_row_examples),
        bad_count=len(bad),
        dropped=dropped,
        attempts=fetched.attempts,
        size=len(fetched.body),
        refused=groups,
    )
