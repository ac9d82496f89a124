"""This machine as an inventory, its configuration, and the pieces of a local run that need
no real engine: GPU discovery through the stand-in nvidia-smi, refusals, the container body,
GPU hand-out, usage sampling, and the engine client against a scripted engine."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_engine import FakeEngine, chunked, frames, hang_up, ping, reply, stall

from nodus_cli import config, engine, localhost, runner
from nodus_cli.containers import GIB, LABEL_GPUS, engine_config, spec_for
from nodus_cli.gpu_usage import Sampler
from nodus_cli.problems import NodusError
from nodus_cli.workload import Workload, load_text

REPO = Path(__file__).resolve().parent.parent
FAKE_BIN = REPO / "tests" / "fakes" / "bin"


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """The stand-in nvidia-smi first on PATH, a private configuration; set NODUS_FAKE_GPUS."""
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("NODUS_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("NODUS_HOME", str(tmp_path / "home"))
    for key in ("NODUS_FAKE_GPUS", "NODUS_FAKE_GPU_UTIL", "NODUS_FAKE_GPU_UTIL_FILE"):
        monkeypatch.delenv(key, raising=False)
    yield monkeypatch


def _workload(body: str) -> Workload:
    result = load_text('name = "w"\nimage = "nodus-test/busybox:1"\ncommand = "true"\n' + body)
    assert result.workload is not None, result.problems
    return result.workload


# -- GPU discovery -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "families", "memory"),
    [
        ("h100x8", ["H100"] * 8, 80.0),
        ("a100x8", ["A100"] * 8, 80.0),
        ("a100-40gbx2", ["A100"] * 2, 40.0),
        ("l4x1", ["L4"], 24.0),
        ("rtx4090x2", ["RTX 4090"] * 2, 24.0),
    ],
)
def test_gpus_are_discovered_with_nvidia_smi(
    machine: pytest.MonkeyPatch, fixture: str, families: list[str], memory: float
) -> None:
    machine.setenv("NODUS_FAKE_GPUS", fixture)
    found = localhost.query_gpus()
    assert [g.family for g in found] == families
    assert {g.nominal_memory_gb for g in found} == {memory}
    assert [g.index for g in found] == list(range(len(found)))
    assert all(g.uuid.startswith("GPU-") for g in found)
    (offer,) = localhost.offers(found)
    assert (offer.gpu, offer.gpu_count, offer.gpu_memory_gb) == (families[0], len(families), memory)
    assert offer.supplier == "local" and offer.price_per_hour == 0.0


def test_a_mixed_machine_is_one_offer_per_model(machine: pytest.MonkeyPatch) -> None:
    machine.setenv("NODUS_FAKE_GPUS", "mixed")
    found = localhost.query_gpus()
    offers = {o.gpu: o.gpu_count for o in localhost.offers(found)}
    assert offers == {"L4": 2, "T4": 1}
    assert localhost.describe(found) == "2× L4 24 GB, 1× T4 16 GB"


@pytest.mark.parametrize(
    ("fake", "note"),
    [
        (None, "couldn't communicate with the NVIDIA driver"),
        ("none", "No devices were found"),
    ],
)
def test_no_driver_or_no_gpu_is_no_gpus_not_an_error(
    machine: pytest.MonkeyPatch, fake: str | None, note: str
) -> None:
    if fake:
        machine.setenv("NODUS_FAKE_GPUS", fake)
    assert localhost.query_gpus() == []
    assert note in localhost.describe([])
    (offer,) = localhost.offers([])
    assert offer.gpu is None and offer.gpu_count == 0


def test_no_nvidia_smi_on_path(machine: pytest.MonkeyPatch, tmp_path: Path) -> None:
    machine.setenv("PATH", str(tmp_path))
    assert localhost.query_gpus() == []
    assert "no nvidia-smi on PATH" in localhost.describe([])


# -- configuration -----------------------------------------------------------------------


def test_the_local_price_comes_from_the_configuration(
    machine: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert config.local().price_per_hour == 0.0
    (tmp_path / "config.toml").write_text('[local]\nprice_per_hour = 2.5\nregion = "eu-west-1"\n')
    assert config.local() == config.LocalConfig(2.5, "eu-west-1")
    (offer,) = localhost.offers([])
    assert offer.price_per_hour == 2.5 and offer.region == "eu-west-1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[local]\nprice_per_hour = -1\n", "price_per_hour must be a number >= 0"),
        ("[local]\nprice_per_hour = true\n", "price_per_hour must be a number >= 0"),
        ("[local]\nprice_per_hour = nan\n", "price_per_hour must be a number >= 0"),
        ("[local]\nprize = 1\n", "local.prize: unknown key"),
        ("[local\n", "cannot read the configuration"),
        ("local = 3\n", "[local] must be a table"),
    ],
)
def test_a_bad_configuration_is_a_clear_error(
    machine: pytest.MonkeyPatch, tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(NodusError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config.local()


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
    machine: pytest.MonkeyPatch, fake: str | None, body: str, has: str, detail: str
) -> None:
    if fake:
        machine.setenv("NODUS_FAKE_GPUS", fake)
    with pytest.raises(NodusError) as caught:
        runner.prepare(_workload(body))
    assert caught.value.exit_code == 3
    assert "this machine cannot run stage 'main'" in caught.value.message
    assert f"This machine has {has}" in caught.value.message
    assert detail in caught.value.message
    if "gpu" not in body:  # a CPU-only workload is not told about GPUs
        assert "GPU" not in caught.value.message
        assert "CPUs" in caught.value.message


def test_prepare_plans_on_this_machine(machine: pytest.MonkeyPatch) -> None:
    machine.setenv("NODUS_FAKE_GPUS", "mixed")
    prepared = runner.prepare(_workload('gpu = "L4"\ngpu_count = 2\n'))
    (stage,) = prepared.plan.stages
    assert stage.selected is not None and stage.selected.offer.gpu == "L4"
    assert len(prepared.local_gpus) == 3


def test_a_cpu_only_workload_does_not_ask_the_driver(
    machine: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    machine.setenv("PATH", str(tmp_path))  # nvidia-smi would be missing: not needed
    prepared = runner.prepare(_workload(""))
    assert prepared.local_gpus == []


# -- GPU hand-out --------------------------------------------------------------------------


def _prepared(machine: pytest.MonkeyPatch, fixture: str, body: str) -> runner.Prepared:
    machine.setenv("NODUS_FAKE_GPUS", fixture)
    return runner.prepare(_workload(body))


def test_gpus_are_picked_among_the_planned_model_only(machine: pytest.MonkeyPatch) -> None:
    p = _prepared(machine, "mixed", 'gpu = "L4"\ngpu_count = 2\n')
    stage = p.workload.stages[0]
    offer, matching = runner._candidates(p, stage)
    assert {g.family for g in matching} == {"L4"}
    picked = runner._pick(stage, offer, matching, {}, ())
    assert set(picked) == {g.uuid for g in matching}


def test_busy_gpus_are_skipped_and_a_retry_keeps_its_own(machine: pytest.MonkeyPatch) -> None:
    p = _prepared(machine, "h100x8", 'gpu = "H100"\ngpu_count = 2\n')
    stage = p.workload.stages[0]
    offer, matching = runner._candidates(p, stage)
    uuids = [g.uuid for g in matching]
    busy = {uuids[0]: "run-a", uuids[1]: "run-a"}
    assert runner._pick(stage, offer, matching, busy, ()) == tuple(uuids[2:4])
    assert runner._pick(stage, offer, matching, {}, (uuids[5], uuids[6])) == (uuids[5], uuids[6])
    # previous GPUs taken meanwhile: any two free ones, same model and count
    assert runner._pick(stage, offer, matching, {uuids[5]: "b"}, (uuids[5], uuids[6])) == tuple(
        uuids[:2]
    )


def test_too_few_free_gpus_names_the_runs_holding_them(machine: pytest.MonkeyPatch) -> None:
    p = _prepared(machine, "h100x8", 'gpu = "H100"\ngpu_count = 8\n')
    stage = p.workload.stages[0]
    offer, matching = runner._candidates(p, stage)
    busy = {g.uuid: "20250101-000000-abcdef" for g in matching[:4]}
    with pytest.raises(NodusError) as caught:
        runner._pick(stage, offer, matching, busy, ())
    assert caught.value.exit_code == 3
    assert "20250101-000000-abcdef" in caught.value.message and "4 free" in caught.value.message


# -- the container body ------------------------------------------------------------------


def test_the_container_body_is_the_local_contract() -> None:
    w = _workload('env = { A = "1" }\ngpu = "H100"\ngpu_count = 2\n[requirements]\ncpu = 3\n')
    spec = spec_for(w.stages[0], "run-1", "w", ("GPU-a", "GPU-b"), "/state/work/run-1")
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
    assert body["Labels"][LABEL_GPUS] == "GPU-a,GPU-b"
    assert body["Labels"]["nodus.run"] == "run-1"


def test_memory_gb_sets_the_limit_when_given() -> None:
    w = _workload("[requirements]\ncpu = 1\nmemory_gb = 3\n")
    body = engine_config(spec_for(w.stages[0], "r", "w"))
    assert body["HostConfig"]["Memory"] == 3 * GIB
    assert "DeviceRequests" not in body["HostConfig"] and "Mounts" not in body["HostConfig"]


# -- GPU use -----------------------------------------------------------------------------


def test_sampling_tells_used_from_idle_gpus(machine: pytest.MonkeyPatch) -> None:
    machine.setenv("NODUS_FAKE_GPUS", "h100x8")
    found = localhost.query_gpus()
    busy, idle, growing = found[0].uuid, found[1].uuid, found[2].uuid
    machine.setenv("NODUS_FAKE_GPU_UTIL", f"{busy}=55")
    sampler = Sampler((busy, idle, growing), interval=0.05)
    sampler.sample()  # baseline
    machine.setenv("NODUS_FAKE_GPU_UTIL", f"{busy}=55,{growing}=0:9000")
    sampler.sample()
    report = sampler.report()
    assert report.used == [busy, growing]  # utilization, or memory allocated since the start
    assert report.idle == [idle]
    assert report.as_json()["gpus"][0]["max_utilization"] == 55


def test_sampling_without_nvidia_smi_says_so(machine: pytest.MonkeyPatch, tmp_path: Path) -> None:
    machine.setenv("PATH", str(tmp_path))
    with Sampler(("GPU-x",), interval=0.05) as sampler:
        pass
    report = sampler.report()
    assert report.available is False and report.idle == [] and report.unsampled == ["GPU-x"]


# -- the engine client, against a scripted engine on a unix socket ---------------------------

API = r"/v1\.4\d"


def test_the_engine_speaks_the_engines_api_version_capped_at_the_newest_checked() -> None:
    with FakeEngine() as fake:
        fake.route("GET", "/_ping", ping("1.45"))
        fake.route("GET", r"/v1\.44/containers/json", reply(200, [{"Id": "c1"}]))
        eng = engine.Engine(fake.host)
        assert eng.ping() == "1.45"
        assert eng.api == "1.44" and eng.api_at_least(engine.MIN_GPU_API)
        assert eng.containers({"label": ["nodus.run"]}) == [{"Id": "c1"}]
        _, path = fake.requests[-1]
        assert path.startswith("/v1.44/containers/json?") and "all=1" in path


def test_an_engine_too_old_for_gpu_device_requests_is_refused(
    machine: pytest.MonkeyPatch,
) -> None:
    machine.setenv("NODUS_FAKE_GPUS", "l4x1")
    prepared = runner.prepare(_workload('gpu = "L4"\n'))
    with FakeEngine() as fake:
        fake.route("GET", "/_ping", ping("1.39"))
        machine.setenv("DOCKER_HOST", fake.host)
        with pytest.raises(NodusError, match=r"speaks API 1\.39; GPU device requests need 1\.40"):
            runner.connect_for(prepared)


def test_error_answers_become_engine_errors_with_the_engines_message() -> None:
    conflict = {"message": 'Conflict. The container name "/x" is already in use'}
    with FakeEngine() as fake:
        fake.route("POST", API + "/containers/create", reply(409, conflict))
        fake.route("POST", API + "/containers/c/start", reply(500, {"message": "OCI runtime"}))
        fake.route("POST", API + "/containers/c/kill", reply(409, {"message": "not running"}))
        fake.route("DELETE", API + "/containers/gone", reply(404, {"message": "No such container"}))
        eng = engine.Engine(fake.host)
        with pytest.raises(engine.EngineError) as caught:
            eng.create("x", {"Image": "i"})
        assert caught.value.status == 409 and caught.value.message == conflict["message"]
        with pytest.raises(engine.EngineError) as caught:
            eng.start("c")
        assert (caught.value.status, caught.value.message) == (500, "OCI runtime")
        eng.kill("c")  # not running: fine
        eng.remove("gone")  # gone already: fine
        assert eng.image_present("nodus-test/missing:0") is False  # 404 from the fallback


def test_a_log_stream_keeps_stdout_and_stderr_apart_across_chunks() -> None:
    body = frames((1, b"out\n"), (2, b"err\n"), (1, b""), (1, b"more"))
    parts = [body[:3], body[3:13], body[13:]]  # a frame header split across chunks
    with FakeEngine() as fake:
        fake.route(
            "GET", API + "/containers/c/logs", chunked(parts, "application/vnd.docker.raw-stream")
        )
        assert list(engine.Engine(fake.host).logs("c")) == [
            (1, b"out\n"),
            (2, b"err\n"),
            (1, b""),
            (1, b"more"),
        ]
        _, path = fake.requests[-1]
        assert "follow=1" in path and "stdout=1" in path and "stderr=1" in path


@pytest.mark.parametrize("after_headers", [True, False])
def test_a_wait_past_its_deadline_is_an_engine_timeout(after_headers: bool) -> None:
    with FakeEngine() as fake:
        fake.route("POST", API + "/containers/c/wait", stall(after_headers))
        eng = engine.Engine(fake.host)
        started = time.monotonic()
        with pytest.raises(engine.EngineTimeout):
            eng.wait("c", timeout=0.3)
        assert time.monotonic() - started < 3


def test_a_connection_dropped_mid_call_is_engine_unreachable() -> None:
    with FakeEngine() as fake:
        fake.route("POST", API + "/containers/c/wait", hang_up())
        with pytest.raises(engine.EngineUnreachable) as caught:
            engine.Engine(fake.host).wait("c")
        assert caught.value.reason == "the engine closed the connection"
        assert str(caught.value).startswith(f"cannot reach the Docker engine at {fake.host}")


def test_a_stalled_pull_is_a_clear_error_within_its_bound(machine: pytest.MonkeyPatch) -> None:
    progress = b'{"status":"Pulling from team/img","id":"2"}\r\n'
    with FakeEngine() as fake:
        fake.route("GET", API + "/images/.*/json", reply(404, {"message": "No such image"}))
        fake.route("POST", API + "/images/create", chunked([progress], "application/json", True))
        machine.setenv("NODUS_PULL_TIMEOUT", "0.5")
        started = time.monotonic()
        with pytest.raises(NodusError) as caught:
            runner.ensure_image(engine.Engine(fake.host), "localhost:5000/team/img:2", False)
        assert time.monotonic() - started < 5
        assert "cannot get image localhost:5000/team/img:2" in caught.value.message
        assert "made no progress pulling it for 0.5 s" in caught.value.message
        _, path = next(r for r in fake.requests if "/images/create" in r[1])
        assert "fromImage=localhost%3A5000%2Fteam%2Fimg" in path and "tag=2" in path


def test_a_failed_pull_says_why(machine: pytest.MonkeyPatch) -> None:
    events = [b'{"status":"Pulling"}', b'{"errorDetail":{"message":"denied"},"error":"denied"}']
    with FakeEngine() as fake:
        fake.route("GET", API + "/images/.*/json", reply(404, {"message": "No such image"}))
        fake.route("POST", API + "/images/create", chunked(events, "application/json"))
        with pytest.raises(NodusError, match="cannot get image private/img:1: denied"):
            runner.ensure_image(engine.Engine(fake.host), "private/img:1", False)


def test_an_unreachable_engine_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    with pytest.raises(NodusError) as caught:
        engine.local()
    assert caught.value.exit_code == 1
    assert "cannot reach the Docker engine at unix:///nonexistent.sock" in caught.value.message
    assert "No such file or directory" in caught.value.message
    assert caught.value.hint and "dockerd" in caught.value.hint


def test_an_unsupported_docker_host_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "ssh://user@box")
    with pytest.raises(NodusError, match="unix socket or tcp"):
        engine.local()


# -- the runner against a scripted engine (what a live engine cannot be made to do) ------


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

    def events(self, since: float, until: float, filters: object) -> list[object]:
        return []

    def alive(self) -> bool:
        return self.alive_answers.pop(0) if self.alive_answers else True

    def wait_until_alive(self, seconds: float) -> bool:
        return True


def _scripted_run(
    machine: pytest.MonkeyPatch, tmp_path: Path, fake: ScriptedEngine, retries: int
) -> tuple[runner.Outcome, list[str], dict[str, object]]:
    import io

    from nodus_cli.records import RunStore

    w = _workload("")
    store = RunStore(tmp_path / "home")
    record = store.start_run(w, "local", 0.0, None, pid=os.getpid())
    said: list[str] = []
    out = io.StringIO()
    run = runner.LocalRunner(
        runner.prepare(w),
        store,
        fake,
        record,
        out,
        said.append,
        retries,
        err=io.StringIO(),  # type: ignore[arg-type]
    )
    outcome = run.execute()
    return outcome, said, store.get(record.id).as_json()


def test_a_lost_engine_is_an_infrastructure_failure_that_is_retried(
    machine: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lost = engine.EngineUnreachable("unix:///scripted.sock", "the engine closed the connection")
    fake = ScriptedEngine([lost, 0])
    outcome, said, doc = _scripted_run(machine, tmp_path, fake, retries=1)
    assert outcome.status == "succeeded" and outcome.exit_code == 0
    assert any("lost the Docker engine" in m and "retrying" in m for m in said)
    assert doc["stages"][0]["attempts"] == 2  # type: ignore[index]
    assert len(fake.created) == 2
    assert fake.created[0] in fake.removed  # the old container, by name, before the retry


def test_a_lost_engine_without_retries_fails_the_run(
    machine: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lost = engine.EngineUnreachable("unix:///scripted.sock", "connection refused")
    outcome, _, doc = _scripted_run(machine, tmp_path, ScriptedEngine([lost]), retries=0)
    assert outcome.status == "failed" and outcome.exit_code == 1
    assert "lost the Docker engine" in str(doc["stages"][0]["message"])  # type: ignore[index]


def test_a_command_the_engine_cannot_exec_is_the_workloads_failure(
    machine: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    error = engine.EngineError(
        500, 'OCI runtime create failed: exec: "x": executable file not found'
    )
    fake = ScriptedEngine([], start_error=error)
    outcome, _, doc = _scripted_run(machine, tmp_path, fake, retries=3)
    assert outcome.exit_code == 127 and outcome.status == "failed"
    assert doc["stages"][0]["attempts"] == 1  # type: ignore[index]


def test_a_stale_container_of_the_same_name_is_replaced(
    machine: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = ScriptedEngine([0])
    fake.conflict_once = True
    outcome, _, _ = _scripted_run(machine, tmp_path, fake, retries=0)
    assert outcome.status == "succeeded"
    assert fake.removed[0].startswith("nodus-")  # removed by name, then created
