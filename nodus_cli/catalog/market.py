"""What the catalog offers per GPU model: ``nodus gpus`` and ``client.gpus()``.

Every model family with its aliases, memory variants, the GPU counts on offer and the
lowest price per GPU-hour (the whole machine's hourly price divided by its GPU count),
and, for one model, its offers. Filters: supplier, location, GPU count.

Both lists come cheapest first, because "what does this GPU cost" is the question they
answer: models by their lowest price per GPU-hour (models with no offer last, in the GPU
table's order), offers by price per GPU-hour, then whole-machine price, then supplier,
region and machine (so equal prices always list in the same order).
"""

from __future__ import annotations

from typing import Any

from nodus_cli.catalog.machines import describe_machine, machine_configurations
from nodus_cli.catalog.model import Offer
from nodus_cli.catalog.selection import load
from nodus_cli.errors import UsageError
from nodus_cli.hardware import gpus, locations
from nodus_cli.structs import struct


@struct(frozen=True)
class Market:
    """The answer to one ``nodus gpus`` question."""

    #: One summary per model family (or the one asked for), cheapest first.
    summaries: list[dict[str, Any]]
    #: The offers of the model asked for, cheapest per GPU-hour first (empty without a name).
    offers: list[Offer]
    #: The memory variant asked for (``A100-80GB`` -> 80.0), if any.
    variant_memory_gb: float | None
    #: Why the filters matched nothing, when a name is wrong rather than just unlucky.
    warnings: list[str]
    filtered: bool


def survey(
    name: str | None = None,
    supplier: str | None = None,
    location: str | None = None,
    count: int | None = None,
    catalog_path: str | None = None,
) -> Market:
    if count is not None and count < 1:
        raise UsageError(f"--count must be 1 or more, not {count}")
    table = gpus.table()
    family, memory = resolve(table, name) if name is not None else (None, None)
    every = load(catalog_path).offers
    offers = [
        o
        for o in every
        if o.gpu is not None
        and (supplier is None or o.supplier.lower() == supplier.strip().lower())
        and (location is None or locations.matches(location, o.region))
        and (count is None or o.gpu_count == count)
    ]
    warnings = _filter_warnings(every, supplier, location)
    by_family: dict[str, list[Offer]] = {}
    for o in offers:
        by_family.setdefault(o.gpu or "", []).append(o)
    filtered = bool(supplier or location or count)
    if family is None:
        rows = [summary(f, by_family.get(f.name, [])) for f in table.families]
        rows.sort(key=_model_order)  # stable: equal prices keep the GPU table's order
        return Market(rows, [], None, warnings, filtered)
    chosen = [
        o for o in by_family.get(family.name, []) if memory is None or o.gpu_memory_gb == memory
    ]
    chosen.sort(key=_offer_order)
    return Market([summary(family, chosen)], chosen, memory, warnings, filtered)


def gpu_summaries(name: str | None = None, catalog_path: str | None = None) -> list[dict[str, Any]]:
    return survey(name, catalog_path=catalog_path).summaries


def _model_order(row: dict[str, Any]) -> tuple[bool, float]:
    price = row["min_price_per_gpu_hour"]
    return (price is None, price or 0.0)


def _offer_order(o: Offer) -> tuple[Any, ...]:
    return (
        per_gpu(o),
        o.price_per_hour,
        o.supplier,
        o.region,
        o.gpu_count,
        o.machine_id,
        o.gpu_memory_gb,
    )


def _filter_warnings(
    every: tuple[Offer, ...], supplier: str | None, location: str | None
) -> list[str]:
    found = []
    if supplier is not None:
        names = sorted({o.supplier for o in every})
        if supplier.strip().lower() not in {n.lower() for n in names}:
            import difflib

            close = difflib.get_close_matches(supplier.strip().lower(), names, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            found.append(
                f'no supplier "{supplier}" in the catalog{hint} (suppliers: {", ".join(names)})'
            )
    if location is not None and not locations.is_known(location, {o.region for o in every}):
        found.append(
            f'location "{location}" matches no region in the catalog; write a region id, a '
            'prefix such as "us-east", or an area: ' + ", ".join(locations.areas())
        )
    return found


def resolve(table: gpus.GpuTable, name: str) -> tuple[gpus.GpuFamily, float | None]:
    """A model family and the memory variant to narrow to (None: the whole family) from
    any spelling the catalog's names table holds, the one supplier imports read
    (``RTX6000`` is Lambda's Quadro RTX 6000).

    The catalog tells a family's offers apart by memory only. So a name that says more (a
    form factor, ``H100 SXM``, or a machine variant, ``H100-MEGA``) narrows to its memory
    only when no other form factor has that memory (``H100 NVL`` is the 94 GB H100); any
    other such name is refused with the names that do work, never widened to the family.
    """
    found = table.catalog_name(name)
    if found is not None:
        family, memory, form = found.family, found.memory_gb, found.form_factor
        if form is None or (memory is not None and table.only_form_at(family, memory, form)):
            # A family that comes in one memory is not narrowed by naming it.
            return family, memory if len(family.memory_gb) > 1 else None
        variants = ", ".join(f"{m:g} GB" for m in family.memory_gb)
        by_memory = " or ".join(f"`nodus gpus {family.name}-{m:g}GB`" for m in family.memory_gb)
        raise UsageError(
            f'"{name}" names a variant of the {family.name} ({form}) that the catalog does '
            f"not record: it tells {family.name} offers apart by memory only ({variants}), "
            "so it cannot list only these",
            hint=f"`nodus gpus {family.name}` lists every {family.name} offer"
            + (f"; {by_memory} one memory variant" if len(family.memory_gb) > 1 else ""),
        )
    machine = describe_machine(name)
    if machine is not None:
        setups = machine_configurations(name)
        raise UsageError(machine, hint=f"nodus gpus {setups[0].gpu}")
    if table.is_supplier(name):
        raise UsageError(
            f'"{name}" is a supplier, not a GPU model',
            hint=f"nodus gpus --supplier {name} lists its models",
        )
    close = table.suggestions(name)
    hint = f"did you mean {gpus.quoted_list(close)}?" if close else "`nodus gpus` lists the models"
    raise UsageError(f'unknown GPU model "{name}"', hint=hint)


def per_gpu(o: Offer) -> float:
    return o.price_per_hour / o.gpu_count


def summary(family: gpus.GpuFamily, offers: list[Offer]) -> dict[str, Any]:
    cheapest = min(
        offers,
        key=lambda o: (per_gpu(o), o.price_per_hour, o.supplier, o.machine_id, o.region),
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
        "min_price_per_gpu_hour": round(per_gpu(cheapest), 6) if cheapest else None,
        "cheapest": cheapest.as_json() if cheapest else None,
    }
