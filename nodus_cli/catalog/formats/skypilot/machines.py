"""What a SkyPilot row's machine is: its GPUs and their memory, its CPU architecture, its
local disk, or why it is no machine nodus plans on (an accelerator that is not a GPU).

SkyPilot names a GPU by ``AcceleratorName`` and describes it in ``GpuInfo``, a Python
literal whose first ``SizeInMiB`` is the memory of one GPU, in MiB, except:

- for the suppliers in :data:`GPUINFO_MEMORY` it is all the machine's GPUs together;
- below :data:`GB_UNDER_MIB_LABEL` it is GB (RunPod's and shadeform's files).

The row rules (:mod:`nodus_cli.catalog.rows`) then take the figure to the nominal memory
of the model variant. arch: the ``Arch`` column where there is one (AWS v8, v9), else arm64
for the types of :data:`ARM64_MACHINES` and the GPUs of :data:`ARM64_GPUS`. Local disk
(AWS v9): ``LocalDiskSize`` (GB per disk) times ``LocalDiskCount``.
"""

from __future__ import annotations

import re

from nodus_cli.catalog.formats import Listing
from nodus_cli.catalog.rows import number_text

__all__ = [
    "ARM64_GPUS",
    "ARM64_MACHINES",
    "GB_UNDER_MIB_LABEL",
    "GPUINFO_MEMORY",
    "MACHINE_COLUMNS",
    "NOT_GPUS",
    "arch_of",
    "gpu_memory",
    "listing",
    "number",
]

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


#: The columns that say what a machine is (its GPU, size, CPU architecture, local disk).
MACHINE_COLUMNS = (
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


def number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def gpu_memory(supplier: str, info: str, count: str) -> str:
    """Per-GPU memory in GB (1 decimal) from a GpuInfo cell, or "" when it has none."""
    if not info:
        return ""
    m = _MIB.search(info)
    if m is None:
        return ""
    figure = number(m.group(1))
    if not figure:
        return ""
    if GPUINFO_MEMORY.get(supplier) == "total":
        n = number(count) or 1.0
        figure = figure / n if n > 0 else figure
    if figure < GB_UNDER_MIB_LABEL:
        return f"{figure:.1f}"  # GB already
    return f"{figure / 1024:.1f}"


def arch_of(machine: str, accelerator: str) -> str:
    if accelerator.upper() in ARM64_GPUS or ARM64_MACHINES.match(machine):
        return "arm64"
    return "x86_64"


def listing(supplier: str, cells: dict[str, str]) -> Listing | str:
    """A machine's listing (its MACHINE_COLUMNS cells, no offers yet) from its cells by
    column name, or why it is refused."""
    g = cells.get
    machine, accelerator = g("InstanceType", ""), g("AcceleratorName", "")
    count = g("AcceleratorCount", "")
    if accelerator and NOT_GPUS.match(accelerator):
        return f"not a GPU ({accelerator.split('-')[0]})"
    arch = _ARCH_COLUMN.get(g("Arch", "").strip().lower()) or arch_of(machine, accelerator)
    disk = _local_disk(g("LocalDiskSize", ""), g("LocalDiskCount", ""))
    vcpus, memory = g("vCPUs", ""), g("MemoryGiB", "")
    if not accelerator:
        return Listing((supplier, machine, "", "0", "", vcpus, memory, disk, arch, ""))
    memory_gb = gpu_memory(supplier, g("GpuInfo", ""), count)
    return Listing(
        (supplier, machine, accelerator, count or "0", memory_gb, vcpus, memory, disk, arch, "")
    )


#: SkyPilot's Arch column (AWS v8 and later): the CPU architecture of the machine type.
#: ``i386`` marks the old types that also run 32-bit code: they are x86_64 machines.
_ARCH_COLUMN = {"x86_64": "x86_64", "arm64": "arm64", "i386": "x86_64"}


def _local_disk(size: str, count: str) -> str:
    """The machine's local disk in GB: LocalDiskSize (GB per disk, as AWS's
    InstanceStorageInfo gives it) times LocalDiskCount, of either type (SSD or HDD); ""
    when the machine has none."""
    per_disk, disks = number(size) if size else None, number(count) if count else None
    if not per_disk or not disks:
        return ""
    return number_text(per_disk * disks)
