"""``nodus gpus``: the canonical GPU models, and the offers of one of them.

``nodus gpus`` lists every model family: vendor, memory variants, GPU counts on offer and
the lowest price per GPU-hour with where it is. ``nodus gpus NAME`` (any accepted
spelling, or a memory variant such as ``A100-80GB``) lists that model's offers. Both
take ``--supplier``, ``--location`` and ``--count`` filters and ``--json`` (SPEC 3.1).
"""

from __future__ import annotations

from typing import Any

from nodus_cli import market
from nodus_cli.catalog import Offer
from nodus_cli.market import per_gpu
from nodus_cli.output import Writer, emit_json, money


def run(
    name: str | None,
    supplier: str | None,
    location: str | None,
    count: int | None,
    catalog_path: str | None,
    as_json: bool,
) -> int:
    found = market.survey(name, supplier, location, count, catalog_path)
    filters = {"supplier": supplier, "location": location, "count": count}
    if name is None:
        if as_json:
            emit_json({"gpus": found.summaries, "filters": filters})
        else:
            _show_families(found.summaries, filtered=found.filtered, warnings=found.warnings)
        return 0
    summary = found.summaries[0]
    if as_json:
        emit_json(
            {
                "gpus": [summary],
                "variant_memory_gb": found.variant_memory_gb,
                "filters": filters,
                "offers": [o.as_json() for o in found.offers],
            }
        )
    else:
        _show_offers(summary, found.offers, found.variant_memory_gb, found.warnings)
    return 0


def _show_families(rows: list[dict[str, Any]], filtered: bool, warnings: list[str]) -> None:
    out = Writer()
    for w in warnings:
        out.line(f"{out.paint('warning:', 'yellow')} {w}")
    shown = [r for r in rows if r["offers"] or not filtered]
    table = []
    for row in shown:
        cheapest = row["cheapest"]
        where = (
            f"{cheapest['supplier']} {cheapest['machine_id']} ({cheapest['region'] or '-'})"
            if cheapest
            else ""
        )
        table.append(
            [
                row["name"],
                row["vendor"],
                "/".join(f"{m:g}" for m in row["memory_gb"]) + " GB",
                ",".join(str(c) for c in row["counts"]) or "-",
                str(row["offers"]),
                money(row["min_price_per_gpu_hour"]),
                where,
            ]
        )
    out.line(out.paint("GPU models (nodus gpus NAME lists one model's offers)", "bold"))
    out.table(
        ["model", "vendor", "memory", "counts", "offers", "from $/GPU·h", "cheapest at"],
        table,
        right=(4, 5),
    )
    on_offer = sum(1 for r in shown if r["offers"])
    out.line(
        out.paint(
            f"{len(shown)} models, {on_offer} on offer. $/GPU·h is the whole-machine hourly "
            "list price divided by its GPU count; a listed price does not guarantee capacity.",
            "dim",
        )
    )
    out.flush()


def _show_offers(
    summary: dict[str, Any], offers: list[Offer], memory: float | None, warnings: list[str]
) -> None:
    out = Writer()
    for w in warnings:
        out.line(f"{out.paint('warning:', 'yellow')} {w}")
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
        out.flush()
        return
    rows = [
        [
            o.supplier,
            o.region or "-",
            str(o.gpu_count),
            o.machine_id,
            f"{o.gpu_memory_gb:g}",
            f"{o.vcpus:g}",
            f"{o.memory_gb:g} GB",
            o.arch,
            money(o.price_per_hour),
            money(per_gpu(o)),
            money(o.spot_price_per_hour),
        ]
        for o in offers
    ]
    out.table(
        [
            "supplier",
            "region",
            "GPUs",
            "machine",
            "GB/GPU",
            "vCPU",
            "memory",
            "arch",
            "$/h",
            "$/GPU·h",
            "spot $/h",
        ],
        rows,
        right=(2, 4, 5, 6, 8, 9, 10),
    )
    cheapest = summary["cheapest"]
    out.line(
        out.paint(
            f"{len(offers)} offers from {len(summary['suppliers'])} supplier(s); lowest "
            f"{money(summary['min_price_per_gpu_hour'])} per GPU-hour at {cheapest['supplier']} "
            f"{cheapest['machine_id']} ({cheapest['region'] or '-'}). $/h is for the whole "
            "machine.",
            "dim",
        )
    )
    out.flush()
