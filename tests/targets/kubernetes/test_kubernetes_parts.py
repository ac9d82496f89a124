"""The Kubernetes target's parts without a server: GPU names from real node labels, the
nodes read from API documents, every manifest checked against Kubernetes' own schemas,
how a pod's end reads, and the one table of API failures."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from nodus_cli import config
from nodus_cli.errors import NodusError
from nodus_cli.hardware import gpus
from nodus_cli.targets.base import Item, Pending, PendingKind, Started, Task, TaskEnd, TaskState
from nodus_cli.targets.follower import LogFollower
from nodus_cli.targets.kubernetes import follow as following
from nodus_cli.targets.kubernetes.api import (
    LOG_MARGIN_SECONDS,
    LOG_SKEW_SECONDS,
    Cluster,
    KubernetesFailure,
    LogLines,
    failure,
)
from nodus_cli.targets.kubernetes.follow import (
    Following,
    follow,
    pending_kind,
    pending_reason,
    pod_end,
    pull_problem,
)
from nodus_cli.targets.kubernetes.indexed import (
    item_job_id,
    newest_by_index,
    no_shell,
    pod_index,
    split_job_id,
)
from nodus_cli.targets.kubernetes.manifest import (
    ITEMS_DIR,
    indexed_manifest,
    item_argv,
    items_config_map,
    items_job_name,
    items_size,
    job_manifest,
    job_name,
)
from nodus_cli.targets.kubernetes.nodes import node_records, quantity
from nodus_cli.workload import normalize

#: The Kubernetes version whose OpenAPI schemas every manifest is checked against.
SCHEMA_VERSION = "1.33.0"


# -- GPU names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "model", "memory"),
    [
        # the GPU operator's nvidia.com/gpu.product: nvidia-smi's name with hyphens
        ("NVIDIA-H100-80GB-HBM3", "H100", 80.0),
        ("NVIDIA-A100-SXM4-80GB", "A100", 80.0),
        ("NVIDIA-A100-SXM4-40GB", "A100", 40.0),
        ("NVIDIA-A100-PCIE-40GB", "A100", 40.0),
        ("NVIDIA-L4", "L4", None),
        ("Tesla-T4", "T4", None),
        ("NVIDIA-A10G", "A10G", None),
        ("Tesla-V100-SXM2-16GB", "V100", 16.0),
        ("NVIDIA-L40S", "L40S", None),
        ("NVIDIA-H100-PCIe", "H100", None),
        # GKE's cloud.google.com/gke-accelerator
        ("nvidia-tesla-a100", "A100", None),
        ("nvidia-a100-80gb", "A100", 80.0),
        ("nvidia-h100-80gb", "H100", 80.0),
        ("nvidia-h100-mega-80gb", "H100", 80.0),
        ("nvidia-l4", "L4", None),
        ("nvidia-tesla-t4", "T4", None),
        ("nvidia-h200-141gb", "H200", 141.0),
        # karpenter.k8s.aws/instance-gpu-name
        ("h100", "H100", None),
        ("a10g", "A10G", None),
        ("l40s", "L40S", None),
    ],
)
def test_node_labels_name_their_model_through_the_one_gpu_table(
    label: str, model: str, memory: float | None
) -> None:
    found = gpus.table().node_label(label)
    assert found is not None, label
    assert (found.family.name, found.memory_gb) == (model, memory)


@pytest.mark.parametrize(
    "label",
    ["NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA-A100-SXM4-80GB-SHARED", "NVIDIA-Unknown-9000"],
)
def test_parts_of_a_gpu_and_unknown_labels_name_no_model(label: str) -> None:
    assert gpus.table().node_label(label) is None


def test_a_label_without_memory_in_its_name_takes_the_gpu_memory_label() -> None:
    docs = [_node("a", {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}, 8)]
    [plain] = node_records(docs, [])
    assert (plain.gpu, plain.gpu_memory_gb) == ("A100", 40.0)  # the smallest A100
    docs[0]["metadata"]["labels"]["nvidia.com/gpu.memory"] = "81920"
    [told] = node_records(docs, [])
    assert (told.gpu, told.gpu_memory_gb) == ("A100", 80.0)


# -- nodes ----------------------------------------------------------------------------------


def _node(name: str, labels: dict[str, str], gpus: int, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": "95500m", "memory": "1056Gi", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(node: str | None, gpus: int, phase: str = "Running") -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "4", "memory": "16Gi"}}
    return {
        "metadata": {"name": "p", "namespace": "other"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": phase},
    }


def test_free_gpus_are_allocatable_minus_what_bound_unended_pods_request() -> None:
    nodes = [_node("h", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, 8)]
    pods = [_pod("h", 3), _pod("h", 2, "Pending"), _pod("h", 4, "Succeeded"), _pod(None, 8)]
    [node] = node_records(nodes, pods)
    assert (node.gpus, node.gpus_used, node.free_gpus) == (8, 5, 3)
    assert node.cpus == 95.5 and node.cpus_used == 8.0 and node.memory_gb == 1056.0
    assert node.words == "ready"


def test_cordoned_not_ready_and_tainted_nodes_take_no_pods() -> None:
    cordoned = _node("c", {}, 8, unschedulable=True)
    tainted = _node("t", {}, 8, taints=[{"key": "maintenance", "effect": "NoSchedule"}])
    gpu_taint = _node("g", {}, 8, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    down = _node("d", {}, 8)
    down["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    found = {n.name: n for n in node_records([cordoned, tainted, gpu_taint, down], [])}
    assert {k: (n.usable, n.words) for k, n in found.items()} == {
        "c": (False, "cordoned"),
        "t": (False, "tainted (maintenance:NoSchedule)"),
        "g": (True, "ready"),  # the GPU taint is tolerated by nodus's pods
        "d": (False, "not ready"),
    }


def test_quantities() -> None:
    assert quantity("95500m") == 95.5
    assert quantity("1Gi") == 1024**3
    assert quantity("16G") == 16e9
    assert quantity(8) == 8.0
    assert quantity("nonsense") == 0.0


# -- manifests ------------------------------------------------------------------------------


def _task(doc: dict[str, Any], item: Item | None = None, attempt: int = 1) -> Task:
    result = normalize(doc)
    workload = result.workload
    assert workload is not None, result.problems
    stage = workload.stages[0]
    return Task("20261205-010203-abcdef", workload.name, stage, 0, {"TOKEN": "x"}, item, attempt)


LABELS = [
    ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
    ("cloud.google.com/gke-accelerator", "nvidia-h100-80gb"),
]

MANIFESTS = {
    "gpu": (
        {
            "name": "train",
            "image": "pytorch/pytorch:2.8.0",
            "command": "python train.py",
            "gpu": "H100",
            "gpu_count": 8,
            "requirements": {"cpu": 32, "memory_gb": 256},
        },
        {},
    ),
    "cpu, list command": (
        {"name": "prep", "image": "busybox", "command": ["echo", "hi"]},
        {},
    ),
    "entrypoint cleared, priority, queue": (
        {
            "name": "q",
            "image": "busybox",
            "command": ["sleep", "1"],
            "entrypoint": [],
            "gpu": "H100",
            "gpu_count": 1,
        },
        {"priority_class": "batch-low", "queue": "team-a"},
    ),
}


@pytest.mark.parametrize("case", sorted(MANIFESTS))
def test_every_manifest_is_valid_for_kubernetes_own_schemas(case: str) -> None:
    doc, options = MANIFESTS[case]
    task = _task(doc)
    labels = LABELS if task.stage.requirements.wants_gpu else []
    manifest = job_manifest(task, "ml", labels, **options)
    kubernetes_validate.validate(manifest, SCHEMA_VERSION, strict=True)


def test_a_gpu_job_holds_its_model_only_and_retries_are_nodus_s() -> None:
    task = _task(MANIFESTS["gpu"][0])
    job = job_manifest(task, "ml", LABELS)
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    [container] = pod["containers"]
    limits = container["resources"]["limits"]
    assert limits == {"cpu": "32000m", "memory": str(256 * 1024**3), "nvidia.com/gpu": "8"}
    assert container["resources"]["requests"] == limits
    assert container["securityContext"] == {"privileged": False, "allowPrivilegeEscalation": False}
    assert container["command"] == ["/bin/sh", "-c", "python train.py"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert sorted(t["matchExpressions"][0]["values"][0] for t in terms) == [
        "NVIDIA-H100-80GB-HBM3",
        "nvidia-h100-80gb",
    ]
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": str(128 * 1024**3)}
    assert job["metadata"]["labels"] == {"nodus.run": task.run_id, "nodus.stage": "main"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["TOKEN"] == "x" and env["NODUS_RUN_ID"] == task.run_id


def test_a_queue_makes_a_suspended_job_kueue_admits() -> None:
    job = job_manifest(
        _task(MANIFESTS["gpu"][0]), "ml", LABELS, queue="team-a", priority_class="batch-low"
    )
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "batch-low"


def test_job_names_are_dns_labels_of_at_most_63_characters() -> None:
    long = _task(
        {
            "name": "x",
            "image": "busybox",
            "command": "true",
            "stages": [{"name": "Very_Long_Stage_Name_" * 2, "command": "true"}],
        }
    )
    name = job_name(long)
    assert len(name) <= 63 and name == name.lower() and "_" not in name
    item = job_name(_task(MANIFESTS["gpu"][0], Item(3, "a.txt", 10), attempt=2))
    assert item == "nodus-20261205-010203-abcdef-main-3-2"


def _items(doc: dict[str, Any], values: list[str]) -> list[Task]:
    return [_task(doc, Item(i, value, len(values)), attempt=1) for i, value in enumerate(values)]


def test_a_fan_out_stage_is_an_indexed_job_with_its_items_in_a_config_map() -> None:
    tasks = _items(MANIFESTS["gpu"][0], ["a", "b c", "d"])
    job = indexed_manifest(tasks, "ml", LABELS, 8, priority_class="batch-low", queue="team-a")
    items = items_config_map(tasks, "ml", {"metadata": {"uid": "u-1"}})
    kubernetes_validate.validate(job, SCHEMA_VERSION, strict=True)
    kubernetes_validate.validate(items, SCHEMA_VERSION, strict=True)
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["backoffLimitPerIndex"] == 0 and "backoffLimit" not in spec
    assert spec["suspend"] is True and spec["template"]["spec"]["priorityClassName"] == "batch-low"
    assert job["metadata"]["name"] == items["metadata"]["name"] == items_job_name(tasks[0])
    assert items["data"] == {"0": "a", "1": "b c", "2": "d"}
    assert items["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert job["spec"]["template"]["metadata"]["labels"] == {
        "nodus.run": tasks[0].run_id,
        "nodus.stage": "main",
    }
    [container] = spec["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert "NODUS_ITEM" not in env and env["NODUS_ITEM_COUNT"]["value"] == "3"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert items_size(["a", "b c", "d"]) == 3 + 5


def test_each_pod_of_an_indexed_job_runs_the_command_with_its_own_item(tmp_path: Path) -> None:
    doc = {"name": "fan", "image": "busybox", "command": 'printf "%s|%s" "$NODUS_ITEM" "$0"'}
    tasks = _items(doc, ["a", "b c"])
    command = indexed_manifest(tasks, "ml", [], 2)["spec"]["template"]["spec"]["containers"][0][
        "command"
    ]
    for index, value in enumerate(["a", "b c"]):
        (tmp_path / str(index)).write_text(value)
    script = command[2].replace(ITEMS_DIR, str(tmp_path))
    for index, value in enumerate(["a", "b c"]):
        done = subprocess.run(
            [*command[:2], script, *command[3:]],
            capture_output=True,
            text=True,
            env={"NODUS_ITEM_INDEX": str(index), "PATH": os.environ["PATH"]},
            check=False,
        )
        assert (done.returncode, done.stdout) == (0, f"{value}|/bin/sh"), done.stderr
    done = subprocess.run(
        [*command[:2], script, *command[3:]],
        capture_output=True,
        text=True,
        env={"NODUS_ITEM_INDEX": "7", "PATH": os.environ["PATH"]},
        check=False,
    )
    assert done.returncode == 126  # no item of that index: the command does not run


def test_an_exec_form_command_runs_after_its_item_is_read_with_its_argv_untouched(
    tmp_path: Path,
) -> None:
    argv = ["printf", "%s|", "$NODUS_ITEM", "a b", "it's", "$(id)", "*"]
    doc = {"name": "fan", "image": "busybox", "entrypoint": [], "command": argv}
    tasks = _items(doc, ["x y", "z"])
    job = indexed_manifest(tasks, "ml", [], 2)
    kubernetes_validate.validate(job, SCHEMA_VERSION, strict=True)
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["/bin/sh", "-c"] and command[3:] == ["nodus-item", *argv]
    for index, value in enumerate(["x y", "z"]):
        (tmp_path / str(index)).write_text(value)
    script = command[2].replace(ITEMS_DIR, str(tmp_path))
    done = subprocess.run(
        [*command[:2], script, *command[3:]],
        capture_output=True,
        text=True,
        env={"NODUS_ITEM_INDEX": "0", "PATH": os.environ["PATH"]},
        check=False,
    )
    # each argument as written, never expanded by the shell; the item in the environment
    assert (done.returncode, done.stdout) == (0, "$NODUS_ITEM|a b|it's|$(id)|*|"), done.stderr
    done = subprocess.run(
        [*command[:2], script, "nodus-item", "sh", "-c", 'printf %s "$NODUS_ITEM"'],
        capture_output=True,
        text=True,
        env={"NODUS_ITEM_INDEX": "0", "PATH": os.environ["PATH"]},
        check=False,
    )
    assert done.stdout == "x y", done.stderr


@pytest.mark.parametrize(
    ("doc", "argv"),
    [
        ({"command": "echo $NODUS_ITEM"}, ["/bin/sh", "-c", "echo $NODUS_ITEM"]),
        ({"command": ["score"], "entrypoint": []}, ["score"]),
        ({"command": ["--fast"], "entrypoint": ["/app/score"]}, ["/app/score", "--fast"]),
        ({"entrypoint": ["/app/score"]}, ["/app/score"]),
        # the image's ENTRYPOINT, unknown to nodus, would be replaced: one Job per item
        ({"command": ["score"]}, None),
        ({}, None),
    ],
)
def test_the_argv_an_indexed_jobs_pod_executes(doc: dict[str, Any], argv: list[str] | None) -> None:
    assert item_argv(_task({"name": "f", "image": "busybox", **doc}).stage) == argv


@pytest.mark.parametrize(
    ("state", "found"),
    [
        # containerd
        (
            {
                "terminated": {
                    "exitCode": 128,
                    "reason": "StartError",
                    "message": 'failed to create containerd task: ... exec: "/bin/sh": stat '
                    "/bin/sh: no such file or directory: unknown",
                }
            },
            True,
        ),
        # Docker through cri-dockerd
        (
            {
                "terminated": {
                    "exitCode": 127,
                    "reason": "ContainerCannotRun",
                    "message": 'OCI runtime create failed: exec: "/bin/sh": executable file '
                    "not found in $PATH: unknown",
                }
            },
            True,
        ),
        (
            {
                "waiting": {
                    "reason": "RunContainerError",
                    "message": 'exec: "/bin/sh": stat /bin/sh: no such file or directory',
                }
            },
            True,
        ),
        (
            {"terminated": {"exitCode": 127, "reason": "Error", "message": "score: not found"}},
            False,
        ),
        ({"running": {}}, False),
    ],
)
def test_an_image_without_bin_sh_is_told_from_the_container_runtimes_words(
    state: dict[str, Any], found: bool
) -> None:
    pod = {"status": {"containerStatuses": [{"name": "task", "state": state}]}}
    assert (no_shell(pod) is not None) == found


def test_an_item_job_id_names_its_job_and_index() -> None:
    long = _items(
        {
            "name": "x",
            "image": "b",
            "command": "true",
            "stages": [{"name": "Stage_" * 10, "command": "true"}],
        },
        ["a"],
    )
    name = items_job_name(long[0])
    assert len(name) <= 63 and name.endswith("-items")
    assert split_job_id(item_job_id(name, 12)) == (name, 12)
    assert split_job_id("nodus-run-main-1") == ("nodus-run-main-1", None)
    pods = [
        {"metadata": {"name": n, "creationTimestamp": t, "labels": labels, "annotations": notes}}
        for n, t, labels, notes in [
            ("p0", "2026-12-05T01:00:00Z", {}, {"batch.kubernetes.io/job-completion-index": "0"}),
            ("p1", "2026-12-05T01:00:00Z", {"batch.kubernetes.io/job-completion-index": "1"}, {}),
            ("p1b", "2026-12-05T01:00:09Z", {"batch.kubernetes.io/job-completion-index": "1"}, {}),
            ("other", "2026-12-05T01:00:00Z", {}, {}),
        ]
    ]
    assert pod_index(pods[3]) is None
    newest = newest_by_index(pods)
    assert {i: p["metadata"]["name"] for i, p in newest.items()} == {0: "p0", 1: "p1b"}


# -- how a pod reads --------------------------------------------------------------------------


def _ended(phase: str, code: int, reason: str = "") -> dict[str, Any]:
    state = {"terminated": {"exitCode": code, "reason": reason}}
    return {"status": {"phase": phase, "containerStatuses": [{"name": "task", "state": state}]}}


def test_pod_ends_read_as_the_local_target_says_them() -> None:
    assert pod_end({"status": {"phase": "Running"}}, "m") is None
    assert pod_end(_ended("Succeeded", 0, "Completed"), "m") == pod_end(_ended("Succeeded", 0), "m")
    end = pod_end(_ended("Failed", 3, "Error"), "m")
    assert end is not None and (end.state, end.exit_code) == (TaskState.EXITED, 3)
    end = pod_end(_ended("Failed", 137, "OOMKilled"), "its 2 GiB memory limit")
    assert end is not None and end.state == TaskState.OUT_OF_MEMORY
    assert "it reached its 2 GiB memory limit; raise memory_gb" in str(end.message)
    end = pod_end(_ended("Failed", 127, "ContainerCannotRun"), "m")
    assert end is not None and (end.state, end.exit_code) == (TaskState.CANNOT_START, 127)
    evicted = {"status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}}
    end = pod_end(evicted, "m")
    assert end is not None and end.state == TaskState.INFRASTRUCTURE
    assert "the node evicted the pod (low on memory)" in str(end.message)


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"])
def test_an_image_the_cluster_cannot_pull_cannot_start(reason: str) -> None:
    waiting = {"waiting": {"reason": reason, "message": "not found"}}
    pod = {"status": {"phase": "Pending", "containerStatuses": [{"state": waiting}]}}
    end = pull_problem(pod, "nope:1")
    assert end is not None and end.state == TaskState.CANNOT_START
    assert f"the cluster cannot pull the image nope:1 ({reason}: not found)" in str(end.message)
    assert "imagePullSecret" in str(end.message)


def test_the_pending_reason_is_the_schedulers_own() -> None:
    said = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    condition = {"type": "PodScheduled", "status": "False", "message": said}
    assert pending_reason({"status": {"conditions": [condition]}}, []) == said
    events = [
        {"reason": "FailedScheduling", "message": "old", "lastTimestamp": "2026-12-05T01:00:00Z"},
        {"reason": "FailedScheduling", "message": said, "lastTimestamp": "2026-12-05T01:00:09Z"},
        {"reason": "Scheduled", "message": "x", "lastTimestamp": "2026-12-05T01:00:10Z"},
    ]
    assert pending_reason({"status": {}}, events) == said
    assert pending_reason(None, []) is None


# -- failures -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "words", "fix"),
    [
        (
            None,
            "the Kubernetes API server at https://k:6443 does not answer (list nodes)",
            "reachable from here",
        ),
        (
            401,
            "refused nodus's credentials (list nodes: 401 Unauthorized): the token",
            "log in again",
        ),
        (
            403,
            "forbids nodus to list nodes in namespace 'ml' (403 Forbidden, RBAC)",
            "[kubernetes] namespace",
        ),
        (404, "has no such thing (list nodes: 404 Not Found)", "kubectl get namespace ml"),
        (500, "failed to list nodes (500)", "readyz"),
    ],
)
def test_each_failure_is_one_line_with_its_cause_and_fix(
    status: int | None, words: str, fix: str
) -> None:
    said = failure(
        status, '{"kind": "Status", "message": "why"}', "list nodes", "ml", "https://k:6443"
    )
    assert words in said.message and said.message.endswith(": why")
    assert "\n" not in said.message
    assert said.hint is not None and fix in said.hint
    assert said.exit_code == 3


# -- start-up -------------------------------------------------------------------------------


def test_validate_and_local_commands_import_no_kubernetes_code(tmp_path: Path) -> None:
    workload = tmp_path / "w.toml"
    workload.write_text('image = "busybox"\ncommand = "true"\n')
    for args in (["validate", str(workload)], ["runs"]):
        code = (
            "import sys\nfrom nodus_cli.__main__ import main\n"
            "try:\n"
            f"    main({args!r})\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes' "
            "or m.startswith('nodus_cli.targets.kubernetes')), file=sys.stderr)\n"
        )
        env = {**os.environ, "NODUS_HOME": str(tmp_path / "home")}
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert done.stderr.strip().splitlines()[-1] == "[]", (args, done.stderr)


def test_without_the_client_the_target_says_how_to_install_it(tmp_path: Path) -> None:
    code = (
        "import sys\nsys.modules['kubernetes'] = None  # as if it were not installed\n"
        "from nodus_cli.__main__ import main\n"
        "sys.exit(main(['nodes', '--target', 'kubernetes']))\n"
    )
    env = {**os.environ, "NODUS_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "needs the official `kubernetes` Python client, which is not installed" in done.stderr
    assert "pip install 'nodus-cli[kubernetes]'" in done.stderr
    assert "Traceback" not in done.stderr


class _Context:
    def __init__(self) -> None:
        self.said: list[str] = []

    def say(self, message: str) -> None:
        self.said.append(message)

    def emit(self, stream: str, text: str) -> None:
        self.said.append(f"{stream}: {text}")

    def submitted(self, note: str | None = None, job_id: str | None = None) -> None:
        pass

    def waiting(self, pending: Pending) -> None:
        self.said.append(f"waiting: {pending.words}")

    def started(self, info: Started) -> None:
        self.said.append(f"started on {info.node}")


class _FlakyCluster:
    """An API server that fails to answer ``failures`` times, then shows an ended pod."""

    def __init__(self, failures: int, status: int | None) -> None:
        self.failures = failures
        self.status = status

    def job(self, name: str) -> dict[str, Any]:
        if self.failures:
            self.failures -= 1
            raise KubernetesFailure("the API server does not answer", status=self.status)
        return {"metadata": {"name": name}}

    def pods(self, selector: str) -> list[dict[str, Any]]:
        pod = _ended("Succeeded", 0)
        pod["metadata"] = {"name": "j-abcde", "labels": {"job-name": "j"}}
        pod["spec"] = {"nodeName": "gpu-a"}
        return [pod]

    def log_frames(self, pod: str, follow: bool, since: str | None = None) -> Any:
        return iter([(1, b"2026-12-05T01:00:00.000000001Z hello\n")])


def _follow(cluster: _FlakyCluster, ctx: _Context) -> TaskEnd:
    return follow(
        cluster,  # type: ignore[arg-type]
        Following("j"),
        ctx,
        image="i",
        memory_said="m",
        started=lambda node: Started(node=node),
        holders=lambda: "",
        queue_ok=True,
        queue_name=None,
    )


def test_an_api_server_that_fails_for_a_moment_does_not_end_the_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(following, "POLL_SECONDS", 0.0)
    ctx = _Context()
    end = _follow(_FlakyCluster(3, None), ctx)
    assert (end.state, end.exit_code) == (TaskState.EXITED, 0)
    assert ctx.said == ["started on gpu-a", "stdout: hello"]
    monkeypatch.setattr(following, "TROUBLE_SECONDS", 0.0)
    with pytest.raises(KubernetesFailure):
        _follow(_FlakyCluster(3, 503), _Context())
    with pytest.raises(KubernetesFailure):  # a refusal (403) is no moment's failure
        _follow(_FlakyCluster(1, 403), _Context())


def test_a_runs_priority_picks_its_priority_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[kubernetes]\npriority_class = "batch-low"\n'
        "priority_classes = { urgent = 80, normal = 40 }\n"
    )
    monkeypatch.setenv("NODUS_CONFIG", str(path))
    settings = config.kubernetes()
    assert [settings.class_for(p) for p in (100, 80, 79, 40, 39, 0)] == [
        "urgent",
        "urgent",
        "normal",
        "normal",
        "batch-low",
        "batch-low",
    ]
    path.write_text("[kubernetes]\npriority_classes = { urgent = 101 }\n")
    with pytest.raises(NodusError) as caught:
        config.kubernetes()
    assert "kubernetes.priority_classes.urgent must be a whole number from 0 to 100" in str(
        caught.value.message
    )


def test_the_schedulers_reasons_by_kind() -> None:
    said = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes..."
    assert pending_kind(said) == PendingKind.RESOURCES
    affinity = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    assert pending_kind(affinity) == PendingKind.NODE_UNAVAILABLE
    assert pending_kind(None) == PendingKind.SCHEDULING
    assert pending_kind("something new") == PendingKind.OTHER


class _Answer:
    """A log answer that arrives in chunks cut anywhere, as a stream's do."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.closed = False

    def stream(self, amount: int) -> Any:
        return iter(self.chunks)

    def close(self) -> None:
        self.closed = True


