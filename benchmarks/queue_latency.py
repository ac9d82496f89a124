"""How soon a queued run starts once its GPUs are free (goal: within 1 s).

Per round: a detached run holds the one stand-in L4 (``sleep 1``) and prints the moment it
ends; a second run of the same GPU, started while the first holds it, waits in the queue
and prints the moment it starts. Both moments are read inside the containers from
``/proc/uptime`` (every container shares the host's kernel: one clock for both), so the
latency is from the holder's last instruction to the waiter's first, and covers the
holder's exit, the engine's event, the waiter waking, reading the engine, checking its
turn, creating and starting its container.

The baseline in the same run is what a plain ``docker run --rm`` of the same image takes
from start to its first instruction (the floor any queue pays to start a container).

Prints the median and the worst latency, and the baseline's median. Needs the local
engine and the test image (``bash tests/harness/engine.sh up``). Not collected by pytest.

Run: python benchmarks/queue_latency.py [--rounds 9]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _timing import REPO, installed_env, nodus_command

IMAGE = "nodus-test/busybox:1"
GOAL_SECONDS = 1.0
STAMP = "echo T $(cut -d' ' -f1 /proc/uptime)"


def workload(name: str, command: str) -> str:
    return f'name = "{name}"\nimage = "{IMAGE}"\ncommand = {json.dumps(command)}\ngpu = "L4"\n'


def stamps(text: str) -> list[float]:
    return [float(line.split("T ", 1)[1]) for line in text.splitlines() if "| T " in line]


def one_round(folder: Path, env: dict[str, str]) -> float:
    nodus = nodus_command()
    hold = folder / "hold.toml"
    hold.write_text(workload("holder", f"sleep 1; {STAMP}"), "utf-8")
    wait = folder / "wait.toml"
    wait.write_text(workload("waiter", STAMP), "utf-8")
    started = subprocess.run(
        [*nodus, "run", "--detach", "--json", str(hold)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    holder = json.loads(started.stdout)["id"]
    waiter = subprocess.run(
        [*nodus, "run", str(wait)], capture_output=True, text=True, env=env, check=True
    )
    if "queued" not in waiter.stderr:
        raise SystemExit(f"the second run did not wait: {waiter.stderr}")
    (begun,) = stamps(waiter.stdout)
    for _ in range(100):  # the holder's record ends a moment after its container
        logs = subprocess.run(
            [*nodus, "logs", holder], capture_output=True, text=True, env=env, check=True
        ).stdout
        if stamps(logs):
            break
        time.sleep(0.1)
    (ended,) = stamps(logs)
    return begun - ended


def docker_floor() -> float:
    before = time.monotonic()
    subprocess.run(["docker", "run", "--rm", IMAGE, "true"], check=True, capture_output=True)
    return time.monotonic() - before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = installed_env(folder)
        env["PATH"] = f"{REPO / 'tests' / 'fakes' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["NODUS_FAKE_GPUS"] = "l4x1"
        latencies, floors = [], []
        one_round(folder, env)  # warm the caches
        for _ in range(args.rounds):
            latencies.append(one_round(folder, env))
            floors.append(docker_floor())
    median, worst = statistics.median(latencies), max(latencies)
    floor = statistics.median(floors)
    print(f"queued run starts after its GPU is free: median {median:.2f} s, worst {worst:.2f} s")
    print(f"(docker run --rm of the same image, start to exit: median {floor:.2f} s)")
    print(f"goal: within {GOAL_SECONDS:g} s -> {'met' if worst <= GOAL_SECONDS else 'NOT met'}")
    return 0 if worst <= GOAL_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
