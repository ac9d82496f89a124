"""Local run overhead: `nodus run` against `docker run --rm`, one-stage echo, CPU only.

Per round, in alternating order (so drift in the engine affects both alike):

- nodus: the wall time of a fresh ``nodus run FILE`` of a one-stage echo workload, from
  start to exit: parsing and planning against this machine, the run record, the
  container (create, start, live output, wait, remove), the final record;
- baseline: the wall time of ``docker run --rm nodus-test/busybox:1 echo hi``.

Prints both medians and their ratio (goal: under 1.3x). Needs the local engine and the
test image (``bash tests/harness/engine.sh up``). Not collected by pytest.

Run: python benchmarks/run_overhead.py [--rounds 7] [--max-ratio 1.3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMAGE = "nodus-test/busybox:1"
GOAL = 1.3
WORKLOAD = f"""\
name = "run-overhead"
image = "{IMAGE}"
command = ["echo", "hi"]
"""


def nodus_command() -> list[str]:
    """The installed ``nodus`` script next to this interpreter, else ``python -m nodus_cli``."""
    script = Path(sys.executable).with_name("nodus")
    return [str(script)] if script.exists() else [sys.executable, "-m", "nodus_cli"]


def time_nodus(file: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(
        [*nodus_command(), "run", str(file)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    if done.returncode != 0 or "main | hi" not in done.stdout:
        sys.exit(f"nodus run failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return elapsed


def time_docker(env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(
        ["docker", "run", "--rm", IMAGE, "echo", "hi"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    if done.returncode != 0 or done.stdout.strip() != "hi":
        sys.exit(f"docker run failed (exit {done.returncode}):\n{done.stderr}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="measured rounds (default 7)")
    parser.add_argument(
        "--max-ratio", type=float, default=None, help="exit 1 when the ratio is above this"
    )
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nodus-bench-") as tmp:
        file = Path(tmp) / "echo.toml"
        file.write_text(WORKLOAD, "utf-8")
        env = {**os.environ, "NODUS_HOME": str(Path(tmp) / "home"), "NO_COLOR": "1"}
        env["NODUS_CONFIG"] = str(Path(tmp) / "config.toml")  # price 0, no user settings
        # Measure nodus as installed: pip byte-compiles a package, so a run does not
        # compile its modules from source each time (PYTHONDONTWRITEBYTECODE would make
        # it; the compiled files go to a temporary folder, not the source tree).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        print(f"one-stage echo, CPU only; {opts.rounds} interleaved rounds")
        time_nodus(file, env)  # warm-up: byte-code, page cache
        time_docker(env)
        nodus_times: list[float] = []
        docker_times: list[float] = []
        for i in range(opts.rounds):
            if i % 2 == 0:
                nodus_times.append(time_nodus(file, env))
                docker_times.append(time_docker(env))
            else:
                docker_times.append(time_docker(env))
                nodus_times.append(time_nodus(file, env))
    nodus_median = statistics.median(nodus_times)
    docker_median = statistics.median(docker_times)
    ratio = nodus_median / docker_median

    def show(values: list[float]) -> str:
        return " ".join(f"{v * 1e3:.0f}" for v in values)

    print(f"  nodus run FILE          median {nodus_median * 1e3:6.0f} ms")
    print(f"    runs (ms): {show(nodus_times)}")
    print(f"  docker run --rm         median {docker_median * 1e3:6.0f} ms")
    print(f"    runs (ms): {show(docker_times)}")
    verdict = "meets" if ratio < GOAL else "misses"
    print(f"ratio: {ratio:.2f}x docker run --rm ({verdict} the goal of under {GOAL:g}x)")
    if opts.max_ratio is not None and ratio > opts.max_ratio:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
