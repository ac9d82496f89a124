"""A run's GPU-use samples over time: one JSON object per line, beside the run's log.

Each sample is one reading of one GPU a task held (``time`` in seconds since the epoch,
``uuid``, ``utilization`` in percent, ``memory_used_mib``), as the local target's sampler
took it from ``nvidia-smi``. The peaks stay in the stage's record (``gpu_usage``); these
are the curve behind them, for a chart.

Bounded: a run keeps at most :data:`MAX_GPU_SAMPLES` samples per GPU. When a GPU has more,
its samples are thinned evenly over the whole run (the first and the last reading stay),
so a week-long run takes as much room as an hour-long one, only coarser. Writing never
fails the run: a write the disk refuses leaves the samples already kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from nodus_cli.structs import struct

__all__ = ["MAX_GPU_SAMPLES", "GpuSample", "read", "thin", "write"]

#: The most samples a run keeps of one GPU.
MAX_GPU_SAMPLES = 720

_lock = threading.Lock()


@struct(frozen=True)
class GpuSample:
    """One reading of one GPU: ``None`` where the driver could not say (``[N/A]``)."""

    time: float
    uuid: str
    utilization: float | None
    memory_used_mib: float | None

    def as_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "uuid": self.uuid,
            "utilization": self.utilization,
            "memory_used_mib": self.memory_used_mib,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> GpuSample:
        return cls(
            float(doc["time"]),
            str(doc["uuid"]),
            _number(doc.get("utilization")),
            _number(doc.get("memory_used_mib")),
        )


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def thin(samples: Iterable[GpuSample], limit: int = MAX_GPU_SAMPLES) -> list[GpuSample]:
    """At most ``limit`` samples per GPU, in time order, chosen evenly over each GPU's
    samples (its first and last kept)."""
    per_gpu: dict[str, list[GpuSample]] = {}
    for s in sorted(samples, key=lambda s: s.time):
        per_gpu.setdefault(s.uuid, []).append(s)
    kept: list[GpuSample] = []
    for series in per_gpu.values():
        n = len(series)
        if n <= limit:
            kept.extend(series)
        elif limit == 1:
            kept.append(series[-1])
        elif limit > 1:
            picks = sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})
            kept.extend(series[i] for i in picks)
    kept.sort(key=lambda s: s.time)
    return kept


def read(path: Path) -> list[GpuSample]:
    """The samples kept in ``path`` (none when it is missing); damaged lines are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        try:
            found.append(GpuSample.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            continue
    return found


def write(path: Path, samples: Sequence[GpuSample], limit: int = MAX_GPU_SAMPLES) -> None:
    """Add ``samples`` to those in ``path``, thinned to ``limit`` per GPU; never raises
    for I/O (the file is replaced whole, so a reader never sees half of it)."""
    if not samples:
        return
    with _lock:
        kept = thin([*read(path), *samples], limit)
        part = path.with_name(path.name + ".part")
        try:
            with part.open("w", encoding="utf-8") as handle:
                for s in kept:
                    handle.write(json.dumps(s.as_json()) + "\n")
            os.replace(part, path)
        except OSError:
            with contextlib.suppress(OSError):
                part.unlink()
