"""``nodus catalog update``: fetch every source, check its rows, replace the stored catalog.

All or nothing: every source is fetched (:mod:`nodus_cli.catalog.sources`), recognised by
its first line as one of the formats (:mod:`nodus_cli.catalog.formats`), converted, and
each of its rows checked by the row rules every catalog goes through
(:func:`nodus_cli.catalog.rows.check`). Refused rows are reported with the source, the
line and the reason, and left out; they are not fatal unless a source gives nothing
usable. A source that answers 304 (not modified) keeps the rows it gave last time. Only
when every source succeeded does the result replace the stored catalog
(:func:`nodus_cli.catalog.store.replace_catalog`, atomic); any failure (a source that
fails after its retries, a malformed file, a download cut short, nothing usable) raises
:class:`~nodus_cli.catalog.sources.SourceError` naming the source, and the catalog in use
stays as it was, byte for byte.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nodus_cli import collector
from nodus_cli.catalog import formats
from nodus_cli.catalog import sources as catalog_sources
from nodus_cli.catalog import store as catalog_store
from nodus_cli.catalog.formats import NO_ON_DEMAND_PRICE, Checked, FormatError, Refused
from nodus_cli.catalog.model import Offer
from nodus_cli.catalog.rows import REQUIRED_COLUMNS, Cells, offer
from nodus_cli.catalog.sources import Fetched, Source, SourceError, Validators
from nodus_cli.catalog.store import StoredSource

if TYPE_CHECKING:
    import httpx

__all__ = ["Reporter", "SourceResult", "UpdateResult", "parse", "update"]

#: Bad rows kept word for word per source (the rest are counted).
BAD_ROWS_KEPT = 20


class Reporter(catalog_sources.Progress, Protocol):
    """Progress of an update: the fetch's, and each source's outcome."""

    def done(self, result: SourceResult) -> None: ...


@dataclass(slots=True)
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

    @property
    def offers(self) -> list[Offer]:
        return [offer(c) for c in self.rows]

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


@dataclass(slots=True)
class UpdateResult:
    path: Path
    results: list[SourceResult]
    updated_at: str

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
    return f"{source.name} {source.url}:{refused.line}: {refused.reason}"


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
    reporter: Reporter | None = None,
) -> UpdateResult:
    """Fetch, check and store ``sources`` as the catalog in use (all or nothing)."""
    shown: Reporter = reporter or catalog_sources.Silent()
    with catalog_store.locked(), collector.paused():
        previous = catalog_store.read_quietly()
        results: list[SourceResult] = []
        with catalog_sources.client(timeout) as http:
            for source in sources:
                results.append(_one(http, source, previous, retries, backoff, shown))
                shown.done(results[-1])
        updated_at = now_iso()
        dropped = sum(r.dropped for r in results)
        path = catalog_store.replace_catalog(
            [(r.stored, r.rows) for r in results],
            {NO_ON_DEMAND_PRICE: dropped},
            updated_at,
        )
    return UpdateResult(path, results, updated_at)


def _one(
    http: httpx.Client,
    source: Source,
    previous: catalog_store.Stored | None,
    retries: int,
    backoff: float,
    reporter: Reporter,
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
    stored = StoredSource(
        name=source.name,
        url=source.url,
        format=checked.format,
        suppliers=sorted({v[0] for v in checked.rows}),
        fetched_at=checked_at,
        checked_at=checked_at,
        etag=fetched.etag,
        last_modified=fetched.last_modified,
        rows=len(checked.rows),
        bad_rows=len(bad),
        bad_row_examples=[_bad_line(source, r) for r in bad[:BAD_ROWS_KEPT]],
        skipped=dict(reasons),
        last_result="fetched",
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
    )
