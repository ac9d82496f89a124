# ruff: noqa: F811 - the fixtures imported from kubernetes_support are test parameters here
"""``--target kubernetes`` against the API server emulator (tests/kubernetes_support.py).

The emulator runs in its own process and answers the official client as the API server
does; it has no scheduler and no kubelet, so each test plays them: it creates the nodes
(with real GPU-operator and GKE labels), then moves the pod of the Job nodus created
through its phases, with events and a log. ``nodus`` runs as a subprocess with its own
state folder and a kubeconfig for the emulator.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from command_support import finish
from kubernetes_support import (
    A100_LABELS,
    H100_LABELS,
    IMAGE,
    L4_LABELS,
    NAMESPACE,
    KubeEmulator,
    KubeNodus,
    kube_emulator,  # noqa: F401 - fixture
)

from nodus_cli import Client

#: The Kubernetes version whose OpenAPI schemas every Job nodus creates is checked against.
SCHEMA_VERSION = "1.33.0"


class Nodus(KubeNodus):
    """``nodus`` with a [kubernetes] configuration of prices."""

    def __init__(self, emulator: KubeEmulator, tmp: Path) -> None:
        super().__init__(
            emulator,
            tmp,
            '[kubernetes]\nprice_per_hour = 2.0\nprices = { "p5.48xlarge" = 98.32 }\n',
        )


@pytest.fixture
def nodus(kube_emulator: KubeEmulator, tmp_path: Path) -> Iterator[Nodus]:
    kube_emulator.clear()
    kube_emulator.add_node("gpu-h100", H100_LABELS, 8)
    kube_emulator.add_node("gpu-a100", A100_LABELS, 4, cpus="64", memory="512Gi")
    kube_emulator.add_node("gpu-l4", L4_LABELS, 1, cpus="8", memory="32Gi")
    before = len(kube_emulator.manifests())
    yield Nodus(kube_emulator, tmp_path)
    # Every Job nodus created in the test is valid for Kubernetes' own schemas.
    for manifest in kube_emulator.manifests()[before:]:
        kubernetes_validate.validate(manifest, SCHEMA_VERSION, strict=True)


def test_nodes_show_each_model_from_its_labels_and_free_gpus(nodus: Nodus) -> None:
    done = nodus.run("nodes", "--target", "kubernetes", "--json")
    assert done.returncode == 0, done.stderr
    nodes = {n["hostname"]: n for n in json.loads(done.stdout)["nodes"]}
    assert {k: (n["gpu"], n["gpus"], n["gpu_memory_gb"]) for k, n in nodes.items()} == {
        "gpu-h100": ("H100", 8, 80.0),
        "gpu-a100": ("A100", 4, 80.0),
        "gpu-l4": ("L4", 1, 24.0),
    }
    assert nodes["gpu-h100"]["price_per_hour"] == 98.32  # by its instance-type label
    assert nodes["gpu-a100"]["price_per_hour"] == 2.0
    assert nodes["gpu-h100"]["gpu_label"] == "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"


def test_an_unknown_label_and_a_cordoned_node_are_explained_and_impossible_requests_refused(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    kube_emulator.add_node(
        "gpu-mig",
        {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"},
        7,
    )
    kube_emulator.add_node("gpu-bare", {}, 2)
    kube_emulator.add_node("gpu-off", H100_LABELS, 8, unschedulable=True)
    done = nodus.run(
        "plan", nodus.workload("a", "true", gpu="H100", count=8), "--target", "kubernetes"
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "node gpu-off is cordoned: the scheduler places no pod there now" in said
    assert "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb names no GPU model" in said
    assert "node gpu-bare: its 2 nvidia.com/gpu have no label naming their model" in said
    done = nodus.run("nodes", "--target", "kubernetes")
    assert "note: node gpu-bare: its 2 nvidia.com/gpu have no label naming" in done.stdout
    done = nodus.run(
        "run", nodus.workload("big", "true", gpu="A100", count=8), "--target", "kubernetes"
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "no node of the Kubernetes cluster can run stage 'main'" in done.stderr
    assert "nearest fit: node gpu-a100 (4× A100" in done.stderr
    done = nodus.run("run", nodus.workload("b200", "true", gpu="B200"), "--target", "kubernetes")
    assert done.returncode == 3, done.stdout + done.stderr
    assert nodus.emulator.jobs() == []  # nothing created


def test_a_run_is_a_job_queued_with_the_schedulers_words_then_followed_to_its_end(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    proc = nodus.popen(
        "run", nodus.workload("train", "python train.py", count=2), "--target", "kubernetes"
    )
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    [job] = kube_emulator.jobs()
    spec = job["spec"]["template"]["spec"]
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {
                    "key": "nvidia.com/gpu.product",
                    "operator": "In",
                    "values": ["NVIDIA-H100-80GB-HBM3"],
                }
            ]
        }
    ]
    message = (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match "
        "Pod's node affinity/selector."
    )
    kube_emulator.unschedulable(pod, message)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        runs = nodus.runs()
        if runs and runs[0]["status"] == "queued":
            break
        time.sleep(0.3)
    assert runs[0]["status"] == "queued", runs
    kube_emulator.run_pod(pod, "gpu-h100", log="epoch 1\n")
    deadline = time.monotonic() + 30
    while kube_emulator.log_bytes(pod) < len("epoch 1\n"):  # followed while it runs
        assert time.monotonic() < deadline, "nodus never read the running pod's log"
        time.sleep(0.1)
    kube_emulator.end_pod(pod, 0, log="epoch 1\nepoch 2\ndone\n")
    code, out = finish(proc)
    assert code == 0, out
    assert (
        "waits for 2× H100: the scheduler says: 0/3 nodes are available: 1 Insufficient "
        "nvidia.com/gpu" in out
    )
    assert "epoch 1\n" in out and "epoch 2" in out and out.count("epoch 1") == 1
    [run] = nodus.runs()
    assert run["status"] == "succeeded"
    stage = run["stages"][0]
    assert stage["job_id"] == job["metadata"]["name"]
    assert stage["node"] == "gpu-h100"
    assert kube_emulator.jobs() == [] and kube_emulator.pods() == []  # the run removed them


def test_a_pods_log_is_followed_as_a_stream_not_read_again_at_each_look(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    nodus.env["PYTHONUNBUFFERED"] = "1"  # each line as nodus prints it
    proc = nodus.popen("run", nodus.workload("long", "python train.py"), "--target", "kubernetes")
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    log = "".join(f"step {i:05d} " + "x" * 60 + "\n" for i in range(2000))
    kube_emulator.run_pod(pod, "gpu-h100", log=log)
    shown: list[str] = []
    reader = threading.Thread(target=lambda: shown.extend(iter(proc.stdout.readline, "")))
    assert proc.stdout is not None
    reader.start()
    for late in range(4):  # printed after the start, over several of nodus's looks
        time.sleep(0.8)
        log += f"late {late}\n"
        kube_emulator.write_log(pod, log)
    deadline = time.monotonic() + 60
    while "main | late 3\n" not in shown and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "main | late 3\n" in shown  # arrived while the pod still runs
    kube_emulator.end_pod(pod, 0, log=log + "done")  # an unterminated last line
    code = proc.wait(timeout=60)
    reader.join(timeout=10)
    assert code == 0, "".join(shown)
    said = [line.partition("main | ")[2] for line in "".join(shown).splitlines()]
    assert [line for line in said if line] == [*log.splitlines(), "done"]  # once, in order
    # followed once and completed once, never re-read whole at each look (the old way read
    # it at each of the dozen looks while it ran)
    assert kube_emulator.log_bytes(pod) < 3 * len(log)


@pytest.mark.parametrize(
    ("end", "code", "words"),
    [
        ({"code": 3}, 3, "failed (exit 3)"),
        ({"code": 137, "reason": "OOMKilled"}, 137, "out of memory: it reached"),
        ({"code": 137, "phase": "Failed", "reason": "Evicted"}, 137, "the node evicted the pod"),
    ],
)
def test_how_a_pod_ends_is_said(
    nodus: Nodus, kube_emulator: KubeEmulator, end: dict[str, Any], code: int, words: str
) -> None:
    proc = nodus.popen("run", nodus.workload("e", "false"), "--target", "kubernetes")
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    kube_emulator.run_pod(pod, "gpu-h100")
    if end.get("reason") == "Evicted":
        kube_emulator.patch_pod(
            pod,
            {
                "status": {
                    "phase": "Failed",
                    "reason": "Evicted",
                    "message": "The node was low on resource: memory.",
                }
            },
        )
    else:
        kube_emulator.end_pod(pod, end["code"], reason=end.get("reason", ""))
    rc, out = finish(proc)
    assert rc == code, out
    assert words in out


def test_an_image_the_cluster_cannot_pull_is_said_and_its_job_deleted(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    proc = nodus.popen("run", nodus.workload("pull", "true"), "--target", "kubernetes")
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    kube_emulator.waiting(pod, "ImagePullBackOff", f'Back-off pulling image "{IMAGE}"')
    rc, out = finish(proc)
    assert rc == 125, out
    assert f"the cluster cannot pull the image {IMAGE} (ImagePullBackOff" in out
    assert kube_emulator.jobs() == []


def test_a_job_deleted_from_outside_is_killed_and_nodus_stop_deletes_the_job(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    proc = nodus.popen("run", nodus.workload("gone", "sleep 100"), "--target", "kubernetes")
    kube_emulator.wait_pod()
    [job] = kube_emulator.jobs()
    kube_emulator.call(
        "DELETE", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job['metadata']['name']}"
    )
    rc, out = finish(proc)
    assert rc == 137, out
    assert "was deleted outside nodus" in out
    done = nodus.run(
        "run", "--detach", nodus.workload("stop", "sleep 100"), "--target", "kubernetes"
    )
    assert done.returncode == 0, done.stderr
    kube_emulator.wait_pod()
    run_id = nodus.runs()[0]["id"]
    done = nodus.run("stop", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    deadline = time.monotonic() + 30
    while kube_emulator.jobs() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert kube_emulator.jobs() == []


def test_a_killed_nodus_leaves_the_job_and_the_next_command_records_its_end(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    proc = nodus.popen("run", nodus.workload("long", "sleep 100"), "--target", "kubernetes")
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    kube_emulator.run_pod(pod, "gpu-h100")
    deadline = time.monotonic() + 30
    while nodus.runs()[0]["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    [job] = kube_emulator.jobs()  # the cluster's: it goes on
    assert nodus.runs()[0]["status"] == "running"
    kube_emulator.end_pod(pod, 0)
    [run] = nodus.runs()
    assert run["status"] == "succeeded", run
    assert run["stages"][0]["job_id"] == job["metadata"]["name"]


@pytest.mark.parametrize(
    ("context", "words", "fix"),
    [
        ("expired", "refused nodus's credentials (list nodes: 401 Unauthorized)", "log in again"),
        (
            "forbidden",
            "forbids nodus to list Jobs in namespace 'forbidden' (403 Forbidden, RBAC): "
            'jobs.batch is forbidden: User "alice" cannot',
            "ask your cluster's admin for the Role",
        ),
    ],
)
def test_credentials_and_rbac_refusals_are_one_line_with_the_fix(
    nodus: Nodus, context: str, words: str, fix: str
) -> None:
    nodus.config.write_text(f'[kubernetes]\ncontext = "{context}"\n')
    done = nodus.run("run", nodus.workload("x", "true"), "--target", "kubernetes")
    assert done.returncode == 3, done.stdout + done.stderr
    assert words in done.stderr
    assert fix in done.stderr
    assert "Traceback" not in done.stderr
    assert nodus.emulator.jobs() == []


def test_no_kubeconfig_and_an_unreachable_server_are_said(nodus: Nodus, tmp_path: Path) -> None:
    nodus.env["KUBECONFIG"] = str(tmp_path / "nowhere")
    done = nodus.run("nodes", "--target", "kubernetes")
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"no kubeconfig: {tmp_path / 'nowhere'} does not exist" in done.stderr
    assert "Traceback" not in done.stderr
    dead = tmp_path / "dead"
    dead.write_text(
        nodus.emulator.kubeconfig.read_text().replace(nodus.emulator.url, "http://127.0.0.1:9")
    )
    nodus.env["KUBECONFIG"] = str(dead)
    done = nodus.run("nodes", "--target", "kubernetes")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "the Kubernetes API server at http://127.0.0.1:9 does not answer" in done.stderr


def _holding_pod(kube: KubeEmulator, name: str, node: str, gpus: int) -> None:
    """Another team's pod bound to ``node`` holding ``gpus`` GPUs."""
    kube.call(
        "POST",
        "/api/v1/namespaces/vision/pods",
        {
            "metadata": {"name": name, "namespace": "vision"},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "c",
                        "image": "x",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
            "status": {"phase": "Running"},
        },
    )


