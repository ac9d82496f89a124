# ruff: noqa: F811 - the fixtures imported from swarm_support are test parameters here
"""The Swarm target against a real two-node Swarm (tests/harness/engine.sh swarm-up).

The manager (this machine's engine) is labelled L4 24 GB with 2 fake GPUs at $0.70/h;
the worker ``nodus-w1`` (a second engine in its own network namespace) H100 80 GB with
4 fake GPUs at $12.50/h. Each test runs ``nodus`` as a subprocess with its own state.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from interpreter import python
from swarm_support import (  # noqa: F401 - fixtures
    IMAGE,
    Cluster,
    SwarmNodus,
    blocker,
    cluster,
    docker,
    nodus_swarm,
)

from nodus_cli.errors import NotRunnable
from nodus_cli.planning.planner import SEPARATE_WORK_DIRS
from nodus_cli.planning.ranking import no_history
from nodus_cli.records import RunStore
from nodus_cli.targets import swarm
from nodus_cli.targets.base import Task
from nodus_cli.targets.docker.containers import spec_for
from nodus_cli.targets.swarm import nodes as swarm_nodes
from nodus_cli.targets.swarm.placement import constraints_for
from nodus_cli.targets.swarm.services import WorkMount
from nodus_cli.workload import Requirements, Stage

SPEC_NODE_KEYS = {
    "id",
    "hostname",
    "state",
    "cpus",
    "memory_gb",
    "gpu",
    "gpu_memory_gb",
    "gpus",
    "free_gpus",
    "price_per_hour",
}
SPEC_RUN_KEYS = {"id", "workload", "target", "status", "exit_code", "started_at", "ended_at"}


def workload(tmp_path: Path, body: str, name: str = "w.toml") -> Path:
    path = tmp_path / name
    path.write_text(f'image = "{IMAGE}"\n' + body, encoding="utf-8")
    return path


def gpu_workload(tmp_path: Path, command: str, gpu: str = "H100", count: int = 1) -> Path:
    return workload(
        tmp_path,
        f"command = {json.dumps(command)}\n"
        f'gpu = "{gpu}"\ngpu_count = {count}\n'
        "[requirements]\ncpu = 0.25\nmemory_gb = 0.25\n",
    )


def cpu_workload(tmp_path: Path, command: str) -> Path:
    return workload(
        tmp_path, f"command = {json.dumps(command)}\n[requirements]\ncpu = 0.25\nmemory_gb = 0.25\n"
    )


def only_run(nodus: SwarmNodus) -> dict[str, Any]:
    runs = nodus.runs()
    assert len(runs) == 1, runs
    return runs[0]


def engine_major() -> int:
    return int(docker("version", "--format", "{{.Server.Version}}").split(".")[0])


def run_tasks(run_id: str) -> list[dict[str, Any]]:
    """Every task Swarm still holds for a run, its service removed or not."""
    tasks = json.loads(
        subprocess.run(
            ["curl", "-s", "--unix-socket", "/var/run/docker.sock", "http://d/v1.41/tasks"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    return [
        t
        for t in tasks
        if (t.get("Spec", {}).get("ContainerSpec", {}).get("Labels") or {}).get("nodus.run")
        == run_id
    ]


def live_tasks(run_id: str, timeout: float = 20) -> list[dict[str, Any]]:
    """The run's tasks Swarm still counts as pending or running, once that settles.

    The manager learns a task's end from the worker's next report, so a container that is
    already gone can show as running for a moment on a loaded machine; a task that is truly
    left behind stays and is returned after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        live = [t for t in run_tasks(run_id) if t["Status"]["State"] in ("pending", "running")]
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.3)


def wait_service(cluster: Cluster, run_id: str, timeout: float = 15) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = cluster.service(run_id)
        if found:
            assert len(found) == 1, found
            return found
        time.sleep(0.1)
    raise AssertionError(f"no service of run {run_id} within {timeout}s")


def wait_ended(nodus: SwarmNodus, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = only_run(nodus)
        if run["status"] not in ("pending", "queued", "running"):
            return run
        time.sleep(0.3)
    raise AssertionError(f"the run did not end within {timeout}s: {only_run(nodus)}")


def wait_table_says(nodus: SwarmNodus, run_id: str, word: str, timeout: float = 20) -> str:
    """`nodus runs` once its row for `run_id` says `word`: a submitted task is `pending`
    until Swarm has placed and started it, which takes longer on a loaded machine."""
    deadline = time.monotonic() + timeout
    while True:
        table = nodus("runs").stdout
        row = next((ln for ln in table.splitlines() if ln.startswith(run_id)), "")
        if word in row.split() or time.monotonic() > deadline:
            return row
        time.sleep(0.2)


# -- without a cluster ---------------------------------------------------------------------


def _node(**changes: Any) -> swarm.Node:
    base: dict[str, Any] = dict(
        id="n1",
        hostname="gpu-1",
        state="ready",
        availability="active",
        role="worker",
        cpus=32.0,
        memory_gb=256.0,
        gpu="H100",
        gpu_memory_gb=80.0,
        gpus=8,
        free_gpus=8,
        free_cpus=32.0,
        free_memory_gb=256.0,
        price_per_hour=98.32,
        price_source="label",
        arch="x86_64",
        labels={"nodus.gpu": "H100", "nodus.gpu_memory_gb": "80"},
    )
    base.update(changes)
    return swarm.Node(**base)


def _spec(stage: Stage) -> Any:
    return spec_for(Task("r1", "wl", stage, 0, stage.env))


def test_service_args_pin_the_node_and_hold_the_gpu_model() -> None:
    stage = Stage(
        "train",
        IMAGE,
        ["python", "train.py"],
        {"A": "1"},
        Requirements(gpu="H100", gpu_count=2, cpu=4, memory_gb=16),
    )
    spec = _spec(stage)
    body = swarm.service_args(spec, constraints_for(spec, _node(), []), WorkMount())
    task = body["TaskTemplate"]
    assert task["Placement"]["Constraints"] == [
        "node.id==n1",
        "node.labels.nodus.gpu==H100",
        "node.labels.nodus.gpu_memory_gb==80",
    ]
    res = task["Resources"]
    assert res["Reservations"]["GenericResources"] == [
        {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 2}}
    ]
    assert res["Reservations"]["NanoCPUs"] == res["Limits"]["NanoCPUs"] == 4_000_000_000
    assert res["Reservations"]["MemoryBytes"] == res["Limits"]["MemoryBytes"] == 16 * 1024**3
    assert task["RestartPolicy"]["Condition"] == "none"
    assert body["Mode"] == {"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}}
    container = task["ContainerSpec"]
    # The command replaces the image's CMD, never its ENTRYPOINT.
    assert container["Args"] == ["python", "train.py"] and container.get("Command") is None
    assert "A=1" in container["Env"] and "NODUS_WORK_DIR=/nodus/work" in container["Env"]
    assert body["Labels"]["nodus.run"] == container["Labels"]["nodus.run"] == "r1"
    shm = next(m for m in container["Mounts"] if m["Target"] == "/dev/shm")
    assert shm["TmpfsOptions"]["SizeBytes"] == 8 * 1024**3


def test_service_args_cpu_stage_only_pins_the_node() -> None:
    stage = Stage("prep", IMAGE, None, {}, Requirements(cpu=1))
    spec = _spec(stage)
    body = swarm.service_args(
        spec, constraints_for(spec, _node(), []), WorkMount("/tmp/nodus-work-r1")
    )
    task = body["TaskTemplate"]
    assert task["Placement"]["Constraints"] == ["node.id==n1"]
    assert "GenericResources" not in task["Resources"]["Reservations"]
    container = task["ContainerSpec"]
    assert container.get("Args") is None and container.get("Command") is None  # the image's
    work = next(m for m in container["Mounts"] if m["Target"] == "/nodus/work")
    assert work["Type"] == "bind" and work["Source"] == "/tmp/nodus-work-r1"


def test_a_command_string_replaces_the_entrypoint_on_swarm_too() -> None:
    stage = Stage("s", IMAGE, ["/bin/sh", "-c", "echo hi"], {}, Requirements(), shell=True)
    spec = _spec(stage)
    container = swarm.service_args(spec, [], WorkMount())["TaskTemplate"]["ContainerSpec"]
    assert container["Command"] == ["/bin/sh", "-c", "echo hi"] and container.get("Args") is None


def test_fanout_tasks_are_not_pinned_and_ports_use_the_routing_mesh() -> None:
    from nodus_cli.workload import Port

    stage = Stage(
        "s", IMAGE, None, {}, Requirements(gpu="H100", gpu_count=1), ports=(Port(80, 8080),)
    )
    spec = _spec(stage)
    body = swarm.service_args(spec, constraints_for(spec, None, [_node(id="n9")]), WorkMount())
    assert body["TaskTemplate"]["Placement"]["Constraints"] == ["node.id!=n9"]
    assert body["EndpointSpec"]["Ports"] == [
        {"Protocol": "tcp", "PublishedPort": 8080, "TargetPort": 80, "PublishMode": "ingress"}
    ]


def test_node_without_generic_resources_offers_no_gpu() -> None:
    raw = {
        "ID": "abc",
        "Description": {"Hostname": "h", "Resources": {"NanoCPUs": 4e9, "MemoryBytes": 8 << 30}},
        "Spec": {"Labels": {"nodus.gpu": "H100"}, "Role": "worker", "Availability": "active"},
        "Status": {"State": "ready"},
    }
    node = swarm_nodes._node(raw, (0, 0.0, 0.0), None)
    assert node.gpus == 0 and node.as_offer().gpu is None
    assert any("no NVIDIA-GPU generic resources" in p for p in node.problems)


@pytest.mark.parametrize("label", ["L4, T4", "L4/T4"])
def test_a_node_labelled_with_several_models_is_no_model(label: str) -> None:
    # Its NVIDIA-GPU generic resources cannot be told apart: a task reserving one could
    # get either model, so nodus offers none of them rather than "L4, T4" as one model.
    raw = {
        "ID": "mixed",
        "Description": {
            "Hostname": "h",
            "Resources": {
                "NanoCPUs": 4e9,
                "MemoryBytes": 8 << 30,
                "GenericResources": [
                    {"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": f"GPU-{i}"}}
                    for i in range(3)
                ],
            },
        },
        "Spec": {"Labels": {"nodus.gpu": label}, "Role": "worker", "Availability": "active"},
        "Status": {"State": "ready"},
    }
    node = swarm_nodes._node(raw, (0, 0.0, 0.0), None)
    assert node.gpu is None and node.as_offer().gpu is None and node.gpus == 3
    (problem,) = node.problems
    assert problem.startswith(f"label nodus.gpu={label} names 2 GPU models (L4, T4); ")
    assert "generic resources cannot tell models apart" in problem
    assert problem.endswith("its GPUs are not offered")


