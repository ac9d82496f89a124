"""SkyPilot catalog ``vms.csv`` files as nodus catalog rows.

SkyPilot's catalog repository (skypilot-org/skypilot-catalog) keeps one ``vms.csv`` per
cloud and schema version (``catalogs/v6``, ``v7``, ``v8``). The layouts share column names,
not their order or set: ``InstanceType, AcceleratorName, AcceleratorCount, vCPUs,
MemoryGiB, GpuInfo, Price, SpotPrice, Region`` and usually ``AvailabilityZone`` (Azure v6
has ``Generation`` instead, Lambda v8 no zone). A file is recognised by its header and its
columns are found by name.

:meth:`SkyPilotFormat.convert` turns one file into listings (a machine and its offers:
region, prices and the lines each comes from, as text) for the row rules to check, and
refuses, with the lines and the reason, the rows no configuration comes from; the rules
are those the embedded catalog was transcribed by (tools/catalog/SOURCES.md in the source
repository):

- A region's availability zones collapse into one row per (machine, accelerator, count,
  vCPUs, memory, region): the on-demand price is the region's (the highest of its zones
  should they differ), the spot price the lowest over the zones that have one.
- A row with no on-demand price (empty, or 0) is refused; a spot price of 0 is no spot
  price.
- GCP (v8) lists host machines (``InstanceType`` set, no accelerator) and GPUs
  (``InstanceType`` empty) on separate rows. A machine with GPUs is a host row plus the GPU
  row of the pairing in ``GPU_HOST_PAIRINGS`` in the same region: price = host + GPUs,
  spot = host spot + GPU spot when both exist. Hosts of accelerator-optimized families
  (``GPU_HOST_FAMILIES``) are never CPU-only machines; other hosts are. A GPU row whose
  per-GPU price is below ``ANOMALY_RATIO`` of the highest per-GPU price of the same
  accelerator in the file is refused as an anomalous regional price.
- Accelerators that are not GPUs (TPU, Inferentia, Trainium, Gaudi, FPGAs, ...) are
  refused.
- GPU memory: the first ``SizeInMiB`` of ``GpuInfo`` (MiB per GPU), except for suppliers
  in ``GPUINFO_MEMORY`` whose figure is the total of all GPUs, or GB.
- arch: arm64 by ``ARM64_MACHINES`` (Graviton, Ampere, Axion families) or for GPUs that
  come with a Grace CPU (``ARM64_GPUS``), else x86_64.

Speed (a 100,000-row file is read in well under a second; ``benchmarks/catalog_update.py``):
a line is split once, from the right, at its first price cell (``str.rsplit``), and a
file lists a region's zones one after the other, so ``itertools.groupby`` collects them:
no Python code runs per line, only per region. The text before the prices (the head) is
split into its cells once per distinct head. A file whose quoting this cannot follow (a
quoted comma after the head, a cell over two lines) is read by the csv module instead,
and grouped the same way.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import groupby, islice
from operator import itemgetter, methodcaller
from typing import Any

from nodus_cli.catalog.formats import (
    NO_ON_DEMAND_PRICE,
    Converted,
    FormatError,
    Listing,
    Refused,
)

__all__ = [
    "ANOMALY_RATIO",
    "ARM64_GPUS",
    "ARM64_MACHINES",
    "FORMAT",
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

#: GCP host machine types and the GPUs they are sold with: (host pattern, accelerator,
#: count; None: the count is the pattern's first group). The n1 pairings are the ones the
#: embedded catalog uses (within GCP's vCPU-per-GPU limits).
GPU_HOST_PAIRINGS: tuple[tuple[str, str, int | None], ...] = (
    (r"a2-highgpu-(\d+)g", "A100", None),
    (r"a2-megagpu-16g", "A100", 16),
    (r"a2-ultragpu-(\d+)g", "A100-80GB", None),
    (r"a3-highgpu-(\d+)g", "H100", None),
    (r"a3-edgegpu-8g", "H100", 8),
    (r"a3-megagpu-8g", "H100-MEGA", 8),
    (r"a3-ultragpu-8g", "H200", 8),
    (r"g2-standard-(?:4|8|12|16|32)", "L4", 1),
    (r"g2-standard-24", "L4", 2),
    (r"g2-standard-48", "L4", 4),
    (r"g2-standard-96", "L4", 8),
    *(
        (r"n1-standard-4", accelerator, n)
        for accelerator in ("T4", "P4", "P100", "V100")
        for n in (1, 2)
    ),
    *((r"n1-standard-8", accelerator, 1) for accelerator in ("T4", "P4", "P100", "V100")),
    *((r"n1-standard-32", accelerator, 4) for accelerator in ("T4", "P4", "P100", "V100")),
    (r"n1-standard-32", "V100", 8),
)
#: Host families that only exist with accelerators attached: never CPU-only machines.
GPU_HOST_FAMILIES = re.compile(r"(a2|a3|a4|a4x|g2|g4|ct\d[a-z]*|tpu)-")
#: A GPU row below this share of the highest per-GPU price of its accelerator is refused.
ANOMALY_RATIO = 0.6
#: Accelerators that are not GPUs.
NOT_GPUS = re.compile(
    r"^(tpu|inferentia|trainium|gaudi|hl-?205|ai100|qualcomm|xilinx|fpga|vu9p|vu47p|"
    r"u30|habana|aws-neuron)",
    re.IGNORECASE,
)
#: Suppliers whose GpuInfo ``SizeInMiB`` is not MiB per GPU: "total" (MiB for all GPUs
#: together) or "gb" (GB per GPU).
GPUINFO_MEMORY: dict[str, str] = {"vast": "total", "primeintellect": "total", "shadeform": "gb"}
#: Machine types with arm64 CPUs: AWS Graviton (c7g, m6gd, t4g, x2gd, g5g, ...) and a1,
#: Azure's p-series (Ampere Altra: D2ps_v5, E4pds_v5, ...), GCP t2a/c4a/n4a.
ARM64_MACHINES = re.compile(
    r"^(a1\.|[a-z]+\d+g[a-z-]*\.|standard_[a-z]+\d+[a-z]*p[a-z]*_v\d|(t2a|c4a|n4a)-)",
    re.IGNORECASE,
)
#: GPUs sold with a Grace (arm64) CPU.
ARM64_GPUS = frozenset({"GH200", "GB200", "GB300"})
_MIB = re.compile(r"SizeInMiB'?\"?\s*:\s*([0-9.]+)")
#: The columns that identify one machine in one region (its zones collapse).
_KEY = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Region")


@dataclass(frozen=True, slots=True)
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


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _memory_gb(supplier: str, info: str, count: str) -> str:
    """Per-GPU memory in GB (1 decimal) from a GpuInfo cell, or "" when it has none."""
    if not info:
        return ""
    m = _MIB.search(info)
    if m is None:
        return ""
    figure = _num(m.group(1))
    if not figure:
        return ""
    unit = GPUINFO_MEMORY.get(supplier)
    if unit == "gb":
        return f"{figure:.1f}"
    if unit == "total":
        n = _num(count) or 1.0
        figure = figure / n if n > 0 else figure
    return f"{figure / 1024:.1f}"


def _arch(machine: str, accelerator: str) -> str:
    if accelerator.upper() in ARM64_GPUS or ARM64_MACHINES.match(machine):
        return "arm64"
    return "x86_64"


def _price(texts: list[str]) -> str:
    """A region's on-demand price from its zones' cells: the highest (they are the same in
    every zone); 0 is no price; a cell that is not a number is kept for the row rules."""
    first = texts[0]
    if texts.count(first) == len(texts):  # the usual case: one price for the region
        try:
            return "" if float(first) == 0 else first
        except ValueError:
            return first.strip()  # empty, or not a number: the row rules say which
    best_text, best = "", -1.0
    for text in texts:
        text = text.strip()
        if not text:
            continue
        value = _num(text)
        if value is None:
            return text  # not a number: the row rules say so
        if value > best and value != 0:
            best_text, best = text, value
    return best_text


def _spot(texts: list[str]) -> str:
    """A region's spot price: the lowest above 0 over the zones that have one."""
    try:
        lowest = min(map(float, filter(None, texts)), default=None)
    except ValueError:
        lowest = -1.0  # a cell that is not a number: the slow way below finds it
    if lowest is None:
        return ""
    if lowest > 0 and lowest != math.inf:
        return repr(lowest)
    best_text, best = "", math.inf
    for text in texts:
        text = text.strip()
        if not text:
            continue
        value = _num(text)
        if value is None or value != value:
            return text  # not a number: the row rules say so
        if 0 < value < best:
            best_text, best = text, value
    return best_text


