"""targets.docker: the one client of the Engine API, against a scripted engine
(tests/fake_engine.py): every DOCKER_HOST form, pulls through the same client, and the
engine's failures as nodus names them, whichever call met them."""

from __future__ import annotations

import ast
import base64
import json
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from fake_engine import FakeEngine, Handler, chunked, ping, reply
from interpreter import python
from paths import REPO

from nodus_cli.errors import NodusError
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.images import ensure as ensure_image

API = r"/v1\.4\d"


@pytest.fixture()
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home and Docker config folder: nothing of the developer's is read."""
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = tmp_path / "docker-config"
    folder.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(folder))
    for name in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    return folder


def _pulled(seen: list[dict[str, Any]], events: list[bytes]) -> Any:
    """POST /images/create: keep the query and the credentials header, send ``events``."""

    def answer(h: Handler) -> None:
        seen.append({"path": h.path, "auth": h.headers.get("X-Registry-Auth")})
        chunked(events, "application/json")(h)

    return answer


# -- pulls ----------------------------------------------------------------------------


def test_a_pull_goes_over_the_same_client_with_the_registry_credentials(
    docker_config: Path,
) -> None:
    login = base64.b64encode(b"ci-bot:s3cret").decode()
    config = {"auths": {"registry.example:5000": {"auth": login}}}
    (docker_config / "config.json").write_text(json.dumps(config), encoding="utf-8")
    seen: list[dict[str, Any]] = []
    progress = [b'{"status":"Pulling from team/img"}\r\n', b'{"status":"Downloaded"}\r\n']
    with FakeEngine() as fake:
        fake.route("POST", API + "/images/create", _pulled(seen, progress))
        got: list[dict[str, Any]] = []
        engine.Engine(fake.host).pull("registry.example:5000/team/img:2", got.append)
    assert got == [{"status": "Pulling from team/img"}, {"status": "Downloaded"}]
    (sent,) = seen
    assert "fromImage=registry.example%3A5000%2Fteam%2Fimg" in sent["path"]
    assert "tag=2" in sent["path"]
    decoded = json.loads(base64.urlsafe_b64decode(sent["auth"]))
    assert (decoded["username"], decoded["password"]) == ("ci-bot", "s3cret")


@pytest.mark.parametrize(
    ("image", "repository", "tag"),
    [
        ("registry.example:5000/team/img", "registry.example%3A5000%2Fteam%2Fimg", "latest"),
        ("busybox", "busybox", "latest"),
        ("busybox:1.36", "busybox", "1.36"),
        ("team/img@sha256:abc", "team%2Fimg", "sha256%3Aabc"),
    ],
)
def test_a_pull_asks_for_the_tag_docker_pull_would(
    docker_config: Path, image: str, repository: str, tag: str
) -> None:
    seen: list[dict[str, Any]] = []
    with FakeEngine() as fake:
        fake.route("POST", API + "/images/create", _pulled(seen, [b'{"status":"done"}\r\n']))
        engine.Engine(fake.host).pull(image, lambda _: None)
    (sent,) = seen
    assert f"fromImage={repository}&" in sent["path"] + "&"
    assert f"tag={tag}" in sent["path"]
    assert sent["auth"] is None  # no credentials in the config


def test_a_pull_without_credentials_does_not_load_the_sdk(docker_config: Path) -> None:
    with FakeEngine() as fake:
        fake.route("POST", API + "/images/create", chunked([b'{"status":"ok"}\n'], "x/json"))
        code = (
            "import sys\n"
            "from nodus_cli.targets.docker import engine\n"
            f"engine.Engine({fake.host!r}).pull('team/img:1', print)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'docker', 'requests'}))\n"
        )
        done = python(code)
    assert done.stdout.splitlines() == ["{'status': 'ok'}", "[]"], done.stdout + done.stderr


def test_progress_documents_split_across_chunks_come_whole(docker_config: Path) -> None:
    events = [b'{"status":"Pull', b'ing"}\r\n{"id":"1",', b'"progress":"[=>  ]"}\r\n']
    with FakeEngine() as fake:
        fake.route("POST", API + "/images/create", chunked(events, "application/json"))
        got: list[dict[str, Any]] = []
        engine.Engine(fake.host).pull("team/img:1", got.append)
    assert got == [{"status": "Pulling"}, {"id": "1", "progress": "[=>  ]"}]


