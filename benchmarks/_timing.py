"""Shared helpers for the benchmarks: wall time of commands, medians, interleaved runs.

These machines are noisy, so every figure is a median and every goal is a ratio
against a baseline measured in the same run, interleaved with it.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def nodus_command() -> list[str]:
    """The installed ``nodus`` script next to this interpreter, else ``python -m nodus_cli``."""
    script = Path(sys.executable).with_name("nodus")
    if script.exists():
        return [str(script)]
    found = shutil.which("nodus")
    return [found] if found else [sys.executable, "-m", "nodus_cli"]


def wall(cmd: Sequence[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(
        list(cmd),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return time.perf_counter() - start


def interleaved_medians(
    commands: dict[str, Sequence[str]], rounds: int, env: dict[str, str] | None = None
) -> dict[str, float]:
    """Run each command once per round, in turn, and return each one's median seconds."""
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for cmd in commands.values():  # warm the file cache once
        wall(cmd, env)
    for _ in range(rounds):
        for name, cmd in commands.items():
            samples[name].append(wall(cmd, env))
    return {name: statistics.median(values) for name, values in samples.items()}
