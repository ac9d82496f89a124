"""A plan against a Kubernetes cluster of 1,000 GPU nodes and their pods, through the
official client, against the API server emulator of the tests (in its own process).

The cluster: ``--nodes`` nodes (default 1,000) with real GPU-operator labels, a third each
H100, A100 and L4, each with ``--pods`` bound pods (default 4) that hold GPUs. Measured
in-process, medians of ``--rounds`` interleaved rounds:

* ``plan``: ``Client(target="kubernetes").plan_text(...)`` of an 8x H100 workload, a new
  ``Client`` each round (so the nodes and pods are listed again), what ``nodus plan
  --target kubernetes`` does after its start-up;
* ``list_nodes``: ``Client(target="kubernetes").list_nodes()``;
* baseline: the same two listings (``GET /api/v1/nodes``, ``GET /api/v1/pods``) with
  ``urllib`` and ``json.loads`` alone: the floor of any client (transfer and parsing),
  most of it the emulator's own time to serve the documents.

Goal: the plan well under a second at 1,000 nodes. Figures in benchmarks/README.md.

Run: python benchmarks/kubernetes_plan.py [--nodes 1000] [--pods 4] [--rounds 7]
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
import urllib.request
from collections.abc import Callable
from pathlib import Path

from _timing import REPO

from nodus_cli import Client

SERVER = REPO / "tests" / "harness" / "kubernetes_emulator.py"
MODELS = [
    ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}, 8),
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}, 4),
    ({"cloud.google.com/gke-accelerator": "nvidia-l4"}, 1),
]
WORKLOAD = """\
name = "bench"
image = "nvcr.io/nvidia/pytorch:24.05-py3"
command = "python train.py"
gpu = "H100"
gpu_count = 8
"""


def _call(url: str, method: str = "GET", doc: object = None) -> bytes:
    data = json.dumps(doc).encode() if doc is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        body: bytes = answer.read()
    return body


def _cluster(nodes: int, pods: int) -> dict[str, list[dict[str, object]]]:
    """The nodes and their pods, as the emulator loads them (``--load``)."""
    made: dict[str, list[dict[str, object]]] = {"nodes": [], "pods": []}
    for i in range(nodes):
        labels, gpus = MODELS[i % len(MODELS)]
        name = f"node-{i:05d}"
        allocatable = {"cpu": "96", "memory": "1056Gi", "nvidia.com/gpu": str(gpus)}
        made["nodes"].append(
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
                "spec": {},
                "status": {
                    "allocatable": allocatable,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
        for j in range(pods):
            limits = {"nvidia.com/gpu": "1", "cpu": "4", "memory": "32Gi"}
            made["pods"].append(
                {
                    "metadata": {"name": f"{name}-p{j}", "namespace": "team"},
                    "spec": {
                        "nodeName": name,
                        "containers": [
                            {"name": "c", "image": "x", "resources": {"limits": limits}}
                        ],
                    },
                    "status": {"phase": "Running"},
                }
            )
    return made


def _once(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        objects = Path(tmp) / "cluster.json"
        objects.write_text(json.dumps(_cluster(args.nodes, args.pods)))
        proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--load", str(objects)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            url = f"http://127.0.0.1:{proc.stdout.readline().strip().split('=', 1)[1]}"
            print(f"emulator: {args.nodes} nodes, {args.nodes * args.pods} pods")
            _measure(url, args, Path(tmp))
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def _measure(url: str, args: argparse.Namespace, tmp: Path) -> None:
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "e", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "e", "context": {"cluster": "e", "user": "u"}}],
                "current-context": "e",
            }
        )
    )
    os.environ["KUBECONFIG"] = str(kubeconfig)
    os.environ["NODUS_HOME"] = str(tmp / "home")
    os.environ["NODUS_CONFIG"] = str(tmp / "config.toml")

    def plan() -> None:
        with Client(target="kubernetes") as client:
            made = client.plan_text(WORKLOAD)
            assert made.stages[0].feasible

    def nodes() -> None:
        with Client(target="kubernetes") as client:
            assert len(client.list_nodes()) == args.nodes

    def floor() -> None:
        json.loads(_call(f"{url}/api/v1/nodes"))
        json.loads(_call(f"{url}/api/v1/pods"))

    plan()  # warm: imports, the GPU table
    rows = [(_once(plan), _once(nodes), _once(floor)) for _ in range(args.rounds)]
    p, n, f = (statistics.median(col) for col in zip(*rows, strict=True))
    print(f"plan (8x H100)      {p * 1000:8.1f} ms   {p / f:5.2f}x the floor")
    print(f"list_nodes          {n * 1000:8.1f} ms   {n / f:5.2f}x the floor")
    print(f"floor (urllib+json) {f * 1000:8.1f} ms")
    print(f"goal: the plan well under 1 s: {'met' if p < 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
