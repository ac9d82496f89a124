"""``nodus catalog``: which catalog is in use and where its prices come from; and
``nodus catalog update [SOURCE...]``: refresh the prices from their sources.

Which catalog is in use, first match wins: ``--catalog FILE.csv``, ``NODUS_CATALOG``, the
catalog ``nodus catalog update`` stored under ``NODUS_HOME``, the embedded one.

The update reports its progress on stderr: a progress bar on a terminal, plain lines
otherwise (none with ``--json``, whose one document goes to stdout). A failure names the
source, exits 1 and leaves the catalog in use as it was.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from nodus_cli.api import CatalogKind, Client, Source, SourceError
from nodus_cli.cli.output import Writer, emit_json
from nodus_cli.text import plural

#: The ``--json`` documents' shape: bumped only when a field is renamed or retyped.
JSON_VERSION = 1

CHOSEN_WORDS = {
    "--catalog": "--catalog",
    "NODUS_CATALOG": "NODUS_CATALOG",
    "nodus catalog update": "`nodus catalog update` (stored under NODUS_HOME)",
    "default": "default (no --catalog, no NODUS_CATALOG, no `nodus catalog update`)",
}


def run(catalog_path: str | None, as_json: bool) -> int:
    in_use = Client(catalog=catalog_path).catalog_in_use()
    cat = in_use.catalog
    suppliers: dict[str, int] = {}
    for o in cat.offers:
        suppliers[o.supplier] = suppliers.get(o.supplier, 0) + 1
    embedded = cat.kind == CatalogKind.EMBEDDED
    age = in_use.age_days
    max_age = in_use.max_age_days
    doc: dict[str, Any] = {
        "version": JSON_VERSION,
        "path": cat.path,
        "name": cat.name,
        "kind": cat.kind,
        "embedded": embedded,
        "chosen_by": CHOSEN_WORDS.get(cat.chosen_by, cat.chosen_by),
        "rows": len(cat.offers),
        "cpu_only_rows": sum(1 for o in cat.offers if o.gpu is None),
        "suppliers": dict(sorted(suppliers.items())),
        "gpus": len({o.gpu for o in cat.offers if o.gpu}),
        "built_from": cat.meta.get("built_from"),
        "built_at": cat.meta.get("built_at"),
        "prices_as_of": cat.meta.get("prices_as_of"),
        "as_of_note": cat.meta.get("as_of_note"),
        "age_days": round(age, 3) if age is not None else None,
        "max_age_days": max_age,
        "stale": in_use.stale,
        "snapshot_note": cat.meta.get("snapshot_note"),
        "provenance": cat.meta.get("provenance"),
        "host_size_minimum": in_use.host_size_minimum,
        "dropped": cat.meta.get("dropped", {}),
        "sources": cat.meta.get("sources", []),
        "origins": [o.as_json() for o in cat.origins],
    }
    if as_json:
        emit_json(doc)
        return 0
    out = Writer()
    kinds = {
        CatalogKind.EMBEDDED: "embedded catalog",
        CatalogKind.USER_FILE: "user catalog",
        CatalogKind.UPDATED: "updated catalog",
    }
    out.line(f"{out.paint('catalog in use', 'bold')}: {cat.name} ({cat.path})")
    out.line(f"  {kinds.get(cat.kind, cat.kind)}, in use by {doc['chosen_by']}")
    out.line(
        f"  {plural(len(cat.offers), 'configuration')} ({doc['cpu_only_rows']} CPU-only), "
        f"{plural(doc['gpus'], 'GPU model')}, {plural(len(suppliers), 'supplier')}"
    )
    as_of = doc["prices_as_of"] or "?"
    note = f" ({doc['as_of_note']})" if doc["as_of_note"] else ""
    out.line(f"  prices as of {as_of}{note}")
    if doc["stale"]:
        out.line(
            "  "
            + out.paint("warning:", "yellow")
            + f" older than max_age_days = {max_age:g}: `nodus catalog update` fetches current "
            "prices"
        )
    if embedded:
        out.line(f"  built from {doc['built_from']} on {doc['built_at'] or '?'}")
    elif cat.kind == CatalogKind.USER_FILE:
        out.line(f"  file modified on {doc['built_at'] or '?'}")
    else:
        out.line(f"  updated at {cat.meta.get('updated_at') or '?'}")
    for reason, n in doc["dropped"].items():
        out.line(f"  rows left out: {n} ({reason})")
    for supplier, why in doc["host_size_minimum"].items():
        out.line(f"  {supplier}: vCPU and memory are minimums, not sizes ({why})")
    if doc["snapshot_note"]:
        out.line(f"  {doc['snapshot_note']}")
    if doc["provenance"]:
        out.line(f"  provenance: {doc['provenance']}")
    if cat.kind == CatalogKind.UPDATED:
        _show_update_sources(out, doc["sources"])
    if cat.origins:
        out.line()
        out.line(out.paint("suppliers (where each one's offers come from):", "bold"))
        headers = ["supplier", "rows", "from", "where"]
        rows = [[o.supplier, str(o.rows), o.source, o.where] for o in cat.origins]
        out.table(headers, _fitted(rows, headers, out.width), right=(1,), indent="  ")
    env = os.environ.get("NODUS_CATALOG")
    out.line()
    if embedded:
        out.line(
            out.paint(
                "Other catalogs: `nodus catalog update` fetches current prices; "
                "--catalog FILE.csv or NODUS_CATALOG=FILE.csv uses a file",
                "dim",
            )
        )
    elif cat.kind == CatalogKind.UPDATED:
        out.line(
            out.paint(
                f"`nodus catalog update` refreshes it; remove {in_use.folder} to use "
                "the embedded catalog again",
                "dim",
            )
        )
    elif env and catalog_path:
        out.line(out.paint(f"(--catalog overrides NODUS_CATALOG={env})", "dim"))
    out.flush()
    return 0


def _show_update_sources(out: Writer, sources: list[dict[str, Any]]) -> None:
    out.line()
    out.line(out.paint("sources:", "bold"))
    out.table(
        ["source", "rows", "bad", "fetched", "checked", "last", "url"],
        [
            [
                str(s.get("name", "?")),
                str(s.get("rows", 0)),
                str(s.get("bad_rows", 0)),
                str(s.get("fetched_at", "?")),
                str(s.get("checked_at", "?")),
                str(s.get("last_result", "")),
                str(s.get("url", "")),
            ]
            for s in sources
        ],
        right=(1, 2),
        indent="  ",
    )


# -- nodus catalog update ---------------------------------------------------------------------


class PlainProgress:
    """One line per event on stderr (not a terminal)."""

    def __init__(self) -> None:
        self.total: dict[str, int | None] = {}

    def start(self, source: Source, total: int | None) -> None:
        size = f" ({total:,} bytes)" if total is not None else ""
        sys.stderr.write(f"nodus: fetching {source.name} from {source.where}{size}\n")
        sys.stderr.flush()

    def advance(self, source: Source, received: int) -> None:
        pass

    def retry(self, source: Source, attempt: int, reason: str, delay: float) -> None:
        sys.stderr.write(
            f"nodus: {source.name}: attempt {attempt} failed ({reason}); retrying in "
            f"{delay:.1f} s\n"
        )
        sys.stderr.flush()

    def done(self, result: Any) -> None:
        sys.stderr.write(f"nodus: {summary(result)}\n")
        sys.stderr.flush()

    def changing(self, changes: Any) -> None:
        for line in change_lines(changes):
            sys.stderr.write(f"nodus: {line}\n")
        sys.stderr.flush()


class BarProgress:
    """A rich progress bar per source on stderr (a terminal)."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

        from nodus_cli.cli.output import error_console

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            console=error_console(),
            transient=False,
        )
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> BarProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def start(self, source: Source, total: int | None) -> None:
        task = self.tasks.get(source.name)
        if task is None:
            self.tasks[source.name] = self.bar.add_task(source.name, total=total)
        else:
            self.bar.reset(task, total=total)

    def advance(self, source: Source, received: int) -> None:
        task = self.tasks.get(source.name)
        if task is not None:
            self.bar.update(task, completed=received)

    def retry(self, source: Source, attempt: int, reason: str, delay: float) -> None:
        self.bar.console.print(
            f"{source.name}: attempt {attempt} failed ({reason}); retrying in {delay:.1f} s",
            markup=False,
            highlight=False,
        )

    def done(self, result: Any) -> None:
        task = self.tasks.get(result.source.name)
        if task is not None:
            self.bar.update(task, description=f"{result.source.name}: done")
        self.bar.console.print(summary(result), markup=False, highlight=False)

    def changing(self, changes: Any) -> None:
        for line in change_lines(changes):
            self.bar.console.print(line, markup=False, highlight=False)


