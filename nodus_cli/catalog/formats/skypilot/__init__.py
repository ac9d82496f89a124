"""SkyPilot catalog ``vms.csv`` files as nodus catalog rows.

SkyPilot's catalog repository (skypilot-org/skypilot-catalog) keeps one ``vms.csv`` per
cloud and schema version (``catalogs/v6`` to ``v9``). The layouts share column names, not
their order or set: ``InstanceType, AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB,
Price, Region`` always; ``GpuInfo``, ``SpotPrice`` and ``AvailabilityZone`` mostly (Azure
v6 has ``Generation`` instead of a zone, Lambda no zone); ``Arch`` in AWS v8 and v9, and
the local-disk columns in AWS v9. A file is recognised by its header and its columns are
found by name.

:meth:`SkyPilotFormat.convert` turns one file into listings (a machine and its offers:
region, prices and the lines each comes from, as text) for the row rules to check, and
refuses, with the lines and the reason, the rows no configuration comes from:

- A region's zones collapse into one configuration per (machine, accelerator, count,
  vCPUs, memory, region): the on-demand price is the region's (the highest of its zones
  should they differ), the spot price the lowest above 0 over the zones that have one.
- A row with no on-demand price (empty, or 0) is refused; a spot price of 0 is none.
- An accelerator that is not a GPU (TPU, Inferentia, Trainium, Gaudi, FPGAs, ...) is
  refused. What a row's machine is: :mod:`.machines`.
- GCP lists hosts and GPUs on rows of their own, priced together zone by zone: :mod:`.gcp`.

The modules: :mod:`.reading` (the rows in groups, fast), :mod:`.machines` (what a row's
machine is), :mod:`.gcp` (GCP's hosts and GPUs), this one (the format, and the rows a
group gives).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from nodus_cli.catalog.formats import NO_ON_DEMAND_PRICE, Converted, FormatError, Refused
from nodus_cli.catalog.formats.skypilot import gcp
from nodus_cli.catalog.formats.skypilot.gcp import GPU_HOST_FAMILIES, GPU_HOST_PAIRINGS
from nodus_cli.catalog.formats.skypilot.machines import (
    ARM64_GPUS,
    ARM64_MACHINES,
    GB_UNDER_MIB_LABEL,
    GPUINFO_MEMORY,
    MACHINE_COLUMNS,
    NOT_GPUS,
    listing,
)
from nodus_cli.catalog.formats.skypilot.reading import Layout, Offers, read
from nodus_cli.structs import struct

__all__ = [
    "ARM64_GPUS",
    "ARM64_MACHINES",
    "FORMAT",
    "GB_UNDER_MIB_LABEL",
    "GPUINFO_MEMORY",
    "GPU_HOST_FAMILIES",
    "GPU_HOST_PAIRINGS",
    "NOT_GPUS",
    "OPTIONAL",
    "REQUIRED",
    "SkyPilotFormat",
]

#: Columns a SkyPilot vms.csv always has (in any order).
REQUIRED = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "Price",
    "Region",
)


#: Columns used when present.
OPTIONAL = ("GpuInfo", "SpotPrice", "AvailabilityZone")


@struct(frozen=True)
class SkyPilotFormat:
    name: str = "skypilot"

    def detect(self, header: Sequence[str]) -> bool:
        present = {h.strip().lstrip("\ufeff") for h in header}
        return all(c in present for c in REQUIRED)

    def convert(self, text: str, supplier: str) -> Converted:
        """The rows of a SkyPilot vms.csv, for ``supplier``; FormatError when the text is
        not one (the message says what is missing)."""
        return _convert(text, supplier)


FORMAT = SkyPilotFormat()


def _header(lines: list[str]) -> list[str]:
    try:
        header = next(csv.reader(lines[:1]), [])
    except csv.Error as exc:
        raise FormatError(f"not a readable CSV file: {exc}", line=1) from None
    names = [h.strip().lstrip("\ufeff") for h in header]
    if not FORMAT.detect(names):
        missing = [c for c in REQUIRED if c not in names]
        raise FormatError(f"not a SkyPilot vms.csv: the header lacks {', '.join(missing)}", 1)
    return names


def _convert(text: str, supplier: str) -> Converted:
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    names = _header(lines)
    layout = Layout.of(names)
    by_head, heads = read(text, lines, layout)
    result = Converted(FORMAT.name, "skypilot")
    result.rows_read = sum(sum(map(len, o.lines)) for o in by_head.values())
    if _is_split(by_head, heads, layout):
        # GCP: a host and its GPUs are priced zone by zone, with the prices as the rows
        # give them (a host's 0.0 is a price), then each machine's zones collapse.
        layout = Layout.of(names, by_zone=True)
        by_head, heads = read(text, lines, layout, zero_is_none=False)
        gcp.emit(by_head, heads, layout, supplier, result)
    else:
        _emit_all(by_head, heads, layout, supplier, result)
    return result


def _emit_all(
    by_head: dict[Any, Offers],
    heads: dict[Any, list[str]],
    layout: Layout,
    supplier: str,
    result: Converted,
) -> None:
    """Each machine's groups as its configurations (or refused)."""
    col = layout.col
    first = layout.first
    ir = col["Region"]
    region_of = itemgetter(layout.right_key_names.index("Region")) if ir >= first else None
    machine_cols = [(c, col[c]) for c in MACHINE_COLUMNS if c in col]
    for head, offers in by_head.items():
        head_cells = heads[head if layout.machine_right is None else head[0]]
        cells = head_cells + offers.parts[1:]
        found = listing(supplier, {name: cells[i] for name, i in machine_cols})
        if isinstance(found, str):  # why the machine is refused
            result.refused.extend(Refused(lines[0], found, tuple(lines)) for lines in offers.lines)
            continue
        result.listings.append(found)
        regions = (
            list(map(region_of, offers.keys))
            if region_of is not None
            else [head_cells[ir]] * len(offers.keys)
        )
        if "" not in offers.prices:  # the usual case: every group has a price
            found.lines, found.regions = offers.lines, regions
            found.prices, found.spots = offers.prices, offers.spots
            continue
        for lines, region, price, spot in zip(
            offers.lines, regions, offers.prices, offers.spots, strict=True
        ):
            if price:
                found.add(lines, region, price, spot)
            else:
                result.refused.append(Refused(lines[0], NO_ON_DEMAND_PRICE, tuple(lines)))


def _is_split(by_head: dict[Any, Offers], heads: dict[Any, list[str]], layout: Layout) -> bool:
    """Whether the file lists GPUs on rows of their own (GCP): no InstanceType."""
    im, ia = layout.col["InstanceType"], layout.col["AcceleratorName"]
    for head, offers in by_head.items():
        cells = heads[head if layout.machine_right is None else head[0]] + offers.parts[1:]
        if not cells[im] and cells[ia]:
            return True
    return False
