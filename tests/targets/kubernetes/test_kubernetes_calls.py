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
INDEX = "batch.kubernetes.io/job-completion-index"
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


def square_or_refuse(x: int) -> int:
    print(f"item {os.environ['NODUS_ITEM_INDEX']} of {os.environ['NODUS_ITEM_COUNT']}: {x}")
    print(f"NODUS_ITEM={os.environ['NODUS_ITEM']}")
    if x == 2:
        raise Refused(f"not {x}")
    return x * x


def length(data: bytes) -> int:
    return len(data)


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
    """Lay out the pod's Secret volumes (their ``items``, else every key) and run its
    command with its environment, the downward API's annotations resolved."""
    spec = pod["spec"]
    container = spec["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["call"] == MOUNT  # the runtime's files, where its command names them
    moved = {CALL_IN_POD: str(tmp / "call")}
    for volume in spec["volumes"]:
        if "secret" not in volume:
            continue
        assert volume["secret"]["secretName"] == secret["metadata"]["name"]
        root = tmp / volume["name"]
        entries = volume["secret"].get("items") or [{"key": k, "path": k} for k in secret["data"]]
        for entry in entries:
            path = root / entry["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(base64.b64decode(secret["data"][entry["key"]]))
        moved[mounts[volume["name"]]] = str(root)
    assert container["command"][0] == "python3"
    argv = [sys.executable]
    for arg in container["command"][1:]:
        for path, here in moved.items():  # a path in the pod: the same here
            if arg == path or arg.startswith(f"{path}/"):
                arg = here + arg[len(path) :]
        argv.append(arg)
    annotations = pod["metadata"].get("annotations") or {}
    env = {}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        else:  # the downward API: metadata.annotations['KEY']
            key = e["valueFrom"]["fieldRef"]["fieldPath"].split("'")[1]
            env[e["name"]] = annotations[key]
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


def test_a_map_is_one_indexed_job_each_call_with_its_result_exception_print_and_record(
    client: Client, kube_emulator: KubeEmulator, tmp_path: Path
) -> None:
    before = len(kube_emulator.manifests())
    _play(kube_emulator, tmp_path, count=3)
    calls = client.map([1, 2, 3], fn=square_or_refuse, image=IMAGE, parallel=2)
    results = calls.results(timeout=60)
    assert [r.value for r in results] == [1, None, 9]
    error = results[1].error
    assert isinstance(error, Refused) and str(error) == "not 2"
    assert "Refused: not 2" in str(error.__cause__)  # the traceback from the pod
    assert calls[0].logs() == "item 0 of 3: 1\nNODUS_ITEM=1\n"  # no frame among the lines
    assert "item 2 of 3: 3" in calls[2].logs()
    made = kube_emulator.manifests()[before:]
    [job] = [m for m in made if m["kind"] == "Job"]
    name = job["metadata"]["name"]
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 2)
    container = spec["template"]["spec"]["containers"][0]
    assert container["command"][0] == "python3" and "/bin/sh" not in container["command"]
    assert container["command"][-2] == "-"  # the runtime reads its index itself
    [secret] = [m for m in made if m["kind"] == "Secret"]
    assert secret["metadata"]["name"] == name
    assert secret["metadata"]["labels"]["nodus.run"] == calls.id
    assert {k for k in secret["data"] if k.endswith("args.pickle.0")} == {
        f"nodus-part.items__{i}__args.pickle.0" for i in range(3)
    }
    record = client.get(calls.id).result(tasks=True)
    assert record.status == RunStatus.FAILED
    tasks = record.as_json(tasks=True)["stages"][0]["tasks"]
    assert [t["job_id"] for t in tasks] == [f"{name}/{i}" for i in range(3)]
    assert [t["status"] for t in tasks] == ["succeeded", "failed", "succeeded"]
    assert "Refused: not 2" in tasks[1]["message"]
    left = kube_emulator.call("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets")["items"]
    assert left == [] and kube_emulator.jobs() == []


def test_an_evicted_call_of_a_maps_indexed_job_is_retried_as_a_job_of_its_own(
    client: Client, kube_emulator: KubeEmulator, tmp_path: Path
) -> None:
    calls = client.map([1, 3], fn=square_or_refuse, image=IMAGE, retries=1)
    deadline = time.monotonic() + 30
    while len(kube_emulator.pods()) < 2:
        assert time.monotonic() < deadline, kube_emulator.pods()
        time.sleep(0.2)
    [job] = kube_emulator.jobs()
    name = job["metadata"]["name"]
    secret = kube_emulator.call("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{name}")
    by_index = {int(p["metadata"]["labels"][INDEX]): p for p in kube_emulator.pods()}
    kube_emulator.run_pod(by_index[1]["metadata"]["name"], "gpu-a100")
    kube_emulator.patch_pod(
        by_index[1]["metadata"]["name"],
        {"status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}},
    )
    _run_pod(kube_emulator, by_index[0], secret, tmp_path / "0")
    retry = f"{name.removesuffix('-items')}-1-2"  # item 1, second attempt
    while not any(p["metadata"]["labels"]["job-name"] == retry for p in kube_emulator.pods()):
        assert time.monotonic() < deadline, kube_emulator.pods()
        time.sleep(0.2)
    [pod] = [p for p in kube_emulator.pods() if p["metadata"]["labels"]["job-name"] == retry]
    while True:  # the retry's own Secret, made right after its Job
        try:
            secret = kube_emulator.call("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{retry}")
            break
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    _run_pod(kube_emulator, pod, secret, tmp_path / "1")
    assert [r.value for r in calls.results(timeout=60)] == [1, 9]
    assert "item 1 of 2: 3" in calls[1].logs()
    tasks = client.get(calls.id).result(tasks=True).as_json(tasks=True)["stages"][0]["tasks"]
    assert [t["job_id"] for t in tasks] == [f"{name}/0", retry]
    assert [t["attempts"] for t in tasks] == [1, 2]


def test_stopping_a_map_ends_each_call_and_deletes_its_indexed_job(
    client: Client, kube_emulator: KubeEmulator
) -> None:
    calls = client.map([1, 2], fn=square_or_refuse, image=IMAGE)
    deadline = time.monotonic() + 30
    while len(kube_emulator.pods()) < 2:
        assert time.monotonic() < deadline, kube_emulator.pods()
        time.sleep(0.2)
    [job] = kube_emulator.jobs()
    assert job["spec"]["completionMode"] == "Indexed"
    for pod in kube_emulator.pods():
        kube_emulator.run_pod(pod["metadata"]["name"], "gpu-a100")
    while client.get(calls.id).result().status != RunStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert calls.stop()
    results = calls.results(timeout=60)
    assert all(isinstance(r.error, Exception) for r in results), results
    assert all("cancelled" in str(r.error) for r in results), results
    record = client.get(calls.id).result(tasks=True)
    assert record.status == RunStatus.CANCELLED
    assert [t.status for t in record.stages[0].tasks] == ["cancelled", "cancelled"]
    assert kube_emulator.jobs() == []
    left = kube_emulator.call("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets")["items"]
    assert left == []


def test_a_map_whose_calls_do_not_fit_one_secret_runs_one_job_per_call(
    client: Client, kube_emulator: KubeEmulator, tmp_path: Path
) -> None:
    before = len(kube_emulator.manifests())
    _play(kube_emulator, tmp_path, count=3)
    chunks = [bytes([i]) * (400 * 1024) for i in range(3)]  # each fits; together they do not
    calls = client.map(chunks, fn=length, image=IMAGE)
    assert [r.value for r in calls.results(timeout=60)] == [400 * 1024] * 3
    jobs = [m for m in kube_emulator.manifests()[before:] if m["kind"] == "Job"]
    assert len(jobs) == 3 and all("completionMode" not in j["spec"] for j in jobs)


def test_a_call_over_a_secrets_size_is_refused_before_anything_is_created(
    client: Client, kube_emulator: KubeEmulator
) -> None:
    call = client.run(fn=big, args=(b"y" * (2 * 2**20),), image=IMAGE)
    with pytest.raises(Exception, match="over the 1 MiB a Kubernetes Secret may hold"):
        call.result(timeout=60)
    assert kube_emulator.jobs() == []
