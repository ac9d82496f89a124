"""A request is not proof of use: sample the GPUs a stage holds while it runs.

A background thread asks ``nvidia-smi`` for utilization and memory of the GPUs running
tasks hold (by UUID) every ``NODUS_GPU_SAMPLE_SECONDS`` (default 2 s) and keeps each task's
peaks, so the summary can say which GPUs were used and warn about those that stayed idle,
and its readings over time (thinned to :data:`~nodus_cli.records.gpu_samples.MAX_GPU_SAMPLES`
per GPU as they come, so a long task holds little), which the records keep for a chart.
One thread and one call per interval serve every task of the process.

What counts as used is :mod:`nodus_cli.targets.usage`'s rule, which the report carries.
Readings the driver cannot give (``[N/A]``, e.g. under MIG) are not counted as samples.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

from nodus_cli.records.gpu_samples import MAX_GPU_SAMPLES, GpuSample, thin
from nodus_cli.targets.usage import GpuPeak, UsageReport

DEFAULT_INTERVAL = 2.0


def interval_from_env() -> float:
    try:
        value = float(os.environ.get("NODUS_GPU_SAMPLE_SECONDS", DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL
    return value if value > 0 else DEFAULT_INTERVAL


class Sampler:
    """``with Sampler(uuids): ...`` samples in the background; a no-op without GPUs.

    Every sampler of a process is served by one :class:`_Hub`: one ``nvidia-smi`` call per
    interval covers the GPUs of every task running, however many there are (a fan-out
    stage may run dozens of short tasks at once, and nvidia-smi costs tens of milliseconds
    of CPU a call). A sampler that starts takes the hub's last reading as its baseline
    when it is less than an interval old; only the first task of a quiet spell asks for
    one at once.
    """

    def __init__(self, uuids: tuple[str, ...], interval: float | None = None) -> None:
        self.peaks = {u: GpuPeak(u) for u in uuids}
        self.samples: list[GpuSample] = []
        self.interval = interval or interval_from_env()
        self._smi = _which_smi() if uuids else None
        self._lock = threading.Lock()

    def __enter__(self) -> Sampler:
        if self.peaks and self._smi:
            _hub(self._smi, self.interval).add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.peaks and self._smi:
            _hub(self._smi, self.interval).remove(self)

    def sample(self) -> None:
        """Take one reading now, for this sampler alone."""
        if self._smi is not None:
            self.apply(_read(self._smi))

    def apply(self, rows: list[tuple[str, float | None, float | None]]) -> None:
        """Fold one reading (uuid, utilization %, memory used MiB) into the peaks."""
        now = time.time()
        with self._lock:
            for uuid, util, memory in rows:
                peak = self.peaks.get(uuid)
                if peak is None or (util is None and memory is None):
                    continue
                self.samples.append(GpuSample(now, uuid, util, memory))
                peak.samples += 1
                if util is not None:
                    peak.max_utilization = max(peak.max_utilization, util)
                if memory is not None:
                    if peak.baseline_memory_mib is None:
                        peak.baseline_memory_mib = memory
                    peak.max_memory_used_mib = max(peak.max_memory_used_mib, memory)
            if len(self.samples) > 2 * MAX_GPU_SAMPLES * len(self.peaks):
                self.samples = thin(self.samples, MAX_GPU_SAMPLES)

    def report(self) -> UsageReport:
        with self._lock:
            return UsageReport(
                list(self.peaks.values()),
                available=self._smi is not None,
                samples=thin(self.samples, MAX_GPU_SAMPLES),
            )


def _which_smi() -> str | None:
    """nvidia-smi on PATH (looked up once per PATH: every GPU task asks)."""
    path = os.environ.get("PATH", "")
    if _SMI.get("path") != path:
        _SMI["path"], _SMI["smi"] = path, shutil.which("nvidia-smi")
    return _SMI["smi"]


_SMI: dict[str, str | None] = {}


class _Hub:
    """One sampling thread for every sampler of the process (per nvidia-smi and interval)."""

    def __init__(self, smi: str, interval: float) -> None:
        self.smi = smi
        self.interval = interval
        self.samplers: set[Sampler] = set()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.last = 0.0
        self.latest: list[tuple[str, float | None, float | None]] = []

    def add(self, sampler: Sampler) -> None:
        with self.lock:
            self.samplers.add(sampler)
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._loop, name="nodus-gpu-sampler", daemon=True
                )
                self.thread.start()
        if time.monotonic() - self.last > self.interval:
            self.wake.set()  # a baseline now
        elif self.latest:
            sampler.apply(self.latest)  # the last reading, less than an interval old

    def remove(self, sampler: Sampler) -> None:
        with self.lock:
            self.samplers.discard(sampler)

    def _loop(self) -> None:
        idle = 0
        while True:
            self.wake.wait(self.interval)
            self.wake.clear()
            with self.lock:
                serving = list(self.samplers)
                if not serving:
                    idle += 1
                    if idle > 3:  # nobody to serve for a while: end (a new one restarts it)
                        self.thread = None
                        return
                    continue
            idle = 0
            rows = _read(self.smi)
            self.last = time.monotonic()
            self.latest = rows
            for sampler in serving:
                sampler.apply(rows)


_hubs: dict[tuple[str, float], _Hub] = {}
_hubs_lock = threading.Lock()


def _hub(smi: str, interval: float) -> _Hub:
    with _hubs_lock:
        hub = _hubs.get((smi, interval))
        if hub is None:
            hub = _hubs[(smi, interval)] = _Hub(smi, interval)
        return hub


def _read(smi: str) -> list[tuple[str, float | None, float | None]]:
    """One ``nvidia-smi`` reading: (uuid, utilization %, memory used MiB) per GPU."""
    try:
        done = subprocess.run(
            [smi, "--query-gpu=uuid,utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    rows = []
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 3:
            rows.append((cells[0], _num(cells[1]), _num(cells[2])))
    return rows


def _num(text: str) -> float | None:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None
