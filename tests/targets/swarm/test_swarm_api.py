"""targets.swarm.api: the Swarm calls over the engine's socket, against a scripted engine
(tests/fake_engine.py): what goes over the wire, credentials included, without the SDK."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from fake_engine import FakeEngine, Handler, reply
from interpreter import python

from nodus_cli.targets.swarm import SwarmApi

BODY = {
    "Name": "nodus-r1-main",
    "Labels": {"nodus.run": "r1"},
    "TaskTemplate": {"ContainerSpec": {"Image": "registry.example:5000/team/train:1"}},
    "Mode": {"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}},
}


def _created(seen: list[dict[str, Any]]) -> Any:
    """POST /services/create: keep the headers and the body, answer an id."""

    def answer(h: Handler) -> None:
        body = json.loads(h.server.fake.bodies[-1])
        seen.append({"auth": h.headers.get("X-Registry-Auth"), "body": body})
        reply(201, {"ID": "svc1"})(h)

    return answer


@pytest.fixture()
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home and Docker config folder: nothing of the developer's is read."""
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = tmp_path / "docker-config"
    folder.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(folder))
    return folder


def _create_with_login(docker_config: Path, registry: str, login: bytes) -> dict[str, Any]:
    """Create BODY's service with ``login`` (user:password) for ``registry`` in the Docker
    config: what the engine was sent (the body, the X-Registry-Auth header)."""
    config = {"auths": {registry: {"auth": base64.b64encode(login).decode()}}}
    (docker_config / "config.json").write_text(json.dumps(config), encoding="utf-8")
    seen: list[dict[str, Any]] = []
    with FakeEngine() as fake:
        fake.route("POST", r"/v1\.4\d/services/create", _created(seen))
        assert SwarmApi(fake.host).create_service(BODY) == "svc1"
    (sent,) = seen
    return sent


def test_a_new_service_carries_the_registry_credentials_of_the_docker_config(
    docker_config: Path,
) -> None:
    # As `docker service create` does: the nodes pull a private image with them.
    sent = _create_with_login(docker_config, "registry.example:5000", b"ci-bot:s3cret")
    assert sent["body"] == BODY
    decoded = json.loads(base64.urlsafe_b64decode(sent["auth"]))
    assert (decoded["username"], decoded["password"]) == ("ci-bot", "s3cret")
    assert decoded["serveraddress"] == "registry.example:5000"


def test_no_credentials_for_the_image_s_registry_sends_none(docker_config: Path) -> None:
    assert _create_with_login(docker_config, "other.example", b"u:p")["auth"] is None


def test_a_docker_config_without_credentials_does_not_load_the_sdk(docker_config: Path) -> None:
    # A config.json that only names the current context (as `docker context use` leaves
    # it) holds no credentials: the Swarm run pays nothing for the SDK's auth module.
    (docker_config / "config.json").write_text('{"currentContext": "default"}', encoding="utf-8")
    with FakeEngine() as fake:
        fake.route("POST", r"/v1\.4\d/services/create", reply(201, {"ID": "svc1"}))
        code = (
            "import sys\n"
            "from nodus_cli.targets.swarm import SwarmApi\n"
            f"print(SwarmApi({fake.host!r}).create_service({BODY!r}))\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'docker', 'requests'}))\n"
        )
        done = python(code)
    assert done.stdout.split() == ["svc1", "[]"], done.stdout + done.stderr


def test_discarding_a_job_first_stops_it_then_removes_it() -> None:
    # Before Docker 24 removing a job alone leaves its task running (or to start later):
    # it is updated to zero completions first, the rest of its spec as it was.
    spec = dict(BODY, EndpointSpec={"Ports": [{"TargetPort": 80, "PublishedPort": 8080}]})
    doc = {"ID": "svc1", "Version": {"Index": 42}, "Spec": spec}
    updates: list[Any] = []

    def updated(h: Handler) -> None:
        updates.append(json.loads(h.server.fake.bodies[-1]))
        reply(200, {})(h)

    with FakeEngine() as fake:
        fake.route("GET", r"/v1\.4\d/services/svc1", reply(200, doc))
        fake.route("POST", r"/v1\.4\d/services/svc1/update", updated)
        fake.route("DELETE", r"/v1\.4\d/services/svc1", reply(200))
        SwarmApi(fake.host).discard_service("svc1")
    stopped = dict(spec, Mode={"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 0}})
    assert updates == [stopped]
    assert [(m, p.split("/", 2)[2]) for m, p in fake.requests] == [
        ("GET", "services/svc1"),
        ("POST", "services/svc1/update?version=42"),
        ("DELETE", "services/svc1"),
    ]


def test_discarding_a_service_that_is_gone_is_fine() -> None:
    with FakeEngine() as fake:  # every path answers 404, as dockerd does for a gone one
        SwarmApi(fake.host).discard_service("gone")
    assert [m for m, _ in fake.requests] == ["GET"]


def test_a_secret_carries_its_data_in_base64_and_a_gone_one_is_removed_quietly() -> None:
    seen: list[Any] = []

    def created(h: Handler) -> None:
        seen.append(json.loads(h.server.fake.bodies[-1]))
        reply(201, {"ID": "sec1"})(h)

    with FakeEngine() as fake:
        fake.route("POST", r"/v1\.4\d/secrets/create", created)
        api = SwarmApi(fake.host)
        assert api.create_object("secret", "part-0", b"\x00\xffdata", {"nodus.run": "r1"}) == "sec1"
        api.remove_object("secret", "sec1")  # 404: already gone
    assert seen == [
        {
            "Name": "part-0",
            "Labels": {"nodus.run": "r1"},
            "Data": base64.b64encode(b"\x00\xffdata").decode(),
        }
    ]
    assert fake.requests[-1][0] == "DELETE"
