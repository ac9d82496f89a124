"""GCP's ``vms.csv``: hosts and GPUs on rows of their own, priced together zone by zone,
as SkyPilot prices them (see :func:`emit`).

GCP lists host machines (``InstanceType`` set, no accelerator: the price of its vCPUs and
memory) and GPUs (``InstanceType`` empty: the price of ``AcceleratorCount`` GPUs) on rows
of their own, per zone. A machine with GPUs is a host row plus the GPU row of one of its
pairings (:data:`GPU_HOST_PAIRINGS`) in the same zone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from nodus_cli.catalog.formats import NO_ON_DEMAND_PRICE, Converted, Refused
from nodus_cli.catalog.formats.skypilot.machines import NOT_GPUS, arch_of, gpu_memory, number
from nodus_cli.catalog.formats.skypilot.reading import Layout, Offers, region_price, region_spot
from nodus_cli.structs import struct

__all__ = ["GPU_HOST_FAMILIES", "GPU_HOST_PAIRINGS", "emit"]


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


@struct
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


def emit(
    by_head: dict[Any, Offers],
    heads: dict[Any, list[str]],
    layout: Layout,
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
                gpu_memory(supplier, gpu.info, gpu.count),
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
    for (machine, accelerator, count, memory_gb, vcpus, memory, region), (
        pair_lines,
        pair_prices,
        pair_spots,
    ) in paired.items():
        what_cells = (supplier, machine, region, accelerator, count, memory_gb, vcpus, memory)
        spot = _text(min(pair_spots)) if pair_spots else ""
        arch = arch_of(machine, accelerator)
        result.add(
            (*what_cells, "", arch, _text(max(pair_prices)), spot, ""), sorted(set(pair_lines))
        )
    for (machine, accelerator, count, vcpus, memory, region, info), (
        whole_lines,
        prices,
        spots,
    ) in whole.items():
        price = region_price(prices)
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
                gpu_memory(supplier, info, count) if accelerator else "",
                vcpus,
                memory,
                "",
                arch_of(machine, accelerator),
                price,
                region_spot(spots),
                "",
            ),
            sorted(set(whole_lines)),
        )
    for (_, _, reason, bad), lines in refused.items():
        result.refused.append(Refused(min(lines), reason, tuple(sorted(lines)), bad))
    result.layout = "skypilot (host and GPU rows priced together, zone by zone)"
    result.shared_rows = True


def _cell_getter(
    layout: Layout, heads: dict[Any, list[str]], name: str
) -> Callable[[Any, tuple[Any, ...]], str]:
    """How to find a cell of a group, from its head and its key: in the key cells, else in
    the head ("" when the file has no such column)."""
    if name in layout.right_key_names:
        at = layout.right_key_names.index(name)
        return lambda head, key: key[at]
    index = layout.col.get(name)
    if index is None:
        return lambda head, key: ""
    machine_right = layout.machine_right
    return lambda head, key: heads[head if machine_right is None else head[0]][index]


def _split_row_rule(price: str, spot: str, *, host: bool) -> tuple[str, bool] | None:
    """The rules of a host or GPU row of a split layout, about the row itself: why it is
    refused (and whether it is a bad row), or None."""
    value = number(price) if price else None
    if not price:
        return NO_ON_DEMAND_PRICE, False
    if value is None or not 0 <= value < math.inf:
        return f"Price is not a number >= 0: {price!r}", True
    if value == 0 and not host:
        return NO_ON_DEMAND_PRICE, False
    if spot:
        spot_value = number(spot)
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
    value = number(text) if text else None
    if value is not None and value.is_integer():
        return str(int(value))
    return text