def _split(line: str) -> list[str]:
    """One record's cells (the csv module only when the quoting is more than one quoted
    cell)."""
    if '"' not in line:
        return line.split(",")
    parts = line.split('"')
    if (
        len(parts) == 3
        and (not parts[0] or parts[0][-1] == ",")
        and (not parts[2] or parts[2][0] == ",")
    ):
        before = parts[0].split(",")[:-1] if parts[0] else []
        after = parts[2][1:].split(",") if parts[2] else []
        return [*before, parts[1], *after]
    return next(csv.reader((line,)), [])


def _getter(indices: list[int]) -> Callable[[Sequence[str]], object]:
    """What identifies a line among the cells at ``indices`` (comparable, nothing more)."""
    if not indices:
        return lambda cells: ()
    return itemgetter(*indices)


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where a file's columns are, from its header."""

    col: dict[str, int]
    width: int
    #: The first of the cells that differ between the rows of one group (Price, SpotPrice,
    #: AvailabilityZone): a line is split from the right there.
    first: int
    #: Where Price and SpotPrice are in a line split from the right (``parts``).
    price: int
    spot: int
    has_spot: bool
    #: The cells of ``parts`` that identify the group along with the head (Region, ...),
    #: by name, and a getter of the head and those cells.
    right_key_names: tuple[str, ...]
    group_key: Callable[[Sequence[Any]], tuple[Any, ...]]
    #: The cells of ``parts`` that say what the machine is (GpuInfo when it comes late);
    #: None when the head holds all of them.
    machine_right: Callable[[Sequence[str]], object] | None

    @classmethod
    def of(cls, names: list[str]) -> _Layout:
        col = {n: i for i, n in enumerate(names)}
        width = len(names)
        ip = col["Price"]
        isp = col.get("SpotPrice", ip)
        varying = {ip, isp}
        if "AvailabilityZone" in col:  # a region's zones collapse into one group
            varying.add(col["AvailabilityZone"])
        first = min(varying)
        right = [i for i in range(first, width) if i not in varying]
        machine = [col[c] - first + 1 for c in _MACHINE_COLUMNS if col.get(c, -1) >= first]
        return cls(
            col,
            width,
            first,
            ip - first + 1,
            isp - first + 1,
            "SpotPrice" in col,
            tuple(names[i] for i in right),
            # A tuple always (a one-item itemgetter gives the item itself): with no key
            # cells after the head, the head twice.
            itemgetter(0, *(i - first + 1 for i in right)) if right else itemgetter(0, 0),
            _getter(machine) if machine else None,
        )


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