def test_a_log_answer_is_one_frame_a_line_however_its_chunks_were_cut() -> None:
    answer = _Answer([b"T1 a\nT2 b", b"b\nT3 ", b"c\n", b"T4 unterminated"])
    lines = LogLines(answer)
    assert list(lines) == [(1, b"T1 a\n"), (1, b"T2 bb\n"), (1, b"T3 c\n"), (1, b"T4 unterminated")]
    lines.close()
    assert answer.closed
    assert list(LogLines(None)) == []  # a container not started yet: no log


class _LogApi:
    """The pod-log call of CoreV1Api: answers ``frames`` and keeps what each call asked."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames
        self.asked: list[dict[str, Any]] = []

    def read_namespaced_pod_log(self, pod: str, namespace: str, **ask: Any) -> _Answer:
        self.asked.append(ask)
        return _Answer(list(self.frames))


def _stamp(at: float) -> bytes:
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))
    return f"{whole}.{int(at % 1 * 1e9):09d}Z".encode()


@pytest.mark.parametrize("skew", [0.0, 40.0, -40.0])
def test_the_final_read_asks_only_seconds_more_than_the_nodes_clock_says(skew: float) -> None:
    # The node's kubelet stamps the lines and counts sinceSeconds on its own clock, `skew`
    # seconds off this machine's; the followed stream's lines tell it.
    cluster = object.__new__(Cluster)
    cluster.namespace, cluster._ahead = "ml", {}
    newest = time.time() + skew
    cluster.core = _LogApi([_stamp(newest - 0.5) + b" a\n", _stamp(newest) + b" b\n"])
    assert len(list(cluster.log_frames("p", follow=True))) == 2
    since = newest - LogFollower.OVERLAP
    list(cluster.log_frames("p", follow=False, since=f"{since:.9f}"))
    asked = cluster.core.asked[-1]["since_seconds"]
    # From 2 s before the newest line, on the node's clock, and a little more: never the
    # whole last minute, and never less than those 2 s.
    assert LogFollower.OVERLAP + LOG_MARGIN_SECONDS <= asked <= LogFollower.OVERLAP + 5
    # Without a followed line to tell the node's clock, the wide margin.
    cluster.core.frames = []
    list(cluster.log_frames("q", follow=False, since=f"{time.time() - 2:.9f}"))
    assert cluster.core.asked[-1]["since_seconds"] >= LOG_SKEW_SECONDS
