"""``nodus gpus``: the canonical GPU models, and the offers of one of them.

``nodus gpus`` lists every model family: vendor, memory variants, GPU counts on offer and
the lowest price per GPU-hour with where it is. ``nodus gpus NAME`` (any accepted
spelling, or a memory variant such as ``A100-80GB``) lists that model's offers. Both
take ``--supplier``, ``--location`` and ``--count`` filters and ``--json`` (SPEC 3.1).
"""

from __future__ import annotations

from typing import Any

from nodus_cli import catalog, gpus, locations
from nodus_cli.catalog import Offer
from nodus_cli.output import Writer, emit_json, money
from nodus_cli.problems import NodusError


def run(
    name: str | None,
    supplier: str | None,
    location: str | None,
    count: int | None,
    catalog_path: str | None,
    as_json: bool,
) -> int:
    if count is not None and count < 1:
        raise NodusError(f"--count must be 1 or more, not {count}", exit_code=2)
    table = gpus.table()
    family, memory = _resolve(table, name) if name is not None else (None, None)
    all_offers = catalog.load(catalog_path).offers
    offers = [
        o
        for o in all_offers
        if o.gpu is not None
        and (supplier is None or o.supplier.lower() == supplier.strip().lower())
        and (location is None or locations.matches(location, o.region))
        and (count is None or o.gpu_count == count)
    ]
    warnings = _filter_warnings(all_offers, offers, supplier, location)
    by_family: dict[str, list[Offer]] = {}
    for o in offers:
        by_family.setdefault(o.gpu or "", []).append(o)
    if family is None:
        rows = [_summary(f, by_family.get(f.name, [])) for f in table.families]
        if as_json:
            emit_json({"gpus": rows, "filters": _filters(supplier, location, count)})
        else:
            _show_families(rows, filtered=bool(supplier or location or count), warnings=warnings)
        return 0
    chosen = [
        o for o in by_family.get(family.name, []) if memory is None or o.gpu_memory_gb == memory
    ]
    chosen.sort(key=_offer_order)
    summary = _summary(family, chosen)
    if as_json:
        emit_json(
            {
                "gpus": [summary],
                "variant_memory_gb": memory,
                "filters": _filters(supplier, location, count),
                "offers": [o.as_json() for o in chosen],
            }
        )
    else:
        _show_offers(summary, chosen, memory, warnings)
    return 0


def _offer_order(o: Offer) -> tuple[Any, ...]:
    return (o.supplier, o.region, o.gpu_count, o.price_per_hour, o.machine_id, o.gpu_memory_gb)


def _filters(supplier: str | None, location: str | None, count: int | None) -> dict[str, Any]:
    return {"supplier": supplier, "location": location, "count": count}


def _filter_warnings(
    every: tuple[Offer, ...], kept: list[Offer], supplier: str | None, location: str | None
) -> list[str]:
    """Say why filters matched nothing when a name is wrong rather than just unlucky."""
    found = []
    if supplier is not None:
        names = sorted({o.supplier for o in every})
        if supplier.strip().lower() not in {n.lower() for n in names}:
            found.append(f'no supplier "{supplier}" in the catalog; suppliers: {", ".join(names)}')
    if location is not None and not locations.is_known(location, {o.region for o in every}):
        found.append(
            f'location "{location}" matches no region in the catalog; write a region id, a '
            'prefix such as "us-east", or an area: ' + ", ".join(locations.areas())
        )
    return found


def _resolve(table: gpus.GpuTable, name: str) -> tuple[gpus.GpuFamily, float | None]:
    family = table.lookup(name)
    if family is not None:
        return family, None
    variant = table.variant(name)
    if variant is not None:
        return variant.family, variant.memory_gb
    machine = catalog.describe_machine(name)
    if machine is not None:
        setups = catalog.machine_configurations(name)
        raise NodusError(machine, exit_code=2, hint=f"nodus gpus {setups[0].gpu}")
    if table.is_supplier(name):
        raise NodusError(
            f'"{name}" is a supplier, not a GPU model',
            exit_code=2,
            hint=f"nodus gpus --supplier {name} lists its models",
        )
    close = table.suggestions(name)
    hint = f"did you mean {gpus.quoted_list(close)}?" if close else "`nodus gpus` lists the models"
    raise NodusError(f'unknown GPU model "{name}"', exit_code=2, hint=hint)


def _per_gpu(o: Offer) -> float:
    return o.price_per_hour / o.gpu_count


def _summary(family: gpus.GpuFamily, offers: list[Offer]) -> dict[str, Any]:
    cheapest = min(
        offers,
        key=lambda o: (_per_gpu(o), o.price_per_hour, o.supplier, o.machine_id, o.region),
        default=None,
    )
    return {
        "name": family.name,
        "aliases": list(family.aliases),
        "vendor": family.vendor,
        "architecture": family.architecture,
        "compute_capability": family.compute_capability,
        "segment": family.segment,
        "memory_gb": list(family.memory_gb),
        "counts": sorted({o.gpu_count for o in offers}),
        "offers": len(offers),
        "suppliers": sorted({o.supplier for o in offers}),
        "min_price_per_gpu_hour": round(_per_gpu(cheapest), 6) if cheapest else None,
        "cheapest": cheapest.as_json() if cheapest else None,
    }


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
            money(_per_gpu(o)),
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