@dataclass(slots=True)
class _Offers:
    """The groups of one head (usually one machine): a group is the rows of one region
    (their zones), with the region's on-demand price and lowest spot price."""

    #: The first row, split as the reader splits it (``parts[0]`` is the head).
    parts: list[Any]
    #: While the file is read: each group's (lines, key, price, spot).
    groups: list[tuple[Sequence[int], tuple[Any, ...], str, str]] = field(default_factory=list)
    lines: list[Sequence[int]] = field(default_factory=list)
    #: Each group's key: the head, then its key cells (Region, ...), as a tuple.
    keys: list[tuple[Any, ...]] = field(default_factory=list)
    #: Each group's on-demand price ("": none) and lowest spot price above 0 ("": none).
    prices: list[str] = field(default_factory=list)
    spots: list[str] = field(default_factory=list)


def _gather(rows: Iterable[list[Any]], layout: _Layout, numbered: bool) -> dict[Any, _Offers]:
    """The rows of a file, one group per run of rows with one key (head and key cells),
    each head's groups together.

    ``rows`` come split (``parts``): from the fast reader (``str.rsplit``), line after line,
    or, ``numbered``, from the csv module, each with its line number last. The grouping is
    ``itertools.groupby`` on the key cells, so the rows of a region's zones, which a file
    lists one after the other, cost no Python code of their own: only each group does. A
    key seen again later in the file makes a second group, merged by :func:`_merged`.
    """
    pp, sp = layout.price, layout.spot
    price_of, spot_of = itemgetter(pp), itemgetter(sp)
    machine_right = layout.machine_right
    has_spot = layout.has_spot
    by_head: dict[Any, _Offers] = {}
    get = by_head.get
    number = 2  # the first data row's line (the header is line 1)
    for key, group in groupby(rows, key=layout.group_key):
        found = list(group)
        n = len(found)
        head = key[0] if machine_right is None else (key[0], machine_right(found[0]))
        offers = get(head)
        if offers is None:
            offers = by_head[head] = _Offers(found[0])
        if numbered:
            lines: Sequence[int] = [row[-1] for row in found]
        else:
            lines = range(number, number + n)
            number += n
        price = found[0][pp]
        if n > 1:
            prices = list(map(price_of, found))
            if prices.count(price) != n:
                price = _price(prices)
        spot = ""
        if has_spot:
            try:  # the lowest spot price (that it is above 0, _checked checks)
                spot = min(filter(None, map(spot_of, found)), key=float, default="")
            except ValueError:
                spot = _spot(list(map(spot_of, found)))
        offers.groups.append((lines, key, price, spot))
    for offers in by_head.values():
        _checked(offers)
    return by_head


