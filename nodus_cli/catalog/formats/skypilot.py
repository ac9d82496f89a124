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
from nodus_cli.catalog.rows import number_text

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


def _pairing_table() -> dict[str, tuple[tuple[str, int], ...]]:
    table: dict[str, list[tuple[str, int]]] = {}

    def pair(host: str, accelerator: str, count: int) -> None:
        table.setdefault(host, []).append((accelerator, count))

    for n in (1, 2, 4, 8):
        pair(f"a2-highgpu-{n}g", "A100", n)
        pair(f"a2-ultragpu-{n}g", "A100-80GB", n)
        pair(f"a3-highgpu-{n}g", "H100", n)
    pair("a2-megagpu-16g", "A100", 16)
    pair("a3-edgegpu-8g", "H100", 8)
    pair("a3-megagpu-8g", "H100-MEGA", 8)
    pair("a3-ultragpu-8g", "H200", 8)
    pair("a4-highgpu-8g", "B200", 8)
    for size in (4, 8, 12, 16, 32):
        pair(f"g2-standard-{size}", "L4", 1)
    for size, n in ((24, 2), (48, 4), (96, 8)):
        pair(f"g2-standard-{size}", "L4", n)
    for accelerator in ("T4", "P4", "P100", "V100"):
        pair("n1-standard-4", accelerator, 1)
        pair("n1-standard-4", accelerator, 2)
        pair("n1-standard-8", accelerator, 1)
        pair("n1-standard-32", accelerator, 4)
    pair("n1-standard-32", "V100", 8)
    return {host: tuple(pairs) for host, pairs in table.items()}


#: GCP host machine types and the GPUs (accelerator, count) they are sold with: SkyPilot's
#: table (``_ACC_INSTANCE_TYPE_DICTS`` in sky/catalog/gcp_catalog.py), with a3-edgegpu-8g
#: (A3 Edge: 8 H100) besides; for n1 the pairings the embedded catalog uses (within GCP's
#: vCPU-per-GPU limits), where SkyPilot picks the cheapest n1 type big enough.
GPU_HOST_PAIRINGS: dict[str, tuple[tuple[str, int], ...]] = _pairing_table()
#: The other way round: (accelerator, count as text) -> its host types.
_HOSTS: dict[tuple[str, str], list[str]] = {}
for _host, _pairs_of in GPU_HOST_PAIRINGS.items():
    for _accelerator, _n in _pairs_of:
        _HOSTS.setdefault((_accelerator, str(_n)), []).append(_host)
#: Host families that only exist with accelerators attached: never CPU-only machines.
GPU_HOST_FAMILIES = re.compile(r"(a2|a3|a4|a4x|g2|g4|ct\d[a-z]*|tpu)-")
#: Accelerators that are not GPUs.
NOT_GPUS = re.compile(
    r"^(tpu|inferentia|trainium|gaudi|hl-?205|ai100|qualcomm|xilinx|fpga|vu9p|vu47p|"
    r"u30|habana|aws-neuron)",
    re.IGNORECASE,
)
#: Suppliers whose GpuInfo ``SizeInMiB`` is the MiB of all the machine's GPUs together,
#: not of one.
GPUINFO_MEMORY: dict[str, str] = {"vast": "total", "primeintellect": "total"}
#: A ``SizeInMiB`` below this is a figure in GB under the MiB label (no GPU has less than
#: 1 GiB): RunPod's fetcher copies RunPod's ``memoryInGb`` there (80 for an 80 GB A100),
#: shadeform's likewise.
GB_UNDER_MIB_LABEL = 1024
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
    if GPUINFO_MEMORY.get(supplier) == "total":
        n = _num(count) or 1.0
        figure = figure / n if n > 0 else figure
    if figure < GB_UNDER_MIB_LABEL:
        return f"{figure:.1f}"  # GB already
    return f"{figure / 1024:.1f}"


def _arch(machine: str, accelerator: str) -> str:
    if accelerator.upper() in ARM64_GPUS or ARM64_MACHINES.match(machine):
        return "arm64"
    return "x86_64"


def _highest(texts: Iterable[str]) -> str:
    """The highest number among cells (empty ones aside), as its text; a cell that is not a
    number is given back instead, for the row rules to refuse; "" when all are empty."""
    best_text, best = "", -math.inf
    for text in texts:
        text = text.strip()
        if text:
            value = _num(text)
            if value is None or value != value:
                return text
            if value > best:
                best_text, best = text, value
    return best_text


