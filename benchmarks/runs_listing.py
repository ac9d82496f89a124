"""``nodus runs`` over a long history: time and peak memory of a long listing (goal: the
peak of ``--top 100000``, table and ``--json``, within 1.5x that of ``nodus runs``).

A history of ``--runs`` ended two-stage runs (default 100,000) is made in a moment: one run
recorded through the store, copied in SQL under other ids (the tests' own
``records_support.long_history``). Then, interleaved for
``--rounds`` rounds, each command runs as installed (``_timing.installed_venv``) with its
output to a file: ``nodus runs`` (the newest 20: the baseline), ``nodus runs --top N`` as a
pipe would get it (every column in full), and ``nodus runs --top N --json``. Printed per
command: the median wall time, the median peak resident memory of the process
(``ru_maxrss``, read with ``os.wait4``), what it printed, and the peak against the baseline's.

Not collected by pytest. Run: python benchmarks/runs_listing.py [--runs 100000] [--rounds 3]
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

from _timing import REPO, installed_env, nodus_command

sys.path.insert(0, str(REPO / "tests"))

from records_support import long_history

GOAL = 1.5


def measure(cmd: list[str], env: dict[str, str], out: Path) -> tuple[float, int, int]:
    """Wall seconds, peak resident memory (bytes) and bytes printed of one command."""
    with out.open("wb") as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return took, usage.ru_maxrss * 1024, out.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--make", metavar="HOME", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make:
        long_history(Path(args.make), args.runs)
        return
    nodus = nodus_command()
    with tempfile.TemporaryDirectory() as tmp:
        env = installed_env(Path(tmp))
        made = time.perf_counter()
        # In a process of its own: a child forked from a large parent would count the
        # parent's pages in its own peak (ru_maxrss) until it execs.
        subprocess.run(
            [sys.executable, __file__, "--make", env["NODUS_HOME"], "--runs", str(args.runs)],
            check=True,
        )
        print(f"history of {args.runs:,} runs made in {time.perf_counter() - made:.1f} s")
        top = str(args.runs)
        commands = {
            "nodus runs": [*nodus, "runs"],
            f"nodus runs --top {top}": [*nodus, "runs", "--top", top],
            f"nodus runs --top {top} --json": [*nodus, "runs", "--top", top, "--json"],
        }
        out = Path(tmp) / "out"
        measure(commands["nodus runs"], env, out)  # the schema's index, the file cache
        samples: dict[str, list[tuple[float, int, int]]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, cmd in commands.items():
                samples[name].append(measure(cmd, env, out))
    base = statistics.median(peak for _, peak, _ in samples["nodus runs"])
    width = max(len(name) for name in commands) + 2
    worst = 0.0
    for name, got in samples.items():
        took = statistics.median(t for t, _, _ in got)
        peak = statistics.median(p for _, p, _ in got)
        printed = got[0][2]
        worst = max(worst, peak / base)
        print(
            f"  {name:<{width}} {took:6.2f} s  peak {peak / 2**20:6.1f} MB "
            f"({peak / base:.2f}x)  printed {printed / 2**20:7.1f} MB"
        )
    print(f"peak memory against `nodus runs`: {worst:.2f}x (goal: within {GOAL}x)")


if __name__ == "__main__":
    main()