def _checked(offers: _Offers) -> None:
    """The groups column by column, each group's price and spot price as :func:`_price`
    and :func:`_spot` give them (0 is no price): the usual case, every one a number above
    0, checked column by column; the others one by one."""
    lines, keys, prices, spots = zip(*offers.groups, strict=True)
    offers.lines, offers.keys = list(lines), list(keys)
    offers.prices, offers.spots = list(prices), list(spots)
    offers.groups = []
    try:
        values = list(map(float, offers.prices))
        found = list(map(float, filter(None, offers.spots)))
    except ValueError:
        values = found = []
    else:
        # Above 0 and finite (a NaN anywhere makes the sum NaN, which is not < inf).
        if (not values or (min(values) > 0 and sum(values) < math.inf)) and (
            not found or (min(found) > 0 and sum(found) < math.inf)
        ):
            return
    offers.prices = [_price([p]) for p in offers.prices]
    offers.spots = [_spot([p]) for p in offers.spots]


def _fast_rows(lines: list[str], layout: _Layout) -> Iterator[list[Any]]:
    """Every data line split from the right at ``layout.first`` (C loops only)."""
    end = len(lines) - 1 if lines[-1] == "" else len(lines)
    return map(methodcaller("rsplit", ",", layout.width - layout.first), islice(lines, 1, end))


def _slow_rows(text: str, layout: _Layout) -> Iterator[list[Any]]:
    """Every record, read by the csv module, split like :func:`_fast_rows` (its head the
    tuple of its first cells) with the line it starts on last."""
    width, first = layout.width, layout.first
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        next(reader, None)
        start = reader.line_num + 1
        for cells in reader:
            if any(c.strip() for c in cells):
                if len(cells) != width:
                    cells = (cells + [""] * width)[:width]
                yield [tuple(cells[:first]), *cells[first:], start]
            start = reader.line_num + 1
    except csv.Error as exc:
        line = reader.line_num
        raise FormatError(f"not a readable CSV file at line {line}: {exc}", line=line) from None


def _read(
    text: str, lines: list[str], layout: _Layout
) -> tuple[dict[Any, _Offers], dict[Any, list[str]]]:
    """The file's groups by head, and each head's cells: by the fast reader when every
    line is one record with no quote after its head (every quote of the file is in a
    head, and each head splits into ``layout.first`` cells), else by the csv module."""
    heads: dict[Any, list[str]] = {}
    try:
        by_head = _gather(_fast_rows(lines, layout), layout, numbered=False)
        quoted = 0  # the quote characters in the heads, over every row
        for head, offers in by_head.items():
            text_head = head if layout.machine_right is None else head[0]
            cells = _head_cells(text_head, layout.first)
            if cells is None:
                raise _Slow
            heads[text_head] = cells
            quoted += text_head.count('"') * sum(map(len, offers.lines))
        if quoted != text.count('"') - lines[0].count('"'):
            raise _Slow  # a quote after a head: its cells are not what rsplit gave
    except (_Slow, IndexError):  # IndexError: a line shorter than the header
        by_head = _gather(_slow_rows(text, layout), layout, numbered=True)
        heads = {}
        for head in by_head:
            text_head = head if layout.machine_right is None else head[0]
            heads[text_head] = list(text_head)
    return _merged(by_head, heads, layout), heads


