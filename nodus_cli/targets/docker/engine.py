"""Access to the Docker engine, with one clear message when it is down.

:class:`Engine` makes the Engine-API calls of a local run, and the Swarm calls of
:class:`~nodus_cli.targets.swarm.api.SwarmApi`, pulls included, over the engine's socket
(:mod:`.http`: the standard library's HTTP client, a kept-alive connection per thread).
Whatever fails on the way raises one of the engine's failures named here
(:class:`EngineUnreachable`, :class:`EngineTimeout`, :class:`EngineError`), made by the
transport in one place. The Docker SDK's public ``auth`` module reads the registry
credentials of the Docker CLI's configuration, and is imported only where one holds any:
never by ``nodus --help``, ``validate``, ``plan``, nor by a run without credentials, local
or on Swarm. Every target finds the engine as the ``docker`` CLI does (:func:`endpoint`):
``DOCKER_HOST`` (with ``DOCKER_TLS_VERIFY`` / ``DOCKER_CERT_PATH``), else the current
Docker context (``docker context use``), else the local socket.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from nodus_cli.errors import NodusError
from nodus_cli.targets.docker import http
from nodus_cli.targets.docker.http import (
    EngineError,
    EngineFailure,
    EngineTimeout,
    EngineUnreachable,
)

__all__ = [
    "DEFAULT_HOST",
    "MAX_API",
    "MIN_GPU_API",
    "PULL_IDLE_TIMEOUT",
    "Engine",
    "EngineError",
    "EngineFailure",
    "EngineTimeout",
    "EngineUnreachable",
    "connect",
    "endpoint",
    "local",
]

DEFAULT_HOST = "unix:///var/run/docker.sock"
#: Device requests (GPUs) need API 1.40 (Docker 19.03).
MIN_GPU_API = (1, 40)
#: The newest API version nodus was checked against; newer engines speak it too.
MAX_API = (1, 44)
#: Seconds a pull may go without any progress from the engine before nodus gives up.
PULL_IDLE_TIMEOUT = 120.0
_HINT = http.UNREACHABLE_HINT


class Engine:
    """The Engine-API calls of a run."""

    def __init__(
        self, host: str | None = None, connect_timeout: float = 10.0, tls: http.Tls | None = None
    ) -> None:
        self.where = host or os.environ.get("DOCKER_HOST") or DEFAULT_HOST
        self.connect_timeout = connect_timeout
        self.api = "1.41"  # until ping() adopts the engine's
        url = urlsplit(self.where)
        if url.scheme not in ("unix", "tcp", "http", "https"):
            raise NodusError(
                f"DOCKER_HOST={self.where}: nodus reaches the engine over a unix socket or "
                "tcp:// (with DOCKER_TLS_VERIFY/DOCKER_CERT_PATH for TLS)",
                hint="for ssh://, forward the socket (`ssh -NL /tmp/docker.sock:"
                "/var/run/docker.sock HOST`) and set DOCKER_HOST=unix:///tmp/docker.sock",
            )
        self.tls = tls if host is not None else _env_tls()
        if url.scheme == "https" and self.tls is None:
            self.tls = http.Tls()
        self.http = http.Http(self.where, connect_timeout, self.tls)
        #: Whether the Docker configuration holds credentials (read once, as the SDK does).
        self._credentials: bool | None = None
        #: Images found, by name: prepare and begin both ask, one inspect serves a run.
        self._images: dict[str, dict[str, Any]] = {}

    def request(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        body: Any = None,
        timeout: float | None = None,
        allow: tuple[int, ...] = (),
        headers: dict[str, str] | None = None,
    ) -> Any:
        """An Engine-API call over the socket: its JSON answer (None when empty, or when
        the engine answered one of the ``allow`` error statuses)."""
        try:
            return self.http.json(method, path, params, body, timeout, headers)
        except EngineError as exc:
            if exc.status in allow:
                return None
            raise

    def registry_auth(self, image: str) -> dict[str, str]:
        """The ``X-Registry-Auth`` header the Docker CLI's configuration gives ``image``'s
        registry, as the ``docker`` CLI sends it with a pull or a new service (empty: no
        credentials for it). The SDK's ``auth`` module reads them (credential stores and
        helpers included), and is loaded only when a configuration holds credentials."""
        if self._credentials is None:
            self._credentials = _has_credentials()
        if not self._credentials:
            return {}
        from docker import auth
        from docker.errors import DockerException

        try:
            registry, _ = auth.resolve_repository_name(image)
            found = auth.resolve_authconfig(auth.load_config(), registry)
        except DockerException as exc:  # a credential helper that failed, a bad name
            raise EngineError(500, f"reading the Docker credentials: {exc}") from None
        return {"X-Registry-Auth": auth.encode_header(found).decode()} if found else {}

    # -- calls ---------------------------------------------------------------------

    def ping(self, timeout: float | None = None) -> str:
        """Check the engine answers; adopt its API version (capped at :data:`MAX_API`)."""
        _, headers, _ = self.http.call(
            "GET", "/_ping", timeout=timeout or self.connect_timeout, versioned=False
        )
        version = str(headers.get("Api-Version") or "1.41")
        major, minor = min(_parse_version(version), MAX_API)
        self.api = self.http.version = f"{major}.{minor}"
        return version

    def api_at_least(self, wanted: tuple[int, int]) -> bool:
        return _parse_version(self.api) >= wanted

    def image_config(self, image: str) -> dict[str, Any]:
        """The image's ``Config`` (User, Entrypoint, Cmd ...); empty when it is missing."""
        config: dict[str, Any] = (self._image(image) or {}).get("Config") or {}
        return config

    def image_present(self, image: str) -> bool:
        return self._image(image) is not None

    def _image(self, image: str) -> dict[str, Any] | None:
        """The image's inspect document (None: the engine has no such image; not kept,
        so a pull is seen)."""
        doc = self._images.get(image)
        if doc is None:
            doc = self.request("GET", f"/images/{http.path_of(image)}/json", allow=(404,))
            if doc is not None:
                self._images[image] = doc
        return doc

    def create(self, name: str, config: dict[str, Any]) -> str:
        doc = self.request("POST", "/containers/create", {"name": name}, body=config)
        return str(doc["Id"])

    def start(self, cid: str) -> None:
        self.request("POST", f"/containers/{cid}/start", allow=(304,))  # 304: already started

    def wait(self, cid: str, timeout: float | None = None) -> int:
        """Block until the container exits; its exit status. EngineTimeout past ``timeout``
        (None: an hour at a time; the caller waits again)."""
        doc = self.request("POST", f"/containers/{cid}/wait", timeout=timeout or 3600.0)
        return int(doc.get("StatusCode", 1)) if isinstance(doc, dict) else 1

    def kill(self, cid: str, signal: str = "KILL") -> None:
        # Gone, or not running: nothing to kill.
        self.request("POST", f"/containers/{cid}/kill", {"signal": signal}, allow=(404, 409))

    def remove(self, cid: str) -> None:
        """Force-remove a container and its anonymous volumes; a missing one is fine."""
        self.request("DELETE", f"/containers/{cid}", {"v": True, "force": True}, allow=(404,))

    def inspect(self, cid: str) -> dict[str, Any]:
        """A container's whole description (EngineError 404 when it is gone)."""
        found: dict[str, Any] = self.request("GET", f"/containers/{cid}/json")
        return found

    def watch(self, filters: dict[str, list[str]]) -> http.Stream:
        """The engine's events from now on, as they happen: iterate ``.documents()``;
        ``close()`` ends it from any thread."""
        return self.http.stream("/events", {"filters": filters})

    def containers(self, filters: dict[str, list[str]], all: bool = True) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.request(
            "GET", "/containers/json", {"all": all, "filters": filters}
        )
        return found

    def events(
        self, since: float, until: float, filters: dict[str, list[str]]
    ) -> list[dict[str, Any]]:
        """Past events between two wall-clock times (the call ends at ``until``)."""
        params = {"since": f"{since:.9f}", "until": f"{until:.9f}", "filters": filters}
        stream = self.http.stream("/events", params, timeout=15.0)
        try:
            return list(stream.documents())
        finally:
            stream.close()

    def logs(self, cid: str, follow: bool = True, since: str | None = None) -> _Frames:
        """A (non-TTY) container's output, ``(1 stdout | 2 stderr, b"TIMESTAMP text")``
        frames, followed or as logged so far, from ``since`` (UNIX seconds) on;
        ``close()`` cuts it."""
        return self.log_frames(f"/containers/{cid}/logs", follow, since)

    def log_frames(self, path: str, follow: bool, since: str | None, **params: Any) -> _Frames:
        """The multiplexed log at ``path`` (a container's, a Swarm service's, with
        ``params`` of its own) as timestamped frames, on a connection of its own.

        Read whole, the log comes at once: an engine that stops answering must not keep
        nodus waiting long for the rest of it."""
        params.update(follow=follow, stdout=1, stderr=1, timestamps=1)
        if since is not None:
            params["since"] = since
        return _Frames(self.http.stream(path, params, None if follow else 15.0))

    def pull(
        self,
        image: str,
        on_event: Callable[[dict[str, Any]], None],
        idle_timeout: float = PULL_IDLE_TIMEOUT,
    ) -> None:
        """Pull ``image``; EngineError on a failed pull, EngineTimeout when the engine sends
        no progress for ``idle_timeout`` seconds. The request ``docker pull`` makes,
        registry credentials included; each progress document goes to ``on_event``."""
        repository, tag = _repository_tag(image)
        params = {"fromImage": repository, "tag": tag or "latest"}
        try:
            stream = self.http.stream(
                "/images/create",
                params,
                idle_timeout,
                method="POST",
                headers=self.registry_auth(repository),
                wait=idle_timeout,
            )
            try:
                for event in stream.documents():
                    if event.get("error"):
                        raise EngineError(500, str(event["error"]))
                    on_event(event)
            finally:
                stream.close()
        except EngineUnreachable as exc:
            # A dropped stream in the middle of a pull is a timeout or an engine restart.
            raise EngineError(500, exc.reason) from None

    def alive(self) -> bool:
        try:
            self.ping(timeout=5)
            return True
        except (EngineUnreachable, EngineError, EngineTimeout):
            return False

    def wait_until_alive(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            if self.alive():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)


