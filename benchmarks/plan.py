"""Planner: one workload against synthetic catalogs of 1k, 10k, 100k and 1M configurations.

Prints, per catalog size, the median in-process time of ``plan_workload``, the time per
configuration, the growth ratio against the previous size (10x the configurations: a
ratio of 10x or less is linear or better) and the ratio against a baseline measured in
the same run on the same configurations (one list comprehension comparing the GPU name:
the floor of any scan). Two workloads: a typical one (``examples/llama-finetune-8xh100.toml``:
8x H100, CPU, memory, location, price limit, CUDA image) and a worst case where nothing
is excluded (a CPU-only stage: every configuration is ranked).

Then the cold time of ``nodus plan FILE`` against ``nodus validate FILE`` on the same file
(fresh interpreters, interleaved, medians): what loading the embedded catalog costs. The
state folder is a fresh one (not the developer's), so the figure does not depend on what
was run before; a second ``plan`` row has a records database there (one run recorded), as a
user who has run something has: the plan then reads the runtimes measured before.

Goals: linear growth; 100k configurations under 100 ms in-process; cold plan under 1.5x
cold validate.

Run: python benchmarks/plan.py [--quick] [--sizes 1000,10000] [--rounds 21] [WORKLOAD.toml]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _timing import REPO, interleaved_medians, nodus_command

from nodus_cli import catalog
from nodus_cli.catalog import Offer
from nodus_cli.planning.planner import plan_workload
from nodus_cli.records import RunStore
from nodus_cli.workload import Workload, load_file, load_text

EXAMPLE = REPO / "examples" / "llama-finetune-8xh100.toml"
FALLBACK = """\
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
EVERYTHING_ELIGIBLE = """\
name = "cpu-only"
image = "python:3.12-slim"
command = "true"
"""
GOAL_100K_MS = 100.0
GOAL_COLD = 1.5


def synthetic(size: int, seed: int = 7) -> tuple[Offer, ...]:
    """``size`` configurations drawn from the embedded catalog, prices and regions varied."""
    rng = random.Random(seed)
    base = catalog.embedded().offers
    regions = sorted({o.region for o in base})
    out = []
    for i in range(size):
        o = base[rng.randrange(len(base))]
        out.append(
            o._replace(
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


def typical_workload(explicit: str | None) -> tuple[Workload, Path | None]:
    """The workload to plan and its file (None when it had to be written in memory)."""
    path = Path(explicit) if explicit else EXAMPLE
    if path.is_file():
        result = load_file(path)
        if result.workload is not None:
            return result.workload, path
        print(f"{path} is not a valid workload; using a built-in one", file=sys.stderr)
    workload = load_text(FALLBACK, "bench.toml", "bench").workload
    assert workload is not None
    return workload, None


def bench_in_process(
    label: str, workload: Workload, catalogs: dict[int, tuple[Offer, ...]], quick: bool
) -> float | None:
    """Print one table; return the median milliseconds at 100k (None if not measured)."""
    print(f"{label}: plan_workload({workload.name!r}), medians")
    print(
        f"{'configs':>9} {'plan ms':>9} {'us/config':>9} {'growth':>7} "
        f"{'scan ms':>8} {'x scan':>7} {'eligible':>9}"
    )
    wanted = workload.requirements.gpu
    previous: float | None = None
    at_100k = None
    for size, offers in catalogs.items():
        repeats = max(3, min(41, 2_000_000 // size // (4 if quick else 1)))
        plan_workload(workload, offers)  # warm the GPU, CUDA and location tables

        def plan(o: Sequence[Offer] = offers) -> object:
            return plan_workload(workload, o)

        def scan(o: Sequence[Offer] = offers) -> object:
            return [x for x in o if x.gpu == wanted]

        planned = median_seconds(plan, repeats)
        floor = median_seconds(scan, repeats)
        eligible = sum(s.eligible for s in plan_workload(workload, offers).stages)
        growth = f"{planned / previous:.2f}x" if previous is not None else "-"
        print(
            f"{size:>9,} {planned * 1e3:>9.2f} {planned / size * 1e6:>9.3f} {growth:>7} "
            f"{floor * 1e3:>8.2f} {planned / floor:>6.1f}x {eligible:>9,}"
        )
        previous = planned
        if size == 100_000:
            at_100k = planned * 1e3
    return at_100k


def bench_cold(path: Path, rounds: int) -> float:
    nodus = nodus_command()
    with tempfile.TemporaryDirectory(prefix="nodus-bench-") as tmp:
        fresh, used = Path(tmp) / "fresh", Path(tmp) / "used"
        store = RunStore.open(used)
        workload = load_file(path).workload
        assert workload is not None
        store.create_run(workload, "local", 0.0, str(path))
        store.close()
        env = {"NO_COLOR": "1", "NODUS_CATALOG": "", "NODUS_CONFIG": str(Path(tmp) / "none")}
        medians = interleaved_medians(
            {
                "nodus validate FILE": [*nodus, "validate", str(path)],
                "nodus plan FILE": [*nodus, "plan", str(path)],
                "nodus plan --json FILE": [*nodus, "plan", "--json", str(path)],
                "plan, with records": [*nodus, "plan", str(path)],
            },
            rounds,
            env={**env, "NODUS_HOME": str(fresh)},
            envs={"plan, with records": {"NODUS_HOME": str(used)}},
        )
    base = medians["nodus validate FILE"]
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    print(f"cold CLI on {shown} ({rounds} interleaved rounds of fresh interpreters, medians)")
    for name, seconds in medians.items():
        print(f"  {name:<24} {seconds * 1e3:7.1f} ms  {seconds / base:5.2f}x validate")
    return medians["nodus plan FILE"] / base


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("workload", nargs="?", help="workload file (default: an example)")
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--rounds", type=int, default=15, help="cold CLI rounds")
    args = parser.parse_args(argv)
    workload, path = typical_workload(args.workload)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    catalogs = {size: synthetic(size) for size in sizes}
    worst = load_text(EVERYTHING_ELIGIBLE, "cpu-only.toml", "cpu-only").workload
    assert worst is not None
    typical_ms = bench_in_process("typical workload", workload, catalogs, args.quick)
    print()
    worst_ms = bench_in_process(
        "worst case, every configuration eligible", worst, catalogs, args.quick
    )
    print("growth: time against the previous size, for 10x the configurations (<= 10x: linear)")
    print("x scan: time against one list comprehension over the same configurations")
    for label, ms in (("typical", typical_ms), ("worst case", worst_ms)):
        if ms is not None:
            verdict = "meets" if ms < GOAL_100K_MS else "misses"
            print(
                f"{label}: 100k configurations in {ms:.1f} ms ({verdict} the goal of "
                f"{GOAL_100K_MS:g} ms)"
            )
    if path is None:
        print("(no workload file, so no cold CLI comparison)")
        return 0
    print()
    ratio = bench_cold(path, 5 if args.quick else args.rounds)
    verdict = "meets" if ratio < GOAL_COLD else "misses"
    print(f"cold plan: {ratio:.2f}x cold validate ({verdict} the goal of {GOAL_COLD:g}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
