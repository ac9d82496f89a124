# ruff: noqa: F811 - the fixtures imported from kubernetes_support are test parameters here
"""Python functions on ``--target kubernetes``, against the API server emulator.

The emulator has no kubelet: the test plays it. It reads the Secret nodus made for the
call, lays its files out as the pod's volume would (each key at its ``items`` path), runs
the pod's command here with this machine's Python (the mount paths moved into a temporary
folder), and hands what it printed to the pod as its log, with its exit code. So the
call, the runtime and the outcome's frames are nodus's own, end to end; only the
container is not.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kubernetes_support import (
    A100_LABELS,
    H100_LABELS,
    NAMESPACE,
    KubeEmulator,
    kube_emulator,  # noqa: F401 - fixture
)

from nodus_cli import Client, RunStatus
from nodus_cli.targets.kubernetes.calls import CALL_IN_POD, MOUNT

IMAGE = "python:3.11-slim"
SCHEMA_VERSION = "1.33.0"


class Refused(Exception):
    pass


def square(x: int) -> int:
    print(f"squaring {x}")
    return x * x


def refuses(x: int) -> int:
    raise Refused(f"not {x}")


def big(n: int) -> bytes:
    return b"x" * n


@pytest.fixture
def client(
    kube_emulator: KubeEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Client]:
    kube_emulator.clear()
    kube_emulator.add_node("gpu-h100", H100_LABELS, 8)
    kube_emulator.add_node("gpu-a100", A100_LABELS, 4, cpus="64", memory="512Gi")
    before = len(kube_emulator.manifests())
    for key in list(os.environ):
        if key.startswith(("NODUS_", "KUBE")) and key != "NODUS_REQUIRE_DOCKER":
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    config = tmp_path / "config.toml"
    config.write_text("[kubernetes]\nprice_per_hour = 2.0\n")
    monkeypatch.setenv("KUBECONFIG", str(kube_emulator.kubeconfig))
    monkeypatch.setenv("NODUS_HOME", str(home))
    monkeypatch.setenv("NODUS_CONFIG", str(config))
    with Client(target="kubernetes", home=home) as c:
        yield c
    for manifest in kube_emulator.manifests()[before:]:
        kubernetes_validate.validate(manifest, SCHEMA_VERSION, strict=True)


def _kubelet(kube: KubeEmulator, tmp: Path, count: int = 1) -> None:
    """Run ``count`` pods of the calls nodus created, as a kubelet with their volume."""
    done: set[str] = set()
    deadline = time.monotonic() + 60
    while len(done) < count and time.monotonic() < deadline:
        try:
            pods = kube.pods()
        except OSError:  # the emulator stopped: the test is over
            return
        for pod in pods:
            name = pod["metadata"]["name"]
            if name in done:
                continue
            job = pod["metadata"]["labels"]["job-name"]
            try:
                secret = kube.call("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{job}")
            except Exception:  # not made yet: the kubelet waits for it as well
                continue
            _run_pod(kube, pod, secret, tmp / name)
            done.add(name)
        time.sleep(0.2)


def _run_pod(kube: KubeEmulator, pod: dict[str, Any], secret: dict[str, Any], tmp: Path) -> None:
    spec = pod["spec"]
    [volume] = [v for v in spec["volumes"] if v["name"] == "call"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    root = tmp / "mount"
    for entry in volume["secret"]["items"]:
        path = root / entry["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(secret["data"][entry["key"]]))
    container = spec["containers"][0]
    assert container["command"][0] == "python3"
    argv = [sys.executable] + [
        a.replace(MOUNT, str(root)).replace(CALL_IN_POD, str(tmp / "call"))
        for a in container["command"][1:]
    ]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    done = subprocess.run(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**env, "PATH": os.environ["PATH"]},
        check=False,
        timeout=60,
    )
    name = pod["metadata"]["name"]
    kube.run_pod(name, "gpu-a100")
    kube.end_pod(name, done.returncode, log=done.stdout.decode())


def _play(kube: KubeEmulator, tmp: Path, count: int = 1) -> threading.Thread:
    thread = threading.Thread(target=_kubelet, args=(kube, tmp, count), daemon=True)
    thread.start()
    return thread


def test_a_call_comes_back_with_its_result_and_its_print_in_the_logs(
    client: Client, kube_emulator: KubeEmulator, tmp_path: Path
) -> None:
    kubelet = _play(kube_emulator, tmp_path)
    call = client.run(fn=square, args=(7,), image=IMAGE, gpu="A100")
    assert call.result(timeout=60) == 49
    kubelet.join(10)
    record = client.get(call.id).result()
    assert record.status == RunStatus.SUCCEEDED and record.target == "kubernetes"
    assert record.stages[0].node == "gpu-a100"
    assert call.logs() == "squaring 7\n"  # no frame of the outcome among the lines
    left = kube_emulator.call("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets")["items"]
    assert left == [] and kube_emulator.jobs() == []
    [secret] = [m for m in kube_emulator.manifests() if m["kind"] == "Secret"]
    assert secret["metadata"]["labels"]["nodus.run"] == call.id


def test_the_functions_exception_comes_back_as_itself(
    client: Client, kube_emulator: KubeEmulator, tmp_path: Path
) -> None:
    _play(kube_emulator, tmp_path)
    with pytest.raises(Refused, match="not 3") as caught:
        client.run(fn=refuses, args=(3,), image=IMAGE).result(timeout=60)
    assert "Refused: not 3" in str(caught.value.__cause__)


def test_a_map_runs_one_job_per_call(
    client: Client, kube_emulator: KubeEmulator, tmp_path: Path
) -> None:
    _play(kube_emulator, tmp_path, count=3)
    calls = client.map([1, 2, 3], fn=square, image=IMAGE)
    assert [r.value for r in calls.results(timeout=60)] == [1, 4, 9]


def test_a_call_over_a_secrets_size_is_refused_before_anything_is_created(
    client: Client, kube_emulator: KubeEmulator
) -> None:
    call = client.run(fn=big, args=(b"y" * (2 * 2**20),), image=IMAGE)
    with pytest.raises(Exception, match="over the 1 MiB a Kubernetes Secret may hold"):
        call.result(timeout=60)
    assert kube_emulator.jobs() == []
