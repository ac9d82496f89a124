"""This machine as an inventory: its CPUs, memory, disk and the GPUs ``nvidia-smi`` reports.

No driver (no ``nvidia-smi`` on PATH, or one that fails) means no GPUs; that is only an
error once a stage asks for a GPU.
"""

from __future__ import annotations

import os
import shutil
import socket

from nodus_cli import config
from nodus_cli.catalog import Offer
from nodus_cli.hardware import gpus
from nodus_cli.structs import struct

SMI_FIELDS = "index,uuid,name,memory.total,memory.used,utilization.gpu"


@struct(frozen=True)
class LocalGpu:
    """A GPU of this machine, as ``nvidia-smi`` reports it."""

    index: int
    uuid: str
    product: str
    family: str | None
    memory_gb: float
    nominal_memory_gb: float
    memory_used_mib: float = 0.0
    utilization: float = 0.0


#: Why the last :func:`query_gpus` found no GPU (for messages); None when it found some.
last_probe_note: str | None = None


def query_gpus(timeout: float = 10.0) -> list[LocalGpu]:
    """GPUs as the driver reports them; an empty list when there is no working driver."""
    import subprocess

    global last_probe_note
    smi = shutil.which("nvidia-smi")
    if smi is None:
        last_probe_note = "no nvidia-smi on PATH: no NVIDIA driver"
        return []
    try:
        done = subprocess.run(
            [smi, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        last_probe_note = f"nvidia-smi did not answer within {timeout:g} s"
        return []
    except (OSError, subprocess.SubprocessError) as exc:
        last_probe_note = f"nvidia-smi could not run: {exc}"
        return []
    if done.returncode != 0:
        said = (done.stdout.strip() or done.stderr.strip()).splitlines()
        first = said[0][:160] if said else f"exit {done.returncode}"
        last_probe_note = f"nvidia-smi: {first}"
        return []
    found = parse_smi(done.stdout)
    last_probe_note = None if found else "nvidia-smi lists no GPU"
    return found


def parse_smi(text: str) -> list[LocalGpu]:
    table = gpus.table()
    found = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 6 or not cells[0].isdigit():
            continue
        family = table.from_smi_name(cells[2])
        memory_gb = _float(cells[3]) / 1024.0
        found.append(
            LocalGpu(
                index=int(cells[0]),
                uuid=cells[1],
                product=cells[2],
                family=family.name if family else None,
                memory_gb=round(memory_gb, 1),
                nominal_memory_gb=family.nominal_memory(memory_gb) if family else memory_gb,
                memory_used_mib=_float(cells[4]),
                utilization=_float(cells[5]),
            )
        )
    return found


def _float(text: str) -> float:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return 0.0


def cpu_count() -> float:
    try:
        return float(len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return float(os.cpu_count() or 1)


def memory_gb() -> float:
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # pragma: no cover
        return 0.0
    return round(pages * size / 1024**3, 1)


def disk_gb(path: str = "/var/lib/docker") -> float:
    """Free disk where the engine keeps containers (else the root file system), in GB."""
    for probe in (path, "/"):
        try:
            return round(shutil.disk_usage(probe).free / 1024**3, 1)
        except OSError:
            continue
    return 0.0


def offers(local_gpus: list[LocalGpu] | None = None) -> tuple[Offer, ...]:
    """One offer per GPU model on this machine (a CPU-only offer when it has none).

    A model's offer lists how many GPUs of it this machine has and the smallest nominal
    memory among them, so every GPU the runner may hand out meets what was planned.
    """
    cfg = config.local()
    found = query_gpus() if local_gpus is None else local_gpus
    host = socket.gethostname()
    vcpus, memory, disk, arch = cpu_count(), memory_gb(), disk_gb(), _arch()

    def offer(gpu: str | None, count: int, gpu_memory: float) -> Offer:
        return Offer(
            supplier="local",
            machine_id=host,
            region=cfg.region,
            gpu=gpu,
            gpu_count=count,
            gpu_memory_gb=gpu_memory,
            vcpus=vcpus,
            memory_gb=memory,
            disk_gb=disk,
            arch=arch,
            price_per_hour=cfg.price_per_hour,
        )

    by_family: dict[str, list[LocalGpu]] = {}
    for gpu in found:
        if gpu.family is not None:
            by_family.setdefault(gpu.family, []).append(gpu)
    if not by_family:
        return (offer(None, 0, 0.0),)
    return tuple(
        offer(family, len(members), min(g.nominal_memory_gb for g in members))
        for family, members in sorted(by_family.items())
    )


def _arch() -> str:
    machine = os.uname().machine
    return "arm64" if machine in ("aarch64", "arm64") else "x86_64"


def describe(local_gpus: list[LocalGpu]) -> str:
    """What GPUs this machine has, in words (count, model, memory) or why there are none."""
    if not local_gpus:
        note = last_probe_note
        if note is None:
            note = (
                "no nvidia-smi on PATH: no NVIDIA driver"
                if shutil.which("nvidia-smi") is None
                else "nvidia-smi lists no GPU"
            )
        return f"no NVIDIA GPU ({note})"
    counts: dict[str, int] = {}
    for g in local_gpus:
        label = f"{g.family or g.product} {g.nominal_memory_gb:g} GB"
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n}× {label}" for label, n in counts.items())