class _Slow(Exception):
    """The fast reader cannot read this file."""


def _head_cells(head: str, first: int) -> list[str] | None:
    """A head text split into its cells; None when it is not ``first`` cells (a quoted
    cell that goes on over the next line, or a comma in a quoted cell after the head)."""
    if head.count('"') % 2:
        return None
    try:
        found = _split(head)
    except csv.Error:
        return None
    return found if len(found) == first else None


def _merged(
    by_head: dict[Any, _Offers], heads: dict[Any, list[str]], layout: _Layout
) -> dict[Any, _Offers]:
    """One :class:`_Offers` per machine and one group per key: the groups of a key seen
    twice (rows out of order), and of heads that differ only in a cell that does not say
    which machine it is (AWS p4de's two GpuInfo spellings), combined. A combined group's
    price is the highest of its parts', its spot price the lowest: as over all its rows."""
    key_of = _getter([layout.col[c] for c in _KEY if layout.col[c] < layout.first])
    machines: dict[Any, list[tuple[Any, _Offers]]] = {}
    for head, offers in by_head.items():
        text_head = head if layout.machine_right is None else head[0]
        machine = (key_of(heads[text_head]), head[1] if layout.machine_right else None)
        machines.setdefault(machine, []).append((head, offers))
    tail = itemgetter(slice(1, None))  # a group's key cells after the head
    if all(
        len(o) == 1 and len(set(map(tail, o[0][1].keys))) == len(o[0][1].keys)
        for o in machines.values()
    ):
        return by_head  # the usual case: nothing to combine
    merged: dict[Any, _Offers] = {}
    for group in machines.values():
        head, first = group[0]
        into = merged[head] = _Offers(first.parts)
        at: dict[object, int] = {}
        for _, offers in group:
            for lines, key, price, spot in zip(
                offers.lines, offers.keys, offers.prices, offers.spots, strict=True
            ):
                same = at.get(key[1:])
                if same is None:
                    at[key[1:]] = len(into.keys)
                    into.lines.append(lines)
                    into.keys.append(key)
                    into.prices.append(price)
                    into.spots.append(spot)
                    continue
                into.lines[same] = [*into.lines[same], *lines]
                into.prices[same] = _price([into.prices[same], price])
                into.spots[same] = _spot([into.spots[same], spot])
    return merged


def _convert(text: str, supplier: str) -> Converted:
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    names = _header(lines)
    layout = _Layout.of(names)
    by_head, heads = _read(text, lines, layout)
    result = Converted(FORMAT.name, "skypilot")
    result.rows_read = sum(sum(map(len, o.lines)) for o in by_head.values())
    if _split_layout(by_head, heads, layout):
        _emit_split(by_head, heads, layout, supplier, result)
    else:
        _emit_all(by_head, heads, layout, supplier, result)
    return result


@dataclass(slots=True)
class _Group:
    """The zones of one machine in one region, collapsed into one row."""

    lines: Sequence[int]
    machine: str
    accelerator: str
    count: str
    vcpus: str
    memory: str
    info: str
    region: str
    price_text: str
    spot_text: str

    @property
    def price(self) -> float | None:
        return _num(self.price_text) if self.price_text else None

    @property
    def spot(self) -> float | None:
        return _num(self.spot_text) if self.spot_text else None


