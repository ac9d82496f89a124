"""Fan-out at the engine's limit: `nodus run` of a [map] against the engine's own pace.

1. GPUs: N items (default 100; the issue's bars are 100 and 1,000) of ``true`` on 4 stand-in
   GPUs, one GPU per task, four at once, measured in one run, interleaved:

   - nodus: the wall time of ``nodus run FILE`` (a [map] stage), and nodus's own CPU per
     task (user + system of the nodus process, start-up included);
   - the engine's limit: a minimal driver calling the Engine API over the unix socket
     (stdlib ``http.client``: create, start, wait, logs, remove), 4 threads, each holding one
     GPU with the same device request nodus makes;
   - the shell: ``xargs`` over ``docker run --rm --gpus device=GPU``, four lanes.

   Goal: nodus at least 0.95x the raw driver's throughput; its own CPU under 5 ms a task
   (printed with the raw driver's and the shell's CPU a task in the same run: the CPU an
   Engine API call costs varies with the machine and the hour, 0.3-0.6 ms a call for the
   raw driver here).
2. No GPU: M items (default 0: skipped; e.g. 2,000): the most memory the nodus process held
   (goal: under 200 MB) and its CPU per task.

Where a task's time goes (each thread's own CPU, kernel included, measured around the
parts of one in-process run of 40 items: ~5.5 ms a task, start-up aside):

  1.8 ms  the GPU claim: two listings of the engine's containers (choose, then verify the
          reservation: the no-double-booking guarantee across processes; ~0.4 ms each,
          their JSON and the ledger ~0.1 ms) and the create
  1.2 ms  running the container: start, wait, the exit's classification
  0.9 ms  the log follower: the live stream, then the read of the complete log once the
          container exited (Docker 20.10 can end the live stream early), a connection
          each
  0.9 ms  the driver: three events a task (~0.4), the records in batches (one SQLite
          transaction every 0.5 s, ~0.2), the budget and stop checks, the progress line
  0.3 ms  removing the container, off the critical path
  0.4 ms  the rest (the task's spec, labels, GPU sampling's share)

Every Engine API call costs ~0.26 ms of its thread's CPU inside a fan-out whatever it
carries, against 0.05-0.07 ms for the same call made alone in a loop: the rest is the
wake-up when the answer comes and the GIL hand-off among the run's threads, on this VM (a
listing adds ~0.2 ms of JSON and ledger work). A task makes nine (two listings, create,
start, wait, remove, two log streams) where the raw driver makes five; the raw driver's
own calls (``http.client``) cost it 0.3-0.6 ms each, its CPU a task printed beside nodus's.

Removed on the way (first measured at 48 ms a task, the stand-in's calls through a pyenv
shim included): the Docker SDK and requests per call (~11 ms; now the standard library's
http.client over one kept-alive connection per thread), an nvidia-smi per task (now one
per interval for the whole process), removal in the critical path, three new
threads and two new connections a task (now lanes, nodus_cli/lanes.py: threads that serve
task after task, each keeping its connection). Left: one listing instead of two when
nobody else uses the engine; the log's two streams (live, then the final read), each on a
connection of its own. The stand-in nvidia-smi's own CPU (a Python script, ~25 ms a
call) is measured and left out of nodus's figure, and printed.

Needs the local engine with the stand-in NVIDIA hook and the test image (``bash
tests/harness/engine.sh up``) and the stand-in nvidia-smi (tests/fakes/bin). Not
collected by pytest.

Run: python benchmarks/fanout.py [--items 100] [--rounds 3] [--cpu-items 0]
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _timing import REPO, installed_env, nodus_command

IMAGE = "nodus-test/busybox:1"
#: nodus's throughput against the raw driver's, at least.
GOAL = 0.95
CPU_GOAL_MS = 5.0
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


def counted_smi(folder: Path) -> tuple[Path, Path]:
    """A folder to put first on PATH whose ``nvidia-smi`` counts its calls (in the file
    returned) and runs the stand-in with this interpreter itself: not through a pyenv
    shim, which costs a bash script and ``pyenv`` per call (50-100 ms here, more than
    nodus's own work for a whole fan-out). Its CPU is the stand-in's, not nodus's."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    calls = folder / "smi-calls"
    calls.touch()
    smi = bin_dir / "nvidia-smi"
    fake = REPO / "tests" / "fakes" / "bin" / "nvidia-smi"
    smi.write_text(
        f'#!/bin/sh\necho x >> "{calls}"\nexec "{os.path.realpath(sys.executable)}" -I -S '
        f'"{fake}" "$@"\n',
        "utf-8",
    )
    smi.chmod(0o755)
    return bin_dir, calls


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children, so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def smi_cost(bin_dir: Path, env: dict[str, str], rounds: int = 7) -> float:
    """CPU seconds (user + system) one stand-in nvidia-smi call costs, median."""
    costs = []
    for _ in range(rounds):
        before = _children_cpu()
        query = ["--query-gpu=uuid,utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
        subprocess.run([str(bin_dir / "nvidia-smi"), *query], env=env, capture_output=True)
        costs.append(_children_cpu() - before)
    return statistics.median(costs)


def run_nodus(file: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """Wall seconds of `nodus run FILE`, the most memory it held (MB), and the CPU seconds
    nodus itself used (user + system): its own overhead, whatever the engine does."""
    before, cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(
        [*nodus_command(), "run", str(file)], capture_output=True, text=True, env=env, check=False
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"nodus run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024, _children_cpu() - cpu_before


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


class _Engine(http.client.HTTPConnection):
    """One connection to the engine's unix socket (the raw driver's)."""

    def __init__(self) -> None:
        super().__init__("localhost")

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect("/var/run/docker.sock")

    def call(self, method: str, path: str, body: object = None) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        self.request(method, f"/v1.41{path}", body=data, headers=headers)
        response = self.getresponse()
        payload = response.read()
        if response.status >= 300:
            sys.exit(f"the raw driver's {method} {path}: {response.status} {payload[:200]!r}")
        return payload


def run_raw(items: int, gpus: list[str]) -> float:
    """4 threads, one GPU each, taking items from one counter: the engine's own pace."""
    left = iter(range(items))
    lock = threading.Lock()

    def lane(gpu: str) -> None:
        conn = _Engine()
        request = {"Driver": "nvidia", "DeviceIDs": [gpu], "Capabilities": [["gpu"]], "Count": 0}
        body = {
            "Image": IMAGE,
            "Cmd": ["true"],
            "HostConfig": {
                "NanoCpus": 250_000_000,
                "Memory": 256 * 1024**2,
                "DeviceRequests": [request],
            },
        }
        while True:
            with lock:
                if next(left, None) is None:
                    return
            cid = json.loads(conn.call("POST", "/containers/create", body))["Id"]
            conn.call("POST", f"/containers/{cid}/start")
            conn.call("POST", f"/containers/{cid}/wait")
            conn.call("GET", f"/containers/{cid}/logs?stdout=1&stderr=1")
            conn.call("DELETE", f"/containers/{cid}?force=1&v=1")

    start = time.perf_counter()
    threads = [threading.Thread(target=lane, args=(g,)) for g in gpus]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--items", type=int, default=100, help="GPU items (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--cpu-items", type=int, default=0, help="CPU-only items (default 0)")
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nodus-fanout-") as tmp:
        folder = Path(tmp)
        gpus_csv, gpus = four_gpus(folder)
        env = installed_env(folder)
        bin_dir, smi_calls = counted_smi(folder)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["NODUS_FAKE_GPUS"] = str(gpus_csv)
        nodus_command()  # the normal install made (and timed) outside the rounds

        gpu_file = folder / "gpu.toml"
        gpu_file.write_text(workload(opts.items, gpu=True), "utf-8")
        n = opts.items
        print(
            f"1. {n} items of `true`, one of 4 stand-in GPUs each, 4 at once, {opts.rounds} rounds"
        )
        walls: dict[str, list[float]] = {"nodus": [], "raw": [], "shell": []}
        cpus: list[float] = []
        raw_cpus: list[float] = []  # the raw driver's CPU (this process's threads)
        shell_cpus: list[float] = []  # the shell's: xargs and every docker CLI it ran
        smi: list[int] = []  # stand-in nvidia-smi calls per nodus run
        for i in range(opts.rounds):
            order = ["nodus", "raw", "shell"]
            for name in order[i % 3 :] + order[: i % 3]:  # rotate who goes first
                if name == "nodus":
                    called = len(smi_calls.read_text().splitlines())
                    wall, _, cpu = run_nodus(gpu_file, env)
                    walls[name].append(wall)
                    cpus.append(cpu)
                    smi.append(len(smi_calls.read_text().splitlines()) - called)
                elif name == "raw":
                    before = time.process_time()
                    walls[name].append(run_raw(n, gpus))
                    raw_cpus.append(time.process_time() - before)
                else:
                    before = _children_cpu()
                    walls[name].append(run_shell(n, gpus))
                    shell_cpus.append(_children_cpu() - before)
        med = {k: statistics.median(v) for k, v in walls.items()}
        for name, label in (
            ("nodus", "nodus run"),
            ("raw", "raw Engine API x4"),
            ("shell", "xargs docker run x4"),
        ):
            rounds = " ".join(f"{w:.2f}" for w in walls[name])
            print(
                f"  {label:<20} median {med[name]:6.2f} s  {n / med[name]:5.1f} tasks/s  ({rounds})"
            )
        ratio = med["raw"] / med["nodus"]
        verdict = "meets" if ratio >= GOAL else "misses"
        print(
            f"  nodus throughput: {ratio:.2f}x the raw driver's ({verdict} the goal of at least"
            f" {GOAL:g}x), {med['shell'] / med['nodus']:.2f}x the shell's"
        )
        per_call = smi_cost(bin_dir, env)
        calls = statistics.median(smi)
        cpu_ms = (statistics.median(cpus) - calls * per_call) / n * 1000
        verdict = "meets" if cpu_ms < CPU_GOAL_MS else "misses"
        print(
            f"  nodus's own CPU: {cpu_ms:.1f} ms per task ({verdict} the goal of under "
            f"{CPU_GOAL_MS:g} ms; start-up included; the stand-in nvidia-smi's {calls:g} "
            f"calls, {per_call * 1000:.0f} ms each, left out: "
            f"{statistics.median(cpus) / n * 1000:.1f} ms with them)"
        )
        raw_ms = statistics.median(raw_cpus) / n * 1000
        shell_ms = statistics.median(shell_cpus) / n * 1000
        print(
            f"  the same run's CPU per task: the raw driver {raw_ms:.1f} ms (nodus "
            f"{cpu_ms / raw_ms:.2f}x), the shell {shell_ms:.1f} ms (xargs and the docker CLI; "
            f"nodus {cpu_ms / shell_ms:.2f}x)"
        )

        if opts.cpu_items:
            cpu_file = folder / "cpu.toml"
            cpu_file.write_text(workload(opts.cpu_items, gpu=False), "utf-8")
            print(f"2. {opts.cpu_items} items of `true`, no GPU")
            wall, peak_mb, cpu = run_nodus(cpu_file, env)
            print(
                f"  nodus run: {wall:.1f} s, {opts.cpu_items / wall:.1f} tasks/s, "
                f"{cpu / opts.cpu_items * 1000:.1f} ms of nodus's own CPU per task"
            )
            verdict = "meets" if peak_mb < MEMORY_GOAL_MB else "misses"
            print(
                f"  most memory of the nodus process: {peak_mb:.0f} MB ({verdict} the goal of "
                f"under {MEMORY_GOAL_MB} MB)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
