"""``nodus gpus``: the canonical GPU models, and the offers of one of them.

``nodus gpus`` lists every model family, cheapest per GPU-hour first (models with no
offer last): vendor, memory variants, GPU counts on offer and the lowest price per
GPU-hour with where it is. ``nodus gpus NAME`` (any accepted spelling, or a memory variant
such as ``A100-80GB``) lists that model's offers, cheapest per GPU-hour first. Both take
``--supplier``, ``--location`` and ``--count`` filters, ``--top N`` (rows shown: every
model, or a model's 20 cheapest offers, by default; ``--json`` lists all), ``--wide`` and
``--json``. The order and the figures are :meth:`Client.market`'s; this module renders.

On a terminal the tables fit its width: the model list leaves out vendor, region and
machine (in that order) before it clips anything; the offers leave out arch, spot price,
vCPU and memory, then clip machine IDs, regions and suppliers with "…".
"""

from __future__ import annotations

from typing import Any

from nodus_cli.api import Client, Offer
from nodus_cli.cli.output import Writer, emit_json
from nodus_cli.text import bounded, money, plural

#: The ``--json`` document's shape: bumped only when a field is renamed or retyped.
JSON_VERSION = 1
#: Offers of one model shown without ``--top``: the cheapest are the ones worth reading.
OFFERS_SHOWN = 20


def run(
    name: str | None,
    supplier: str | None,
    location: str | None,
    count: int | None,
    catalog_path: str | None,
    as_json: bool,
    top: int | None = None,
    wide: bool = False,
) -> int:
    found = Client(catalog=catalog_path).market(
        name, supplier=supplier, location=location, count=count
    )
    filters = {"supplier": supplier, "location": location, "count": count}
    if name is None:
        if as_json:
            emit_json({"version": JSON_VERSION, "gpus": found.summaries, "filters": filters})
        else:
            out = Writer(wide=wide)
            _show_families(out, found.summaries, found.filtered, found.warnings, top)
            out.flush()
        return 0
    summary = found.summaries[0]
    if as_json:
        emit_json(
            {
                "version": JSON_VERSION,
                "gpus": [summary],
                "variant_memory_gb": found.variant_memory_gb,
                "filters": filters,
                "offers": [o.as_json() for o in found.offers],
            }
        )
    else:
        out = Writer(wide=wide)
        shown = OFFERS_SHOWN if top is None else top
        _show_offers(out, summary, found.offers, found.variant_memory_gb, found.warnings, shown)
        out.flush()
    return 0


def _more(out: Writer, left: int, what: str) -> None:
    if left > 0:
        more = plural(left, f"more {what}")
        out.line(out.paint(f"… {more} (--top N shows more, --json lists all)", "dim"))


def _show_families(
    out: Writer,
    rows: list[dict[str, Any]],
    filtered: bool,
    warnings: list[str],
    top: int | None,
) -> None:
    for w in warnings:
        out.line(f"{out.paint('warning:', 'yellow')} {bounded(w)}")
    listed = [r for r in rows if r["offers"] or not filtered]
    shown = listed if top is None else listed[:top]
    table = []
    for row in shown:
        cheapest = row["cheapest"] or {}
        table.append(
            [
                row["name"],
                row["vendor"],
                "/".join(f"{m:g}" for m in row["memory_gb"]) + " GB",
                ",".join(str(c) for c in row["counts"]) or "-",
                str(row["offers"]),
                money(row["min_price_per_gpu_hour"]),
                cheapest.get("supplier", ""),
                cheapest.get("machine_id", ""),
                (cheapest.get("region") or "-") if cheapest else "",
            ]
        )
    out.line(
        out.paint("GPU models, cheapest first (nodus gpus NAME lists one model's offers)", "bold")
    )
    out.table(
        [
            "model",
            "vendor",
            "memory",
            "counts",
            "offers",
            "from $/GPU·h",
            "cheapest at",
            "machine",
            "region",
        ],
        table,
        right=(4, 5),
        drop=(1, 8, 7),
        clip=(7, 8, 6, 3, 0),
    )
    _more(out, len(listed) - len(shown), "model")
    on_offer = sum(1 for r in listed if r["offers"])
    out.line(
        out.paint(
            f"{plural(len(listed), 'model')}, {on_offer} on offer. $/GPU·h is the whole-machine "
            "hourly list price divided by its GPU count; a listed price does not guarantee "
            "capacity.",
            "dim",
        )
    )
    out.narrowed_note()


def _show_offers(
    out: Writer,
    summary: dict[str, Any],
    offers: list[Offer],
    memory: float | None,
    warnings: list[str],
    top: int,
) -> None:
    for w in warnings:
        out.line(f"{out.paint('warning:', 'yellow')} {bounded(w)}")
    aliases = ", ".join(summary["aliases"]) or "none"
    sizes = ", ".join(f"{m:g} GB" for m in summary["memory_gb"])
    cc = (
        f", compute capability {summary['compute_capability']}"
        if summary["compute_capability"]
        else ""
    )
    out.line(
        f"{out.paint(summary['name'], 'bold')} ({summary['vendor']}, "
        f"{summary['architecture']}{cc}); memory variants: {sizes}; aliases: {aliases}"
    )
    if memory is not None:
        out.line(f"showing the {memory:g} GB variant only")
    if not offers:
        out.line(out.paint("no offers in the catalog match", "yellow"))
        return
    rows = [
        [
            o.supplier,
            o.machine_id,
            o.region or "-",
            str(o.gpu_count),
            f"{o.gpu_memory_gb:g}",
            f"{o.vcpus:g}",
            f"{o.memory_gb:g} GB",
            o.arch,
            money(o.price_per_hour),
            money(o.price_per_gpu_hour),
            money(o.spot_price_per_hour),
        ]
        for o in offers[:top]
    ]
    out.table(
        [
            "supplier",
            "machine",
            "region",
            "GPUs",
            "GB/GPU",
            "vCPU",
            "memory",
            "arch",
            "$/h",
            "$/GPU·h",
            "spot $/h",
        ],
        rows,
        right=(3, 4, 5, 6, 8, 9, 10),
        drop=(7, 10, 5, 6),
        clip=(1, 2, 0),
    )
    _more(out, len(offers) - len(rows), "offer")
    cheapest = summary["cheapest"]
    suppliers = plural(len(summary["suppliers"]), "supplier")
    out.line(
        out.paint(
            f"{plural(len(offers), 'offer')} from {suppliers}, cheapest per GPU-hour first; "
            f"lowest {money(summary['min_price_per_gpu_hour'])} per GPU-hour at "
            f"{cheapest['supplier']} {cheapest['machine_id']} ({cheapest['region'] or '-'}). "
            "$/h is for the whole machine.",
            "dim",
        )
    )
    out.narrowed_note()