def summary(result: Any) -> str:
    """One source's outcome in a line: configurations fetched and refused, rows used and
    refused (each adds up to what the file describes)."""
    r = result
    how = "not modified, kept" if r.stored.last_result == "not modified" else "fetched"
    line = (
        f"{r.source.name}: {how} {plural(len(r.rows), 'configuration', grouped=True)} ({r.format})"
    )
    if r.rows_read:
        used = r.rows_read - r.rows_refused
        line += f" from {used:,} of {plural(r.rows_read, 'row', grouped=True)}"
    if r.rows_refused or r.configurations_refused:
        line += (
            f"; refused {plural(r.rows_refused, 'row', grouped=True)} "
            f"({plural(r.configurations_refused, 'configuration', grouped=True)})"
        )
    return line


def refused_lines(result: Any, shown: int = 12) -> list[str]:
    """Every refused row of a source, by reason, with its lines."""
    found = []
    for group in result.refused:
        kind = "bad rows" if group.bad else "left out"
        found.append(
            f"{kind}: {group.reason}: {plural(group.rows, 'row')} "
            f"({plural(group.configurations, 'configuration')}), "
            f"{'line' if group.rows == 1 else 'lines'} {line_ranges(group.lines, shown)}"
        )
    return found


def line_ranges(lines: Any, shown: int) -> str:
    """``2, 5-9, 12`` (at most ``shown`` ranges, then how many lines more: --json has all)."""
    ranges: list[list[int]] = []
    for n in lines:
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:shown]]
    rest = sum(b - a + 1 for a, b in ranges[shown:])
    return ", ".join(text) + (f" and {rest:,} more (--json lists every one)" if rest else "")


