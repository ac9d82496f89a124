# ruff: noqa: F811 - the fixture imported from machine_support is a test parameter here
"""The local target without a real engine: refusals before anything starts, GPU hand-out
(whole GPUs and GPUs shared by memory), the container body, the GPU lock, and how a task
ended, against a scripted engine (what a live engine cannot be made to do on demand)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_engine import FakeEngine, ping
from machine_support import FAKE_BIN, machine  # noqa: F401 - a fixture

from nodus_cli.errors import InvalidInput, NotRunnable
from nodus_cli.planning.ranking import no_history
from nodus_cli.records import RunStatus, RunStore
from nodus_cli.run import launcher
from nodus_cli.structs import replace
from nodus_cli.targets.base import Item, Preparation, Task, TaskState
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.containers import (
    GIB,
    LABEL_GPU_SHARE,
    LABEL_GPUS,
    engine_config,
    spec_for,
)
from nodus_cli.targets.local.queue import Holder, Picture, Use
from nodus_cli.targets.local.target import LocalTarget
from nodus_cli.workload import MapSpec, Mount, Port, Workload, load_text


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore.open(tmp_path / "home")


def _workload(body: str) -> Workload:
    result = load_text('name = "w"\nimage = "nodus-test/busybox:1"\ncommand = "true"\n' + body)
    assert result.workload is not None, result.problems
    return result.workload


def _planned(store: RunStore, body: str) -> tuple[LocalTarget, Workload]:
    target = LocalTarget(store)
    w = _workload(body)
    target._plan = target.plan(w, no_history)
    return target, w


# -- refusing before anything starts -----------------------------------------------------


@pytest.mark.parametrize(
    ("fake", "body", "has", "detail"),
    [
        ("h100x8", 'gpu = "A100"\n', "8× H100 80 GB", "A100"),
        ("l4x1", 'gpu = "L4"\ngpu_count = 2\n', "1× L4 24 GB", "2"),
        ("a100-40gbx2", 'gpu = "A100"\npeak_memory_gb = 80\n', "2× A100 40 GB", "80"),
        (None, 'gpu = "H100"\n', "no NVIDIA GPU", "H100"),
        (None, "[requirements]\ncpu = 100000\n", "", "100000"),
    ],
)
def test_prepare_refuses_naming_what_this_machine_has(
    machine: pytest.MonkeyPatch,
    store: RunStore,
    fake: str | None,
    body: str,
    has: str,
    detail: str,
) -> None:
    if fake:
        machine.setenv("NODUS_FAKE_GPUS", fake)
    target = LocalTarget(store)
    w = _workload(body)
    with pytest.raises(NotRunnable) as caught:
        target.prepare(w, target.plan(w, no_history))
    assert caught.value.exit_code == 3
    assert "this machine cannot run stage 'main'" in caught.value.message
    assert f"This machine has {has}" in caught.value.message
    assert detail in caught.value.message
    if "gpu" not in body:  # a CPU-only workload is not told about GPUs
        assert "GPU" not in caught.value.message
        assert "CPUs" in caught.value.message


def test_a_cpu_only_workload_does_not_ask_the_driver(
    machine: pytest.MonkeyPatch, store: RunStore, tmp_path: Path
) -> None:
    machine.setenv("PATH", str(tmp_path))  # nvidia-smi would be missing: not needed
    target = LocalTarget(store)
    (offer,) = target.offers(_workload(""))
    assert offer.gpu is None and target._gpus == []


def test_an_engine_too_old_for_gpu_device_requests_is_refused(
    machine: pytest.MonkeyPatch, store: RunStore
) -> None:
    machine.setenv("NODUS_FAKE_GPUS", "l4x1")
    target = LocalTarget(store)
    w = _workload('gpu = "L4"\n')
    with FakeEngine() as fake:
        fake.route("GET", "/_ping", ping("1.39"))
        machine.setenv("DOCKER_HOST", fake.host)
        plan = target.plan(w, no_history)  # (it asks who holds the GPU: no answer, no note)
        with pytest.raises(NotRunnable, match=r"speaks API 1\.39; GPU device requests need 1\.40"):
            target.prepare(w, plan)


def test_a_missing_host_path_is_refused_naming_the_entry(
    machine: pytest.MonkeyPatch, store: RunStore, tmp_path: Path
) -> None:
    target = LocalTarget(store)
    w = _workload("")
    mounts = (
        Mount(str(tmp_path / "nope"), "/data", True, "./nope:/data:ro", "w.toml:4: mounts[0]"),
    )
    w = replace(w, stages=[replace(w.stages[0], mounts=mounts)])
    with pytest.raises(InvalidInput) as caught:
        target.prepare(w, target.plan(w, no_history))
    assert "w.toml:4: mounts[0]: ./nope:/data:ro" in caught.value.message
    assert f"{tmp_path / 'nope'} does not exist" in caught.value.message


def test_a_published_port_in_use_is_refused(machine: pytest.MonkeyPatch, store: RunStore) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        target = LocalTarget(store)
        w = _workload("")
        w = replace(w, stages=[replace(w.stages[0], ports=(Port(80, port),))])
        with pytest.raises(NotRunnable) as caught:
            target.prepare(w, target.plan(w, no_history))
    assert f"host port {port}/tcp is in use on this machine" in caught.value.message
    assert caught.value.exit_code == 3


# -- GPU hand-out --------------------------------------------------------------------------


def test_a_task_asks_for_the_planned_model_only(
    machine: pytest.MonkeyPatch, store: RunStore
) -> None:
    machine.setenv("NODUS_FAKE_GPUS", "mixed")  # two L4 and a T4
    target, w = _planned(store, 'gpu = "L4"\ngpu_count = 2\n')
    request = target._request(w.stages[0])
    l4 = [g.uuid for g in target._local_gpus(None) if g.family == "L4"]
    assert request.candidates == tuple(l4) and request.count == 2 and request.share_gb is None
    shared = _shared(store, 10.0)[0]._request(_shared(store, 10.0)[1].stages[0])
    assert shared.share_gb == 10.0 and shared.need == "share:10"


def test_no_wait_names_the_run_holding_the_gpus_its_home_and_how_to_stop_it(
    machine: pytest.MonkeyPatch, store: RunStore
) -> None:
    machine.setenv("NODUS_FAKE_GPUS", "h100x8")
    target, w = _planned(store, 'gpu = "H100"\ngpu_count = 8\n')
    stage = w.stages[0]
    request = target._request(stage)
    other = Holder("c1", "nodus-x", "20250101-000000-abcdef", "/srv/ci", None, None, 1.0)
    held = Picture({u: Use(whole=[other]) for u in request.candidates[:4]}, [])
    error = target._claims.refusal(stage.name, "H100", request, held)
    assert error.exit_code == 3
    assert "stage 'main' needs 8× H100" in error.message
    assert "held by run 20250101-000000-abcdef of NODUS_HOME /srv/ci since" in error.message
    assert error.hint is not None and "run without --no-wait to wait for them" in error.hint
    assert "NODUS_HOME=/srv/ci nodus stop 20250101-000000-abcdef" in error.hint


def _shared(store: RunStore, memory: float) -> tuple[LocalTarget, Workload]:
    target, w = _planned(store, f'gpu = "L4"\npeak_memory_gb = {memory:g}\n')
    stage = w.stages[0]
    shared = replace(stage, requirements=replace(stage.requirements, share_gpu=True))
    w = replace(w, stages=[shared])
    target._plan = target.plan(w, no_history)
    return target, w


def test_the_capacity_of_a_fanout_stage_counts_every_slot_of_the_machine(
    machine: pytest.MonkeyPatch, store: RunStore
) -> None:
    # whatever other runs hold now: a task whose GPUs are held waits in the queue
    machine.setenv("NODUS_FAKE_GPUS", "h100x8")
    target, w = _planned(store, 'gpu = "H100"\ngpu_count = 2\n[requirements]\ncpu = 0.1\n')
    w = replace(w, stages=[replace(w.stages[0], map=MapSpec(("a", "b"), None))])
    target._plan = target.plan(w, no_history)
    sp = target._plan.stages[0]
    assert target.capacity(w.stages[0], sp) == 4  # 8 H100, 2 per task
    machine.setenv("NODUS_FAKE_GPUS", "mixed")
    shared_target, sw = _shared(store, 10.0)
    small = replace(sw.stages[0].requirements, cpu=0.1)
    sw = replace(sw, stages=[replace(sw.stages[0], map=MapSpec(("a",), None), requirements=small)])
    shared_target._plan = shared_target.plan(sw, no_history)
    assert shared_target.capacity(sw.stages[0], shared_target._plan.stages[0]) == 4  # 2 per L4


# -- the container -----------------------------------------------------------------------


def _task(w: Workload, **changes: Any) -> Task:
    return Task("run-1", w.name, w.stages[0], 0, w.stages[0].env, **changes)


def test_the_container_body_is_the_local_contract() -> None:
    w = _workload('env = { A = "1" }\ngpu = "H100"\ngpu_count = 2\n[requirements]\ncpu = 3\n')
    spec = spec_for(_task(w), ("GPU-a", "GPU-b"), "/state/work/run-1")
    body = engine_config(spec)
    host = body["HostConfig"]
    assert host["NanoCpus"] == 3_000_000_000
    assert host["Memory"] == 6 * GIB == host["MemorySwap"]  # 2 GiB per CPU, no swap
    assert 0 < host["ShmSize"] <= host["Memory"]
    assert host["Privileged"] is False and "no-new-privileges" in host["SecurityOpt"]
    (request,) = host["DeviceRequests"]
    assert request["DeviceIDs"] == ["GPU-a", "GPU-b"] and request["Count"] == 0
    assert request["Driver"] == "nvidia" and request["Capabilities"] == [["gpu"]]
    (mount,) = host["Mounts"]
    assert mount == {
        "Type": "bind",
        "Source": "/state/work/run-1",
        "Target": "/nodus/work",
        "ReadOnly": False,
    }
    assert "Binds" not in host and "Devices" not in host
    env = dict(item.split("=", 1) for item in body["Env"])
    assert env["A"] == "1" and env["NODUS_WORK_DIR"] == "/nodus/work"
    assert env["NODUS_RUN_ID"] == "run-1" and env["NODUS_STAGE"] == "main"
    assert "NODUS_ITEM" not in env
    assert body["Labels"][LABEL_GPUS] == "GPU-a,GPU-b"
    assert body["Labels"]["nodus.run"] == "run-1"
    assert LABEL_GPU_SHARE not in body["Labels"]
    # a command string replaces the image's ENTRYPOINT: /bin/sh -c TEXT, whatever it has
    assert body["Entrypoint"] == ["/bin/sh", "-c", "true"] and "Cmd" not in body


def test_an_item_task_carries_its_item_and_its_own_name() -> None:
    w = _workload("")
    spec = spec_for(_task(w, item=Item(3, "shard-3.jsonl", 10)), (), None)
    body = engine_config(spec)
    env = dict(item.split("=", 1) for item in body["Env"])
    assert (env["NODUS_ITEM"], env["NODUS_ITEM_INDEX"], env["NODUS_ITEM_COUNT"]) == (
        "shard-3.jsonl",
        "3",
        "10",
    )
    assert spec.name.endswith("-main-3") and body["Labels"]["nodus.item"] == "3"


def test_a_command_list_goes_to_the_entrypoint_and_entrypoint_replaces_it() -> None:
    w = _workload("")
    stage = replace(w.stages[0], command=["--epochs", "3"], shell=False)
    body = engine_config(spec_for(replace(_task(w), stage=stage)))
    assert body["Cmd"] == ["--epochs", "3"] and "Entrypoint" not in body
    body = engine_config(spec_for(replace(_task(w), stage=replace(stage, entrypoint=["python"]))))
    assert body["Entrypoint"] == ["python"] and body["Cmd"] == ["--epochs", "3"]
    cleared = engine_config(spec_for(replace(_task(w), stage=replace(stage, entrypoint=[]))))
    assert cleared["Entrypoint"] == [""]  # as `docker run --entrypoint ""`


def test_mounts_and_ports_reach_the_container() -> None:
    w = _workload("")
    stage = replace(
        w.stages[0],
        mounts=(Mount("/srv/data", "/data", True), Mount("hf-cache", "/root/.cache/hf")),
        ports=(Port(8000, 8000), Port(80, 8080, "tcp", "127.0.0.1")),
    )
    body = engine_config(spec_for(replace(_task(w), stage=stage), (), "/w"))
    mounts = body["HostConfig"]["Mounts"]
    assert {"Type": "bind", "Source": "/srv/data", "Target": "/data", "ReadOnly": True} in mounts
    assert {
        "Type": "volume",
        "Source": "hf-cache",
        "Target": "/root/.cache/hf",
        "ReadOnly": False,
    } in mounts
    assert body["ExposedPorts"] == {"8000/tcp": {}, "80/tcp": {}}
    assert body["HostConfig"]["PortBindings"] == {
        "8000/tcp": [{"HostIp": "", "HostPort": "8000"}],
        "80/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8080"}],
    }


def test_memory_gb_sets_the_limit_when_given() -> None:
    w = _workload("[requirements]\ncpu = 1\nmemory_gb = 3\n")
    body = engine_config(spec_for(_task(w)))
    assert body["HostConfig"]["Memory"] == 3 * GIB
    assert "DeviceRequests" not in body["HostConfig"] and "Mounts" not in body["HostConfig"]


# -- how a task ended, against a scripted engine ------------------------------------------


class ScriptedEngine:
    """Stands in for :class:`engine.Engine`: each ``wait`` takes the next scripted step."""

    where = "unix:///scripted.sock"

    def __init__(self, waits: list[object], start_error: Exception | None = None) -> None:
        self.waits = list(waits)
        self.start_error = start_error
        self.created: list[str] = []
        self.removed: list[str] = []
        self.alive_answers = [False, True]
        self.conflict_once = False
        self.events_seen: list[dict[str, object]] = []

    def create(self, name: str, body: dict[str, object]) -> str:
        if self.conflict_once:
            self.conflict_once = False
            raise engine.EngineError(409, f'Conflict. The container name "/{name}" is in use')
        self.created.append(name)
        return f"id-{len(self.created)}"

    def start(self, cid: str) -> None:
        if self.start_error is not None:
            raise self.start_error

    def logs(self, cid: str) -> Iterator[tuple[int, bytes]]:
        yield 1, f"hello from {cid}\n".encode()

    def wait(self, cid: str, timeout: float | None = None) -> int:
        step = self.waits.pop(0)
        if isinstance(step, BaseException):
            raise step
        assert isinstance(step, int)
        return step

    def kill(self, cid: str, signal: str = "KILL") -> None:
        pass

    def remove(self, cid: str) -> None:
        self.removed.append(cid)

    def containers(self, filters: dict[str, list[str]], all: bool = True) -> list[object]:
        return []

    def events(self, since: float, until: float, filters: object) -> list[dict[str, object]]:
        return self.events_seen

    def image_config(self, image: str) -> dict[str, object]:
        return {}

    def alive(self) -> bool:
        return self.alive_answers.pop(0) if self.alive_answers else True

    def wait_until_alive(self, seconds: float) -> bool:
        return True


def _scripted_run(
    store: RunStore, fake: ScriptedEngine, retries: int
) -> tuple[Any, dict[str, Any]]:
    target = LocalTarget(store)
    target._engine = fake  # type: ignore[assignment]
    w = _workload("")
    plan = target.plan(w, no_history)
    launch = launcher.Launch(w, target, plan, Preparation(), {"main": {}})
    record, outcome = launcher.execute(launch, store, retries=retries)
    return outcome, store.get(record.id).as_json()


def _said(store: RunStore, doc: dict[str, Any]) -> list[str]:
    lines, _ = store.read_log(doc["id"])
    return [line.text for line in lines if line.stream == "nodus"]


def test_a_lost_engine_is_an_infrastructure_failure_that_is_retried(
    machine: pytest.MonkeyPatch, store: RunStore
) -> None:
    lost = engine.EngineUnreachable("unix:///scripted.sock", "the engine closed the connection")
    fake = ScriptedEngine([lost, 0])
    outcome, doc = _scripted_run(store, fake, retries=1)
    assert outcome.status == RunStatus.SUCCEEDED and outcome.exit_code == 0
    assert any("lost the Docker engine" in m and "retrying" in m for m in _said(store, doc))
    assert doc["stages"][0]["attempts"] == 2
    assert len(fake.created) == 2


def test_a_lost_engine_without_retries_fails_the_run(
    machine: pytest.MonkeyPatch, store: RunStore
) -> None:
    lost = engine.EngineUnreachable("unix:///scripted.sock", "connection refused")
    outcome, doc = _scripted_run(store, ScriptedEngine([lost]), retries=0)
    assert outcome.status == RunStatus.FAILED and outcome.exit_code == 1
    assert "lost the Docker engine" in str(doc["stages"][0]["message"])


def test_a_command_the_engine_cannot_exec_is_the_workloads_failure(
    machine: pytest.MonkeyPatch, store: RunStore
) -> None:
    error = engine.EngineError(
        500, 'OCI runtime create failed: exec: "x": executable file not found'
    )
    fake = ScriptedEngine([], start_error=error)
    outcome, doc = _scripted_run(store, fake, retries=3)
    assert outcome.exit_code == 127 and outcome.status == RunStatus.FAILED
    assert doc["stages"][0]["attempts"] == 1


def test_an_out_of_memory_kill_says_so_with_the_limit_and_the_key(
    machine: pytest.MonkeyPatch, store: RunStore
) -> None:
    fake = ScriptedEngine([137])
    fake.events_seen = [{"Action": "oom"}, {"Action": "kill", "Actor": {"Attributes": {}}}]
    outcome, doc = _scripted_run(store, fake, retries=2)
    assert outcome.exit_code == 137 and doc["stages"][0]["attempts"] == 1
    message = doc["stages"][0]["message"]
    assert "out of memory: it reached its 2 GiB memory limit" in message
    assert "raise memory_gb" in message
    assert any("out of memory" in m for m in _said(store, doc))  # shown, not only recorded


def test_an_outside_kill_is_not_retried(machine: pytest.MonkeyPatch, store: RunStore) -> None:
    fake = ScriptedEngine([137])
    fake.events_seen = [{"Action": "kill", "Actor": {"Attributes": {"signal": "9"}}}]
    outcome, doc = _scripted_run(store, fake, retries=2)
    assert outcome.exit_code == 137 and doc["stages"][0]["attempts"] == 1
    assert "killed from outside nodus (signal 9)" in doc["stages"][0]["message"]
    assert len(fake.created) == 1


def test_a_stale_container_of_the_same_name_is_replaced(
    machine: pytest.MonkeyPatch, store: RunStore
) -> None:
    fake = ScriptedEngine([0])
    fake.conflict_once = True
    outcome, _ = _scripted_run(store, fake, retries=0)
    assert outcome.status == RunStatus.SUCCEEDED
    assert fake.removed[0].startswith("nodus-")  # removed by name, then created


def test_the_task_kinds_the_driver_acts_on_are_a_closed_vocabulary() -> None:
    assert {s.value for s in TaskState} == {
        "exited",
        "cannot_start",
        "out_of_memory",
        "killed",
        "infrastructure",
        "stopped",
    }