def test_init_node_on_a_machine_of_two_models_says_how_to_declare_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from docker_support import FAKE_BIN

    from nodus_cli.errors import NodusError
    from nodus_cli.hardware import smi
    from nodus_cli.targets.swarm import setup

    monkeypatch.setenv("PATH", f"{FAKE_BIN}:/usr/bin:/bin")
    monkeypatch.setenv("NODUS_FAKE_GPUS", "mixed")
    with pytest.raises(NodusError) as caught:
        setup.node_settings(smi.query_gpus(), 1.0, None)
    assert caught.value.message.startswith("this machine has several GPU models (2× L4, 1× T4)")
    assert "so nodus declares one model per node" in caught.value.message
    hint = caught.value.hint or ""
    assert "L4: NVIDIA-GPU=GPU-de84ad31-ebe4-fc2d-5518-4b13a4c16e1c, NVIDIA-GPU=GPU-3a23" in hint
    assert "T4: NVIDIA-GPU=GPU-6cf00fa7-59ac-16f2-3e83-d24ccdc56f84" in hint


class FakeApi:
    """Just enough of SwarmApi for planning and the pending diagnosis."""

    def __init__(self, nodes: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> None:
        self._nodes, self._tasks = nodes, tasks

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes

    def tasks(self, filters: Any = None) -> list[dict[str, Any]]:
        return self._tasks


def raw_node(node_id: str, host: str, gpu: str | None, gpus: int) -> dict[str, Any]:
    generic = [{"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": f"G{i}"}} for i in range(gpus)]
    labels = {"nodus.gpu": gpu, "nodus.gpu_memory_gb": "80"} if gpu else {}
    return {
        "ID": node_id,
        "Description": {
            "Hostname": host,
            "Resources": {"NanoCPUs": 8e9, "MemoryBytes": 64 << 30, "GenericResources": generic},
            "Engine": {"EngineVersion": "20.10.24"},
        },
        "Spec": {"Labels": labels, "Role": "worker", "Availability": "active"},
        "Status": {"State": "ready"},
    }


def gpu_task(node_id: str, gpus: int) -> dict[str, Any]:
    generic = [{"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": gpus}}]
    return {
        "NodeID": node_id,
        "Status": {"State": "running"},
        "Spec": {"Resources": {"Reservations": {"GenericResources": generic}}},
    }


def _target(api: FakeApi, tmp_path: Path) -> swarm.SwarmTarget:
    target = swarm.SwarmTarget(RunStore.open(tmp_path / "home"))
    target._api = api  # type: ignore[assignment]
    return target


def explain(api: FakeApi, node_id: str, count: int, err: str | None = None) -> str:
    import tempfile

    stage = Stage("train", IMAGE, None, {}, Requirements(gpu="H100", gpu_count=count, cpu=1))
    node = next(n for n in swarm.list_nodes(api) if n.id == node_id)  # type: ignore[arg-type]
    target = _target(api, Path(tempfile.mkdtemp()))
    return target.explain_pending(stage, node, err).words


def test_pending_diagnosis_names_the_largest_matching_capacity() -> None:
    api = FakeApi(
        [raw_node("a", "gpu-a", "H100", 8), raw_node("b", "gpu-b", "H100", 4)],
        [gpu_task("a", 7), gpu_task("b", 2)],
    )
    text = explain(api, "a", 4, "no suitable node (insufficient resources on 2 nodes)")
    assert "submitted, none running" in text and "Swarm: no suitable node" in text
    assert "needs 4 free H100" in text
    assert "largest matching capacity is 2 free of 4 on gpu-b" in text


def test_pending_diagnosis_when_the_node_lost_its_generic_resources() -> None:
    api = FakeApi([raw_node("a", "gpu-a", "H100", 0)], [])
    text = explain(api, "a", 2)
    assert "declares no NVIDIA-GPU generic resources" in text
    assert "nodus swarm init-node" in text and "largest matching" not in text


def test_refusal_names_nodes_whose_gpus_are_not_declared(tmp_path: Path) -> None:
    from nodus_cli.workload import Workload

    stage = Stage("main", IMAGE, None, {}, Requirements(gpu="H100", gpu_count=1))
    work = Workload(
        name="w",
        image=IMAGE,
        command=None,
        env={},
        model=None,
        budget=None,
        requirements=stage.requirements,
        stages=[stage],
    )
    api = FakeApi([raw_node("a", "gpu-a", "H100", 0)], [])
    target = _target(api, tmp_path)
    plan = target.plan(work, no_history)
    # With no eligible node, the plan shows what the cluster holds instead of nothing.
    (sp,) = plan.stages
    assert [c.offer.machine_id for c in sp.nearest] == ["gpu-a"]
    assert any(n.startswith("the cluster holds: gpu-a (8 CPUs") for n in sp.notes)
    with pytest.raises(NotRunnable) as caught:
        target.prepare(work, plan)
    assert caught.value.exit_code == 3
    assert "node gpu-a: labelled nodus.gpu=H100 but it declares no NVIDIA-GPU" in str(caught.value)


