"""How soon a queued run starts once its GPUs are free (goal: within 1 s), and how soon a
GPU held by an idle warm worker goes to a queued run of another user (goal: within 1 s).

1. Per round: a detached run holds the one stand-in L4 (``sleep 1``) and prints the moment
   it ends; a second run of the same GPU, started while the first holds it, waits in the
   queue and prints the moment it starts. Both moments are read inside the containers
   from ``/proc/uptime`` (every container shares the host's kernel: one clock for both),
   so the latency is from the holder's last instruction to the waiter's first, and covers
   the holder's exit, the engine's event, the waiter waking, reading the engine, checking
   its turn, creating and starting its container.
2. Warm workers (issue 32), per round: this process (a ``Client`` of its own
   ``NODUS_HOME``) makes a single call that wants the L4, so an idle warm worker holds it;
   then ``nodus run`` of another ``NODUS_HOME`` (another user, to nodus) wants the L4 and
   queues. The hand-over is from the moment its queue entry exists (the engine's ``create``
   event of the entry, on the wall clock, turned into the kernel's boot clock that
   ``/proc/uptime`` reads) to the waiter's first instruction: the caller's watcher seeing
   the entry, ending the worker, the waiter seeing it go, and starting its container.
   Round 1's figure (a holder that ends) is the baseline in the same run: the same
   hand-over when the GPU's holder is a plain task that ends.

The floor in the same run is what a plain ``docker run --rm`` of the same image takes from
start to exit (what any queue pays to start a container).

Prints the medians and the worst latencies, and the floor's median. Needs the local engine
and the test images (``bash tests/harness/engine.sh up``). Not collected by pytest.

Run: python benchmarks/queue_latency.py [--rounds 9] [--warm-rounds 5]
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
from typing import Any

from _timing import REPO, installed_env, nodus_command

IMAGE = "nodus-test/busybox:1"
PY_IMAGE = "nodus-test/python:3.11"
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


def hello() -> str:
    return "hello"


def warm_round(folder: Path, env: dict[str, str], client: Any) -> float:
    """An idle warm worker of ``client`` holds the L4; a run of another NODUS_HOME
    (``env``) queues for it: from its entry's creation to its first instruction."""
    assert client.run(fn=hello, image=PY_IMAGE, gpu="L4", keep_warm=600).result() == "hello"
    wait = folder / "wait.toml"
    wait.write_text(workload("waiter", STAMP), "utf-8")
    since = time.time()
    waiter = subprocess.run(
        [*nodus_command(), "run", str(wait)], capture_output=True, text=True, env=env, check=True
    )
    until = time.time() + 1
    if "held by warm worker" not in waiter.stderr:
        raise SystemExit(f"the run did not wait for the warm worker: {waiter.stderr}")
    (begun,) = stamps(waiter.stdout)
    listed = subprocess.run(
        [
            *("docker", "events", "--since", f"{since:.3f}", "--until", f"{until:.3f}"),
            *("--filter", "type=container", "--filter", "event=create"),
            *("--filter", f"label=nodus.home={env['NODUS_HOME']}"),
            *("--filter", "label=nodus.queue", "--format", "{{json .}}"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    (entry,) = [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]
    # The wall clock turned into the boot clock (/proc/uptime) the containers read.
    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return begun - (int(entry["timeNano"]) / 1e9 - boot)


def docker_floor() -> float:
    before = time.monotonic()
    subprocess.run(["docker", "run", "--rm", IMAGE, "true"], check=True, capture_output=True)
    return time.monotonic() - before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--warm-rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = installed_env(folder)
        env["PATH"] = f"{REPO / 'tests' / 'fakes' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["NODUS_FAKE_GPUS"] = "l4x1"
        latencies, floors, handed = [], [], []
        one_round(folder, env)  # warm the caches
        for _ in range(args.rounds):
            latencies.append(one_round(folder, env))
            floors.append(docker_floor())
        if args.warm_rounds:
            # This process is the warm worker's caller, of a NODUS_HOME of its own.
            os.environ.update({k: env[k] for k in ("PATH", "NODUS_FAKE_GPUS")})
            os.environ["NODUS_CONFIG"] = env["NODUS_CONFIG"]
            from nodus_cli import Client

            with Client(home=folder / "caller-home") as client:
                warm_round(folder, env, client)  # warm the caches
                handed = [warm_round(folder, env, client) for _ in range(args.warm_rounds)]
    median, worst = statistics.median(latencies), max(latencies)
    floor = statistics.median(floors)
    print(f"queued run starts after its GPU is free: median {median:.2f} s, worst {worst:.2f} s")
    print(f"(docker run --rm of the same image, start to exit: median {floor:.2f} s)")
    ok = worst <= GOAL_SECONDS
    print(f"goal: within {GOAL_SECONDS:g} s -> {'met' if ok else 'NOT met'}")
    if handed:
        shown = " ".join(f"{v:.2f}" for v in handed)
        print(
            f"an idle warm worker's GPU handed to a queued run of another user: median "
            f"{statistics.median(handed):.2f} s, worst {max(handed):.2f} s (runs: {shown}); "
            f"a holder that ends (above): median {median:.2f} s"
        )
        met = max(handed) <= GOAL_SECONDS
        print(f"goal: within {GOAL_SECONDS:g} s -> {'met' if met else 'NOT met'}")
        ok = ok and met
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