def _lowest(texts: Iterable[str]) -> str:
    """The lowest number among cells, as :func:`_highest` finds the highest."""
    best_text, best = "", math.inf
    for text in texts:
        text = text.strip()
        if text:
            value = _num(text)
            if value is None or value != value:
                return text
            if value < best or not best_text:
                best_text, best = text, value
    return best_text


def _price(texts: list[str]) -> str:
    """A region's on-demand price from its zones' cells: the highest (they are the same in
    every zone); 0 is no price; a cell that is not a number is kept for the row rules."""
    return _highest(t for t in texts if _num(t) != 0)


def _spot(texts: list[str]) -> str:
    """A region's spot price: the lowest above 0 over the zones that have one (0 is no
    spot price; a cell that is not a number is kept for the row rules)."""
    return _lowest(t for t in texts if _not_zero_or_less(t))


def _not_zero_or_less(text: str) -> bool:
    value = _num(text)
    return value is None or value > 0


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
    #: The first of the cells that differ between the rows of one group (Price, SpotPrice
    #: and, unless each zone is a group of its own, AvailabilityZone): a line is split from
    #: the right there.
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
    #: The columns that say which group a row is in: _KEY, and the zone when each zone
    #: is a group of its own.
    identity: tuple[str, ...] = ()

    @classmethod
    def of(cls, names: list[str], *, by_zone: bool = False) -> _Layout:
        col = {n: i for i, n in enumerate(names)}
        width = len(names)
        ip = col["Price"]
        isp = col.get("SpotPrice", ip)
        varying = {ip, isp}
        if "AvailabilityZone" in col and not by_zone:  # a region's zones make one group
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
            (*_KEY, "AvailabilityZone") if by_zone and "AvailabilityZone" in col else _KEY,
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


def _gather(
    rows: Iterable[list[Any]], layout: _Layout, numbered: bool, *, zero_is_none: bool = True
) -> tuple[dict[Any, _Offers], bool]:
    """The rows of a file, one group per run of rows with one key (head and key cells),
    each head's groups together.

    ``rows`` come split (``parts``): from the fast reader (``str.rsplit``), line after line,
    or, ``numbered``, from the csv module, each with its line number last. The grouping is
    ``itertools.groupby`` on the key cells, so the rows of a region's zones, which a file
    lists one after the other, cost no Python code of their own: only each group does. A
    key seen again later in the file makes a second group, merged by :func:`_merged` (the
    second value says whether one was). Unless ``zero_is_none`` is False, a price or spot
    price of 0 is none (:func:`_checked`).
    """
    pp, sp = layout.price, layout.spot
    price_of, spot_of = itemgetter(pp), itemgetter(sp)
    machine_right = layout.machine_right
    has_spot = layout.has_spot
    by_head: dict[Any, _Offers] = {}
    get = by_head.get
    seen: set[tuple[Any, ...]] = set()
    see = seen.add
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
        see(key)  # the head's hash is known by now: cheap
    for offers in by_head.values():
        _checked(offers, zero_is_none)
    return by_head, len(seen) != sum(len(o.keys) for o in by_head.values())


