"""SkyPilot catalog ``vms.csv`` files as nodus catalog rows.

SkyPilot's catalog repository (skypilot-org/skypilot-catalog) keeps one ``vms.csv`` per
cloud and schema version (``catalogs/v6``, ``v7``, ``v8``). The layouts share column names,
not their order or set: ``InstanceType, AcceleratorName, AcceleratorCount, vCPUs,
MemoryGiB, GpuInfo, Price, SpotPrice, Region`` and usually ``AvailabilityZone`` (Azure v6
has ``Generation`` instead, Lambda v8 no zone). A file is recognised by its header
(:func:`is_skypilot_header`) and its columns are found by name.

:func:`convert` turns one file into rows of the SPEC section 4 columns (strings, as a
``--catalog`` file would hold them: :data:`Row`), each with the line it came from, for
:func:`nodus_cli.catalog.row_cells` to validate by the rules of ``--catalog``. Nothing is
validated here. The rules are those the embedded catalog was transcribed by
(tools/catalog/SOURCES.md in the source repository):

- A region's availability zones collapse into one row per (machine, accelerator, count,
  vCPUs, memory, region): the on-demand price is the region's (the highest of its zones
  should they differ), the spot price the lowest over the zones that have one.
- A row with no on-demand price (empty, or 0) is left out and counted; a spot price of 0
  is no spot price.
- GCP (v8) lists host machines (``InstanceType`` set, no accelerator) and GPUs
  (``InstanceType`` empty) on separate rows. A machine with GPUs is a host row plus the GPU
  row of the pairing in ``GPU_HOST_PAIRINGS`` in the same region: price = host + GPUs,
  spot = host spot + GPU spot when both exist. Hosts of accelerator-optimized families
  (``GPU_HOST_FAMILIES``) are never CPU-only machines; other hosts are. A GPU row whose
  per-GPU price is below ``ANOMALY_RATIO`` of the highest per-GPU price of the same
  accelerator in the file is left out as an anomalous regional price.
- Accelerators that are not GPUs (TPU, Inferentia, Trainium, Gaudi, FPGAs, ...) are left
  out and counted.
- GPU memory: the first ``SizeInMiB`` of ``GpuInfo`` (MiB per GPU), except for suppliers
  in ``GPUINFO_MEMORY`` whose figure is the total of all GPUs, or GB.
- arch: arm64 by ``ARM64_MACHINES`` (Graviton, Ampere, Axion families) or for GPUs that
  come with a Grace CPU (``ARM64_GPUS``), else x86_64.
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter
from typing import Any

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
#: A GPU row below this share of the highest per-GPU price of its accelerator is dropped.
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


#: One converted row: the arguments of :func:`nodus_cli.catalog.row_values` (supplier,
#: machine_id, region, gpu, gpu_count, gpu_memory_gb, vcpus, memory_gb, price_per_hour,
#: spot_price_per_hour, arch), cells as text for the validator to check.
Row = tuple[str, str, str, str, str, str, str, str, str, str, str]


@dataclass(slots=True)
class Converted:
    """One file's rows (first source line, row) and what was left out, with counts."""

    rows: list[tuple[int, Row]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    layout: str = "skypilot"


def is_skypilot_header(names: Iterable[str]) -> bool:
    present = set(names)
    return all(c in present for c in REQUIRED)


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
    every zone); 0 is no price; a cell that is not a number is kept for the validator."""
    first = texts[0]
    if texts.count(first) == len(texts):  # the usual case: one price for the region
        try:
            return "" if float(first) == 0 else first
        except ValueError:
            return first.strip()  # empty, or not a number: the validator says which
    best_text, best = "", -1.0
    for text in texts:
        text = text.strip()
        if not text:
            continue
        value = _num(text)
        if value is None:
            return text  # not a number: the validator says so
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
            return text  # not a number: the validator says so
        if 0 < value < best:
            best_text, best = text, value
    return best_text


@dataclass(slots=True)
class _Group:
    """The zones of one machine in one region, collapsed into one row."""

    line: int
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


def convert(text: str, supplier: str) -> Converted:
    """The rows of a SkyPilot vms.csv, for ``supplier``. Raises ValueError when the text
    is not one (the message says what is missing).

    A line without a quote is split on its commas, which is what the csv module does with
    it (the default dialect); a line with quotes goes through the csv module, joined with
    the lines after it while a quoted field is open. Rows of one machine in one region
    (its zones) are collected in one pass, then each becomes one row.
    """
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    header = next(csv.reader(lines[:1]), [])
    names = [h.strip().lstrip("\ufeff") for h in header]
    if not is_skypilot_header(names):
        missing = [c for c in REQUIRED if c not in names]
        raise ValueError(f"not a SkyPilot vms.csv: the header lacks {', '.join(missing)}")
    col = {n: i for i, n in enumerate(names)}
    width = len(names)
    key_of = itemgetter(*(col[c] for c in _KEY))
    ig = col.get("GpuInfo")
    ip = col["Price"]
    isp = col.get("SpotPrice")
    no_spot = isp is None
    if isp is None:
        isp = ip
    groups: dict[tuple[str, ...], list[Any]] = {}
    get = groups.get
    reader = csv.reader
    # A file lists a region's zones one after the other: compare with the previous row's
    # key before hashing it (one dict lookup per region instead of one per zone).
    last_key: tuple[str, ...] = ()
    last_prices: list[str] = []
    last_spots: list[str] = []
    it = iter(enumerate(lines, 1))
    next(it)  # the header
    for number, line in it:
        if '"' not in line:
            cells = line.split(",")
        else:
            quotes = line.count('"')
            if quotes % 2:  # a quoted field goes on over the next lines
                parts = [line]
                for _, more in it:
                    parts.append(more)
                    quotes += more.count('"')
                    if not quotes % 2:
                        break
                line = "\n".join(parts)
            cells = next(reader((line,)), [])
        try:
            key = key_of(cells)
            price = cells[ip]
            spot = cells[isp]
        except IndexError:
            if not any(c.strip() for c in cells):
                continue  # a blank line
            cells = cells + [""] * (width - len(cells))
            key, price, spot = key_of(cells), cells[ip], cells[isp]
        if key == last_key:
            last_prices.append(price)
            last_spots.append(spot)
            continue
        entry = get(key)
        if entry is None:
            entry = groups[key] = [number, cells[ig] if ig is not None else "", [price], [spot]]
        else:
            entry[2].append(price)
            entry[3].append(spot)
        last_key, last_prices, last_spots = key, entry[2], entry[3]
    result = Converted()
    _emit_all(groups, supplier, result, no_spot)
    return result


#: The columns that identify one machine in one region (its zones collapse).
_KEY = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Region")


def _emit_all(
    groups: dict[tuple[str, ...], list[Any]], supplier: str, result: Converted, no_spot: bool
) -> None:
    not_gpu: dict[str, bool] = {}
    arch: dict[tuple[str, str], str] = {}
    memory: dict[tuple[str, str], str] = {}
    hosts: list[_Group] = []
    split: list[_Group] = []
    append = result.rows.append
    skipped = result.skipped
    # GCP (v8) lists GPUs on rows of their own (no InstanceType), priced with a host.
    has_split = any(not k[0] and k[1] for k in groups)
    for key, (line, info, prices, spots) in groups.items():
        machine, accelerator, count, vcpus, host_memory, region = key
        if accelerator:
            excluded = not_gpu.get(accelerator)
            if excluded is None:
                excluded = not_gpu[accelerator] = NOT_GPUS.match(accelerator) is not None
            if excluded:
                skipped[f"not a GPU ({accelerator.split('-')[0]})"] += len(prices)
                continue
        price_text = _price(prices)
        spot_text = "" if no_spot else _spot(spots)
        if has_split and not (machine and accelerator):
            # A host or a GPU row of the split layout: priced together below.
            group = _Group(
                line,
                machine,
                accelerator,
                count,
                vcpus,
                host_memory,
                info,
                region,
                price_text,
                spot_text,
            )
            (hosts if machine else split).append(group)
            continue
        if not price_text:
            skipped["no on-demand price"] += 1
            continue
        if accelerator:
            gpu_memory = memory.get((info, count))
            if gpu_memory is None:
                gpu_memory = memory[(info, count)] = _memory_gb(supplier, info, count)
        else:
            gpu_memory = count = ""
        a = arch.get((machine, accelerator))
        if a is None:
            a = arch[(machine, accelerator)] = _arch(machine, accelerator)
        append(
            (
                line,
                (
                    supplier,
                    machine,
                    region,
                    accelerator,
                    count or "0",
                    gpu_memory,
                    vcpus,
                    host_memory,
                    price_text,
                    spot_text,
                    a,
                ),
            )
        )
    if has_split:
        result.layout = "skypilot (host and GPU rows priced together)"
        _pair(hosts, split, supplier, result)


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
    if price is None and not g.price_text:
        result.skipped["no on-demand price"] += 1
        return
    price_text = _price_text(price) if price is not None else g.price_text
    spot_text = g.spot_text
    if gpu is not None:
        spot_text = _price_text(spot) if spot is not None else ""
    info = gpu.info if gpu else g.info
    result.rows.append(
        (
            g.line,
            (
                supplier,
                g.machine,
                g.region,
                accelerator,
                count if accelerator else "0",
                _memory_gb(supplier, info, count) if accelerator else "",
                g.vcpus,
                g.memory,
                price_text,
                spot_text,
                _arch(g.machine, accelerator),
            ),
        )
    )


def _price_text(value: float) -> str:
    return repr(round(value, 6))


def _pair(hosts: list[_Group], gpus: list[_Group], supplier: str, result: Converted) -> None:
    """GCP: each host row with the GPU rows of its pairings in the same region."""
    # Per-GPU prices: the highest of each accelerator, to drop anomalous regional rows.
    top: dict[str, float] = {}
    for g in gpus:
        n = _num(g.count) or 0.0
        price = g.price
        if price is not None and n > 0:
            top[g.accelerator] = max(top.get(g.accelerator, 0.0), price / n)
    by_region: dict[tuple[str, str, str], _Group] = {}
    for g in gpus:
        n = _num(g.count) or 0.0
        price = g.price
        if price is None or n <= 0:
            result.skipped["no on-demand price"] += 1
            continue
        if price / n < ANOMALY_RATIO * top[g.accelerator]:
            result.skipped[f"anomalous regional GPU price ({g.accelerator})"] += 1
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
                result.skipped["no on-demand price"] += 1
                continue
            host_spot, gpu_spot = host.spot, gpu.spot
            spot = host_spot + gpu_spot if host_spot is not None and gpu_spot is not None else None
            _emit(result, supplier, host, price=host_price + gpu.price, spot=spot, gpu=gpu)
        if GPU_HOST_FAMILIES.match(host.machine):
            if not pairings:
                result.skipped["GPU host without a known pairing"] += 1
            continue
        _emit(result, supplier, host)  # a CPU-only machine (n1 hosts are sold bare too)


def _count(text: str) -> str:
    """``8.0`` -> ``8`` (SkyPilot writes counts as floats); anything else as written."""
    value = _num(text) if text else None
    if value is not None and value.is_integer():
        return str(int(value))
    return text
