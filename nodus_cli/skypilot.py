"""SkyPilot catalog ``vms.csv`` files as nodus catalog rows.

SkyPilot's catalog repository (skypilot-org/skypilot-catalog) keeps one ``vms.csv`` per
cloud and schema version (``catalogs/v6``, ``v7``, ``v8``). The layouts share column names,
not their order or set: ``InstanceType, AcceleratorName, AcceleratorCount, vCPUs,
MemoryGiB, GpuInfo, Price, SpotPrice, Region`` and usually ``AvailabilityZone`` (Azure v6
has ``Generation`` instead, Lambda v8 no zone). A file is recognised by its header
(:func:`is_skypilot_header`) and its columns are found by name.

:func:`convert` turns one file into rows with the SPEC section 4 columns (strings, as a
``--catalog`` file would hold them), each with the line it came from, for
:func:`nodus_cli.catalog.parse_row` to validate. The rules are those the embedded catalog
was transcribed by (tools/catalog/SOURCES.md in the source repository):

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
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

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


@dataclass(slots=True)
class Converted:
    """One file's rows (line, SPEC-column row) and what was left out, with counts."""

    rows: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    layout: str = "skypilot"


def is_skypilot_header(names: Iterable[str]) -> bool:
    present = set(names)
    return all(c in present for c in REQUIRED)


def _num(text: str) -> float | None:
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _count(text: str) -> str:
    """``8.0`` -> ``8`` (SkyPilot writes counts as floats); anything else as written."""
    value = _num(text)
    if value is not None and value.is_integer():
        return str(int(value))
    return text


def _price_text(value: float) -> str:
    return repr(round(value, 6))


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


@dataclass(slots=True)
class _Group:
    """The zones of one machine in one region, collapsing into one row."""

    line: int
    machine: str
    accelerator: str
    count: str
    vcpus: str
    memory: str
    info: str
    region: str
    price: float | None = None
    price_text: str = ""
    spot: float | None = None
    spot_text: str = ""

    def add(self, price_text: str, spot_text: str) -> None:
        price = _num(price_text)
        if price is not None and price > 0 and (self.price is None or price > self.price):
            self.price, self.price_text = price, price_text
        spot = _num(spot_text)
        if spot is not None and spot > 0 and (self.spot is None or spot < self.spot):
            self.spot, self.spot_text = spot, spot_text


def convert(text: str, supplier: str) -> Converted:
    """The rows of a SkyPilot vms.csv, for ``supplier``. Raises ValueError when the text
    is not one (the message says what is missing)."""
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    names = [h.strip().lstrip("\ufeff") for h in header or []]
    if not is_skypilot_header(names):
        missing = [c for c in REQUIRED if c not in names]
        raise ValueError(f"not a SkyPilot vms.csv: the header lacks {', '.join(missing)}")
    col = {n: i for i, n in enumerate(names)}
    width = len(names)
    it, ia, ic, iv, im, ip, ir = (col[c] for c in REQUIRED)
    ig, isp = col.get("GpuInfo"), col.get("SpotPrice")
    result = Converted()
    groups: dict[tuple[str, ...], _Group] = {}
    split_gpus: dict[tuple[str, ...], _Group] = {}
    for cells in reader:
        if len(cells) < width:
            if not any(c.strip() for c in cells):
                continue
            cells = cells + [""] * (width - len(cells))
        machine = cells[it].strip()
        accelerator = cells[ia].strip()
        count = _count(cells[ic].strip()) if accelerator else ""
        region = cells[ir].strip()
        if accelerator and NOT_GPUS.match(accelerator):
            result.skipped[f"not a GPU ({accelerator.split('-')[0]})"] += 1
            continue
        key = (machine, accelerator, count, cells[iv].strip(), cells[im].strip(), region)
        target = groups if machine else split_gpus
        group = target.get(key)
        if group is None:
            group = target[key] = _Group(
                reader.line_num,
                machine,
                accelerator,
                count,
                key[3],
                key[4],
                cells[ig] if ig is not None else "",
                region,
            )
        group.add(cells[ip].strip(), cells[isp].strip() if isp is not None else "")
    if split_gpus:
        result.layout = "skypilot (host and GPU rows priced together)"
        _pair(groups, split_gpus, supplier, result)
    else:
        for g in groups.values():
            _emit(result, supplier, g)
    return result


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
    if price is None and g.price is None:
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
            {
                "supplier": supplier,
                "machine_id": g.machine,
                "gpu": accelerator,
                "gpu_count": count if accelerator else "0",
                "gpu_memory_gb": _memory_gb(supplier, info, count) if accelerator else "",
                "vcpus": g.vcpus,
                "memory_gb": g.memory,
                "region": g.region,
                "price_per_hour": price_text,
                "spot_price_per_hour": spot_text,
                "arch": _arch(g.machine, accelerator),
            },
        )
    )


def _pair(
    hosts: dict[tuple[str, ...], _Group],
    gpus: dict[tuple[str, ...], _Group],
    supplier: str,
    result: Converted,
) -> None:
    """GCP: each host row with the GPU rows of its pairings in the same region."""
    # Per-GPU prices: the highest of each accelerator, to drop anomalous regional rows.
    top: dict[str, float] = {}
    for g in gpus.values():
        n = _num(g.count) or 0.0
        if g.price is not None and n > 0:
            top[g.accelerator] = max(top.get(g.accelerator, 0.0), g.price / n)
    by_region: dict[tuple[str, str, str], _Group] = {}
    for g in gpus.values():
        n = _num(g.count) or 0.0
        if g.price is None or n <= 0:
            result.skipped["no on-demand price"] += 1
            continue
        if g.price / n < ANOMALY_RATIO * top[g.accelerator]:
            result.skipped[f"anomalous regional GPU price ({g.accelerator})"] += 1
            continue
        by_region.setdefault((g.accelerator, g.count, g.region), g)
    patterns = [(re.compile(p), a, n) for p, a, n in GPU_HOST_PAIRINGS]
    for host in hosts.values():
        if host.accelerator:  # a machine row that carries its accelerator itself
            _emit(result, supplier, host)
            continue
        paired = False
        for pattern, accelerator, fixed in patterns:
            m = pattern.fullmatch(host.machine)
            if m is None:
                continue
            paired = True
            count = str(fixed if fixed is not None else int(m.group(1)))
            gpu = by_region.get((accelerator, count, host.region))
            if gpu is None or gpu.price is None:
                continue
            if host.price is None:
                result.skipped["no on-demand price"] += 1
                continue
            spot = host.spot + gpu.spot if host.spot is not None and gpu.spot is not None else None
            _emit(result, supplier, host, price=host.price + gpu.price, spot=spot, gpu=gpu)
        if GPU_HOST_FAMILIES.match(host.machine):
            if not paired:
                result.skipped["GPU host without a known pairing"] += 1
            continue
        _emit(result, supplier, host)  # a CPU-only machine (n1 hosts are sold bare too)
