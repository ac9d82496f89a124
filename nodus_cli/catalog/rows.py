"""The rules of a catalog row: one function, :func:`check`, for every catalog nodus reads.

A row is 13 cells of text in :data:`COLUMNS` order (the fields of
:class:`~nodus_cli.catalog.model.Offer`). :func:`check` applies every rule to it and gives
it back as canonical text: the GPU family for a supplier's spelling, the nominal memory of
the model variant, the arch, the host size; or None for a row with only a spot price
(nothing to rank by on-demand price). A row that breaks a rule raises ValueError with a
message that names the column at fault. ``--catalog`` files, the embedded catalog's build,
and every format ``nodus catalog update`` reads go through it, so a supplier's GPU
spelling is canonicalized the same way wherever it comes from.

The rules that depend only on the machine (GPU spelling, counts, sizes, disk, arch) are
checked once per distinct machine description and remembered, so a catalog that lists one
machine in many regions is checked at the cost of its prices.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import contains

from nodus_cli.catalog.model import HOST_SIZE_EXACT, HOST_SIZE_MINIMUM_VALUE, Offer
from nodus_cli.hardware import gpus

__all__ = [
    "COLUMNS",
    "HOST_SIZE_MINIMUM",
    "MACHINE_COLUMNS",
    "REQUIRED_COLUMNS",
    "Cells",
    "canonical_gpu",
    "cells_of",
    "check",
    "check_offers",
    "number_text",
    "offer",
    "parse_row",
]

#: The columns a catalog file must have (SPEC section 4), in the order the SPEC lists them.
REQUIRED_COLUMNS = (
    "supplier",
    "machine_id",
    "gpu",
    "gpu_count",
    "gpu_memory_gb",
    "vcpus",
    "memory_gb",
    "region",
    "price_per_hour",
    "spot_price_per_hour",
    "arch",
)
#: A row's cells, in order: the fields of :class:`Offer` (``host_size`` for
#: ``size_is_minimum``). Files nodus writes (the embedded catalog, an updated one) have this
#: header; they are read by :func:`nodus_cli.catalog.files.read_canonical`.
COLUMNS = (
    "supplier",
    "machine_id",
    "region",
    "gpu",
    "gpu_count",
    "gpu_memory_gb",
    "vcpus",
    "memory_gb",
    "disk_gb",
    "arch",
    "price_per_hour",
    "spot_price_per_hour",
    "host_size",
)
#: A row as text, in :data:`COLUMNS` order.
Cells = tuple[str, str, str, str, str, str, str, str, str, str, str, str, str]

#: Suppliers whose vCPU and memory figures are a lower bound, not the machine's size, and
#: why (an empty ``host_size`` cell of theirs means "minimum"). vast: every row of its
#: catalog says 32 vCPU / 64 GB, the marketplace search minimum SkyPilot queries with (the
#: ``-32-65536`` in its machine IDs).
HOST_SIZE_MINIMUM: dict[str, str] = {
    "vast": "vast lists every machine at 32 vCPU / 64 GB, the minimum of its marketplace "
    "search, not the machine's size",
}

_ARCH = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "x64": "x86_64",
    "arm64": "arm64",
    "aarch64": "arm64",
}
# vast merges variants in its accelerator name (RTX4070 is also the 4070 Ti SUPER); its
# machine_id carries the exact model: "2x-RTX_4070S_Ti-32-65536".
_VAST_MACHINE = re.compile(r"\d+x-(.+)-\d+-\d+")
# Per-GPU memory a machine ID states when the supplier's GPU column does not.
_MACHINE_MEMORY: tuple[tuple[str, re.Pattern[str], float | None], ...] = (
    # Azure NC*ads_H100_v5 carry the H100 NVL, 94 GB (Azure documentation).
    ("azure", re.compile(r"^Standard_NC\d+ad[a-z]*_H100_v5$"), 94.0),
    # primeintellect: "crusoecloud__8xA100_80GB__96__960".
    ("primeintellect", re.compile(r"x[A-Za-z0-9]+_(\d+)GB__"), None),
)


#: The cells that say what a machine is, in :data:`COLUMNS` order; the other three
#: (region, price_per_hour, spot_price_per_hour) say where it is offered and for how much.
MACHINE_COLUMNS = tuple(
    c for c in COLUMNS if c not in ("region", "price_per_hour", "spot_price_per_hour")
)


def check(cells: Sequence[str]) -> Cells | None:
    """Every rule of a catalog row (13 cells of text, :data:`COLUMNS` order): the row as
    canonical text, or None when it has only a spot price. ValueError names the column at
    fault."""
    s, m, r, g, n, gm, v, mem, d, a, p, sp, h = cells
    (found,) = check_offers((s, m, g, n, gm, v, mem, d, a, h), [r], [p], [sp])
    if isinstance(found, ValueError):
        raise found
    return found


def check_offers(
    machine: Sequence[str],
    regions: list[str],
    prices: list[str],
    spots: list[str],
) -> list[Cells | ValueError | None]:
    """The rows of one machine (its :data:`MACHINE_COLUMNS` cells) offered in each of
    ``regions`` at ``prices`` and ``spots``: per offer, the row as canonical text, None when
    it has only a spot price, or the ValueError that names the column at fault.

    The rules of the machine run once (and are remembered for the next time it is seen);
    those of the prices run on whole columns when every offer plainly passes them (the
    usual case, and much faster for a big file), else offer by offer.
    """
    key = tuple(machine)
    try:
        known = _MACHINES.get(key)
        if known is None:
            if len(_MACHINES) >= _MACHINES_KEPT:
                _MACHINES.clear()
            known = _MACHINES[key] = _machine(*key)
    except ValueError as exc:
        return [exc] * len(prices)
    s, m, g, n, gm, v, mem, d, a, h = known
    if _plain(regions, prices, spots):
        r = repeat  # a machine's cells, the same in each of its rows
        return list(
            zip(
                r(s),
                r(m),
                regions,
                r(g),
                r(n),
                r(gm),
                r(v),
                r(mem),
                r(d),
                r(a),
                prices,
                spots,
                r(h),
                strict=False,  # the repeats are endless; the columns have one length
            )
        )
    found: list[Cells | ValueError | None] = []
    for region, price, spot in zip(regions, prices, spots, strict=True):
        try:
            offer = _offer(price, spot)
        except ValueError as exc:
            found.append(exc)
            continue
        if offer is None:
            found.append(None)
        else:
            found.append((s, m, _region(region), g, n, gm, v, mem, d, a, *offer, h))
    return found


# What _machine gave for each machine description seen (bounded: cleared when full).
_MACHINES: dict[tuple[str, ...], tuple[str, str, str, str, str, str, str, str, str, str]] = {}
_MACHINES_KEPT = 65536


def _region(text: str) -> str:
    """A region without empty parts: vast.ai's without a state is ", US, NA" in SkyPilot's
    file; it is "US, NA"."""
    return ", ".join(part.strip() for part in text.split(",") if part.strip())


def _offer(price: str, spot: str) -> tuple[str, str] | None:
    """The rules of an offer's prices: (price, spot) as text, or None for spot only."""
    spot = spot.strip()
    if spot:
        _amount(spot, "spot_price_per_hour")
    price = price.strip()
    if not price:
        if not spot:
            raise ValueError("price_per_hour is empty")
        return None  # spot only: nothing to rank by on-demand price
    _amount(price, "price_per_hour")
    return price, spot


