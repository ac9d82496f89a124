"""This machine's GPUs, as its driver (``nvidia-smi``) reports them: model, UUID, memory.

Hardware, not a target: the local target's inventory and queue, and the Swarm node setup
(``nodus swarm init-node``) read the same GPUs through here; neither builds on the other.
No driver (no ``nvidia-smi`` on PATH, or one that fails) means no GPUs; that is only an
error once a stage asks for a GPU, and :func:`describe` then says why there are none.
"""

from __future__ import annotations

import shutil

from nodus_cli.hardware import gpus
from nodus_cli.structs import struct

__all__ = ["SMI_FIELDS", "LocalGpu", "describe", "last_probe_note", "parse_smi", "query_gpus"]

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