class _Frames:
    """A container's log as (stream, bytes) frames; ``close()`` cuts it from any thread."""

    def __init__(self, stream: http.Stream) -> None:
        self.stream = stream

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return self.stream.frames()

    def close(self) -> None:
        self.stream.close()


def _has_credentials() -> bool:
    """Whether the Docker CLI configuration the SDK reads (the first of
    ``$DOCKER_CONFIG/config.json``, ``~/.docker/config.json``, ``~/.dockercfg`` that
    exists) holds registry credentials, or names a store or helper for them."""
    home = os.path.expanduser("~")
    folder = os.environ.get("DOCKER_CONFIG")
    paths = [os.path.join(folder, "config.json")] if folder else []
    paths += [os.path.join(home, ".docker", "config.json"), os.path.join(home, ".dockercfg")]
    for path in paths:
        if path.endswith(".dockercfg") and os.path.exists(path):
            return True  # the legacy file holds nothing but credentials
        try:
            with open(path, encoding="utf-8") as handle:
                doc = json.load(handle)
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return True  # the SDK's reading of it decides
        return not isinstance(doc, dict) or any(
            doc.get(key) for key in ("auths", "credsStore", "credHelpers")
        )
    return False


def endpoint() -> tuple[str | None, http.Tls | None]:
    """(host, TLS settings) of the engine to use, as the ``docker`` CLI chooses it:
    ``DOCKER_HOST`` (None: read with its TLS variables by :class:`Engine`), else the current Docker
    context's endpoint (``docker context use``), else the local socket."""
    host, tls_dir = _context_endpoint()
    return host, (_context_tls(tls_dir) if tls_dir is not None else None)


