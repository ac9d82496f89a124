"""A request is not proof of use: sample the GPUs a stage holds while it runs.

A background thread asks ``nvidia-smi`` for utilization and memory of the stage's GPUs
(by UUID) every ``NODUS_GPU_SAMPLE_SECONDS`` (default 2 s) and keeps the peaks, so the
summary can say which GPUs were used and warn about those that stayed idle.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

IDLE_UTILIZATION = 1.0  # percent: at or below this for the whole stage counts as unused


@dataclass(slots=True)
class GpuPeak:
    uuid: str
    samples: int = 0
    max_utilization: float = 0.0
    max_memory_used_mib: float = 0.0

    @property
    def used(self) -> bool:
        return self.max_utilization > IDLE_UTILIZATION


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
    def idle(self) -> list[str]:
        return [g.uuid for g in self.gpus if g.samples and not g.used]


class Sampler:
    def __init__(self, uuids: tuple[str, ...], interval: float | None = None) -> None:
        self.peaks = {u: GpuPeak(u) for u in uuids}
        self.interval = interval or float(os.environ.get("NODUS_GPU_SAMPLE_SECONDS", "2"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nodus-gpu-sampler", daemon=True)
        self._smi = shutil.which("nvidia-smi")

    def __enter__(self) -> Sampler:
        if self.peaks and self._smi:
            self.sample()
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.peaks and self._smi:
            self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        assert self._smi is not None
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
            )
        except (OSError, subprocess.SubprocessError):
            return
        if done.returncode != 0:
            return
        for line in done.stdout.splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) < 3 or cells[0] not in self.peaks:
                continue
            peak = self.peaks[cells[0]]
            peak.samples += 1
            peak.max_utilization = max(peak.max_utilization, _num(cells[1]))
            peak.max_memory_used_mib = max(peak.max_memory_used_mib, _num(cells[2]))

    def report(self) -> UsageReport:
        return UsageReport(list(self.peaks.values()), available=self._smi is not None)


def _num(text: str) -> float:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return 0.0