def _plain(regions: list[str], prices: list[str], spots: list[str]) -> bool:
    """Whether :func:`_offer` passes every offer as it is (and the regions need no
    stripping): its rules, on whole columns at once."""
    for column in (regions, prices, spots):
        if list(map(str.strip, column)) != column:
            return False
    # (a C loop finds the regions with a comma: most have none)
    if any(map(contains, regions, repeat(","))) and any(
        _region(r) != r for r in regions if "," in r
    ):
        return False
    if not all(prices):
        return False
    try:
        for texts in (prices, list(filter(None, spots))):
            values = list(map(float, texts))
            # _amount's rule: a finite number >= 0 (a NaN anywhere makes the sum NaN,
            # which is not < inf).
            if values and not (min(values) >= 0.0 and sum(values) < math.inf):
                return False
    except ValueError:
        return False
    return True


def cells_of(row: Mapping[str, str | None]) -> list[str]:
    """A row given as column name -> cell, as cells in :data:`COLUMNS` order (a missing or
    empty column is "")."""
    g = row.get
    return [g(name) or "" for name in COLUMNS]


def parse_row(row: Mapping[str, str | None]) -> Offer | None:
    """One row given as column name -> cell, checked (:func:`check`), as an offer; None for
    a row with only a spot price."""
    cells = check(cells_of(row))
    return None if cells is None else offer(cells)


def offer(cells: Sequence[str]) -> Offer:
    """The offer of a row :func:`check` gave (no checks: it was checked then)."""
    s, m, r, g, n, gm, v, mem, d, a, p, sp, h = cells
    return Offer(
        s,
        m,
        r,
        g or None,
        int(n or 0),
        float(gm or 0),
        float(v or 0),
        float(mem or 0),
        float(d) if d else None,
        a or "x86_64",
        float(p),
        float(sp) if sp else None,
        h == HOST_SIZE_MINIMUM_VALUE,
    )