def _checked(offers: _Offers, zero_is_none: bool = True) -> None:
    """The groups column by column, each group's price and spot price as :func:`_price`
    and :func:`_spot` give them (0 is no price): the usual case, every one a number above
    0, checked column by column; the others one by one."""
    lines, keys, prices, spots = zip(*offers.groups, strict=True)
    offers.lines, offers.keys = list(lines), list(keys)
    offers.prices, offers.spots = list(prices), list(spots)
    offers.groups = []
    if not zero_is_none:
        return
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
    text: str, lines: list[str], layout: _Layout, *, zero_is_none: bool = True
) -> tuple[dict[Any, _Offers], dict[Any, list[str]]]:
    """The file's groups by head, and each head's cells: by the fast reader when every
    line is one record with no quote after its head (every quote of the file is in a
    head, and each head splits into ``layout.first`` cells), else by the csv module."""
    heads: dict[Any, list[str]] = {}
    try:
        by_head, repeated = _gather(
            _fast_rows(lines, layout), layout, False, zero_is_none=zero_is_none
        )
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
        by_head, repeated = _gather(
            _slow_rows(text, layout), layout, True, zero_is_none=zero_is_none
        )
        heads = {}
        for head in by_head:
            text_head = head if layout.machine_right is None else head[0]
            heads[text_head] = list(text_head)
    return _merged(by_head, heads, layout, repeated, zero_is_none), heads


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
    by_head: dict[Any, _Offers],
    heads: dict[Any, list[str]],
    layout: _Layout,
    repeated: bool,
    zero_is_none: bool = True,
) -> dict[Any, _Offers]:
    """One :class:`_Offers` per machine and one group per key: the groups of a key seen
    twice (rows out of order), and of heads that differ only in a cell that does not say
    which machine it is (AWS p4de's two GpuInfo spellings), combined. A combined group's
    price is the highest of its parts', its spot price the lowest: as over all its rows."""
    key_of = _getter([layout.col[c] for c in layout.identity if layout.col[c] < layout.first])
    machines: dict[Any, list[tuple[Any, _Offers]]] = {}
    for head, offers in by_head.items():
        text_head = head if layout.machine_right is None else head[0]
        machine = (key_of(heads[text_head]), head[1] if layout.machine_right else None)
        machines.setdefault(machine, []).append((head, offers))
    if not repeated and len(machines) == len(by_head):
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
                both = [into.prices[same], price]
                into.prices[same] = _price(both) if zero_is_none else _highest(both)
                both = [into.spots[same], spot]
                into.spots[same] = _spot(both) if zero_is_none else _lowest(both)
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
        # GCP: a host and its GPUs are priced zone by zone, with the prices as the rows
        # give them (a host's 0.0 is a price), then each machine's zones collapse.
        layout = _Layout.of(names, by_zone=True)
        by_head, heads = _read(text, lines, layout, zero_is_none=False)
        _emit_split(by_head, heads, layout, supplier, result)
    else:
        _emit_all(by_head, heads, layout, supplier, result)
    return result


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
    machine_cols = [(c, col[c]) for c in _MACHINE_COLUMNS if c in col]
    for head, offers in by_head.items():
        head_cells = heads[head if layout.machine_right is None else head[0]]
        cells = head_cells + offers.parts[1:]
        listing = _machine(supplier, {name: cells[i] for name, i in machine_cols})
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


#: The columns that say what a machine is (its GPU, size, CPU architecture, local disk).
_MACHINE_COLUMNS = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "GpuInfo",
    "Arch",
    "LocalDiskSize",
    "LocalDiskCount",
)


def _machine(supplier: str, cells: dict[str, str]) -> Listing | str:
    """A machine's listing (its MACHINE_COLUMNS cells, no offers yet) from its cells by
    column name, or why it is refused."""
    g = cells.get
    machine, accelerator = g("InstanceType", ""), g("AcceleratorName", "")
    count = g("AcceleratorCount", "")
    if accelerator and NOT_GPUS.match(accelerator):
        return f"not a GPU ({accelerator.split('-')[0]})"
    arch = _ARCH_COLUMN.get(g("Arch", "").strip().lower()) or _arch(machine, accelerator)
    disk = _local_disk(g("LocalDiskSize", ""), g("LocalDiskCount", ""))
    vcpus, memory = g("vCPUs", ""), g("MemoryGiB", "")
    if not accelerator:
        return Listing((supplier, machine, "", "0", "", vcpus, memory, disk, arch, ""))
    gpu_memory = _memory_gb(supplier, g("GpuInfo", ""), count)
    return Listing(
        (supplier, machine, accelerator, count or "0", gpu_memory, vcpus, memory, disk, arch, "")
    )


#: SkyPilot's Arch column (AWS v8 and later): the CPU architecture of the machine type.
#: ``i386`` marks the old types that also run 32-bit code: they are x86_64 machines.
_ARCH_COLUMN = {"x86_64": "x86_64", "arm64": "arm64", "i386": "x86_64"}


def _local_disk(size: str, count: str) -> str:
    """The machine's local disk in GB: LocalDiskSize (GB per disk, as AWS's
    InstanceStorageInfo gives it) times LocalDiskCount, of either type (SSD or HDD); ""
    when the machine has none."""
    per_disk, disks = _num(size) if size else None, _num(count) if count else None
    if not per_disk or not disks:
        return ""
    return number_text(per_disk * disks)


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


@dataclass(slots=True)
class _Zone:
    """A host row or a GPU row of a split layout: one zone's (identical rows together)."""

    lines: list[int]
    machine: str
    accelerator: str
    count: str
    vcpus: str
    memory: str
    info: str
    region: str
    zone: str
    price: float
    spot: float | None
    used: bool = False