def _emit_all(
    by_head: dict[Any, _Offers],
    heads: dict[Any, list[str]],
    layout: _Layout,
    supplier: str,
    result: Converted,
) -> None:
    """Each machine's groups as its configurations (or refused)."""
    col = layout.col
    first = layout.first
    ir = col["Region"]
    region_of = itemgetter(1 + layout.right_key_names.index("Region")) if ir >= first else None
    machine_cols = [col[c] for c in _MACHINE_COLUMNS if c in col]
    for head, offers in by_head.items():
        head_cells = heads[head if layout.machine_right is None else head[0]]
        cells = head_cells + offers.parts[1:]
        listing = _machine(supplier, *(cells[i] for i in machine_cols))
        if isinstance(listing, str):  # why the machine is refused
            result.refused.extend(
                Refused(lines[0], listing, tuple(lines)) for lines in offers.lines
            )
            continue
        result.listings.append(listing)
        regions = (
            list(map(region_of, offers.keys))
            if region_of is not None
            else [head_cells[ir]] * len(offers.keys)
        )
        if "" not in offers.prices:  # the usual case: every group has a price
            listing.lines, listing.regions = offers.lines, regions
            listing.prices, listing.spots = offers.prices, offers.spots
            continue
        for lines, region, price, spot in zip(
            offers.lines, regions, offers.prices, offers.spots, strict=True
        ):
            if price:
                listing.add(lines, region, price, spot)
            else:
                result.refused.append(Refused(lines[0], NO_ON_DEMAND_PRICE, tuple(lines)))


#: The columns that say what a machine is (its GPU, size), in _machine's order.
_MACHINE_COLUMNS = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "GpuInfo",
)


def _machine(
    supplier: str,
    machine: str,
    accelerator: str,
    count: str,
    vcpus: str,
    memory: str,
    info: str = "",
) -> Listing | str:
    """A machine's listing (its MACHINE_COLUMNS cells, no offers yet), or why it is
    refused."""
    if accelerator and NOT_GPUS.match(accelerator):
        return f"not a GPU ({accelerator.split('-')[0]})"
    arch = _arch(machine, accelerator)
    if not accelerator:
        return Listing((supplier, machine, "", "0", "", vcpus, memory, "", arch, ""))
    gpu_memory = _memory_gb(supplier, info, count)
    return Listing(
        (supplier, machine, accelerator, count or "0", gpu_memory, vcpus, memory, "", arch, "")
    )


def _split_layout(
    by_head: dict[Any, _Offers], heads: dict[Any, list[str]], layout: _Layout
) -> bool:
    """Whether the file lists GPUs on rows of their own (GCP): no InstanceType."""
    im, ia = layout.col["InstanceType"], layout.col["AcceleratorName"]
    for head, offers in by_head.items():
        cells = heads[head if layout.machine_right is None else head[0]] + offers.parts[1:]
        if not cells[im] and cells[ia]:
            return True
    return False


def _emit_split(
    by_head: dict[Any, _Offers],
    heads: dict[Any, list[str]],
    layout: _Layout,
    supplier: str,
    result: Converted,
) -> None:
    """GCP: hosts and GPUs on rows of their own, priced together (:func:`_pair`)."""
    col = layout.col
    ig = col.get("GpuInfo")
    ir = col["Region"]
    first = layout.first
    region_of = itemgetter(1 + layout.right_key_names.index("Region")) if ir >= first else None
    hosts: list[_Group] = []
    gpus: list[_Group] = []
    for head, offers in by_head.items():
        head_cells = heads[head if layout.machine_right is None else head[0]]
        cells = head_cells + offers.parts[1:]
        machine, accelerator = cells[col["InstanceType"]], cells[col["AcceleratorName"]]
        if accelerator and NOT_GPUS.match(accelerator):
            why = f"not a GPU ({accelerator.split('-')[0]})"
            result.refused.extend(Refused(lines[0], why, tuple(lines)) for lines in offers.lines)
            continue
        for lines, key, price, spot in zip(
            offers.lines, offers.keys, offers.prices, offers.spots, strict=True
        ):
            group = _Group(
                lines,
                machine,
                accelerator,
                cells[col["AcceleratorCount"]],
                cells[col["vCPUs"]],
                cells[col["MemoryGiB"]],
                cells[ig] if ig is not None else "",
                region_of(key) if region_of is not None else head_cells[ir],
                price,
                spot,
            )
            (hosts if machine else gpus).append(group)
    result.layout = "skypilot (host and GPU rows priced together)"
    result.shared_rows = True
    _pair(hosts, gpus, supplier, result)


@lru_cache(maxsize=1024)
def _pairs(machine: str) -> tuple[tuple[str, str], ...]:
    """The (accelerator, count) pairings of a GCP host machine type (empty: none)."""
    found = []
    for pattern, accelerator, fixed in _PAIRINGS:
        m = pattern.fullmatch(machine)
        if m is not None:
            found.append((accelerator, str(fixed if fixed is not None else int(m.group(1)))))
    return tuple(found)