def test_a_refused_pull_is_an_engine_error_with_the_engines_message(docker_config: Path) -> None:
    denied = {"message": "pull access denied for team/img"}
    with FakeEngine() as fake:
        fake.route("POST", API + "/images/create", reply(404, denied))
        with pytest.raises(engine.EngineError) as caught:
            engine.Engine(fake.host).pull("team/img:1", lambda _: None)
    assert (caught.value.status, caught.value.message) == (404, denied["message"])


# -- streams --------------------------------------------------------------------------


def test_a_stream_the_engine_cuts_is_engine_unreachable() -> None:
    # The engine's events (the queue's nudges) end with the engine's own failure, as any
    # other call does: never an exception of the transport.
    def half_an_event(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.write(b'30\r\n{"status":"die"')
        h.wfile.flush()
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)

    with FakeEngine() as fake:
        fake.route("GET", API + "/events", half_an_event)
        stream = engine.Engine(fake.host).watch({"type": ["container"]})
        with pytest.raises(engine.EngineUnreachable) as caught:
            list(stream.documents())
    assert caught.value.reason == "the engine closed the stream"


def test_a_stream_closed_from_another_thread_just_ends() -> None:
    with FakeEngine() as fake:
        fake.route("GET", API + "/events", chunked([b'{"status":"die"}\n'], "x/json", True))
        stream = engine.Engine(fake.host).watch({})
        documents = stream.documents()
        assert next(documents) == {"status": "die"}
        stream.close()
        assert list(documents) == []


def test_a_stream_closed_while_its_reader_is_inside_a_read_just_ends() -> None:
    # close() from another thread can take the answer's file away in the middle of a
    # read, and http.client then fails reading from None: the queue's event thread must
    # see the end, not die with a traceback.
    with FakeEngine() as fake:
        fake.route("GET", API + "/events", chunked([b'{"status":"die"}\n'], "x/json", True))
        stream = engine.Engine(fake.host).watch({})
        documents = stream.documents()
        assert next(documents) == {"status": "die"}

        def cut(size: int) -> bytes:
            stream.close()
            raise AttributeError("'NoneType' object has no attribute 'readline'")

        stream._answer.read1 = cut  # type: ignore[method-assign]
        assert list(documents) == []


# -- failures -------------------------------------------------------------------------


def test_a_call_the_engine_hangs_up_on_a_new_connection_is_not_made_twice() -> None:
    # A retry is for a kept-alive connection the engine closed while idle; a new one it
    # closed may have done what it was asked (a create, a start).
    def hang_up(h: Handler) -> None:
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)

    with FakeEngine() as fake:
        fake.route("POST", API + "/containers/create", hang_up)
        with pytest.raises(engine.EngineUnreachable, match="the engine closed the connection"):
            engine.Engine(fake.host).create("x", {"Image": "i"})
        assert len(fake.requests) == 1


def test_a_refused_connection_says_so(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))  # bound, never listening: connections are refused
    try:
        with pytest.raises(engine.EngineUnreachable) as caught:
            engine.Engine(f"unix://{path}").ping()
    finally:
        listener.close()
    assert caught.value.reason == "connection refused"


def test_a_ping_past_its_deadline_is_an_engine_timeout() -> None:
    def silent(h: Handler) -> None:
        h.server.fake.release.wait(60)
        h.close_connection = True

    with FakeEngine() as fake:
        fake.route("GET", "/_ping", silent)
        started = time.monotonic()
        with pytest.raises(engine.EngineTimeout):
            engine.Engine(fake.host).ping(timeout=0.3)
        assert time.monotonic() - started < 3


# -- every DOCKER_HOST form -----------------------------------------------------------


def test_a_tcp_engine_is_reached_over_tcp(docker_config: Path) -> None:
    with FakeEngine(tcp=True) as fake:
        fake.route("GET", "/_ping", ping("1.43"))
        fake.route("GET", r"/v1\.43/containers/json", reply(200, [{"Id": "c1"}]))
        eng = engine.Engine(fake.host)
        assert eng.ping() == "1.43"
        assert eng.containers({}) == [{"Id": "c1"}]


