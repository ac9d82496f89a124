"""Slurm: `nodus run --target slurm` against Slurm's own commands doing the same work.

Three measures, each against a baseline measured in the same run, on the test cluster
of ``tests/harness/slurm.sh`` (2 ``h100`` on ``gpu-a``, 2 ``a100`` on ``gpu-b``; the
jobs run the image on this machine's Docker engine, as nodus's jobs do):

- **one job** (goal at most 1.2x): the wall time of a fresh ``nodus run FILE --target
  slurm`` of a one-GPU stage running ``true`` (plan, ``sbatch``, following it through
  ``squeue``, its end from ``sacct``, the record), against ``sbatch --wait`` of a script
  that runs the same image and command with ``docker run --gpus device=$SLURM_JOB_GPUS``
  and the same GRES, i.e. what one does by hand. Interleaved rounds, medians.
- **fan-out** (goal at least 0.9x the throughput): a ``[map]`` of ``--items`` (100)
  one-GPU items of ``true`` on the two ``h100`` (one job array), against ``sbatch --wait
  --array=0-99`` of the same script: items per second of each, wall clock, medians.
- **a queued job's start** (goal: within Slurm's own scheduling interval): both GPUs of
  ``gpu-a`` held by a job that writes the time it ends, then a one-GPU job queued behind
  it, by nodus and by ``sbatch``; the time from the holder's end to the queued job's
  command starting (the same clock: the nodes are this machine), medians, shown beside
  the cluster's ``SchedulerParameters`` (``sched_interval``, 60 s unless set; a job
  that ends makes Slurm schedule at once, so both are well under it).

Needs root and the harness: ``--harness`` runs ``slurm.sh up`` before and ``down``
after; without it ``SLURM_CONF`` must name a running test cluster (the harness's
``up`` prints it). Run under the shared Docker lock where several share the engine.

Run: python benchmarks/slurm.py [--harness] [--rounds 5] [--items 100] [--fanout-rounds 2]
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

from _timing import alternate, installed_env, nodus_command, report_ratio, timed

REPO = Path(__file__).resolve().parent.parent
SLURM_SH = REPO / "tests" / "harness" / "slurm.sh"
IMAGE = "nodus-test/busybox:1"
#: For the queued job, which prints the time its command starts.
PYTHON = "nodus-test/python:3.11"
ONE_GOAL = 1.2
FANOUT_GOAL = 0.9
NOW = "import time; print('began-at', repr(time.time()))"


def slurm(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def script(tmp: Path, name: str, command: str, image: str = IMAGE) -> Path:
    """A batch script that runs ``command`` in the image on the GPUs Slurm allocated."""
    path = tmp / f"{name}.sh"
    path.write_text(
        "#!/bin/bash\n"
        'gpus="${SLURM_JOB_GPUS:-$CUDA_VISIBLE_DEVICES}"\n'
        f'exec docker run --rm --gpus "\\"device=$gpus\\"" {image} {command}\n'
    )
    return path


def workload(tmp: Path, name: str, command: str, items: int = 0, image: str = IMAGE) -> Path:
    path = tmp / f"{name}.toml"
    text = f'name = "{name}"\nimage = "{image}"\ncommand = {command}\ngpu = "H100"\n'
    if items:
        shown = ", ".join(f'"{i}"' for i in range(items))
        text += f"[map]\nitems = [{shown}]\n"
    path.write_text(text)
    return path


def time_sbatch(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    slurm("sbatch", "--wait", "-o", "/dev/null", *args, env=env)
    return time.perf_counter() - start


def one_job(tmp: Path, env: dict[str, str], rounds: int) -> float:
    file = workload(tmp, "one", '"true"')
    raw = script(tmp, "one", "true")
    gres = ["--gres=gpu:h100:1", "--nodes=1", "--ntasks=1", "--cpus-per-task=1", str(raw)]

    def nodus() -> float:
        return timed([*nodus_command(), "run", str(file), "--target", "slurm"], env, _any)

    def sbatch() -> float:
        return time_sbatch(gres, env)

    nodus()  # warm-up: page cache, image, accounting
    sbatch()
    a, b = alternate(rounds, nodus, sbatch)
    print("one job of `true` on one h100:")
    return report_ratio("nodus run --target slurm", a, "sbatch --wait", b, ONE_GOAL)


def fanout(tmp: Path, env: dict[str, str], items: int, rounds: int) -> float:
    file = workload(tmp, "fan", '"true"', items)
    raw = script(tmp, "fan", "true")
    args = [f"--array=0-{items - 1}", "--gres=gpu:h100:1", "--cpus-per-task=1", str(raw)]
    ours: list[float] = []
    theirs: list[float] = []
    for i in range(rounds):
        order = [("nodus", file), ("raw", raw)] if i % 2 == 0 else [("raw", raw), ("nodus", file)]
        for who, _ in order:
            if who == "nodus":
                cmd = [*nodus_command(), "run", str(file), "--target", "slurm"]
                ours.append(items / timed(cmd, env, _any))
            else:
                theirs.append(items / time_sbatch(args, env))
    mine, base = statistics.median(ours), statistics.median(theirs)
    print(f"fan-out of {items} one-GPU items on 2 h100 (one job array each):")
    print(f"  nodus run --target slurm  median {mine:6.1f} items/s  runs: {_shown(ours)}")
    print(f"  sbatch --wait --array     median {base:6.1f} items/s  runs: {_shown(theirs)}")
    ratio = mine / base
    verdict = "meets" if ratio >= FANOUT_GOAL else "misses"
    print(f"ratio: {ratio:.2f}x the raw array's throughput ({verdict} the goal of {FANOUT_GOAL}x)")
    return ratio


def queued_start(tmp: Path, env: dict[str, str], rounds: int) -> None:
    """Seconds from a holder's end to the start of a job queued behind it."""
    file = workload(tmp, "queued", f'["python3", "-c", "{NOW}"]', image=PYTHON)
    raw = script(tmp, "queued", f'python3 -c "{NOW}"', image=PYTHON)
    ours: list[float] = []
    theirs: list[float] = []
    for i in range(rounds):
        for who in ("nodus", "raw") if i % 2 == 0 else ("raw", "nodus"):
            ended = tmp / f"held-{who}-{i}"
            slurm(
                "sbatch", "--parsable", "--gres=gpu:h100:2", "-o", "/dev/null",
                "--wrap", f"sleep 4; python3 -c 'import time; print(time.time())' > {ended}",
                env=env,
            )  # fmt: skip
            time.sleep(1.0)
            if who == "nodus":
                cmd = [*nodus_command(), "run", str(file), "--target", "slurm"]
                done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
                out = done.stdout
            else:
                log = tmp / f"queued-{i}.out"
                slurm("sbatch", "--wait", "-o", str(log), "--gres=gpu:h100:1", str(raw), env=env)
                out = log.read_text()
            began = float(out.split("began-at", 1)[1].split()[0])
            (ours if who == "nodus" else theirs).append(began - float(ended.read_text()))
    config = slurm("scontrol", "show", "config", env=env)
    params = next((ln for ln in config.splitlines() if "SchedulerParameters" in ln), "")
    print("a job queued behind both h100 of gpu-a, from the holder's end to its command:")
    print(f"  nodus run --target slurm  median {statistics.median(ours):.2f} s  {_shown(ours)}")
    print(f"  sbatch                    median {statistics.median(theirs):.2f} s  {_shown(theirs)}")
    print(f"  the cluster's {' '.join(params.split())} (sched_interval 60 s unless set)")


