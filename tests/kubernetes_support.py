"""Fixtures for tests of ``--target kubernetes`` against an API server emulator.

Import them into a test module::

    from kubernetes_support import KubeEmulator, kube_emulator  # noqa: F401

* ``KubeNodus``: the ``nodus`` command against the emulator, with its own NODUS_HOME,
  kubeconfig and configuration (a test module subclasses it for what only it asks).
* ``kube_emulator`` (module): starts ``tests/harness/kubernetes_emulator.py`` in its own
  process (kmock's ``KubernetesEmulator`` on 127.0.0.1: no scheduler, no kubelet), writes
  a kubeconfig for it, and at the end stops the process and checks it is gone. It changes
  nothing on the machine, so it needs no ``NODUS_TEST_SYSTEM``; when it cannot start (kmock
  or the client missing) the tests fail if ``NODUS_REQUIRE_DOCKER=1`` (CI) and are skipped
  otherwise.

A test drives the cluster through the API nodus uses, never by patching the client: it
creates nodes with real GPU-operator labels (:meth:`KubeEmulator.add_node`), patches a
pod's phase and container state, creates Events and writes a pod's log
(:meth:`KubeEmulator.run_pod`, :meth:`KubeEmulator.end_pod`, ...). Every Job created is
recorded as it was sent (:meth:`KubeEmulator.manifests`), and every ConfigMap, for the
check against Kubernetes' own schemas.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from command_support import NodusCommand

REPO = Path(__file__).resolve().parent.parent
SERVER = REPO / "tests" / "harness" / "kubernetes_emulator.py"
NAMESPACE = "ml"
LOG_ANNOTATION = "emulator.nodus.test/log"

#: Real label values: the GPU operator's GPU feature discovery on an 8-GPU H100 SXM node and
#: a 4-GPU A100 80 GB node; GKE's on an L4 node.
H100_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.count": "8",
    "kubernetes.io/arch": "amd64",
    "node.kubernetes.io/instance-type": "p5.48xlarge",
}
A100_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/gpu.count": "4",
    "kubernetes.io/arch": "amd64",
}
L4_LABELS = {
    "cloud.google.com/gke-accelerator": "nvidia-l4",
    "kubernetes.io/arch": "amd64",
}


class KubeEmulator:
    """The emulator's address, a kubeconfig for it, and the test's hands on it."""

    def __init__(self, port: int, folder: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        #: Every Job created, one JSON document a line (the emulator's ``--record``).
        self.record = folder / "jobs.jsonl"
        #: The bytes of log served per pod (the emulator's ``--served``).
        self.served = folder / "served.json"
        self.kubeconfig = folder / "kubeconfig"
        user = {"token": "good-token"}
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "emu", "cluster": {"server": self.url}}],
                    "users": [
                        {"name": "alice", "user": user},
                        {"name": "expired", "user": {"token": "expired-token"}},
                    ],
                    "contexts": [
                        {
                            "name": "emu",
                            "context": {"cluster": "emu", "user": "alice", "namespace": NAMESPACE},
                        },
                        {
                            "name": "expired",
                            "context": {"cluster": "emu", "user": "expired"},
                        },
                        {
                            "name": "missing",
                            "context": {"cluster": "emu", "user": "alice", "namespace": "missing"},
                        },
                        {
                            "name": "forbidden",
                            "context": {
                                "cluster": "emu",
                                "user": "alice",
                                "namespace": "forbidden",
                            },
                        },
                    ],
                    "current-context": "emu",
                }
            )
        )

    def call(self, method: str, path: str, doc: Any = None) -> Any:
        data = json.dumps(doc).encode() if doc is not None else None
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Authorization": "Bearer good-token"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                body = answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and method == "DELETE":
                return None
            raise
        return json.loads(body) if body.strip().startswith(b"{") else body.decode()

    # -- nodes -----------------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        labels: dict[str, str],
        gpus: int,
        cpus: str = "96",
        memory: str = "1056Gi",
        ready: bool = True,
        unschedulable: bool = False,
        taints: list[dict[str, str]] | None = None,
    ) -> None:
        allocatable = {"cpu": cpus, "memory": memory, "pods": "110"}
        if gpus:
            allocatable["nvidia.com/gpu"] = str(gpus)
        self.call(
            "POST",
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
                "spec": {
                    "unschedulable": unschedulable,
                    "taints": taints
                    if taints is not None
                    else (
                        [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
                        if gpus
                        else []
                    ),
                },
                "status": {
                    "allocatable": allocatable,
                    "capacity": allocatable,
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            },
        )

    def clear(self) -> None:
        """Remove every node, job, pod, event and ConfigMap (between tests)."""
        for doc in self.call("GET", "/api/v1/nodes")["items"]:
            self.call("DELETE", f"/api/v1/nodes/{doc['metadata']['name']}")
        for plural, base in (
            ("jobs", "/apis/batch/v1"),
            ("pods", "/api/v1"),
            ("events", "/api/v1"),
            ("configmaps", "/api/v1"),
        ):
            for doc in self.call("GET", f"{base}/{plural}")["items"]:
                meta = doc["metadata"]
                self.call(
                    "DELETE", f"{base}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
                )

    def clear_pods(self) -> None:
        """Remove every pod left in the namespace (a Job deleted leaves none)."""
        for doc in self.pods():
            self.call("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{doc['metadata']['name']}")

    # -- jobs and pods ---------------------------------------------------------------------

    def manifests(self) -> list[dict[str, Any]]:
        """Every Job and ConfigMap created so far, as it was sent."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]

    def jobs(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.call(
            "GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
        )["items"]
        return items

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")[
            "items"
        ]
        return items

    def wait_pod(self, timeout: float = 30.0) -> dict[str, Any]:
        """The first pod of a Job nodus created (waits for it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pods = self.pods()
            if pods:
                return pods[0]
            time.sleep(0.1)
        raise AssertionError(f"no pod within {timeout}s")

    def patch_pod(self, name: str, doc: dict[str, Any]) -> None:
        self.call("PATCH", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", doc)

    def unschedulable(self, pod: str, message: str) -> None:
        """The scheduler could not place it (its condition, and a FailedScheduling event)."""
        self.patch_pod(
            pod,
            {
                "status": {
                    "phase": "Pending",
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": message,
                        }
                    ],
                }
            },
        )
        self.call(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/events",
            {
                "metadata": {"name": f"{pod}.1", "namespace": NAMESPACE},
                "involvedObject": {"kind": "Pod", "name": pod, "namespace": NAMESPACE},
                "reason": "FailedScheduling",
                "message": message,
                "type": "Warning",
            },
        )

    def run_pod(self, pod: str, node: str, log: str = "") -> None:
        self.patch_pod(
            pod,
            {
                "metadata": {"annotations": {LOG_ANNOTATION: log}},
                "spec": {"nodeName": node},
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [
                        {
                            "name": "task",
                            "state": {"running": {"startedAt": "2026-12-05T01:00:00Z"}},
                        }
                    ],
                },
            },
        )

    def end_pod(
        self, pod: str, code: int, reason: str = "", log: str | None = None, phase: str = ""
    ) -> None:
        terminated = {"exitCode": code, "reason": reason or ("Completed" if code == 0 else "Error")}
        doc: dict[str, Any] = {
            "status": {
                "phase": phase or ("Succeeded" if code == 0 else "Failed"),
                "containerStatuses": [{"name": "task", "state": {"terminated": terminated}}],
            }
        }
        if log is not None:
            doc["metadata"] = {"annotations": {LOG_ANNOTATION: log}}
        self.patch_pod(pod, doc)

    def log_bytes(self, pod: str) -> int:
        """The bytes of pod ``pod``'s log the emulator has served so far."""
        try:
            served: dict[str, int] = json.loads(self.served.read_text())
        except (OSError, ValueError):
            return 0
        return served.get(pod, 0)

    def write_log(self, pod: str, log: str) -> None:
        """The pod's log is now ``log`` (what it printed so far)."""
        self.patch_pod(pod, {"metadata": {"annotations": {LOG_ANNOTATION: log}}})

    def waiting(self, pod: str, reason: str, message: str) -> None:
        """The kubelet cannot start the container (``ErrImagePull``...)."""
        self.patch_pod(
            pod,
            {
                "spec": {"nodeName": "gpu-h100"},
                "status": {
                    "phase": "Pending",
                    "containerStatuses": [
                        {
                            "name": "task",
                            "state": {"waiting": {"reason": reason, "message": message}},
                        }
                    ],
                },
            },
        )