def _emit_split(
    by_head: dict[Any, _Offers],
    heads: dict[Any, list[str]],
    layout: _Layout,
    supplier: str,
    result: Converted,
) -> None:
    """GCP: hosts and GPUs on rows of their own, priced together zone by zone.

    Every host row is paired with the GPU row of each of its pairings
    (:data:`GPU_HOST_PAIRINGS`; a ``-nolssd`` or ``-lssd`` host pairs like its twin) in the
    same zone: price = host price + GPU price, spot = host spot + GPU spot when both rows
    have one. A host's 0.0 is a price (A4 hosts: the B200 row carries the whole VM's
    price); a GPU's 0 is none. Then a machine's zones in a region collapse: the highest
    price (they agree), the lowest spot price. A host of a family sold only with GPUs that
    finds no GPU row to pair with in its zone, and a GPU row with no host row in its zone,
    are refused, each with the reason; hosts of other families are CPU-only machines too.
    """
    col = layout.col
    ig = col.get("GpuInfo")
    cell_of = {name: _cell_getter(layout, heads, name) for name in ("Region", "AvailabilityZone")}
    hosts: list[_Zone] = []
    gpus: dict[tuple[str, str, str, str], _Zone] = {}
    refused: dict[tuple[str, str, str, bool], list[int]] = {}  # what, region, reason, bad
    # A machine in a region -> its lines and its zones' prices and spot prices.
    paired: dict[tuple[str, ...], tuple[list[int], list[float], list[float]]] = {}
    whole: dict[tuple[str, ...], tuple[list[int], list[str], list[str]]] = {}
    for head, offers in by_head.items():
        cells = heads[head if layout.machine_right is None else head[0]] + offers.parts[1:]
        machine, accelerator = cells[col["InstanceType"]], cells[col["AcceleratorName"]]
        count = _count(cells[col["AcceleratorCount"]])
        vcpus, memory = cells[col["vCPUs"]], cells[col["MemoryGiB"]]
        info = cells[ig] if ig is not None else ""
        what = machine or f"{accelerator} ×{count}"
        for lines, key, price, spot in zip(
            offers.lines, offers.keys, offers.prices, offers.spots, strict=True
        ):
            region = cell_of["Region"](head, key)
            if accelerator and NOT_GPUS.match(accelerator):
                reason = f"not a GPU ({accelerator.split('-')[0]})"
                refused.setdefault((what, region, reason, False), []).extend(lines)
                continue
            if bool(machine) == bool(accelerator):
                # A row that is a whole machine (or names no machine and no GPU): its
                # zones collapse as in other layouts, and the row rules judge it.
                found = whole.setdefault(
                    (machine, accelerator, count, vcpus, memory, region, info), ([], [], [])
                )
                found[0].extend(lines)
                found[1].append(price)
                found[2].append(spot)
                continue
            problem = _split_row_rule(price, spot, host=bool(machine))
            if problem is not None:
                reason, bad = problem
                refused.setdefault((what, region, f"{what}: {reason}", bad), []).extend(lines)
                continue
            zone = cell_of["AvailabilityZone"](head, key)
            row = _Zone(
                list(lines),
                machine,
                accelerator,
                count,
                vcpus,
                memory,
                info,
                region,
                zone,
                float(price),
                _split_spot(spot, host=bool(machine)),
            )
            if machine:
                hosts.append(row)
                continue
            known = gpus.setdefault((accelerator, count, region, zone), row)
            if known is not row:  # the same GPU row twice in a zone
                known.lines.extend(lines)
    for host in hosts:
        pairings = GPU_HOST_PAIRINGS.get(_twin(host.machine), ())
        found_gpu = False
        for wanted_gpu, wanted_count in pairings:
            gpu = gpus.get((wanted_gpu, str(wanted_count), host.region, host.zone))
            if gpu is None:
                continue
            found_gpu = gpu.used = True
            key = (
                host.machine,
                gpu.accelerator,
                gpu.count,
                _memory_gb(supplier, gpu.info, gpu.count),
                host.vcpus,
                host.memory,
                host.region,
            )
            pair_lines, pair_prices, pair_spots = paired.setdefault(key, ([], [], []))
            pair_lines += host.lines + gpu.lines
            pair_prices.append(host.price + gpu.price)
            if host.spot is not None and gpu.spot is not None:
                pair_spots.append(host.spot + gpu.spot)
        if GPU_HOST_FAMILIES.match(host.machine):
            if not found_gpu:
                wanted = " or ".join(f"{a} ×{n}" for a, n in pairings)
                reason = (
                    f"GPU host {host.machine}: no {wanted} GPU row in its zone"
                    if pairings
                    else f"GPU host {host.machine}: no pairing with a GPU is known for it"
                )
                refused.setdefault((host.machine, host.region, reason, False), []).extend(
                    host.lines
                )
            continue
        # A host of another family is a CPU-only machine too (n1 hosts are sold bare).
        found = whole.setdefault(
            (host.machine, "", "", host.vcpus, host.memory, host.region, ""), ([], [], [])
        )
        found[0].extend(host.lines)
        found[1].append(_text(host.price))
        found[2].append(_text(host.spot) if host.spot is not None else "")
    for gpu in gpus.values():
        if not gpu.used:
            hosts_for = _HOSTS.get((gpu.accelerator, gpu.count))
            what = f"{gpu.accelerator} ×{gpu.count}"
            reason = (
                f"{what} GPU row: no host row ({' or '.join(hosts_for)}) in its zone"
                if hosts_for
                else f"{what} GPU row: no host machine type is known for it"
            )
            refused.setdefault((what, gpu.region, reason, False), []).extend(gpu.lines)
    for (machine, accelerator, count, gpu_memory, vcpus, memory, region), (
        pair_lines,
        pair_prices,
        pair_spots,
    ) in paired.items():
        what_cells = (supplier, machine, region, accelerator, count, gpu_memory, vcpus, memory)
        spot = _text(min(pair_spots)) if pair_spots else ""
        arch = _arch(machine, accelerator)
        result.add(
            (*what_cells, "", arch, _text(max(pair_prices)), spot, ""), sorted(set(pair_lines))
        )
    for (machine, accelerator, count, vcpus, memory, region, info), (
        whole_lines,
        prices,
        spots,
    ) in whole.items():
        price = _price(prices)
        if not price:
            refused.setdefault((machine, region, NO_ON_DEMAND_PRICE, False), []).extend(whole_lines)
            continue
        result.add(
            (
                supplier,
                machine,
                region,
                accelerator,
                count or "0",
                _memory_gb(supplier, info, count) if accelerator else "",
                vcpus,
                memory,
                "",
                _arch(machine, accelerator),
                price,
                _spot(spots),
                "",
            ),
            sorted(set(whole_lines)),
        )
    for (_, _, reason, bad), lines in refused.items():
        result.refused.append(Refused(min(lines), reason, tuple(sorted(lines)), bad))
    result.layout = "skypilot (host and GPU rows priced together, zone by zone)"
    result.shared_rows = True