def connect(timeout: float = 10.0) -> Engine:
    """The engine :func:`endpoint` names, not yet contacted."""
    host, tls = endpoint()
    return Engine(host=host, connect_timeout=timeout, tls=tls)


def _context_endpoint() -> tuple[str | None, str | None]:
    """(host, TLS folder) of the current Docker context, when DOCKER_HOST does not say.

    Read from the Docker CLI's own files (``docker context use`` writes them): the
    context named by ``DOCKER_CONTEXT`` or by ``currentContext`` in config.json.
    """
    if os.environ.get("DOCKER_HOST"):
        return None, None
    config_dir = os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker")
    name = os.environ.get("DOCKER_CONTEXT")
    if not name:
        try:
            with open(os.path.join(config_dir, "config.json"), encoding="utf-8") as handle:
                name = (json.load(handle) or {}).get("currentContext")
        except (OSError, ValueError, AttributeError):
            name = None
    if not name or name == "default":
        return None, None
    import hashlib

    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = os.path.join(config_dir, "contexts", "meta", digest, "meta.json")
    try:
        with open(meta, encoding="utf-8") as handle:
            endpoint = json.load(handle)["Endpoints"]["docker"]
    except (OSError, ValueError, KeyError, TypeError):
        raise NodusError(
            f"the current Docker context {name!r} cannot be read ({meta})",
            hint="`docker context ls` lists the contexts; or set DOCKER_HOST",
        ) from None
    tls_dir = os.path.join(config_dir, "contexts", "tls", digest, "docker")
    host = endpoint.get("Host")
    if not host:
        return None, None
    return str(host), tls_dir if os.path.isdir(tls_dir) else None


