#!/usr/bin/env python3
"""Planner benchmark: one workload against synthetic catalogs of 1k, 10k, 100k and 1M offers.

    /tmp/v/bin/python benchmarks/plan.py [--quick] [--sizes 1000,10000] [WORKLOAD.toml]

Prints, per catalog size, the median time of ``plan_workload`` in-process, the time per
offer, the growth ratio against the previous size (10x the offers: a ratio <= 10 is
linear or better) and the ratio against a baseline measured in the same run on the same
offers (one list comprehension that only compares the GPU name: the floor of any scan).
Then the cold time of ``nodus plan FILE`` against ``nodus validate FILE`` (fresh
interpreters, medians), which shows what loading the embedded catalog costs.

Goals: linear growth, 100k offers under 100 ms in-process, cold plan under 1.5x validate.
The workload is the first ``examples/*.toml`` that requests a GPU, or a temporary one.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nodus_cli import catalog  # noqa: E402
from nodus_cli.catalog import Offer  # noqa: E402
from nodus_cli.planner import plan_workload  # noqa: E402
from nodus_cli.workload import Workload, load_file  # noqa: E402

FALLBACK_WORKLOAD = """\
name = "bench"
image = "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime"
command = ["python", "train.py"]
gpu = "H100"
gpu_count = 8

[requirements]
cpu = 32
memory_gb = 256
location = "us"
max_price_per_hour = 120.0
"""


def synthetic(size: int, seed: int = 7) -> tuple[Offer, ...]:
    """``size`` offers drawn from the embedded catalog, with prices and regions varied."""
    rng = random.Random(seed)
    base = catalog.embedded().offers
    regions = sorted({o.region for o in base})
    out = []
    for i in range(size):
        o = base[rng.randrange(len(base))]
        out.append(
            replace(
                o,
                machine_id=f"{o.machine_id}-{i}",
                region=regions[rng.randrange(len(regions))] if rng.random() < 0.5 else o.region,
                price_per_hour=round(o.price_per_hour * rng.uniform(0.7, 1.3), 4),
            )
        )
    return tuple(out)


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def find_workload(explicit: str | None) -> tuple[Path, Path | None]:
    """The workload file to plan, and a temporary folder to delete afterwards (or None)."""
    if explicit:
        return Path(explicit), None
    for path in sorted((REPO / "examples").glob("*.toml")):
        result = load_file(path)
        if result.workload is not None and result.workload.requirements.wants_gpu:
            return path, None
    tmp = Path(tempfile.mkdtemp(prefix="nodus-bench-"))
    path = tmp / "bench.toml"
    path.write_text(FALLBACK_WORKLOAD, encoding="utf-8")
    return path, tmp


def bench_in_process(workload: Workload, sizes: Sequence[int], quick: bool) -> None:
    print(f"in-process: plan_workload({workload.name!r}) against synthetic catalogs (medians)")
    header = (
        f"{'offers':>9} {'plan ms':>9} {'us/offer':>9} {'growth':>7} "
        f"{'scan ms':>8} {'x scan':>7} {'eligible':>9}"
    )
    print(header)
    previous: tuple[int, float] | None = None
    wanted = workload.requirements.gpu
    for size in sizes:
        offers = synthetic(size)
        repeats = max(3, min(51, 2_000_000 // size // (4 if quick else 1)))
        plan_workload(workload, offers)  # warm the caches (GPU table, CUDA table, locations)
        planned = median_seconds(lambda o=offers: plan_workload(workload, o), repeats)
        scan = median_seconds(lambda o=offers: [x for x in o if x.gpu == wanted], repeats)
        eligible = sum(len(s.candidates) for s in plan_workload(workload, offers).stages)
        growth = (
            f"{planned / previous[1]:.2f}x" if previous is not None else "-"
        )  # time ratio for (size / previous size) times the offers
        print(
            f"{size:>9,} {planned * 1e3:>9.2f} {planned / size * 1e6:>9.3f} {growth:>7} "
            f"{scan * 1e3:>8.2f} {planned / scan:>6.1f}x {eligible:>9,}"
        )
        previous = (size, planned)
    print("growth: time ratio to the previous size (10x the offers; <= 10x is linear or better)")


def bench_cold(path: Path, repeats: int) -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("NODUS_CATALOG", None)
    python = sys.executable

    def run(*args: str) -> None:
        subprocess.run(
            [python, "-m", "nodus_cli", *args, str(path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )

    run("validate")  # warm the file system cache and the byte-code
    run("plan")
    validate = median_seconds(lambda: run("validate"), repeats)
    plan = median_seconds(lambda: run("plan"), repeats)
    plan_json = median_seconds(lambda: run("plan", "--json"), repeats)
    print(
        f"cold CLI on {path.relative_to(REPO) if path.is_relative_to(REPO) else path} "
        f"(median of {repeats} fresh interpreters):"
    )
    print(f"  nodus validate      {validate * 1e3:7.1f} ms  1.00x (baseline)")
    print(f"  nodus plan          {plan * 1e3:7.1f} ms  {plan / validate:.2f}x")
    print(f"  nodus plan --json   {plan_json * 1e3:7.1f} ms  {plan_json / validate:.2f}x")
    print("  goal: plan under 1.5x validate")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", help="workload file (default: an example)")
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    path, tmp = find_workload(args.workload)
    try:
        result = load_file(path)
        if result.workload is None:
            print(f"{path} is not a valid workload", file=sys.stderr)
            return 1
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        bench_in_process(result.workload, sizes, args.quick)
        print()
        bench_cold(path, 5 if args.quick else 11)
    finally:
        if tmp is not None:
            for p in tmp.iterdir():
                p.unlink()
            tmp.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
