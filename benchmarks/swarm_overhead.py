"""Swarm overhead: `nodus run --target swarm` against the bare Docker CLI, one echo job.

Per round, in alternating order (so drift in the engine affects both alike):

- nodus: the wall time of a fresh ``nodus run FILE --target swarm`` of a one-stage echo
  workload, from start to exit: planning against the nodes, submitting the stage as a
  replicated job, following it to completion, its output, the record, removing the
  service;
- baseline: the wall time of ``docker service create --mode replicated-job`` of the same
  image, command, reservations and node, which waits until the job completes (the CLI's
  own progress wait), i.e. what one does by hand. Removing that service is not timed.

Prints both medians and their ratio (goal: under 1.2x). Needs a Swarm manager at
DOCKER_HOST (or the local socket); ``--harness`` brings up the two-node test Swarm
(``tests/harness/engine.sh swarm-up``) for the run and tears it down afterwards.

Run: python benchmarks/swarm_overhead.py [--rounds 9] [--harness] [--max-ratio 1.2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _timing import alternate, installed_env, nodus_command, report_ratio, timed

REPO = Path(__file__).resolve().parent.parent
ENGINE_SH = REPO / "tests" / "harness" / "engine.sh"
IMAGE = "nodus-test/busybox:1"
GOAL = 1.2
WORKLOAD = f"""\
name = "swarm-overhead"
image = "{IMAGE}"
command = ["echo", "hello from swarm"]

[requirements]
cpu = 0.5
memory_gb = 0.25
"""
BENCH_LABEL = "nodus.bench=swarm-overhead"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def chosen_node(file: Path, env: dict[str, str]) -> tuple[str, str]:
    """The node nodus plans the stage on: (host name, node id)."""
    done = subprocess.run(
        [*nodus_command(), "plan", str(file), "--target", "swarm", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"nodus plan --target swarm failed:\n{done.stderr}")
    host = json.loads(done.stdout)["stages"][0]["selected"]["machine_id"]
    for line in docker("node", "ls", "--format", "{{.ID}} {{.Hostname}}").stdout.splitlines():
        node_id, name = line.split()
        if name == host:
            return host, node_id
    sys.exit(f"node {host} is not in `docker node ls`")


def time_nodus(file: Path, env: dict[str, str]) -> float:
    cmd = [*nodus_command(), "run", str(file), "--target", "swarm"]
    return timed(cmd, env, lambda out: "hello from swarm" in out)


def time_baseline(node_id: str) -> float:
    name = f"nodus-bench-{uuid.uuid4().hex[:8]}"
    args = [
        "docker",
        "service",
        "create",
        "--quiet",
        "--no-resolve-image",
        "--name",
        name,
        "--label",
        BENCH_LABEL,
        "--mode",
        "replicated-job",
        "--restart-condition",
        "none",
        "--constraint",
        f"node.id=={node_id}",
        "--reserve-cpu",
        "0.5",
        "--limit-cpu",
        "0.5",
        "--reserve-memory",
        "256M",
        "--limit-memory",
        "256M",
        IMAGE,
        "echo",
        "hello from swarm",
    ]
    t0 = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    try:
        if done.returncode != 0:
            sys.exit(f"docker service create failed:\n{done.stderr}")
        state = docker("service", "ps", name, "--format", "{{.CurrentState}}").stdout
        if not state.startswith("Complete"):
            sys.exit(f"the baseline job did not complete: {state.strip()}")
    finally:
        docker("service", "rm", name, check=False)
        # Before Docker 24 a removed job leaves its finished container behind
        # (moby/moby#42789): remove it where this engine can (the job ran here).
        leftover = docker(
            "ps", "-aq", "--filter", f"label=com.docker.swarm.service.name={name}", check=False
        ).stdout.split()
        if leftover:
            docker("rm", "-f", *leftover, check=False)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="measured rounds (default 9)")
    parser.add_argument(
        "--harness", action="store_true", help="bring the test Swarm up, and down afterwards"
    )
    parser.add_argument(
        "--max-ratio", type=float, default=None, help="exit 1 when the ratio is above this"
    )
    opts = parser.parse_args(argv)
    if opts.harness:
        subprocess.run(["bash", str(ENGINE_SH), "swarm-up"], check=True, stdout=subprocess.DEVNULL)
    try:
        with tempfile.TemporaryDirectory(prefix="nodus-bench-") as tmp:
            file = Path(tmp) / "echo.toml"
            file.write_text(WORKLOAD, "utf-8")
            env = installed_env(Path(tmp))
            host, node_id = chosen_node(file, env)
            print(f"one-stage echo job on node {host}; {opts.rounds} interleaved rounds")
            time_nodus(file, env)  # warm-up: page cache, image on the node
            time_baseline(node_id)
            nodus_times, base_times = alternate(
                opts.rounds, lambda: time_nodus(file, env), lambda: time_baseline(node_id)
            )
    finally:
        if opts.harness:
            subprocess.run(["bash", str(ENGINE_SH), "swarm-down"], check=False)
    ratio = report_ratio(
        "nodus run --target swarm",
        nodus_times,
        "docker service create (job wait)",
        base_times,
        GOAL,
    )
    if opts.max_ratio is not None and ratio > opts.max_ratio:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