def _certificate(folder: Path) -> None:
    """A self-signed certificate for 127.0.0.1 in ``folder``, as ca.pem, cert.pem, key.pem
    (the engine's, the authority that signed it, and the client's, all one)."""
    folder.mkdir()
    key, cert = str(folder / "key.pem"), str(folder / "cert.pem")
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
    command += ["-keyout", key, "-out", cert, *subject]
    subprocess.run(command, check=True, capture_output=True)
    (folder / "ca.pem").write_bytes((folder / "cert.pem").read_bytes())


def test_a_tls_engine_is_verified_and_given_the_client_certificate(
    docker_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = tmp_path / "certs"
    _certificate(certs)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs / "cert.pem", certs / "key.pem")
    server.verify_mode = ssl.CERT_REQUIRED  # the client's certificate or no answer
    server.load_verify_locations(certs / "ca.pem")
    with FakeEngine(tcp=True, tls=server) as fake:
        fake.route("GET", "/_ping", ping("1.44"))
        monkeypatch.setenv("DOCKER_HOST", fake.host)
        monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
        monkeypatch.setenv("DOCKER_CERT_PATH", str(certs))
        assert engine.local().api == "1.44"


def test_a_tls_engine_with_an_unknown_certificate_is_not_trusted(
    docker_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs, other = tmp_path / "certs", tmp_path / "other"
    _certificate(certs)
    _certificate(other)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs / "cert.pem", certs / "key.pem")
    with FakeEngine(tcp=True, tls=server) as fake:
        fake.route("GET", "/_ping", ping("1.44"))
        monkeypatch.setenv("DOCKER_HOST", fake.host)
        monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
        monkeypatch.setenv("DOCKER_CERT_PATH", str(other))
        with pytest.raises(engine.EngineUnreachable) as caught:
            engine.connect().ping()
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.reason


# -- the SDK ---------------------------------------------------------------------------


def test_the_docker_sdk_serves_only_the_registry_credentials() -> None:
    # One way to speak to the Engine API: the SDK's public `auth` module reads the Docker
    # CLI's credentials (its errors with it); nothing else of it, nothing private.
    used: set[str] = set()
    for path in (REPO / "nodus_cli").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "docker":
                used |= {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                used |= {a.name for a in node.names if a.name.split(".")[0] == "docker"}
    assert used == {"docker.auth", "docker.errors.DockerException"}


def test_a_credential_helper_that_fails_is_a_clear_error_not_a_traceback(
    docker_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (docker_config / "config.json").write_text('{"credsStore": "nodus-none"}', encoding="utf-8")
    monkeypatch.setenv("PATH", str(docker_config))  # no docker-credential-nodus-none
    with FakeEngine() as fake:
        fake.route("GET", API + "/images/.*/json", reply(404, {"message": "No such image"}))
        with pytest.warns(UserWarning), pytest.raises(NodusError) as caught:
            ensure_image(engine.Engine(fake.host), "team/img:1")
    assert caught.value.message.startswith("cannot get image team/img:1: reading the Docker")
    assert "docker-credential-nodus-none" in caught.value.message
    assert not any("/images/create" in path for _, path in fake.requests)


def test_an_answer_reset_midway_on_a_kept_alive_connection_is_not_asked_again() -> None:
    # Only a kept-alive connection closed before any answer is made again: once the
    # engine began answering, it did what it was asked.
    def reset_midway(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.write(b'5\r\n{"Sta')
        h.wfile.flush()
        h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        h.close_connection = True
        h.connection.close()  # a reset, not an orderly end

    with FakeEngine(tcp=True) as fake:
        fake.route("GET", API + "/containers/json", reply(200, []))
        fake.route("POST", API + "/containers/c/wait", reset_midway)
        eng = engine.Engine(fake.host)
        assert eng.containers({}) == []  # the connection is kept alive
        with pytest.raises(engine.EngineUnreachable):
            eng.wait("c")
        assert [method for method, _ in fake.requests] == ["GET", "POST"]
