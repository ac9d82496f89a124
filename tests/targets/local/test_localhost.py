# ruff: noqa: F811 - the fixture imported from machine_support is a test parameter here
"""This machine as an inventory and its configuration, GPU discovery through the stand-in
nvidia-smi, usage sampling, and the engine client against a scripted engine (what a live
engine cannot be made to do)."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
from fake_engine import FakeEngine, chunked, frames, hang_up, ping, reply, stall
from machine_support import FAKE_BIN, machine  # noqa: F401 - a fixture

from nodus_cli import config
from nodus_cli.errors import NodusError
from nodus_cli.hardware import smi
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.images import ensure as ensure_image
from nodus_cli.targets.local import gpu_usage
from nodus_cli.targets.local import machine as localhost
from nodus_cli.targets.local.gpu_usage import Sampler
from nodus_cli.workload import Workload, load_text


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
    found = smi.query_gpus()
    assert [g.family for g in found] == families
    assert {g.nominal_memory_gb for g in found} == {memory}
    assert [g.index for g in found] == list(range(len(found)))
    assert all(g.uuid.startswith("GPU-") for g in found)
    (offer,) = localhost.offers(found)
    assert (offer.gpu, offer.gpu_count, offer.gpu_memory_gb) == (families[0], len(families), memory)
    assert offer.supplier == "local" and offer.price_per_hour == 0.0


def test_a_mixed_machine_is_one_offer_per_model(machine: pytest.MonkeyPatch) -> None:
    machine.setenv("NODUS_FAKE_GPUS", "mixed")
    found = smi.query_gpus()
    offers = {o.gpu: o.gpu_count for o in localhost.offers(found)}
    assert offers == {"L4": 2, "T4": 1}
    assert smi.describe(found) == "2× L4 24 GB, 1× T4 16 GB"


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
    assert smi.query_gpus() == []
    assert note in smi.describe([])
    (offer,) = localhost.offers([])
    assert offer.gpu is None and offer.gpu_count == 0


def test_no_nvidia_smi_on_path(machine: pytest.MonkeyPatch, tmp_path: Path) -> None:
    machine.setenv("PATH", str(tmp_path))
    assert smi.query_gpus() == []
    assert "no nvidia-smi on PATH" in smi.describe([])


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


# -- GPU use -----------------------------------------------------------------------------


def test_sampling_tells_used_from_idle_gpus(machine: pytest.MonkeyPatch) -> None:
    machine.setenv("NODUS_FAKE_GPUS", "h100x8")
    found = smi.query_gpus()
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


def test_sampling_keeps_each_reading_over_time_bounded(
    machine: pytest.MonkeyPatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine.setenv("NODUS_FAKE_GPUS", "h100x8")
    busy, idle = (g.uuid for g in smi.query_gpus()[:2])
    sampler = Sampler((busy, idle), interval=0.05)
    for percent in (10, 60, 30):
        machine.setenv("NODUS_FAKE_GPU_UTIL", f"{busy}={percent}:{percent * 100}")
        sampler.sample()
    kept = sampler.report().samples
    assert [(s.utilization, s.memory_used_mib) for s in kept if s.uuid == busy] == [
        (10, 1000),
        (60, 6000),
        (30, 3000),
    ]
    assert [s.utilization for s in kept if s.uuid == idle] == [0, 0, 0]
    assert [s.time for s in kept] == sorted(s.time for s in kept)
    monkeypatch.setattr(gpu_usage, "MAX_GPU_SAMPLES", 4)  # a long task: thinned as it goes
    for _ in range(20):
        sampler.sample()
    assert len(sampler.samples) <= 2 * 4 * 2
    assert sum(s.uuid == busy for s in sampler.report().samples) == 4


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


def test_a_wait_whose_answer_is_cut_mid_body_is_not_an_exit_code() -> None:
    # dockerd sends a wait's headers at once and its body when the container exits: a
    # connection that drops in between is a lost engine, never "exited with 1".
    def headers_then_hang_up(h: Any) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.write(b'5\r\n{"Sta')
        h.wfile.flush()
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)

    with FakeEngine() as fake:
        fake.route("POST", API + "/containers/c/wait", headers_then_hang_up)
        with pytest.raises(engine.EngineUnreachable) as caught:
            engine.Engine(fake.host).wait("c")
        assert caught.value.reason == "the engine closed the connection in the middle of its answer"


def test_a_kept_alive_connection_the_engine_closed_is_made_again() -> None:
    with FakeEngine() as fake:
        fake.route("GET", API + "/containers/json", reply(200, [{"Id": "c1"}]))
        eng = engine.Engine(fake.host)
        assert eng.containers({}) == [{"Id": "c1"}]
        fake.drop_connections()  # the engine restarted, or closed an idle connection
        assert eng.containers({}) == [{"Id": "c1"}]


def test_a_stalled_pull_is_a_clear_error_within_its_bound(machine: pytest.MonkeyPatch) -> None:
    progress = b'{"status":"Pulling from team/img","id":"2"}\r\n'
    with FakeEngine() as fake:
        fake.route("GET", API + "/images/.*/json", reply(404, {"message": "No such image"}))
        fake.route("POST", API + "/images/create", chunked([progress], "application/json", True))
        machine.setenv("NODUS_PULL_TIMEOUT", "0.5")
        started = time.monotonic()
        with pytest.raises(NodusError) as caught:
            ensure_image(engine.Engine(fake.host), "localhost:5000/team/img:2")
        assert time.monotonic() - started < 5
        assert "cannot get image localhost:5000/team/img:2" in caught.value.message
        assert "made no progress pulling it for 0.5 s" in caught.value.message
        _, path = next(r for r in fake.requests if "/images/create" in r[1])
        assert "fromImage=localhost%3A5000%2Fteam%2Fimg" in path and "tag=2" in path


def test_a_pull_shows_each_step_of_its_progress(machine: pytest.MonkeyPatch) -> None:
    # Over the engine's socket as `docker pull` asks: a digest is the tag, and the
    # progress comes as JSON documents, one a line or several in a chunk.
    events = [
        b'{"status":"Pulling from team/img","id":"2"}\r\n{"status":"Downloading","id":"a"}',
        b'\r\n{"status":"Digest: sha256:abc"}{"status":"Downloaded newer image"}\r\n',
    ]
    seen: list[dict[str, Any]] = []
    with FakeEngine() as fake:
        fake.route("POST", API + "/images/create", chunked(events, "application/json"))
        engine.Engine(fake.host).pull("localhost:5000/team/img@sha256:abc", seen.append, 5.0)
        _, path = next(r for r in fake.requests if "/images/create" in r[1])
    assert [e["status"] for e in seen] == [
        "Pulling from team/img",
        "Downloading",
        "Digest: sha256:abc",
        "Downloaded newer image",
    ]
    assert "fromImage=localhost%3A5000%2Fteam%2Fimg&tag=sha256%3Aabc" in path


def test_a_failed_pull_says_why(machine: pytest.MonkeyPatch) -> None:
    events = [b'{"status":"Pulling"}', b'{"errorDetail":{"message":"denied"},"error":"denied"}']
    with FakeEngine() as fake:
        fake.route("GET", API + "/images/.*/json", reply(404, {"message": "No such image"}))
        fake.route("POST", API + "/images/create", chunked(events, "application/json"))
        with pytest.raises(NodusError, match="cannot get image private/img:1: denied"):
            ensure_image(engine.Engine(fake.host), "private/img:1")


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
