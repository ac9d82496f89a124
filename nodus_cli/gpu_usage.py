"""A request is not proof of use: sample the GPUs a stage holds while it runs.

A background thread asks ``nvidia-smi`` for utilization and memory of the stage's GPUs
(by UUID) every ``NODUS_GPU_SAMPLE_SECONDS`` (default 2 s) and keeps the peaks, so the
summary can say which GPUs were used and warn about those that stayed idle.

A GPU counts as used when its utilization went above 1 % in any sample, or when its
memory in use rose by at least 256 MiB over what it held when the stage started.
Readings the driver cannot give (``[N/A]``, e.g. under MIG) are not counted as samples.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

IDLE_UTILIZATION = 1.0  # percent: at or below this for the whole stage counts as unused
MEMORY_USE_MIB = 256.0  # memory in use must rise by this much to count as use
DEFAULT_INTERVAL = 2.0


@dataclass(slots=True)
class GpuPeak:
    uuid: str
    samples: int = 0
    max_utilization: float = 0.0
    max_memory_used_mib: float = 0.0
    baseline_memory_mib: float | None = None

    @property
    def used(self) -> bool:
        if self.max_utilization > IDLE_UTILIZATION:
            return True
        base = self.baseline_memory_mib
        return base is not None and self.max_memory_used_mib - base >= MEMORY_USE_MIB


@dataclass(slots=True)
class UsageReport:
    gpus: list[GpuPeak] = field(default_factory=list)
    available: bool = True

    def as_json(self) -> dict[str, Any]:
        return {
            "sampled": self.available,
            "gpus": [
                {
                    "uuid": g.uuid,
                    "samples": g.samples,
                    "max_utilization": g.max_utilization,
                    "max_memory_used_mib": g.max_memory_used_mib,
                    "used": g.used,
                }
                for g in self.gpus
            ],
        }

    @property
    def used(self) -> list[str]:
        return [g.uuid for g in self.gpus if g.used]

    @property
    def idle(self) -> list[str]:
        """GPUs sampled at least once that never showed use."""
        return [g.uuid for g in self.gpus if g.samples and not g.used]

    @property
    def unsampled(self) -> list[str]:
        return [g.uuid for g in self.gpus if not g.samples]


def interval_from_env() -> float:
    try:
        value = float(os.environ.get("NODUS_GPU_SAMPLE_SECONDS", DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL
    return value if value > 0 else DEFAULT_INTERVAL


class Sampler:
    """``with Sampler(uuids): ...`` samples in the background; a no-op without GPUs."""

    def __init__(self, uuids: tuple[str, ...], interval: float | None = None) -> None:
        self.peaks = {u: GpuPeak(u) for u in uuids}
        self.interval = interval or interval_from_env()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._smi = shutil.which("nvidia-smi") if uuids else None

    def __enter__(self) -> Sampler:
        if self.peaks and self._smi:
            self._thread = threading.Thread(
                target=self._loop, name="nodus-gpu-sampler", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None

    def _loop(self) -> None:
        self.sample()  # the first sample is the baseline of memory in use
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        if self._smi is None:
            return
        try:
            done = subprocess.run(
                [
                    self._smi,
                    "--query-gpu=uuid,utilization.gpu,memory.used",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError):
            return
        if done.returncode != 0:
            return
        for line in done.stdout.splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) < 3 or cells[0] not in self.peaks:
                continue
            util, memory = _num(cells[1]), _num(cells[2])
            if util is None and memory is None:
                continue
            peak = self.peaks[cells[0]]
            peak.samples += 1
            if util is not None:
                peak.max_utilization = max(peak.max_utilization, util)
            if memory is not None:
                if peak.baseline_memory_mib is None:
                    peak.baseline_memory_mib = memory
                peak.max_memory_used_mib = max(peak.max_memory_used_mib, memory)

    def report(self) -> UsageReport:
        return UsageReport(list(self.peaks.values()), available=self._smi is not None)


def _num(text: str) -> float | None:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None