def _context_tls(folder: str) -> http.Tls:
    """The TLS settings of a context's folder: its CA, its client certificate."""
    return _tls_from(folder, verify=True)


def _env_tls() -> http.Tls | None:
    """TLS as ``DOCKER_TLS_VERIFY`` and ``DOCKER_CERT_PATH`` ask it, as the docker CLI reads
    them (None: plain HTTP, or a unix socket)."""
    verify = os.environ.get("DOCKER_TLS_VERIFY") or ""
    folder = os.environ.get("DOCKER_CERT_PATH") or ""
    if not verify and not folder:
        return None
    return _tls_from(folder or os.path.expanduser("~/.docker"), verify=bool(verify))


def _tls_from(folder: str, verify: bool) -> http.Tls:
    ca, cert, key = (os.path.join(folder, f) for f in ("ca.pem", "cert.pem", "key.pem"))
    return http.Tls(
        ca=ca if verify and os.path.exists(ca) else None,
        cert=(cert, key) if os.path.exists(cert) and os.path.exists(key) else None,
        verify=verify,
    )


#: The engines :func:`local` pinged, by address, TLS and timeout, with when (monotonic).
_PINGED: dict[tuple[str, str, float], tuple[float, Engine]] = {}


def local(timeout: float = 10.0, fresh_for: float = 0.0) -> Engine:
    """The engine local runs use, checked with a ping: one clear message when it is down.
    ``fresh_for``: the engine of the same address pinged less than that many seconds ago
    is the one returned, not pinged again (a burst of runs, each its target, pings once)."""
    engine = connect(timeout)
    key = (engine.where, repr(engine.tls), timeout)
    known = _PINGED.get(key)
    if known is not None and time.monotonic() - known[0] < fresh_for:
        return known[1]
    try:
        engine.ping()
    except EngineUnreachable as exc:
        raise exc.as_nodus_error() from None
    except EngineTimeout:
        said = f"did not answer within {timeout:g} s"
        raise NodusError(f"the Docker engine at {engine.where} {said}", hint=_HINT) from None
    except EngineError as exc:
        said = f"answered the ping with an error: {exc}"
        raise NodusError(f"the Docker engine at {engine.where} {said}", hint=_HINT) from None
    _PINGED[key] = (time.monotonic(), engine)
    return engine


def _parse_version(text: str) -> tuple[int, int]:
    try:
        major, minor = text.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (1, 41)


def _repository_tag(image: str) -> tuple[str, str | None]:
    """(repository, tag or digest) of an image reference, as ``docker pull`` splits it
    (``registry:5000/team/img`` has no tag: the colon is the port's)."""
    repository, at, digest = image.rpartition("@")
    if at:
        return repository, digest
    repository, colon, tag = image.rpartition(":")
    if colon and "/" not in tag:
        return repository, tag
    return image, None