def change_lines(changes: Any) -> list[str]:
    """What an update does to the suppliers in use, before the new catalog is in use."""
    found = []
    for c in changes:
        if c.after is None:
            rows = plural(c.before_rows, "configuration", grouped=True)
            found.append(
                f"removing {c.supplier}: its {rows} from {c.before} (nothing supplies it now)"
            )
        elif c.before is None:
            found.append(
                f"adding {c.supplier}: {plural(c.after_rows, 'configuration', grouped=True)} "
                f"from {c.after}"
            )
        else:
            found.append(
                f"replacing {c.supplier}: {c.before_rows:,} configurations from {c.before} by "
                f"{c.after_rows:,} from {c.after}"
            )
    return found


def update(
    arguments: list[str] | None,
    as_json: bool,
    timeout: float | None,
    retries: int,
    replace: bool = False,
) -> int:
    client = Client()
    sources = client.catalog_sources(arguments)
    reporter: Any = None  # None: silent
    bar: BarProgress | None = None
    if replace and not as_json:
        sys.stderr.write(
            "nodus: --replace: the catalog in use will hold only the suppliers these sources "
            "carry; every other supplier (the embedded catalog's too) is removed\n"
        )
    if sys.stderr.isatty():
        bar = reporter = BarProgress()
    elif not as_json:
        reporter = PlainProgress()
    try:
        if bar is not None:
            with bar:
                result = client.update_catalog(
                    sources, timeout=timeout, retries=retries, reporter=reporter, replace=replace
                )
        else:
            result = client.update_catalog(
                sources, timeout=timeout, retries=retries, reporter=reporter, replace=replace
            )
    except SourceError as exc:
        if as_json:
            failed = exc.source
            emit_json(
                {
                    "version": JSON_VERSION,
                    "updated": False,
                    "error": exc.message,
                    "source": failed.name if failed else None,
                    "url": failed.url if failed else None,
                }
            )
        raise
    if as_json:
        emit_json(
            {
                "version": JSON_VERSION,
                "updated": True,
                "path": str(result.path),
                "updated_at": result.updated_at,
                "rows": result.rows,
                "sources": [r.as_json() for r in result.results],
                "kept_sources": result.kept,
                "embedded_rest": result.embedded_rest,
                "changes": [c.as_json() for c in result.changes],
            }
        )
        return 0
    out = Writer()
    rows = plural(result.rows, "configuration", grouped=True)
    fetched = plural(len(result.results), "source")
    out.line(f"{out.paint('updated', 'green')}: {rows} from {fetched} now in use ({result.path})")
    for r in result.results:
        out.line(f"  {summary(r)}")
        for line in refused_lines(r):  # every refused row, bad ones first, with its line
            out.line(f"    {line}")
    for line in change_lines(result.changes):
        out.line(f"  {line}")
    if result.kept:
        out.line(f"  kept as they were: {', '.join(result.kept)} (sources not given)")
    if result.embedded_rest:
        out.line("  the embedded catalog supplies every supplier no source carries")
    out.flush()
    return 0


def _fitted(rows: list[list[str]], headers: list[str], width: int | None) -> list[list[str]]:
    """The sources table's rows, each ``where`` (``repo@commit path``) on two lines when
    the table would be wider than ``width``: nothing of it is clipped (it is what a user
    copies to find the file), and the table fits 80 columns."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    if width is None or 2 + sum(widths) + 2 * (len(widths) - 1) <= width:
        return rows
    split: list[list[str]] = []
    for *cells, where in rows:
        head, _, tail = where.rpartition(" ")
        split.append([*cells, head or tail])
        if head:
            split.append(["", "", "", tail])
    return split