def _cell_getter(
    layout: _Layout, heads: dict[Any, list[str]], name: str
) -> Callable[[Any, tuple[Any, ...]], str]:
    """How to find a cell of a group, from its head and its key: in the key cells, else in
    the head ("" when the file has no such column)."""
    if name in layout.right_key_names:
        at = 1 + layout.right_key_names.index(name)
        return lambda head, key: key[at]
    index = layout.col.get(name)
    if index is None:
        return lambda head, key: ""
    machine_right = layout.machine_right
    return lambda head, key: heads[head if machine_right is None else head[0]][index]


def _split_row_rule(price: str, spot: str, *, host: bool) -> tuple[str, bool] | None:
    """The rules of a host or GPU row of a split layout, about the row itself: why it is
    refused (and whether it is a bad row), or None."""
    value = _num(price) if price else None
    if not price:
        return NO_ON_DEMAND_PRICE, False
    if value is None or not 0 <= value < math.inf:
        return f"Price is not a number >= 0: {price!r}", True
    if value == 0 and not host:
        return NO_ON_DEMAND_PRICE, False
    if spot:
        spot_value = _num(spot)
        if spot_value is None or not 0 <= spot_value < math.inf:
            return f"SpotPrice is not a number >= 0: {spot!r}", True
    return None


def _split_spot(spot: str, *, host: bool) -> float | None:
    """A host's or GPU's spot price (a host's 0.0 counts, as its price does; a GPU's 0 is
    none)."""
    if not spot:
        return None
    value = float(spot)
    return value if value > 0 or host else None


def _twin(machine: str) -> str:
    """A host type without its local-SSD suffix: ``a3-ultragpu-8g-nolssd`` pairs as
    ``a3-ultragpu-8g`` (GCP prices them the same: SkyPilot's prices leave local SSD out)."""
    return _LSSD.sub("", machine)


_LSSD = re.compile(r"-(?:no)?lssd$")


def _text(value: float) -> str:
    """A sum of two prices as text (5 decimals, as SkyPilot's, add up to 6)."""
    return repr(round(value, 6))


def _count(text: str) -> str:
    """``8.0`` -> ``8`` (SkyPilot writes counts as floats); anything else as written."""
    value = _num(text) if text else None
    if value is not None and value.is_integer():
        return str(int(value))
    return text