#: The image the tests' workloads name (the emulator pulls nothing).
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


class KubeNodus(NodusCommand):
    """``nodus`` with its own NODUS_HOME, a kubeconfig for ``emulator`` and the
    configuration ``config``."""

    image = IMAGE

    def __init__(self, emulator: KubeEmulator, tmp: Path, config: str) -> None:
        super().__init__(tmp, config)
        self.emulator = emulator

    def target_environ(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("NODUS_", "KUBE"))}
        return {**base, "KUBECONFIG": str(self.emulator.kubeconfig)}


def _fail_or_skip(reason: str) -> None:
    message = f"the Kubernetes API emulator cannot start: {reason}"
    if os.environ.get("NODUS_REQUIRE_DOCKER") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def kube_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeEmulator]:
    try:
        import kmock  # noqa: F401
        import kubernetes  # noqa: F401
    except ImportError as exc:
        _fail_or_skip(f"{exc} (pip install -e '.[test]')")
    folder = tmp_path_factory.mktemp("kube")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(SERVER),
            "--record",
            str(folder / "jobs.jsonl"),
            "--served",
            str(folder / "served.json"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT="):
            proc.kill()
            _fail_or_skip((proc.stderr.read() if proc.stderr else "")[-500:] or "no port")
        yield KubeEmulator(int(line.strip().split("=", 1)[1]), folder)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.poll() is not None, "the emulator still runs"