def test_sharing_a_gpu_by_memory_is_refused_on_swarm_with_the_reason(tmp_path: Path) -> None:
    from nodus_cli.workload import Workload

    stage = Stage(
        "main",
        IMAGE,
        None,
        {},
        Requirements(gpu="H100", gpu_count=1, peak_memory_gb=10, share_gpu=True),
    )
    work = Workload("w", IMAGE, None, {}, None, None, stage.requirements, [stage])
    target = _target(FakeApi([raw_node("a", "gpu-a", "H100", 4)], []), tmp_path)
    plan = target.plan(work, no_history)
    assert any("Swarm reserves whole GPUs" in n for n in plan.stages[0].notes)
    with pytest.raises(NotRunnable, match="which Swarm cannot do"):
        target.prepare(work, plan)


def test_the_current_docker_context_names_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    meta = tmp_path / "contexts" / "meta" / hashlib.sha256(b"gpu-cluster").hexdigest()
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(
        json.dumps(
            {"Name": "gpu-cluster", "Endpoints": {"docker": {"Host": "tcp://10.0.0.5:2375"}}}
        )
    )
    (tmp_path / "config.json").write_text(json.dumps({"currentContext": "gpu-cluster"}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert swarm.connect().where == "tcp://10.0.0.5:2375"
    from nodus_cli.targets.docker import engine

    assert engine.connect().where == "tcp://10.0.0.5:2375"  # the local target: the same engine
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/other.sock")  # DOCKER_HOST wins
    assert swarm.connect().where == "unix:///run/other.sock"
    assert engine.connect().where == "unix:///run/other.sock"


def test_job_mode_follows_the_engine_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODUS_SWARM_MODE", raising=False)
    assert not swarm.job_mode([_node(engine_version="20.10.24+dfsg1")])
    assert swarm.job_mode([_node(engine_version="26.1.4")])
    assert not swarm.job_mode([_node(engine_version="26.1.4"), _node(engine_version="23.0.1")])
    monkeypatch.setenv("NODUS_SWARM_MODE", "replicated-job")
    assert swarm.job_mode([_node(engine_version="20.10.24")])


# -- what the plan and prepare say (without a cluster) -------------------------------------


def _workload(*stages: Stage, output_dir: str | None = None) -> Any:
    from nodus_cli.workload import Workload

    return Workload(
        "w",
        IMAGE,
        None,
        {},
        None,
        None,
        stages[0].requirements,
        list(stages),
        output_dir=output_dir,
    )


def test_plan_and_prepare_say_what_works_differently_on_swarm(tmp_path: Path) -> None:
    from nodus_cli.workload import MapSpec, Mount, Port

    stage = Stage(
        "main",
        IMAGE,
        None,
        {},
        Requirements(gpu="H100", gpu_count=1),
        mounts=(Mount("/data", "/in"), Mount("/data", "/again"), Mount("cache", "/cache")),
        ports=(Port(80, 8080), Port(53, 5353, "udp")),
        map=MapSpec(("a", "b")),
    )
    work = _workload(stage, output_dir="out")
    a, b = raw_node("a", "gpu-a", "H100", 4), raw_node("b", "gpu-b", "H100", 0)
    a["Status"]["Addr"], b["Status"]["Addr"] = "10.0.0.1", "10.0.0.2"
    api = FakeApi([a, b], [])
    target = _target(api, tmp_path)
    plan = target.plan(work, no_history)
    notes = plan.stages[0].notes
    assert (
        "mounts: the host path(s) /data must exist on the node that runs the stage (Swarm "
        "does not create them)" in notes
    )
    assert (
        "ports 8080->80/tcp, 5353->53/udp: published through the routing mesh, on every "
        "node's address (10.0.0.1, 10.0.0.2)" in notes
    )
    assert (
        "mounts: the named volume(s) cache live on each node that runs a task (created there "
        "when missing, kept after the run): another node has its own, not this one" in notes
    )
    assert (
        "fan-out: Swarm spreads the tasks over every node that can run them; each task gets "
        "an empty work folder of its own" in notes
    )
    declared = (
        "node gpu-b: labelled nodus.gpu=H100 but it declares no NVIDIA-GPU generic resources "
        "(dockerd's node-generic-resources): no GPU can be reserved on it; see "
        "`nodus swarm init-node`"
    )
    output_note = (
        "output_dir: on Swarm the work folder lives on the node that ran the stage and is "
        "removed there after the run; nodus cannot copy it back (write results to storage "
        "the nodes share, e.g. a mount)"
    )
    assert plan.notes[-2:] == [output_note, f"warning: {declared}"]
    prepared = target.prepare(work, plan)
    assert prepared.warnings == (
        declared,
        "output_dir is not copied back on Swarm: the work folder lives on the node that ran "
        "the stage and is removed there after the run; write results to storage the nodes "
        "share",
    )
    assert prepared.notes == (  # said at submit: where the ports will answer
        *plan.notes,
        "stage main: port 80/tcp answers at http://10.0.0.1:8080 and on every other node's "
        "address (10.0.0.2) (routing mesh)",
        "stage main: port 53/udp answers at udp://10.0.0.1:5353 and on every other node's "
        "address (10.0.0.2) (routing mesh)",
    )
    assert prepared.price_per_hour == plan.stages[0].selected.offer.price_per_hour  # type: ignore[union-attr]


def test_stages_on_two_nodes_are_told_they_share_no_folder(tmp_path: Path) -> None:

    api = FakeApi([raw_node("a", "gpu-a", "H100", 4), raw_node("b", "gpu-b", "A100", 4)], [])
    first = Stage("first", IMAGE, None, {}, Requirements(gpu="H100", gpu_count=1))
    second = Stage("second", IMAGE, None, {}, Requirements(gpu="A100", gpu_count=1))
    plan = _target(api, tmp_path).plan(_workload(first, second), no_history)
    assert [sp.selected.offer.machine_id for sp in plan.stages if sp.selected] == [
        "gpu-a",
        "gpu-b",
    ]
    # The target declares that its nodes do not share a work folder; the planner says so.
    assert SEPARATE_WORK_DIRS in plan.notes
    again = Stage("again", IMAGE, None, {}, Requirements(gpu="H100", gpu_count=1))
    one = _target(api, tmp_path).plan(_workload(first, again), no_history)
    assert SEPARATE_WORK_DIRS not in one.notes


def test_a_named_volume_of_stages_on_two_nodes_is_two_volumes(tmp_path: Path) -> None:
    from nodus_cli.workload import Mount

    api = FakeApi([raw_node("a", "gpu-a", "H100", 4), raw_node("b", "gpu-b", "A100", 4)], [])
    cache = (Mount("cache", "/cache"),)
    first = Stage("first", IMAGE, None, {}, Requirements(gpu="H100", gpu_count=1), mounts=cache)
    second = Stage("second", IMAGE, None, {}, Requirements(gpu="A100", gpu_count=1), mounts=cache)
    target = _target(api, tmp_path)
    work = _workload(first, second)
    plan = target.plan(work, no_history)
    said = (
        "named volume cache: its stages run on different nodes (first on node gpu-a; second "
        "on node gpu-b), and a named volume lives on the node that mounts it: each node has "
        "its own cache, so they do not see each other's files; share data through a bind "
        "mount of storage every node mounts, or run them on one node"
    )
    assert said in plan.notes
    assert said in target.prepare(work, plan).notes  # what `nodus run` prints
    again = Stage("again", IMAGE, None, {}, Requirements(gpu="H100", gpu_count=1), mounts=cache)
    one = _target(api, tmp_path).plan(_workload(first, again), no_history)
    assert not any(n.startswith("named volume cache") for n in one.notes)  # one node: one


def test_a_stage_no_node_can_run_is_refused_with_the_unusable_nodes(tmp_path: Path) -> None:
    drained = raw_node("b", "gpu-b", "A100", 8)
    drained["Spec"]["Availability"] = "drain"
    api = FakeApi([raw_node("a", "gpu-a", "H100", 4), drained], [])
    target = _target(api, tmp_path)
    work = _workload(Stage("main", IMAGE, None, {}, Requirements(gpu="A100", gpu_count=1)))
    plan = target.plan(work, no_history)
    (sp,) = plan.stages
    assert not sp.feasible
    assert [c.offer.machine_id for c in sp.nearest] == ["gpu-b", "gpu-a"]
    assert (
        "the cluster holds: gpu-b (8× A100 80 GB, 8 CPUs, 64 GB, ready/drain); "
        "gpu-a (4× H100 80 GB, 8 CPUs, 64 GB)" in sp.notes
    )
    with pytest.raises(NotRunnable) as caught:
        target.prepare(work, plan)
    message = str(caught.value)
    assert message.startswith("no node of the cluster can run stage 'main': ")
    assert "configuration" not in message
    assert message.endswith("\n  node gpu-b is ready/drain")
    assert caught.value.hint == "`nodus nodes` shows what each node holds"


def test_capacity_is_what_the_eligible_nodes_hold(tmp_path: Path) -> None:
    api = FakeApi(
        [
            raw_node("a", "gpu-a", "H100", 8),
            raw_node("b", "gpu-b", "H100", 4),
            raw_node("c", "gpu-c", "A100", 8),
        ],
        [],
    )
    target = _target(api, tmp_path)
    gpu = Stage("g", IMAGE, None, {}, Requirements(gpu="H100", gpu_count=3), map=None)
    cpu = Stage("c", IMAGE, None, {}, Requirements(cpu=3))
    big = Stage("b", IMAGE, None, {}, Requirements(cpu=8, memory_gb=1))
    plan = target.plan(_workload(gpu, cpu, big), no_history)
    g, c, b = plan.stages
    assert target.capacity(gpu, g) == 2 + 1  # 8 // 3 on gpu-a, 4 // 3 on gpu-b; not the A100s
    assert target.capacity(cpu, c) == 3 * (8 // 3)
    assert target.capacity(big, b) == 3


# -- a pending task (without a cluster) ----------------------------------------------------


def reserving(node_id: str, cpu: float = 0, memory_gb: float = 0) -> dict[str, Any]:
    return {
        "NodeID": node_id,
        "Status": {"State": "running"},
        "Spec": {
            "Resources": {
                "Reservations": {"NanoCPUs": int(cpu * 1e9), "MemoryBytes": int(memory_gb * 2**30)}
            }
        },
    }


def pending(api: FakeApi, node_id: str | None, req: Requirements, err: str | None = None) -> str:
    import tempfile

    stage = Stage("train", IMAGE, None, {}, req)
    nodes = swarm.list_nodes(api)  # type: ignore[arg-type]
    node = next((n for n in nodes if n.id == node_id), None) if node_id else None
    if node_id and node is None:
        node = _node(id=node_id, hostname="gone")
    target = _target(api, Path(tempfile.mkdtemp()))
    return target.explain_pending(stage, node, err).words


HEAD = "stage train: submitted, none running"
TAIL = " It starts when they are released; Ctrl-C to give up."


def test_pending_explanations_word_for_word() -> None:
    nodes = [raw_node("a", "gpu-a", "H100", 8), raw_node("b", "gpu-b", "H100", 4)]
    api = FakeApi(nodes, [gpu_task("a", 7), gpu_task("b", 2), reserving("a", 6, 40)])
    h100 = Requirements(gpu="H100", gpu_count=1, cpu=1)
    assert pending(api, None, h100) == (
        f"{HEAD}: every node that can run it is busy (3 matching GPUs free now); tasks start "
        "as others finish." + TAIL
    )
    assert pending(api, None, Requirements(cpu=1), "no suitable node") == (
        f"{HEAD} (Swarm: no suitable node): waiting for Swarm to place it." + TAIL
    )
    assert pending(api, "zz", h100) == f"{HEAD}: node gone has left the cluster"
    assert pending(api, "a", Requirements(gpu="H100", gpu_count=9, cpu=1)) == (
        f"{HEAD}: it reserves 9 NVIDIA-GPU and node gpu-a declares 8 NVIDIA-GPU generic "
        "resources (dockerd's node-generic-resources); it cannot start there until the node "
        "declares its GPUs (`nodus swarm init-node`). Ctrl-C to give up."
    )
    assert pending(api, "a", Requirements(gpu="H100", gpu_count=2, cpu=1)) == (
        f"{HEAD}: it needs 2 free H100 GPUs and no node has them now; the largest matching "
        "capacity is 2 free of 4 on gpu-b (the rest are reserved by other tasks)." + TAIL
    )
    assert pending(api, "a", Requirements(cpu=4)) == (
        f"{HEAD}: it reserves 4 CPUs and gpu-a has 2 free now; the largest free is 8 on gpu-b."
        + TAIL
    )
    assert pending(api, "a", Requirements(cpu=1, memory_gb=30)) == (
        f"{HEAD}: it reserves 30 GB of memory and gpu-a has 24 GB free now; the largest free "
        "is 64 GB on gpu-b." + TAIL
    )
    assert pending(api, "a", h100) == (
        f"{HEAD}: waiting for Swarm to place it on gpu-a. Ctrl-C to give up."
    )


def test_pending_explanations_say_their_kind() -> None:
    import tempfile

    from nodus_cli.targets.base import PendingKind

    nodes = [raw_node("a", "gpu-a", "H100", 8), raw_node("b", "gpu-b", "H100", 4)]
    api = FakeApi(nodes, [gpu_task("a", 7), gpu_task("b", 2), reserving("a", 6, 40)])
    target = _target(api, Path(tempfile.mkdtemp()))
    listed = {n.id: n for n in swarm.list_nodes(api)}  # type: ignore[arg-type]

    def kind(node_id: str | None, req: Requirements) -> PendingKind:
        stage = Stage("train", IMAGE, None, {}, req)
        node = listed.get(node_id) if node_id else None
        if node_id and node is None:
            node = _node(id=node_id, hostname="gone")
        return target.explain_pending(stage, node, None).kind

    two = Requirements(gpu="H100", gpu_count=2, cpu=1)
    assert kind("a", two) == PendingKind.RESOURCES
    assert kind("a", Requirements(cpu=4)) == PendingKind.RESOURCES
    assert kind(None, Requirements(gpu="H100", gpu_count=1, cpu=1)) == PendingKind.RESOURCES
    assert kind("zz", two) == PendingKind.NODE_UNAVAILABLE
    assert kind("a", Requirements(gpu="H100", gpu_count=1, cpu=1)) == PendingKind.SCHEDULING


def test_pending_on_a_node_that_is_down_or_drained() -> None:
    down = raw_node("a", "gpu-a", None, 0)
    down["Status"]["State"] = "down"
    drained = raw_node("b", "gpu-b", None, 0)
    drained["Spec"]["Availability"] = "drain"
    api = FakeApi([down, drained], [])
    again = "; it runs when the node is ready and active again. Ctrl-C to give up."
    assert pending(api, "a", Requirements(cpu=1)) == f"{HEAD}: node gpu-a is down" + again
    assert pending(api, "b", Requirements(cpu=1)) == (
        f"{HEAD}: node gpu-b is ready (drain)" + again
    )


# -- a task's end (without a cluster) ------------------------------------------------------


def test_how_a_task_ended_from_its_last_status() -> None:
    from nodus_cli.targets.base import TaskEnd, TaskState
    from nodus_cli.targets.swarm import following

    stage = Stage("s", IMAGE, None, {}, Requirements(cpu=0.5, memory_gb=0.25))
    task = Task("r1", "wl", stage, 0, stage.env)
    node = _node(hostname="gpu-a")
    ended = following.ended

    def end(
        state: str, code: int | None, err: str | None = None, stopping: bool = False
    ) -> TaskEnd:
        status: dict[str, Any] = {"State": state, "Err": err}
        if code is not None:
            status["ContainerStatus"] = {"ExitCode": code}
        return ended(task, following.Live(stopping=stopping), state, status, err, node)

    assert end("complete", 0) == TaskEnd(TaskState.EXITED, 0)
    assert end("complete", None) == TaskEnd(TaskState.EXITED, 0)
    assert end("failed", 3, "task: non-zero exit (3)") == TaskEnd(
        TaskState.EXITED, 3, "failed on node gpu-a: task: non-zero exit (3)"
    )
    assert end("failed", None) == TaskEnd(TaskState.EXITED, 1)
    assert end("rejected", None, "no such image") == TaskEnd(
        TaskState.INFRASTRUCTURE, 1, "task rejected on node gpu-a: no such image"
    )
    assert end("failed", 137) == TaskEnd(
        TaskState.EXITED,
        137,
        "failed on node gpu-a: killed (exit 137, SIGKILL); Swarm does not report why: the "
        "usual cause is its 0.25 GiB memory limit (which includes /dev/shm), so raise "
        "memory_gb in [requirements] if it needs more, else it was killed from outside nodus",
    )
    assert end("failed", 137, stopping=True) == TaskEnd(TaskState.STOPPED, 137, "stopped by nodus")


def test_a_started_fan_out_task_pays_its_share_of_the_node() -> None:
    from nodus_cli.targets.base import Item
    from nodus_cli.targets.swarm.following import started

    stage = Stage("s", IMAGE, None, {}, Requirements(gpu="H100", gpu_count=2), map=None)
    node = _node(gpus=8, price_per_hour=80.0)
    doc = {
        "AssignedGenericResources": [
            {"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": "GPU-1"}},
            {"NamedResourceSpec": {"Kind": "other", "Value": "x"}},
            {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 1}},
        ]
    }
    whole = started(Task("r1", "wl", stage, 0, stage.env), doc, node)
    assert (whole.devices, whole.node, whole.price_per_hour) == (("GPU-1",), "gpu-1", 80.0)
    assert whole.config == node.as_offer().as_json()
    item = Task("r1", "wl", stage, 0, stage.env, item=Item(0, "a", 4))
    assert started(item, doc, node).price_per_hour == 20.0
    cpu = Stage("c", IMAGE, None, {}, Requirements(cpu=5))
    assert (
        started(Task("r1", "wl", cpu, 0, cpu.env, item=Item(0, "a", 4)), doc, node).price_per_hour
        == 80.0 / 6
    )
    legacy = started(
        Task("r1", "wl", stage, 0, stage.env),
        {"GenericResources": doc["AssignedGenericResources"]},
        None,
    )
    assert (legacy.devices, legacy.node, legacy.price_per_hour) == (("GPU-1",), None, 0.0)


# -- nodes ---------------------------------------------------------------------------------


@pytest.mark.swarm
def test_nodes_table_and_json(cluster: Cluster, nodus_swarm: SwarmNodus) -> None:
    done = nodus_swarm("nodes")
    assert done.returncode == 0, done.stderr
    assert "nodus-w1" in done.stdout and cluster.manager_hostname in done.stdout
    assert "H100 80 GB" in done.stdout and "L4 24 GB" in done.stdout
    assert "$12.50" in done.stdout and "$0.70" in done.stdout
    assert "not every configuration a supplier could offer" in done.stdout

    doc = nodus_swarm.json("nodes")
    assert "not every configuration" in doc["note"]
    nodes = {n["hostname"]: n for n in doc["nodes"]}
    assert set(nodes) == {"nodus-w1", cluster.manager_hostname}
    for n in nodes.values():
        assert set(n) >= SPEC_NODE_KEYS, n
        assert n["state"] == "ready" and n["cpus"] > 0 and n["memory_gb"] > 0
    w, m = nodes["nodus-w1"], nodes[cluster.manager_hostname]
    assert (w["id"], w["gpu"], w["gpu_memory_gb"], w["gpus"], w["free_gpus"]) == (
        cluster.worker_id,
        "H100",
        80.0,
        4,
        4,
    )
    assert w["price_per_hour"] == 12.5
    assert (m["id"], m["gpu"], m["gpu_memory_gb"], m["gpus"], m["price_per_hour"]) == (
        cluster.manager_id,
        "L4",
        24.0,
        2,
        0.7,
    )


@pytest.mark.swarm
def test_nodes_price_from_the_machine_id_label(cluster: Cluster, nodus_swarm: SwarmNodus) -> None:
    from nodus_cli import catalog

    expected = min(o.price_per_hour for o in catalog.load().offers if o.machine_id == "p5.48xlarge")
    saved = cluster.labels(cluster.worker_id)
    try:
        wanted = {k: v for k, v in saved.items() if k != "nodus.price_per_hour"}
        cluster.set_labels(cluster.worker_id, {**wanted, "nodus.machine_id": "p5.48xlarge"})
        doc = nodus_swarm.json("nodes")
        worker = next(n for n in doc["nodes"] if n["hostname"] == "nodus-w1")
        assert worker["price_per_hour"] == expected
        assert worker["price_source"] == "catalog price of p5.48xlarge"
    finally:
        cluster.set_labels(cluster.worker_id, saved)
    assert cluster.labels(cluster.worker_id) == saved


# -- planning ------------------------------------------------------------------------------


@pytest.mark.swarm
def test_plan_places_each_gpu_model_on_its_node(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    h100 = nodus_swarm.json("plan", gpu_workload(tmp_path, "true", "H100", 2), "--target", "swarm")
    selected = h100["stages"][0]["selected"]
    assert (selected["supplier"], selected["machine_id"]) == ("swarm", "nodus-w1")
    assert (selected["gpu"], selected["gpu_count"], selected["gpu_memory_gb"]) == ("H100", 4, 80)
    assert h100["stages"][0]["eligible"] == 1

    l4 = nodus_swarm.json("plan", gpu_workload(tmp_path, "true", "L4", 1), "--target", "swarm")
    assert l4["stages"][0]["selected"]["machine_id"] == cluster.manager_hostname


@pytest.mark.swarm
def test_plan_explains_what_no_node_holds(nodus_swarm: SwarmNodus, tmp_path: Path) -> None:
    eight = nodus_swarm("plan", gpu_workload(tmp_path, "true", "H100", 8), "--target", "swarm")
    assert eight.returncode == 3, eight.stdout + eight.stderr
    # Which requirement emptied the list, and the largest count the cluster holds.
    assert "gpu_count" in eight.stdout
    said = " ".join(eight.stdout.split())  # long lines wrap at the terminal's width
    assert re.search(r"largest .*count.* 4\b.*nodus-w1", said), eight.stdout

    a100 = gpu_workload(tmp_path, "true", "A100", 1)
    plan = nodus_swarm("plan", a100, "--target", "swarm")
    assert plan.returncode == 3
    assert re.search(r"no configuration .*A100", " ".join(plan.stdout.split())), plan.stdout
    run = nodus_swarm("run", a100, "--target", "swarm")
    assert run.returncode == 3
    assert "no node of the cluster can run stage 'main'" in run.stderr
    assert "A100" in run.stderr and "Traceback" not in run.stderr
    assert nodus_swarm.runs() == []  # refused before anything was recorded or submitted


# -- running -------------------------------------------------------------------------------


@pytest.mark.swarm
def test_detached_gpu_run_service_spec_placement_and_records(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    file = gpu_workload(
        tmp_path,
        "cat /proc/1/environ | tr '\\0' '\\n' | grep DOCKER_RESOURCE; "
        "echo shm=$(df -m /dev/shm | tail -1); "
        "until test -e /tmp/go; do sleep 0.1; done; sleep 4; echo done",  # runs until let go
        "H100",
        2,
    )
    t0 = time.monotonic()
    started = nodus_swarm("run", file, "--target", "swarm", "--detach")
    assert started.returncode == 0, started.stderr
    assert time.monotonic() - t0 < 30  # it did not wait for the job, which waits for the test
    run_id = started.stdout.strip().splitlines()[-1]

    # The service as Swarm holds it, while the job runs.
    services = wait_service(cluster, run_id)
    spec = services[0]["Spec"]
    task = spec["TaskTemplate"]
    assert set(task["Placement"]["Constraints"]) == {
        f"node.id=={cluster.worker_id}",
        "node.labels.nodus.gpu==H100",
        "node.labels.nodus.gpu_memory_gb==80",
    }
    reservations = task["Resources"]["Reservations"]
    assert reservations["GenericResources"] == [
        {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 2}}
    ]
    assert reservations["NanoCPUs"] == task["Resources"]["Limits"]["NanoCPUs"] == 250_000_000
    quarter = 1024**3 // 4
    assert reservations["MemoryBytes"] == task["Resources"]["Limits"]["MemoryBytes"] == quarter
    assert spec["Labels"]["nodus.run"] == run_id and spec["Labels"]["nodus.stage"] == "main"
    assert task["ContainerSpec"]["Labels"]["nodus.run"] == run_id
    # One task, never restarted: a replicated job where Swarm can stop and clean up jobs
    # (Docker >= 24), else the same one-off task as a one-replica service.
    if engine_major() >= 24:
        assert spec["Mode"] == {"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}}
    else:
        assert spec["Mode"] == {"Replicated": {"Replicas": 1}}
    assert task["RestartPolicy"]["Condition"] == "none"

    # `nodus runs` shows the run with what the cluster says about it.
    row = wait_table_says(nodus_swarm, run_id, "running")
    assert "running" in row.split() and "main:running" in row, row
    listed = only_run(nodus_swarm)
    assert listed["id"] == run_id and listed["target"] == "swarm"
    assert "cluster" in listed and "main:" in listed["cluster"]
    (container,) = docker("ps", "-q", "--filter", f"label=nodus.run={run_id}", worker=True).split()
    docker("exec", container, "touch", "/tmp/go", worker=True)  # the job goes on to its end

    run = wait_ended(nodus_swarm)
    assert run["status"] == "succeeded" and run["exit_code"] == 0, run
    assert set(run) >= SPEC_RUN_KEYS
    stage = run["stages"][0]
    assert (stage["name"], stage["status"], stage["exit_code"]) == ("main", "succeeded", 0)
    assert stage["started_at"] and stage["ended_at"] and stage["runtime_seconds"] >= 4
    assert stage["configuration"]["machine_id"] == "nodus-w1"
    assert len(stage["gpus"]) == 2 and all(g.startswith("GPU-w1-") for g in stage["gpus"])
    assert run["cost"] > 0  # $12.50/h for a few seconds

    log = nodus_swarm("logs", run_id).stdout
    line = next(ln for ln in log.splitlines() if "DOCKER_RESOURCE_NVIDIA-GPU=" in ln)
    assert line.startswith("main | ")
    ids = line.split("=", 1)[1].split(",")
    assert sorted(ids) == sorted(stage["gpus"])
    assert "main | done" in log
    shm = next(ln for ln in log.splitlines() if "shm=" in ln)
    assert " 128 " in shm  # /dev/shm: half of the 0.25 GiB memory limit
    assert cluster.service(run_id) == []  # removed once it completed


@pytest.mark.swarm
def test_a_detached_run_says_where_its_port_answers_at_submit_and_in_its_log(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    file = workload(
        tmp_path,
        'command = "echo up; sleep 2"\nports = ["18080:80"]\n'
        "[requirements]\ncpu = 0.25\nmemory_gb = 0.25\n",
    )
    started = nodus_swarm("run", file, "--target", "swarm", "--detach")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip().splitlines()[-1]
    # The plan puts a CPU stage on the cheaper node, the manager (10.213.0.1).
    answers = (
        "stage main: port 80/tcp answers at http://10.213.0.1:18080 and on every other node's "
        "address (10.213.0.2) (routing mesh)"
    )
    try:
        assert f"nodus: note: {answers}" in started.stderr  # at submit
    finally:
        run = wait_ended(nodus_swarm)
    assert run["status"] == "succeeded", run
    log = nodus_swarm("logs", run_id).stdout
    assert f"nodus: {answers}" in log  # once it ran, in the run's log
    assert cluster.service(run_id) == []


@pytest.mark.swarm
def test_exit_code_output_and_logs(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    file = cpu_workload(tmp_path, "echo to-stdout; echo to-stderr >&2; exit 7")
    done = nodus_swarm("run", file, "--target", "swarm")
    assert done.returncode == 7, done.stderr
    # Each line keeps its stream, as on the local engine.
    assert "main | to-stdout" in done.stdout and "main | to-stderr" in done.stderr
    assert "to-stderr" not in done.stdout
    assert f"submitting to node {cluster.manager_hostname} (no GPU)" in done.stderr
    run = only_run(nodus_swarm)
    assert (run["status"], run["exit_code"]) == ("failed", 7)
    assert (run["stages"][0]["status"], run["stages"][0]["exit_code"]) == ("failed", 7)
    assert run["stages"][0]["configuration"]["machine_id"] == cluster.manager_hostname
    log = nodus_swarm("logs", run["id"]).stdout
    assert "main | to-stdout" in log and "main | to-stderr" in log
    assert cluster.service(run["id"]) == []


@pytest.mark.swarm
def test_a_swarm_run_does_not_load_the_docker_sdk(nodus_swarm: SwarmNodus, tmp_path: Path) -> None:
    # Its calls go over the socket as a local run's do: importing the SDK (and requests)
    # would cost more than the run's own calls.

    file = cpu_workload(tmp_path, "echo lean")
    code = (
        "import contextlib, io, sys\n"
        "from nodus_cli.__main__ import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    code = main(['run', {str(file)!r}, '--target', 'swarm'])\n"
        "heavy = ('docker', 'requests', 'urllib3', 'httpx')\n"
        "print(code, 'main | lean' in out.getvalue(), "
        "sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    done = python(code, nodus_swarm.environ({"HOME": str(tmp_path)}))
    assert done.stdout.strip().splitlines()[-1] == "0 True []", done.stdout + done.stderr


@pytest.mark.swarm
def test_a_job_killed_at_its_memory_limit_names_the_likely_cause(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    file = workload(
        tmp_path, 'command = "tail /dev/zero"\n[requirements]\ncpu = 0.25\nmemory_gb = 0.02\n'
    )
    done = nodus_swarm("run", file, "--target", "swarm")
    assert done.returncode == 137, done.stderr
    said = " ".join(done.stderr.split())
    assert "killed (exit 137, SIGKILL); Swarm does not report why" in said, done.stderr
    assert "its 0.02 GiB memory limit (which includes /dev/shm)" in said
    assert "raise memory_gb in [requirements]" in said
    run = only_run(nodus_swarm)
    assert (run["status"], run["exit_code"]) == ("failed", 137)
    assert "0.02 GiB memory limit" in (run["stages"][0]["message"] or "")
    assert cluster.service(run["id"]) == []


@pytest.mark.swarm
def test_output_of_a_remote_job_is_complete_and_not_repeated(
    nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    # Live lines for a while, then a burst on both streams at once, then an
    # unterminated last line: every line exactly once, on its own stream, in the
    # terminal and the log. (The unterminated stdout line is not glued to stderr lines
    # that the engine delivers after it.)
    file = gpu_workload(
        tmp_path,
        "for i in $(seq 1 15); do echo live$i; echo elive$i >&2; sleep 0.05; done; "
        "seq 1 1500 | sed s/^/o/; seq 1 1500 | sed s/^/e/ >&2; printf tail",
    )
    done = nodus_swarm("run", file, "--target", "swarm")
    assert done.returncode == 0, done.stderr
    out = [f"live{i}" for i in range(1, 16)] + [f"o{i}" for i in range(1, 1501)] + ["tail"]
    err = [f"elive{i}" for i in range(1, 16)] + [f"e{i}" for i in range(1, 1501)]
    expected = out + err
    shown = [ln.removeprefix("main | ") for ln in done.stdout.splitlines()]
    shown_err = [
        ln.removeprefix("main | ") for ln in done.stderr.splitlines() if ln.startswith("main | ")
    ]
    # Every line once, on its stream, each stream in its order.
    assert shown == out
    assert shown_err == err
    log = nodus_swarm("logs", only_run(nodus_swarm)["id"]).stdout
    output = [ln for ln in log.splitlines() if not ln.startswith("nodus: ")]
    assert sorted(ln.removeprefix("main | ") for ln in output) == sorted(expected)
    # nodus's own status lines are in the log too, as for every target
    assert any(ln.startswith("nodus: stage main: submitting to node") for ln in log.splitlines())


@pytest.mark.swarm
def test_a_pending_task_is_queued_and_wait_timeout_gives_up(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path, blocker: Any
) -> None:
    held = blocker(3)  # 3 of the worker's 4 GPUs are taken by someone else
    try:
        done = nodus_swarm(
            "run",
            gpu_workload(tmp_path, "echo never", "H100", 2),
            "--target",
            "swarm",
            "--wait-timeout",
            "4s",
        )
    finally:
        docker("service", "rm", held)
    assert done.returncode == 3, done.stderr
    assert "gave up after waiting 4 s (wait_timeout) for:" in done.stderr
    run = only_run(nodus_swarm)
    assert (run["status"], run["exit_code"]) == ("failed", 3)
    assert run["cost"] == 0
    assert cluster.service(run["id"]) == []


def test_pending_diagnosis_then_ctrl_c(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path, blocker: Any
) -> None:
    held = blocker(3)  # 3 of the worker's 4 GPUs are taken by someone else
    free = next(n for n in nodus_swarm.json("nodes")["nodes"] if n["hostname"] == "nodus-w1")
    assert free["free_gpus"] == 1

    running = nodus_swarm.start(
        "run", gpu_workload(tmp_path, "echo never", "H100", 2), "--target", "swarm"
    )
    try:
        running.wait_for("submitting to node nodus-w1", timeout=30)
        line, seconds = running.wait_for("submitted, none running", timeout=15)
        assert seconds < 6, f"the explanation took {seconds:.1f}s"
        assert "largest matching capacity is 1 free of 4 on nodus-w1" in line
        assert "2 free H100" in line

        run_id = only_run(nodus_swarm)["id"]
        assert len(cluster.service(run_id)) == 1
        assert "pending" in only_run(nodus_swarm)["cluster"]
        # Submitted, not yet placed: Swarm keeps it pending, so the run and its stage are
        # queued, not running.
        waiting = only_run(nodus_swarm)
        assert (waiting["status"], waiting["stages"][0]["status"]) == ("queued", "queued")
        assert "submitted, none running" in (waiting["stages"][0]["message"] or "")
        code = running.interrupt()
    finally:
        running.stop()
    assert code == 130
    assert cluster.service(run_id) == []
    run = only_run(nodus_swarm)
    assert (run["status"], run["exit_code"]) == ("cancelled", 130)
    stage = run["stages"][0]
    assert stage["status"] == "cancelled"
    assert stage["started_at"] and stage["ended_at"]
    assert stage["configuration"]["machine_id"] == "nodus-w1"
    # Nothing of it is left to be placed once the GPUs free up: it never runs.
    docker("service", "rm", held)
    time.sleep(4)
    assert docker("ps", "-aq", "--filter", f"label=nodus.run={run_id}", worker=True).strip() == ""
    assert live_tasks(run_id) == []


@pytest.mark.swarm
def test_ctrl_c_stops_a_running_replicated_job(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    # The job mode, forced on any engine: Ctrl-C must stop its task, not only remove the
    # service (before Docker 24 a removed job's task keeps running).
    nodus_swarm.env["NODUS_SWARM_MODE"] = "replicated-job"
    file = gpu_workload(tmp_path, "trap 'exit 143' TERM; sleep 120 & wait", "H100", 1)
    running = nodus_swarm.start("run", file, "--target", "swarm")
    try:
        running.wait_for("submitting to node nodus-w1", timeout=30)
        run_id = only_run(nodus_swarm)["id"]
        spec = wait_service(cluster, run_id)[0]["Spec"]
        assert "ReplicatedJob" in spec["Mode"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if docker("ps", "-q", "--filter", f"label=nodus.run={run_id}", worker=True).strip():
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the job never started on the worker")
        code = running.interrupt()
    finally:
        running.stop()
    assert code == 130
    assert cluster.service(run_id) == []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if not docker("ps", "-q", "--filter", f"label=nodus.run={run_id}", worker=True).strip():
            break
        time.sleep(0.3)
    else:
        raise AssertionError("the cancelled job still runs on the worker")
    assert live_tasks(run_id) == []
    assert only_run(nodus_swarm)["status"] == "cancelled"


@pytest.mark.swarm
def test_stop_returns_once_the_runs_container_is_gone_from_the_manager(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    # On the manager's own L4: the one node whose containers the manager's engine lists.
    file = gpu_workload(tmp_path, "trap 'exit 143' TERM; sleep 120 & wait", "L4", 1)
    started = nodus_swarm("run", file, "--target", "swarm", "--detach")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip().splitlines()[-1]
    deadline = time.monotonic() + 30
    while not docker("ps", "-q", "--filter", f"label=nodus.run={run_id}").strip():
        assert time.monotonic() < deadline, "the run never started on the manager"
        time.sleep(0.2)
    stopped = nodus_swarm("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    # Right after `nodus stop` returns: no container of the run, not even an exited one.
    assert docker("ps", "-aq", "--filter", f"label=nodus.run={run_id}").strip() == ""
    assert cluster.service(run_id) == []
    assert only_run(nodus_swarm)["status"] == "cancelled"


@pytest.mark.swarm
def test_the_budget_stops_a_remote_stage(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    # $12.50/h on the worker: $0.003 lasts under a second.
    file = workload(
        tmp_path,
        "command = \"trap 'exit 143' TERM; echo working; sleep 600 & wait\"\n"
        'budget = 0.003\ngpu = "H100"\n[requirements]\ncpu = 0.25\nmemory_gb = 0.25\n',
    )
    t0 = time.monotonic()
    done = nodus_swarm("run", file, "--target", "swarm")
    assert done.returncode == 4, done.stderr
    assert time.monotonic() - t0 < 80  # the budget stopped it, long before its end
    assert "budget" in done.stderr
    run = only_run(nodus_swarm)
    assert run["status"] == "budget_exhausted" and run["stages"][0]["status"] == "budget_exhausted"
    assert cluster.service(run["id"]) == []
    deadline = time.monotonic() + 60
    while docker("ps", "-q", "--filter", f"label=nodus.run={run['id']}", worker=True).strip():
        assert time.monotonic() < deadline, "the stopped stage still runs on the worker"
        time.sleep(0.3)


@pytest.mark.swarm
def test_stages_on_two_nodes_cannot_share_a_directory(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    file = workload(
        tmp_path,
        'command = "true"\n'
        "[requirements]\ncpu = 0.25\nmemory_gb = 0.25\n"
        '[[stages]]\nname = "prep"\n'
        'command = "echo data > $NODUS_WORK_DIR/x; hostname"\n'
        '[[stages]]\nname = "train"\ngpu = "H100"\n'
        'command = "ls $NODUS_WORK_DIR; test ! -e $NODUS_WORK_DIR/x && echo separate"\n'
        "[stages.requirements]\ncpu = 0.25\nmemory_gb = 0.25\n",
    )
    plan = nodus_swarm.json("plan", file, "--target", "swarm")
    hosts = [s["selected"]["machine_id"] for s in plan["stages"]]
    assert hosts == [cluster.manager_hostname, "nodus-w1"]
    assert any("cannot share" in n and "NODUS_WORK_DIR" in n for n in plan["notes"])
    text = nodus_swarm("plan", file, "--target", "swarm").stdout
    assert "cannot share" in text

    done = nodus_swarm("run", file, "--target", "swarm")
    assert done.returncode == 0, done.stderr
    assert "cannot share" in done.stderr
    assert "train | separate" in done.stdout
    run = only_run(nodus_swarm)
    placed = [s["configuration"]["machine_id"] for s in run["stages"]]
    assert placed == [cluster.manager_hostname, "nodus-w1"]


@pytest.mark.swarm
def test_stages_on_one_node_share_a_folder_removed_afterwards(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    file = workload(
        tmp_path,
        "[requirements]\ncpu = 0.25\nmemory_gb = 0.25\n"
        '[[stages]]\nname = "write"\ncommand = "echo shared-data > $NODUS_WORK_DIR/x"\n'
        '[[stages]]\nname = "read"\ncommand = "cat $NODUS_WORK_DIR/x"\n',
    )
    plan = nodus_swarm.json("plan", file, "--target", "swarm")
    assert plan["notes"] == []
    done = nodus_swarm("run", file, "--target", "swarm")
    assert done.returncode == 0, done.stderr
    assert "read | shared-data" in done.stdout
    run_id = only_run(nodus_swarm)["id"]
    assert docker("volume", "ls", "-q", "--filter", f"label=nodus.run={run_id}").split() == []
    assert cluster.service(run_id) == []
    assert not Path(f"/tmp/nodus-work-{run_id}").exists()  # both nodes share this /tmp here
    assert "stays on node" not in done.stderr


@pytest.mark.swarm
def test_stages_sharing_a_worker_node_leave_nothing_there(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    file = workload(
        tmp_path,
        'gpu = "H100"\n[requirements]\ncpu = 0.25\nmemory_gb = 0.25\n'
        '[[stages]]\nname = "write"\ngpu = "H100"\ncommand = "echo on-worker > $NODUS_WORK_DIR/x"\n'
        "[stages.requirements]\ncpu = 0.25\nmemory_gb = 0.25\n"
        '[[stages]]\nname = "read"\ngpu = "H100"\ncommand = "cat $NODUS_WORK_DIR/x"\n'
        "[stages.requirements]\ncpu = 0.25\nmemory_gb = 0.25\n",
    )
    done = nodus_swarm("run", file, "--target", "swarm")
    assert done.returncode == 0, done.stderr
    assert "read | on-worker" in done.stdout
    run_id = only_run(nodus_swarm)["id"]
    placed = [s["configuration"]["machine_id"] for s in only_run(nodus_swarm)["stages"]]
    assert placed == ["nodus-w1", "nodus-w1"]
    labelled = f"label=nodus.run={run_id}"
    assert docker("volume", "ls", "-q", "--filter", labelled, worker=True).strip() == ""
    # nodus removes the services; the worker's engine then removes their containers on
    # its own, a moment later (the manager forgets a task before its container is gone).
    deadline = time.monotonic() + 60
    while docker("ps", "-aq", "--filter", labelled, worker=True).strip():
        assert time.monotonic() < deadline, "the run's containers stay on the worker"
        time.sleep(0.2)
    assert cluster.service(run_id) == []
    assert not Path(f"/tmp/nodus-work-{run_id}").exists()


@pytest.mark.swarm
def test_a_failed_stage_skips_the_next(nodus_swarm: SwarmNodus, tmp_path: Path) -> None:
    file = workload(
        tmp_path,
        "[requirements]\ncpu = 0.25\nmemory_gb = 0.25\n"
        '[[stages]]\nname = "first"\ncommand = "exit 3"\n'
        '[[stages]]\nname = "second"\ncommand = "echo never"\n',
    )
    done = nodus_swarm("run", file, "--target", "swarm", "--json")
    assert done.returncode == 3
    doc = json.loads(done.stdout)
    assert [(s["name"], s["status"]) for s in doc["stages"]] == [
        ("first", "failed"),
        ("second", "skipped"),
    ]
    assert "never" not in done.stderr


@pytest.mark.swarm
def test_fanout_tasks_spread_over_both_nodes(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    items = ", ".join(f'"i{n}"' for n in range(6))
    file = workload(
        tmp_path,
        'command = "echo item $NODUS_ITEM; sleep 2"\n'
        "[requirements]\ncpu = 0.25\nmemory_gb = 0.25\n"
        f"[map]\nitems = [{items}]\n",
    )
    plan = nodus_swarm("plan", file, "--target", "swarm").stdout
    assert "Swarm spreads the tasks over every node" in plan
    done = nodus_swarm("run", file, "--target", "swarm", timeout=180)
    assert done.returncode == 0, done.stderr
    assert sorted(ln for ln in done.stdout.splitlines() if "| item" in ln) == sorted(
        f"main[{n}] | item i{n}" for n in range(6)
    )
    run = only_run(nodus_swarm)
    detail = nodus_swarm.json("runs", run["id"])
    nodes = {t["node"] for t in detail["stages"][0]["tasks"]}
    assert nodes == {cluster.manager_hostname, "nodus-w1"}  # Swarm placed them, not nodus
    assert all(t["status"] == "succeeded" for t in detail["stages"][0]["tasks"])
    assert cluster.service(run["id"]) == []


# -- swarm init-node -----------------------------------------------------------------------


@pytest.mark.swarm
def test_init_node_prints_the_settings(nodus_swarm: SwarmNodus) -> None:
    from swarm_support import FAKE_BIN

    env = {"PATH": f"{FAKE_BIN}:/usr/bin:/bin", "NODUS_FAKE_GPUS": "h100x8"}
    done = nodus_swarm("swarm", "init-node", env=env)
    assert done.returncode == 0, done.stderr
    assert "NVIDIA-GPU=GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1" in done.stdout
    assert 'swarm-resource = "DOCKER_RESOURCE_NVIDIA-GPU"' in done.stdout
    assert "--label-add nodus.gpu=H100 --label-add nodus.gpu_memory_gb=80" in done.stdout

    doc = json.loads(nodus_swarm("swarm", "init-node", "--json", env=env).stdout)
    assert len(doc["daemon"]["node-generic-resources"]) == 8
    assert doc["labels"] == {"nodus.gpu": "H100", "nodus.gpu_memory_gb": "80"}
    assert doc["applied"] == []


@pytest.mark.swarm
def test_init_node_apply_writes_and_labels(
    cluster: Cluster, nodus_swarm: SwarmNodus, tmp_path: Path
) -> None:
    from swarm_support import FAKE_BIN

    daemon_json = tmp_path / "daemon.json"
    daemon_json.write_text('{"log-level": "warn"}', encoding="utf-8")
    runtime = tmp_path / "config.toml"
    runtime.write_text(
        'disable-require = false\n#swarm-resource = "DOCKER_RESOURCE_GPU"\n\n'
        '[nvidia-container-cli]\nldconfig = "@/sbin/ldconfig"\n',
        encoding="utf-8",
    )
    env = {
        "PATH": f"{FAKE_BIN}:/usr/bin:/bin",
        "NODUS_FAKE_GPUS": "h100x8",
        "NODUS_NVIDIA_RUNTIME_CONFIG": str(runtime),
    }
    saved = cluster.labels(cluster.manager_id)
    try:
        done = nodus_swarm(
            "swarm",
            "init-node",
            "--apply",
            "--daemon-json",
            daemon_json,
            "--price",
            "20",
            env=env,
        )
        assert done.returncode == 0, done.stderr
        labels = cluster.labels(cluster.manager_id)
        assert labels["nodus.gpu"] == "H100"
        assert labels["nodus.gpu_memory_gb"] == "80"
        assert labels["nodus.price_per_hour"] == "20"
    finally:
        cluster.set_labels(cluster.manager_id, saved)
    assert cluster.labels(cluster.manager_id) == saved
    written = json.loads(daemon_json.read_text(encoding="utf-8"))
    assert written["log-level"] == "warn"
    assert len(written["node-generic-resources"]) == 8
    assert written["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    text = runtime.read_text(encoding="utf-8")
    assert 'swarm-resource = "DOCKER_RESOURCE_NVIDIA-GPU"' in text
    assert 'DOCKER_RESOURCE_GPU"' not in text and "[nvidia-container-cli]" in text
    assert "labelled node" in done.stdout


@pytest.mark.swarm
def test_not_a_swarm_manager_is_a_clear_error(nodus_swarm: SwarmNodus) -> None:
    from swarm_support import WORKER_SOCK

    done = nodus_swarm("nodes", env={"DOCKER_HOST": f"unix://{WORKER_SOCK}"})
    assert done.returncode == 3  # not runnable there
    assert "Swarm worker" in done.stderr and "Traceback" not in done.stderr
