"""Fan-out: `nodus run` of a [map] over many items against the shell doing the same.

1. GPUs: 200 items of ``true`` on 4 stand-in GPUs, one GPU per task. nodus: the wall time
   of ``nodus run FILE``; baseline: ``xargs`` over ``docker run --rm --gpus device=GPU``
   of the same image, four at once, each lane holding one GPU (what a shell user writes).
   Goal: nodus at most 0.8x the shell's time (it pays no process start per task). Prints
   tasks/s for both.
2. No GPU: 2,000 items of ``true``: nodus's overhead per task (its wall time per task at
   its concurrency, minus the engine's own time for one container, measured alone in the
   same run) and the most memory the nodus process held (goal: under 200 MB).

Needs the local engine with the stand-in NVIDIA hook and the test image (``bash
tests/harness/engine.sh up``) and the stand-in nvidia-smi (tests/fakes/bin). Not
collected by pytest.

Run: python benchmarks/fanout.py [--items 200] [--cpu-items 2000]
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _timing import REPO, installed_env, nodus_command

IMAGE = "nodus-test/busybox:1"
GOAL = 0.8
MEMORY_GOAL_MB = 200


def workload(items: int, gpu: bool) -> str:
    listed = ", ".join(f'"{i}"' for i in range(items))
    need = 'gpu = "H100"\n' if gpu else ""
    return (
        f'name = "fanout-bench"\nimage = "{IMAGE}"\ncommand = ["true"]\n{need}'
        "[requirements]\ncpu = 0.25\nmemory_gb = 0.25\n"
        f"[map]\nitems = [{listed}]\n"
    )


def four_gpus(folder: Path) -> tuple[Path, list[str]]:
    """A stand-in machine with the first four GPUs of the 8x H100 capture."""
    source = REPO / "tests" / "fakes" / "gpus" / "h100x8.csv"
    with source.open(encoding="utf-8") as handle:
        lines = [ln for ln in handle if ln.strip() and not ln.startswith("#")]
    rows = list(csv.DictReader(lines))[:4]
    target = folder / "h100x4.csv"
    with target.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return target, [r["uuid"] for r in rows]


def run_nodus(file: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """Wall seconds of `nodus run FILE`, the most memory it held (MB), and the CPU seconds
    nodus itself used (user + system): its own overhead, whatever the engine does."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu_before = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    start = time.perf_counter()
    done = subprocess.run(
        [*nodus_command(), "run", str(file)], capture_output=True, text=True, env=env, check=False
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"nodus run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - cpu_before
    return wall, max(usage.ru_maxrss, before) / 1024, cpu


def run_shell(items: int, gpus: list[str]) -> float:
    """Four lanes of `xargs docker run --rm --gpus device=G`, one GPU each, at once."""
    per_lane = [items // len(gpus) + (1 if i < items % len(gpus) else 0) for i in range(len(gpus))]
    start = time.perf_counter()
    lanes = [
        subprocess.Popen(
            [
                "sh",
                "-c",
                f"seq {n} | xargs -I{{}} docker run --rm --gpus device={gpu} {IMAGE} true",
            ],
            stdout=subprocess.DEVNULL,
        )
        for gpu, n in zip(gpus, per_lane, strict=True)
    ]
    codes = [lane.wait() for lane in lanes]
    if any(codes):
        sys.exit(f"the shell baseline failed: {codes}")
    return time.perf_counter() - start


def engine_time(rounds: int = 15) -> float:
    """The engine's own time for one container of `true`: create, start, wait, remove."""
    import docker

    client = docker.APIClient()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        cid = client.create_container(IMAGE, ["true"])["Id"]
        client.start(cid)
        client.wait(cid)
        client.remove_container(cid, force=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--items", type=int, default=200, help="GPU items (default 200)")
    parser.add_argument("--cpu-items", type=int, default=2000, help="CPU-only items (default 2000)")
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nodus-fanout-") as tmp:
        folder = Path(tmp)
        gpus_csv, gpus = four_gpus(folder)
        env = installed_env(folder)
        env["PATH"] = f"{REPO / 'tests' / 'fakes' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["NODUS_FAKE_GPUS"] = str(gpus_csv)
        env["NODUS_GPU_SAMPLE_SECONDS"] = "60"  # sampling is not what is measured here

        gpu_file = folder / "gpu.toml"
        gpu_file.write_text(workload(opts.items, gpu=True), "utf-8")
        print(f"1. {opts.items} items of `true`, one of 4 stand-in GPUs each")
        shell = run_shell(opts.items, gpus)
        nodus, _, _ = run_nodus(gpu_file, env)
        print(f"  nodus run            {nodus:7.2f} s  {opts.items / nodus:6.1f} tasks/s")
        print(f"  xargs docker run x4  {shell:7.2f} s  {opts.items / shell:6.1f} tasks/s")
        ratio = nodus / shell
        verdict = "meets" if ratio <= GOAL else "misses"
        print(f"  ratio: {ratio:.2f}x the shell ({verdict} the goal of at most {GOAL:g}x)")

        cpu_file = folder / "cpu.toml"
        cpu_file.write_text(workload(opts.cpu_items, gpu=False), "utf-8")
        print(f"2. {opts.cpu_items} items of `true`, no GPU")
        alone = engine_time()
        wall, peak_mb, cpu = run_nodus(cpu_file, env)
        from nodus_cli.targets.local import machine

        at_once = min(opts.cpu_items, int(machine.cpu_count() // 0.25))
        per_task = wall * at_once / opts.cpu_items
        print(f"  nodus run: {wall:.1f} s, {opts.cpu_items / wall:.1f} tasks/s, {at_once} at once")
        print(f"  the engine alone, one container of `true`: {alone * 1000:.0f} ms")
        print(
            f"  nodus overhead per task: {cpu / opts.cpu_items * 1000:.1f} ms of nodus's own CPU "
            f"(user + system of the nodus process, start-up included)"
        )
        print(
            f"  wall per task at {at_once} at once: {per_task * 1000:.0f} ms, "
            f"{max(0.0, per_task - alone) * 1000:.0f} ms above the engine's time for one "
            "container alone (the engine shares these cores with every task at once)"
        )
        verdict = "meets" if peak_mb < MEMORY_GOAL_MB else "misses"
        print(
            f"  most memory of the nodus process: {peak_mb:.0f} MB ({verdict} the goal of "
            f"under {MEMORY_GOAL_MB} MB)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
