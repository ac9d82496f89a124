"""Shared helpers for the benchmarks: wall time of commands, medians, interleaved runs.

These machines are noisy, so every figure is a median and every goal is a ratio
against a baseline measured in the same run, interleaved with it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def nodus_command() -> list[str]:
    """``nodus`` as a user has it: installed normally (not the editable install the tests
    use, whose import hook costs every start), from this checkout, in a venv of its own
    under .ci/state/ whose dependencies are this interpreter's (made on first use)."""
    return [str(installed_venv() / "bin" / "nodus")]


def installed_venv() -> Path:
    """A venv with this checkout's nodus installed as a wheel would be (byte-compiled,
    no import hook), its dependencies found through a path file: reinstalled once per
    benchmark process, so it measures the code as it is now."""
    global _INSTALLED
    venv = REPO / ".ci" / "state" / "bench-venv"
    if _INSTALLED is None:
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps"]
        subprocess.run([*pip, "--force-reinstall", str(REPO)], check=True, **quiet)
        site = next((venv / "lib").glob("python3*/site-packages"))
        deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
        (site / "zz_nodus_deps.pth").write_text("\n".join(deps) + "\n", "utf-8")
        _INSTALLED = venv
    return _INSTALLED


_INSTALLED: Path | None = None


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
    commands: dict[str, Sequence[str]],
    rounds: int,
    env: dict[str, str] | None = None,
    envs: dict[str, dict[str, str]] | None = None,
) -> dict[str, float]:
    """Run each command once per round, in turn, and return each one's median seconds
    (``envs``: more variables for some of the commands, by name)."""
    samples: dict[str, list[float]] = {name: [] for name in commands}
    each = {name: {**(env or {}), **(envs or {}).get(name, {})} for name in commands}
    for name, cmd in commands.items():  # warm the file cache once
        wall(cmd, each[name])
    for _ in range(rounds):
        for name, cmd in commands.items():
            samples[name].append(wall(cmd, each[name]))
    return {name: statistics.median(values) for name, values in samples.items()}


def installed_env(tmp: Path) -> dict[str, str]:
    """An environment that measures nodus as installed, with its own state folder.

    pip byte-compiles a package and its dependencies when it installs them, and nodus's
    first start in a fresh folder uses those compiled files as a user's would: no
    PYTHONPYCACHEPREFIX, which would make every benchmark process compile nodus and its
    dependencies again (1-2 s of CPU in the first round it measures). PYTHONDONTWRITEBYTECODE
    (set on these machines) is dropped, as a user's machine has it.
    """
    env = {**os.environ, "NODUS_HOME": str(tmp / "home"), "NO_COLOR": "1"}
    env["NODUS_CONFIG"] = str(tmp / "config.toml")  # price 0, no user settings
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    return env


def alternate(
    rounds: int, measure_a: Callable[[], float], measure_b: Callable[[], float]
) -> tuple[list[float], list[float]]:
    """Time two things ``rounds`` times each, alternating which goes first."""
    a: list[float] = []
    b: list[float] = []
    for i in range(rounds):
        if i % 2 == 0:
            a.append(measure_a())
            b.append(measure_b())
        else:
            b.append(measure_b())
            a.append(measure_a())
    return a, b


def report_ratio(
    label: str, times: list[float], base_label: str, base_times: list[float], goal: float
) -> float:
    """Print both medians, every sample, and the ratio against the goal; return the ratio."""
    median, base = statistics.median(times), statistics.median(base_times)
    width = max(len(label), len(base_label)) + 2
    for name, values, value in ((label, times, median), (base_label, base_times, base)):
        print(f"  {name:<{width}} median {value * 1e3:6.0f} ms")
        print(f"    runs (ms): {' '.join(f'{v * 1e3:.0f}' for v in values)}")
    ratio = median / base
    verdict = "meets" if ratio < goal else "misses"
    print(f"ratio: {ratio:.2f}x {base_label} ({verdict} the goal of under {goal:g}x)")
    return ratio


def timed(cmd: Sequence[str], env: dict[str, str], ok: Callable[[str], bool]) -> float:
    """Seconds ``cmd`` took; stop the benchmark when it failed or printed the wrong thing."""
    start = time.perf_counter()
    done = subprocess.run(list(cmd), capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or not ok(done.stdout):
        sys.exit(f"{cmd[0]} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return elapsed
