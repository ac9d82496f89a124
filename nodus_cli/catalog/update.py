"""``nodus catalog update``: fetch every source, validate its rows, replace the stored catalog.

All or nothing: every source is fetched (:mod:`nodus_cli.catalog.sources`), recognised by
its header as a nodus catalog (the SPEC section 4 columns) or a SkyPilot ``vms.csv``
(:mod:`nodus_cli.catalog.formats.skypilot`), and each of its rows validated by
:func:`nodus_cli.catalog.row_cells`: the rules of ``--catalog`` (``parse_row``), giving
the row back as the canonical text the stored catalog holds. Bad rows are reported
with the source and line and left out; they are not fatal unless a source gives nothing
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nodus_cli import catalog, collector
from nodus_cli.catalog import Cells, Offer
from nodus_cli.catalog import sources as catalog_sources
from nodus_cli.catalog import store as catalog_store
from nodus_cli.catalog.formats import skypilot
from nodus_cli.catalog.sources import Fetched, Source, SourceError, Validators
from nodus_cli.catalog.store import StoredSource
from nodus_cli.text import plural

if TYPE_CHECKING:
    import httpx

FORMAT_NODUS = "nodus"
FORMAT_SKYPILOT = "skypilot"
#: Bad rows kept word for word per source (the rest are counted).
BAD_ROWS_KEPT = 20


class Reporter(catalog_sources.Progress, Protocol):
    """Progress of an update: the fetch's, and each source's outcome."""

    def done(self, result: SourceResult) -> None: ...


@dataclass(slots=True)
class SourceResult:
    source: Source
    stored: StoredSource
    #: The validated rows, as canonical text (``catalog.CELL_COLUMNS``).
    rows: list[Cells]
    format: str
    bad_rows: list[str] = field(default_factory=list)
    bad_count: int = 0
    dropped: int = 0
    attempts: int = 1
    size: int = 0

    @property
    def offers(self) -> list[Offer]:
        return [catalog.offer_from_cells(c) for c in self.rows]

    def as_json(self) -> dict[str, object]:
        doc = self.stored.as_json()
        doc.update(
            {
                "rows": len(self.rows),
                "bad_rows": self.bad_count,
                "bad_row_examples": self.bad_rows,
                "dropped": {"no on-demand price": self.dropped} if self.dropped else {},
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


@dataclass(slots=True)
class Parsed:
    format: str
    rows: list[Cells]
    bad_rows: list[str]
    bad_count: int
    skipped: Counter[str]
    dropped: int


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def parse(source: Source, body: bytes) -> Parsed:
    """A fetched file's offers; SourceError when it is neither format or gives nothing."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(
            source,
            f"source {source} is not a UTF-8 text file (byte {exc.start}): not a catalog",
            hint=_format_hint(source),
        ) from None
    first = text.split("\n", 1)[0]
    try:
        header = next(csv.reader([first]), [])
    except csv.Error:
        header = []
    names = [h.strip().lower() for h in header]
    if all(c in names for c in catalog.REQUIRED_COLUMNS):
        parsed = _parse_nodus(source, text)
    elif skypilot.is_skypilot_header(h.strip() for h in header):
        parsed = _parse_skypilot(source, text)
    else:
        looks = " (it looks like an HTML page)" if first.lstrip().startswith("<") else ""
        raise SourceError(
            source,
            f"source {source} is neither a nodus catalog nor a SkyPilot vms.csv{looks}: "
            f"its first line is {first[:120]!r}",
            hint=_format_hint(source),
        )
    if not parsed.rows:
        why = []
        if parsed.bad_count:
            why.append(plural(parsed.bad_count, "bad row"))
        if parsed.dropped:
            why.append(f"{parsed.dropped} without an on-demand price")
        why += [f"{n} {reason}" for reason, n in sorted(parsed.skipped.items())]
        detail = f" ({', '.join(why)})" if why else " (no rows)"
        first_bad = f"\n{parsed.bad_rows[0]}" if parsed.bad_rows else ""
        raise SourceError(
            source,
            f"source {source} gave nothing usable{detail}{first_bad}",
            hint=_format_hint(source),
        )
    return parsed


def _format_hint(source: Source) -> str:
    return (
        "a source is a CSV with the columns " + ",".join(catalog.REQUIRED_COLUMNS) + ", or a "
        "SkyPilot catalog vms.csv; the catalog in use was left as it was"
    )