def _any(out: str) -> bool:
    return True


def _shown(values: list[float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of one job (default 5)")
    parser.add_argument("--items", type=int, default=100, help="fan-out items (default 100)")
    parser.add_argument("--fanout-rounds", type=int, default=2, help="fan-out rounds (2)")
    parser.add_argument("--harness", action="store_true", help="bring the cluster up and down")
    opts = parser.parse_args(argv)
    conf = os.environ.get("SLURM_CONF")
    if opts.harness:
        up = subprocess.run(["bash", str(SLURM_SH), "up"], capture_output=True, text=True)
        if up.returncode != 0:
            sys.exit(f"slurm.sh up failed:\n{up.stderr[-2000:]}")
        conf = next(ln.split("=", 1)[1] for ln in up.stdout.splitlines() if "SLURM_CONF=" in ln)
    if not conf:
        sys.exit("no cluster: pass --harness, or set SLURM_CONF to the test cluster's")
    try:
        with tempfile.TemporaryDirectory(prefix="nodus-bench-") as name:
            tmp = Path(name)
            env = {**installed_env(tmp), "SLURM_CONF": conf}
            (tmp / "config.toml").write_text(f'[slurm]\nwork_root = "{tmp / "work"}"\n')
            one_job(tmp, env, opts.rounds)
            fanout(tmp, env, opts.items, opts.fanout_rounds)
            queued_start(tmp, env, max(3, opts.rounds // 2))
    finally:
        if opts.harness:
            subprocess.run(["bash", str(SLURM_SH), "down"], capture_output=True, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