def number_text(x: float) -> str:
    """A number as nodus writes it: ``192`` for 192.0, else the shortest exact form."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def canonical_gpu(
    supplier: str, machine_id: str, spelled: str, reported_gb: float | None
) -> tuple[gpus.GpuFamily, float] | None:
    """A supplier's GPU spelling as (family, nominal memory per GPU), or None if unknown.

    The memory is the variant the spelling or machine ID names (``A100-80GB``), else the
    variant nearest the supplier's figure (AWS's 22.4 GB A10G is the 24 GB model), else
    the smallest variant: never more than the machine is known to have.
    """
    table = gpus.table()
    hit = None
    if supplier == "vast":
        m = _VAST_MACHINE.fullmatch(machine_id)
        if m:
            hit = table.resolve_supplier_spelling(m.group(1))
    hit = hit or table.resolve_supplier_spelling(spelled)
    if hit is None:
        return None
    family, implied = hit
    if implied is not None:
        return family, family.nominal_memory(implied)
    figure = reported_gb or _machine_memory(supplier, machine_id)
    return family, family.nominal_memory(figure)


def _machine_memory(supplier: str, machine_id: str) -> float | None:
    for name, pattern, memory in _MACHINE_MEMORY:
        if supplier == name:
            m = pattern.search(machine_id)
            if m:
                return memory if memory is not None else float(m.group(1))
    return None


def _amount(text: str, column: str) -> float:
    """A non-empty cell as a finite number >= 0; ValueError naming the column otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column} is not a number: {text!r}") from None
    if not 0.0 <= value < math.inf:  # also false for nan
        raise ValueError(f"{column} must be a finite number >= 0, not {text!r}")
    return value


def _optional(text: str, column: str) -> float | None:
    text = text.strip()
    return _amount(text, column) if text else None


def _machine(
    supplier: str,
    machine: str,
    gpu: str,
    gpu_count: str,
    gpu_memory_gb: str,
    vcpus: str,
    memory_gb: str,
    disk_gb: str,
    arch: str,
    host_size: str,
) -> tuple[str, str, str, str, str, str, str, str, str, str]:
    """The rules of a row that depend only on the machine, not on its region or price: its
    :data:`MACHINE_COLUMNS` cells as canonical text."""
    supplier = supplier.strip()
    machine = machine.strip()
    if not supplier or not machine:
        raise ValueError("supplier and machine_id must not be empty")
    spelled = gpu.strip()
    count_value = _optional(gpu_count, "gpu_count") or 0.0
    if not count_value.is_integer():
        raise ValueError(f"gpu_count must be a whole number, not {gpu_count!r}")
    count = int(count_value)
    reported = _optional(gpu_memory_gb, "gpu_memory_gb")
    family_name = ""
    memory = 0.0
    if spelled:
        resolved = canonical_gpu(supplier, machine, spelled, reported)
        if resolved is None:
            close = gpus.table().suggestions(spelled)
            hint = f" (closest: {', '.join(close)})" if close else ""
            raise ValueError(f"unknown GPU {spelled!r}{hint}")
        family, memory = resolved
        family_name = family.name
        if count <= 0:
            raise ValueError(f"gpu_count must be at least 1 for GPU {spelled!r}")
    elif count > 0:
        raise ValueError(f"gpu_count is {count} but the gpu column is empty")
    arch_text = arch.strip()
    arch_name = _ARCH.get(arch_text.lower() or "x86_64")
    if arch_name is None:
        raise ValueError(f'arch must be "x86_64" or "arm64", not {arch_text!r}')
    size_text = host_size.strip().lower()
    if not size_text:
        minimum = supplier in HOST_SIZE_MINIMUM
    elif size_text in (HOST_SIZE_EXACT, HOST_SIZE_MINIMUM_VALUE):
        minimum = size_text == HOST_SIZE_MINIMUM_VALUE
    else:
        raise ValueError(
            f'host_size must be "{HOST_SIZE_EXACT}", "{HOST_SIZE_MINIMUM_VALUE}" or empty, '
            f"not {host_size!r}"
        )
    disk = _optional(disk_gb, "disk_gb")
    return (
        supplier,
        machine,
        family_name,
        str(count),
        number_text(memory),
        number_text(_optional(vcpus, "vcpus") or 0.0),
        number_text(_optional(memory_gb, "memory_gb") or 0.0),
        "" if disk is None else number_text(disk),
        arch_name,
        HOST_SIZE_MINIMUM_VALUE if minimum else "",
    )
