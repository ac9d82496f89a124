"""``nodus gpus``: the canonical GPU models, and the offers of one of them."""

from __future__ import annotations

from typing import Any

from nodus_cli import catalog, gpus, locations
from nodus_cli.catalog import Offer
from nodus_cli.output import console, emit_json, money
from nodus_cli.problems import NodusError


def run(
    name: str | None,
    supplier: str | None,
    location: str | None,
    count: int | None,
    catalog_path: str | None,
    as_json: bool,
) -> int:
    table = gpus.table()
    offers = [
        o
        for o in catalog.load(catalog_path).offers
        if o.gpu is not None
        and (supplier is None or o.supplier.lower() == supplier.lower())
        and (location is None or locations.matches(location, o.region))
        and (count is None or o.gpu_count == count)
    ]
    if name is None:
        rows = [_summary(f, [o for o in offers if o.gpu == f.name]) for f in table.families]
        if as_json:
            emit_json({"gpus": rows})
        else:
            _show_families(rows, filtered=bool(supplier or location or count))
        return 0
    family, memory = _resolve(table, name)
    chosen = [
        o
        for o in offers
        if o.gpu == family.name and (memory is None or o.gpu_memory_gb == memory)
    ]
    chosen.sort(key=lambda o: (o.price_per_hour / o.gpu_count, o.price_per_hour, o.supplier,
                               o.machine_id, o.region))
    summary = _summary(family, chosen)
    if as_json:
        emit_json({"gpus": [summary], "offers": [o.as_json() for o in chosen]})
    else:
        _show_offers(summary, chosen, memory)
    return 0


def _resolve(table: gpus.GpuTable, name: str) -> tuple[gpus.GpuFamily, float | None]:
    family = table.lookup(name)
    if family is not None:
        return family, None
    variant = table.variant(name)
    if variant is not None:
        return variant.family, variant.memory_gb
    close = table.suggestions(name)
    hint = f"did you mean {gpus.quoted_list(close)}?" if close else "`nodus gpus` lists the models"
    raise NodusError(f'unknown GPU model "{name}"', exit_code=2, hint=hint)


def _summary(family: gpus.GpuFamily, offers: list[Offer]) -> dict[str, Any]:
    cheapest = min(
        offers, key=lambda o: (o.price_per_hour / o.gpu_count, o.supplier, o.machine_id),
        default=None,
    )
    return {
        "name": family.name,
        "aliases": list(family.aliases),
        "vendor": family.vendor,
        "architecture": family.architecture,
        "segment": family.segment,
        "memory_gb": list(family.memory_gb),
        "counts": sorted({o.gpu_count for o in offers}),
        "offers": len(offers),
        "min_price_per_gpu_hour": (
            round(cheapest.price_per_hour / cheapest.gpu_count, 6) if cheapest else None
        ),
        "cheapest": (
            {"supplier": cheapest.supplier, "machine_id": cheapest.machine_id,
             "region": cheapest.region, "gpu_count": cheapest.gpu_count,
             "price_per_hour": cheapest.price_per_hour}
            if cheapest
            else None
        ),
    }


def _show_families(rows: list[dict[str, Any]], filtered: bool) -> None:
    from rich.table import Table

    table = Table(title="GPU models (nodus gpus NAME shows the offers)", title_justify="left")
    for col in ("model", "vendor", "memory", "counts", "offers", "from $/GPU·h", "where"):
        table.add_column(col, justify="right" if col in ("offers", "from $/GPU·h") else "left")
    shown = 0
    for row in rows:
        if filtered and not row["offers"]:
            continue
        shown += 1
        cheapest = row["cheapest"]
        table.add_row(
            row["name"],
            row["vendor"],
            ", ".join(f"{m:g} GB" for m in row["memory_gb"]),
            ", ".join(str(c) for c in row["counts"]) or "-",
            str(row["offers"]) if row["offers"] else "[dim]0[/]",
            money(row["min_price_per_gpu_hour"]),
            f"{cheapest['supplier']} ({cheapest['region']})" if cheapest else "",
        )
    console().print(table)
    console().print(
        f"[dim]{shown} models. Prices are whole-machine list prices divided by GPU count; "
        "an accepted name does not guarantee capacity.[/]"
    )


def _show_offers(summary: dict[str, Any], offers: list[Offer], memory: float | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    aliases = ", ".join(summary["aliases"]) or "none"
    sizes = ", ".join(f"{m:g} GB" for m in summary["memory_gb"])
    out.print(
        f"[bold]{summary['name']}[/] ({summary['vendor']}, {summary['architecture']}); "
        f"memory variants: {sizes}; aliases: {escape(aliases)}"
    )
    if memory is not None:
        out.print(f"[dim]showing the {memory:g} GB variant only[/]")
    if not offers:
        out.print("[yellow]no offers in the catalog match[/]")
        return
    table = Table(show_edge=False, box=None)
    for col in ("supplier", "machine", "region", "GPUs", "GB/GPU", "vCPU", "memory", "$/h",
                "$/GPU·h", "spot $/h"):
        table.add_column(col, justify="left" if col in ("supplier", "machine", "region")
                         else "right")
    for o in offers:
        table.add_row(
            escape(o.supplier), escape(o.machine_id), escape(o.region), str(o.gpu_count),
            f"{o.gpu_memory_gb:g}", f"{o.vcpus:g}", f"{o.memory_gb:g} GB",
            money(o.price_per_hour), money(o.price_per_hour / o.gpu_count),
            money(o.spot_price_per_hour),
        )
    out.print(table)
    out.print(f"[dim]{len(offers)} offers; $/h is for the whole machine.[/]")