def test_a_waiting_pod_names_who_holds_the_gpus_and_nodes_show_them_held(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    _holding_pod(kube_emulator, "resnet", "gpu-h100", 6)
    done = nodus.run("nodes", "--target", "kubernetes", "--json")
    nodes = {n["hostname"]: n for n in json.loads(done.stdout)["nodes"]}
    assert (nodes["gpu-h100"]["gpus_used"], nodes["gpu-h100"]["free_gpus"]) == (6, 2)
    proc = nodus.popen("run", nodus.workload("big", "true", count=4), "--target", "kubernetes")
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    kube_emulator.unschedulable(pod, "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.")
    deadline = time.monotonic() + 30
    runs = nodus.runs()
    while runs[0]["status"] != "queued" and time.monotonic() < deadline:
        time.sleep(0.3)
        runs = nodus.runs()
    assert runs[0]["status"] == "queued"
    done = nodus.run("runs")
    assert (
        f"main: Job {kube_emulator.jobs()[0]['metadata']['name']} pending: the scheduler says: "
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu." in done.stdout
    ), done.stdout
    kube_emulator.run_pod(pod, "gpu-h100")
    kube_emulator.end_pod(pod, 0)
    rc, out = finish(proc)
    assert rc == 0, out
    assert "the GPUs of nodes gpu-h100 are held by vision/resnet (6 on gpu-h100)" in out


def test_no_wait_refuses_a_pod_the_scheduler_cannot_place_and_wait_timeout_gives_up(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    proc = nodus.popen("run", "--no-wait", nodus.workload("nw", "true"), "--target", "kubernetes")
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    kube_emulator.unschedulable(pod, "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.")
    rc, out = finish(proc)
    assert rc == 3, out
    assert "--no-wait: the cluster could not place pod" in out
    assert kube_emulator.jobs() == []
    kube_emulator.clear_pods()
    proc = nodus.popen(
        "run", "--wait-timeout", "3s", nodus.workload("wt", "true"), "--target", "kubernetes"
    )
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    kube_emulator.unschedulable(pod, "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.")
    rc, out = finish(proc)
    assert rc == 3, out
    assert "gave up after waiting 3 s (wait_timeout) for: pod " in out
    assert kube_emulator.jobs() == []
    [run, _] = nodus.runs()
    assert run["status"] == "failed"


INDEX = "batch.kubernetes.io/job-completion-index"


def _fan(nodus: Nodus, items: list[str], extra: str = "", command: str = "") -> Path:
    path = nodus.tmp / "fan.toml"
    path.write_text(
        f'name = "fan"\nimage = "{IMAGE}"\n'
        + (command or 'command = "echo $NODUS_ITEM"\n')
        + 'gpu = "A100"\ngpu_count = 2\n[map]\nitems = '
        + json.dumps(items)
        + "\n"
        + extra
    )
    return path


def _pods_by_index(kube: KubeEmulator, count: int, timeout: float = 30) -> dict[int, str]:
    """The newest pod of each index once ``count`` pods of the Indexed Job are there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = [p for p in kube.pods() if INDEX in (p["metadata"].get("labels") or {})]
        if len(pods) >= count:
            pods.sort(key=lambda p: str(p["metadata"]["creationTimestamp"]))
            return {int(p["metadata"]["labels"][INDEX]): p["metadata"]["name"] for p in pods}
        time.sleep(0.2)
    raise AssertionError(f"not {count} pods of the Indexed Job: {kube.pods()}")


def _tasks(nodus: Nodus) -> list[dict[str, Any]]:
    """The tasks of the newest run's first stage, as nodus recorded them."""
    done = nodus.run("runs", nodus.runs()[0]["id"], "--json")
    assert done.returncode == 0, done.stderr
    tasks: list[dict[str, Any]] = json.loads(done.stdout)["stages"][0]["tasks"]
    return tasks


def _config_maps(kube: KubeEmulator) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.call("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps")[
        "items"
    ]
    return items


def test_a_fan_out_stage_is_one_indexed_job_each_item_followed_and_retried_on_its_own(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    path = _fan(nodus, ["a", "b", "c"], extra="parallel = 2\n")
    proc = nodus.popen("run", path, "--target", "kubernetes", "--retries", "1")
    pods = _pods_by_index(kube_emulator, 2)
    assert sorted(pods) == [0, 1]  # parallelism 2: the third index waits its turn
    [job] = kube_emulator.jobs()
    name = job["metadata"]["name"]
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 2)
    assert spec["backoffLimitPerIndex"] == 0
    [items] = _config_maps(kube_emulator)
    assert items["metadata"]["name"] == name and items["data"] == {"0": "a", "1": "b", "2": "c"}
    container = spec["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODUS_ITEM_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        f"metadata.annotations['{INDEX}']"
    )
    assert env["NODUS_ITEM_COUNT"]["value"] == "3" and "NODUS_ITEM" not in env
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert container["command"][-3:] == ["/bin/sh", "-c", "echo $NODUS_ITEM"]
    # item 0 waits for the scheduler, then runs; item 1 is evicted: retried on its own
    kube_emulator.unschedulable(pods[0], "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.")
    deadline = time.monotonic() + 30
    while nodus.runs()[0]["status"] != "queued":
        assert time.monotonic() < deadline, nodus.runs()
        time.sleep(0.3)
    while "the scheduler says" not in (_tasks(nodus)[0]["message"] or ""):  # nodus read them
        assert time.monotonic() < deadline, _tasks(nodus)
        time.sleep(0.3)
    kube_emulator.run_pod(pods[1], "gpu-a100", log="b\n")
    kube_emulator.patch_pod(
        pods[1], {"status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}}
    )
    kube_emulator.run_pod(pods[0], "gpu-a100")
    pods = _pods_by_index(kube_emulator, 3)  # item 1's pod ended: index 2 gets its pod
    kube_emulator.end_pod(pods[0], 0, log="a\n")
    kube_emulator.run_pod(pods[2], "gpu-a100")
    kube_emulator.end_pod(pods[2], 0, log="c\n")
    retry = f"{name.removesuffix('-items')}-1-2"  # item 1, second attempt: a Job of its own
    deadline = time.monotonic() + 30
    while not any(j["metadata"]["name"] == retry for j in kube_emulator.jobs()):
        assert time.monotonic() < deadline, kube_emulator.jobs()
        time.sleep(0.2)
    [pod] = [p for p in kube_emulator.pods() if p["metadata"]["labels"]["job-name"] == retry]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert (env["NODUS_ITEM"], env["NODUS_ITEM_INDEX"]) == ("b", "1")
    kube_emulator.run_pod(pod["metadata"]["name"], "gpu-a100")
    kube_emulator.end_pod(pod["metadata"]["name"], 0, log="b again\n")
    rc, out = finish(proc)
    assert rc == 0, out
    assert "3 items as one submission, up to 2 at once" in out
    assert "the scheduler says: 0/3 nodes are available: 1 Insufficient nvidia.com/gpu" in out
    assert "the node evicted the pod (low on memory)" in out
    assert "b again" in out
    [run] = nodus.runs()
    assert run["status"] == "succeeded"
    done = nodus.run("runs", run["id"], "--json")
    tasks = json.loads(done.stdout)["stages"][0]["tasks"]
    assert [t["job_id"] for t in tasks] == [f"{name}/0", retry, f"{name}/2"]
    assert [t["attempts"] for t in tasks] == [1, 2, 1]
    assert {t["node"] for t in tasks} == {"gpu-a100"}
    assert kube_emulator.jobs() == [] and _config_maps(kube_emulator) == []


def test_an_exec_form_fan_out_with_an_entrypoint_is_one_indexed_job_its_argv_untouched(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    command = 'entrypoint = []\ncommand = ["python", "run.py", "$HOME", "a b", "it\'s"]\n'
    proc = nodus.popen("run", _fan(nodus, ["a", "b"], command=command), "--target", "kubernetes")
    pods = _pods_by_index(kube_emulator, 2)
    [job] = kube_emulator.jobs()
    assert job["spec"]["completionMode"] == "Indexed"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert container["command"][3:] == ["nodus-item", "python", "run.py", "$HOME", "a b", "it's"]
    assert "args" not in container
    [items] = _config_maps(kube_emulator)
    assert items["data"] == {"0": "a", "1": "b"}
    for index, pod in pods.items():
        kube_emulator.run_pod(pod, "gpu-a100")
        kube_emulator.end_pod(pod, 0, log=f"item {index}\n")
    rc, out = finish(proc)
    assert rc == 0, out
    assert "item 0" in out and "item 1" in out
    assert nodus.runs()[0]["status"] == "succeeded"


def test_an_image_without_bin_sh_ends_every_item_of_an_exec_form_fan_out_saying_so(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    command = 'entrypoint = ["/app/score"]\ncommand = ["--fast"]\n'
    path = _fan(nodus, ["a", "b", "c"], command=command, extra="parallel = 2\n")
    proc = nodus.popen("run", path, "--target", "kubernetes")
    pods = _pods_by_index(kube_emulator, 2)
    said = (
        "failed to create containerd task: failed to create shim task: OCI runtime create "
        'failed: runc create failed: unable to start container process: exec: "/bin/sh": '
        "stat /bin/sh: no such file or directory: unknown"
    )
    kube_emulator.patch_pod(
        pods[0],
        {
            "spec": {"nodeName": "gpu-a100"},
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "task",
                        "state": {
                            "terminated": {"exitCode": 128, "reason": "StartError", "message": said}
                        },
                    }
                ],
            },
        },
    )
    rc, out = finish(proc)
    assert rc == 127, out
    assert (
        f"the image {IMAGE} has no /bin/sh, which nodus needs in each pod of the Indexed Job" in out
    )
    assert "use an image that has /bin/sh" in out
    assert "0 of 3 items succeeded, 3 failed" in out
    assert kube_emulator.jobs() == [] and _config_maps(kube_emulator) == []
    [run] = nodus.runs()
    assert run["status"] == "failed"


def test_a_fan_out_stage_that_keeps_the_images_entrypoint_is_one_job_per_item(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    path = _fan(nodus, ["a", "b"], command='command = ["python", "run.py"]\n')
    proc = nodus.popen("run", path, "--target", "kubernetes")
    deadline = time.monotonic() + 30
    while len(kube_emulator.pods()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    pods = kube_emulator.pods()
    assert len(pods) == 2  # the A100 node holds both at once: both Jobs are created
    assert len(kube_emulator.jobs()) == 2
    seen = {}
    for pod in pods:
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        seen[env["NODUS_ITEM_INDEX"]] = (env["NODUS_ITEM"], env["NODUS_ITEM_COUNT"])
        assert pod["metadata"]["labels"]["nodus.item"] == env["NODUS_ITEM_INDEX"]
        kube_emulator.run_pod(pod["metadata"]["name"], "gpu-a100")
        kube_emulator.end_pod(pod["metadata"]["name"], 0, log=env["NODUS_ITEM"] + "\n")
    assert seen == {"0": ("a", "2"), "1": ("b", "2")}
    rc, out = finish(proc)
    assert rc == 0, out
    [run] = nodus.runs()
    assert run["status"] == "succeeded"


def test_stop_ends_each_item_of_an_indexed_job_and_a_killed_nodus_settles_each_item(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    proc = nodus.popen("run", _fan(nodus, ["a", "b", "c"]), "--target", "kubernetes")
    pods = _pods_by_index(kube_emulator, 3)
    for index in (0, 1):
        kube_emulator.run_pod(pods[index], "gpu-a100")
    deadline = time.monotonic() + 30
    while nodus.runs()[0]["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    [job] = kube_emulator.jobs()  # the cluster's: it goes on
    name = job["metadata"]["name"]
    [run] = nodus.runs()
    assert run["cluster"] == f"main: Indexed Job {name}: 1 pending, 2 running", run
    kube_emulator.end_pod(pods[0], 0)
    kube_emulator.end_pod(pods[1], 4)
    assert nodus.runs()[0]["status"] == "running"  # index 2 has not ended
    kube_emulator.run_pod(pods[2], "gpu-a100")
    kube_emulator.end_pod(pods[2], 0)
    [run] = nodus.runs()
    assert run["status"] == "failed", run
    assert "1 of 3 items failed (item 1: exited with 4)" in run["message"], run
    tasks = json.loads(nodus.run("runs", run["id"], "--json").stdout)["stages"][0]["tasks"]
    assert [(t["status"], t["exit_code"]) for t in tasks] == [
        ("succeeded", 0),
        ("failed", 4),
        ("succeeded", 0),
    ]
    assert [t["job_id"] for t in tasks] == [f"{name}/{i}" for i in range(3)]
    # nodus stop: every item ends stopped, the Job and its items' ConfigMap are deleted
    kube_emulator.clear()
    kube_emulator.add_node("gpu-a100", A100_LABELS, 4, cpus="64", memory="512Gi")
    done = nodus.run("run", "--detach", _fan(nodus, ["a", "b"]), "--target", "kubernetes")
    assert done.returncode == 0, done.stderr
    pods = _pods_by_index(kube_emulator, 2)
    kube_emulator.run_pod(pods[0], "gpu-a100")
    run_id = nodus.runs()[0]["id"]
    done = nodus.run("stop", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    deadline = time.monotonic() + 30
    while (kube_emulator.jobs() or _config_maps(kube_emulator)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert kube_emulator.jobs() == [] and _config_maps(kube_emulator) == []
    deadline = time.monotonic() + 30
    while nodus.runs()[0]["status"] != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert nodus.runs()[0]["status"] == "cancelled", nodus.runs()[0]
    tasks = json.loads(nodus.run("runs", run_id, "--json").stdout)["stages"][0]["tasks"]
    assert [t["status"] for t in tasks] == ["cancelled", "cancelled"], tasks


def test_a_killed_nodus_whose_job_was_deleted_records_it_failed(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    proc = nodus.popen("run", nodus.workload("long", "sleep 100"), "--target", "kubernetes")
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    kube_emulator.run_pod(pod, "gpu-h100")
    deadline = time.monotonic() + 30
    while nodus.runs()[0]["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    [job] = kube_emulator.jobs()
    kube_emulator.call(
        "DELETE", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job['metadata']['name']}"
    )
    [run] = nodus.runs()
    assert run["status"] == "failed", run
    assert f"the Job {job['metadata']['name']} is gone (deleted)" in json.dumps(run)


def test_mounts_are_refused_before_anything_is_created(
    nodus: Nodus, kube_emulator: KubeEmulator, tmp_path: Path
) -> None:
    path = nodus.tmp / "mount.toml"
    path.write_text(
        f'name = "m"\nimage = "{IMAGE}"\ncommand = "true"\nmounts = ["{tmp_path}:/data"]\n'
    )
    done = nodus.run("run", path, "--target", "kubernetes")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "stage 'main' mounts host paths" in done.stderr
    assert kube_emulator.jobs() == []


def test_with_a_kueue_queue_the_job_waits_suspended_until_kueue_admits_it_with_its_class(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    nodus.config.write_text(
        '[kubernetes]\nqueue = "team-a"\npriority_class = "batch-low"\n'
        "priority_classes = { urgent = 80 }\n"
    )
    workload = nodus.workload("kq", "true")
    workload.write_text(workload.read_text() + "priority = 90\n")
    proc = nodus.popen("run", workload, "--target", "kubernetes")
    deadline = time.monotonic() + 30
    while not kube_emulator.jobs() and time.monotonic() < deadline:
        time.sleep(0.2)
    [job] = kube_emulator.jobs()
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "urgent"  # priority 90
    while nodus.runs()[0]["status"] != "queued" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert kube_emulator.pods() == []
    name = job["metadata"]["name"]
    kube_emulator.call(  # Kueue admits it
        "PATCH", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{name}", {"spec": {"suspend": False}}
    )
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    kube_emulator.run_pod(pod, "gpu-h100")
    kube_emulator.end_pod(pod, 0)
    rc, out = finish(proc)
    assert rc == 0, out
    assert f"waiting for Kueue to admit Job {name} from queue 'team-a'" in out


def test_a_namespace_that_does_not_exist_fails_the_stage_saying_so(nodus: Nodus) -> None:
    nodus.config.write_text('[kubernetes]\ncontext = "missing"\n')
    done = nodus.run("run", nodus.workload("ns", "true"), "--target", "kubernetes")
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "has no such thing (create Job nodus-" in said
    assert 'namespaces "missing" not found' in said
    assert "kubectl get namespace missing" in said
    assert "Traceback" not in said


def test_client_list_nodes_is_what_nodus_nodes_shows(
    nodus: Nodus, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in nodus.environ().items():
        monkeypatch.setenv(key, value)
    with Client(target="kubernetes") as client:
        nodes = {n.hostname: n for n in client.list_nodes()}
    assert {k: (n.gpu, n.gpus, n.free_gpus, n.state) for k, n in nodes.items()} == {
        "gpu-h100": ("H100", 8, 8, "ready"),
        "gpu-a100": ("A100", 4, 4, "ready"),
        "gpu-l4": ("L4", 1, 1, "ready"),
    }


def test_a_task_pays_the_share_of_its_node_that_it_holds(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    path = nodus.tmp / "cpu.toml"
    path.write_text(f'name = "cpu"\nimage = "{IMAGE}"\ncommand = "true"\n[requirements]\ncpu = 2\n')
    proc = nodus.popen("run", path, "--target", "kubernetes")
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    kube_emulator.run_pod(pod, "gpu-l4")  # 8 CPUs at $2.00 an hour: 4 such tasks at once
    nodus.wait_for("the run running", lambda r: r["status"] == "running")  # its clock starts
    time.sleep(1)
    kube_emulator.end_pod(pod, 0)
    rc, out = finish(proc)
    assert rc == 0, out
    [run] = nodus.runs()
    [stage] = run["stages"]
    whole = stage["runtime_seconds"] / 3600 * 2.0
    assert stage["cost"] == pytest.approx(whole / 4, rel=0.05), (stage, whole)