def _validate_mappings(
    source: Source, rows: Sequence[tuple[int, dict[str, str]]], parsed: Parsed
) -> None:
    row_cells, arguments = catalog.row_cells, catalog.row_arguments
    kept = parsed.rows
    for line, row in rows:
        try:
            values = row_cells(*arguments(row))
        except ValueError as exc:
            _bad(source, parsed, line, str(exc))
            continue
        if values is None:
            parsed.dropped += 1
        else:
            kept.append(values)


def _validate_rows(
    source: Source, rows: Sequence[tuple[int, skypilot.Row]], parsed: Parsed
) -> None:
    row_cells = catalog.row_cells
    kept = parsed.rows
    append = kept.append
    for line, row in rows:
        try:
            values = row_cells(*row)
        except ValueError as exc:
            _bad(source, parsed, line, str(exc))
            continue
        if values is None:
            parsed.dropped += 1
        else:
            append(values)


def _bad(source: Source, parsed: Parsed, line: int, message: str) -> None:
    parsed.bad_count += 1
    if len(parsed.bad_rows) < BAD_ROWS_KEPT:
        parsed.bad_rows.append(f"{source.name} {source.url}:{line}: {message}")


def _parse_nodus(source: Source, text: str) -> Parsed:
    parsed = Parsed(FORMAT_NODUS, [], [], 0, Counter(), 0)
    reader = csv.reader(text.splitlines())
    names = [h.strip().lower().lstrip("\ufeff") for h in next(reader)]
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        for cells in reader:
            if not any(c.strip() for c in cells):
                continue
            rows.append((reader.line_num, dict(zip(names, cells, strict=False))))
    except csv.Error as exc:
        raise SourceError(
            source,
            f"source {source} is not a readable CSV file at line {reader.line_num}: {exc}",
            hint=_format_hint(source),
        ) from None
    _validate_mappings(source, rows, parsed)
    return parsed


def _parse_skypilot(source: Source, text: str) -> Parsed:
    try:
        converted = skypilot.convert(text, source.name)
    except csv.Error as exc:
        raise SourceError(
            source, f"source {source} is not a readable CSV file: {exc}", hint=_format_hint(source)
        ) from None
    except ValueError as exc:
        raise SourceError(source, f"source {source}: {exc}", hint=_format_hint(source)) from None
    parsed = Parsed(FORMAT_SKYPILOT, [], [], 0, Counter(), 0)
    parsed.dropped = converted.skipped.pop("no on-demand price", 0)
    parsed.skipped = converted.skipped
    _validate_rows(source, converted.rows, parsed)
    return parsed


def update(
    sources: Sequence[Source],
    *,
    timeout: float = catalog_sources.DEFAULT_TIMEOUT,
    retries: int = catalog_sources.DEFAULT_RETRIES,
    backoff: float = catalog_sources.DEFAULT_BACKOFF,
    reporter: Reporter | None = None,
) -> UpdateResult:
    """Fetch, validate and store ``sources`` as the catalog in use (all or nothing)."""
    with catalog_store.locked(), collector.paused():
        previous = catalog_store.read_quietly()
        results: list[SourceResult] = []
        with catalog_sources.client(timeout) as http:
            for source in sources:
                results.append(_one(http, source, previous, retries, backoff, reporter))
                if reporter is not None:
                    reporter.done(results[-1])
        updated_at = now_iso()
        dropped = sum(r.dropped for r in results)
        path = catalog_store.replace_catalog(
            [(r.stored, r.rows) for r in results],
            {"no on-demand price": dropped},
            updated_at,
        )
    return UpdateResult(path, results, updated_at)


def _one(
    http: httpx.Client,
    source: Source,
    previous: catalog_store.Stored | None,
    retries: int,
    backoff: float,
    reporter: Reporter | None,
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
    checked = now_iso()
    if fetched.status == 304 and before is not None and kept:
        stored = StoredSource.from_json(before.as_json())
        stored.checked_at = checked
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
    parsed = parse(source, fetched.body)
    suppliers = sorted({v[0] for v in parsed.rows})
    stored = StoredSource(
        name=source.name,
        url=source.url,
        format=parsed.format,
        suppliers=suppliers,
        fetched_at=checked,
        checked_at=checked,
        etag=fetched.etag,
        last_modified=fetched.last_modified,
        rows=len(parsed.rows),
        bad_rows=parsed.bad_count,
        bad_row_examples=list(parsed.bad_rows),
        skipped=dict(parsed.skipped),
        last_result="fetched",
    )
    return SourceResult(
        source,
        stored,
        parsed.rows,
        parsed.format,
        bad_rows=parsed.bad_rows,
        bad_count=parsed.bad_count,
        dropped=parsed.dropped,
        attempts=fetched.attempts,
        size=len(fetched.body),
    )