_PAIRINGS = tuple((re.compile(p), a, n) for p, a, n in GPU_HOST_PAIRINGS)


def _emit(
    result: Converted,
    supplier: str,
    g: _Group,
    *,
    price: float | None = None,
    spot: float | None = None,
    gpu: _Group | None = None,
) -> None:
    accelerator = gpu.accelerator if gpu else g.accelerator
    count = gpu.count if gpu else g.count
    lines = [*g.lines, *gpu.lines] if gpu else g.lines
    if price is None and not g.price_text:
        result.refused.append(Refused(lines[0], NO_ON_DEMAND_PRICE, tuple(lines)))
        return
    price_text = _price_text(price) if price is not None else g.price_text
    spot_text = g.spot_text
    if gpu is not None:
        spot_text = _price_text(spot) if spot is not None else ""
    info = gpu.info if gpu else g.info
    result.add(
        (
            supplier,
            g.machine,
            g.region,
            accelerator,
            count if accelerator else "0",
            _memory_gb(supplier, info, count) if accelerator else "",
            g.vcpus,
            g.memory,
            "",
            _arch(g.machine, accelerator),
            price_text,
            spot_text,
            "",
        ),
        lines,
    )


def _price_text(value: float) -> str:
    return repr(round(value, 6))


def _pair(hosts: list[_Group], gpus: list[_Group], supplier: str, result: Converted) -> None:
    """GCP: each host row with the GPU rows of its pairings in the same region."""
    refused = result.refused
    # Per-GPU prices: the highest of each accelerator, to refuse anomalous regional rows.
    top: dict[str, float] = {}
    for g in gpus:
        n = _num(g.count) or 0.0
        price = g.price
        if price is not None and n > 0:
            top[g.accelerator] = max(top.get(g.accelerator, 0.0), price / n)
    by_region: dict[tuple[str, str, str], _Group] = {}
    used: set[int] = set()
    for g in gpus:
        n = _num(g.count) or 0.0
        price = g.price
        if price is None or n <= 0:
            refused.append(Refused(g.lines[0], NO_ON_DEMAND_PRICE, tuple(g.lines)))
            continue
        if price / n < ANOMALY_RATIO * top[g.accelerator]:
            reason = f"anomalous regional GPU price ({g.accelerator})"
            refused.append(Refused(g.lines[0], reason, tuple(g.lines)))
            continue
        by_region.setdefault((g.accelerator, _count(g.count), g.region), g)
    for host in hosts:
        if host.accelerator:  # a machine row that carries its accelerator itself
            _emit(result, supplier, host)
            continue
        pairings = _pairs(host.machine)
        for accelerator, count in pairings:
            gpu = by_region.get((accelerator, count, host.region))
            if gpu is None or gpu.price is None:
                continue
            host_price = host.price
            if host_price is None:
                refused.append(Refused(host.lines[0], NO_ON_DEMAND_PRICE, ()))
                continue
            host_spot, gpu_spot = host.spot, gpu.spot
            spot = host_spot + gpu_spot if host_spot is not None and gpu_spot is not None else None
            _emit(result, supplier, host, price=host_price + gpu.price, spot=spot, gpu=gpu)
            used.update(gpu.lines)
            used.update(host.lines)
        if GPU_HOST_FAMILIES.match(host.machine):
            if host.lines[0] not in used:
                reason = "GPU host without a known pairing" if not pairings else "unpaired GPU host"
                refused.append(Refused(host.lines[0], reason, tuple(host.lines)))
            continue
        _emit(result, supplier, host)  # a CPU-only machine (n1 hosts are sold bare too)
        used.update(host.lines)
    # GPU rows no host was paired with (counted, not reported by name, in this version).
    for g in by_region.values():
        if g.lines[0] not in used:
            refused.append(Refused(g.lines[0], "GPU row without a host", tuple(g.lines)))


def _count(text: str) -> str:
    """``8.0`` -> ``8`` (SkyPilot writes counts as floats); anything else as written."""
    value = _num(text) if text else None
    if value is not None and value.is_integer():
        return str(int(value))
    return text
