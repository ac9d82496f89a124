"""Access to the Docker engine, with one clear message when it is down.

:class:`Engine` makes the Engine-API calls of a local run, and the Swarm calls of
:class:`~nodus_cli.targets.swarm.api.SwarmApi`, straight over the engine's socket
(:mod:`.http`: the standard library, a kept-alive connection per thread), pulls included.
The Docker SDK stays for its ``auth`` module, the registry credentials of the Docker
CLI's configuration (read only where one holds any). Its failures and the transport's
become nodus's in this module alone (:meth:`Engine.mapped` for the SDK's, the
transport's in :meth:`Engine.answer`). Every
target finds the engine as the ``docker`` CLI does (:func:`endpoint`): ``DOCKER_HOST``
(with ``DOCKER_TLS_VERIFY`` / ``DOCKER_CERT_PATH``), else the current Docker context
(``docker context use``), else the local socket. The SDK is imported only when credentials
are needed: never by ``nodus --help``, ``validate``, ``plan``, nor by a run of an image
the engine has, local or on Swarm.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from nodus_cli.errors import NodusError
from nodus_cli.targets.docker import http

DEFAULT_HOST = "unix:///var/run/docker.sock"
#: Device requests (GPUs) need API 1.40 (Docker 19.03).
MIN_GPU_API = (1, 40)
#: The newest API version nodus was checked against; newer engines speak it too.
MAX_API = (1, 44)
#: Seconds a pull may go without any progress from the engine before nodus gives up.
PULL_IDLE_TIMEOUT = 120.0
_HINT = (
    "is dockerd running (`docker info`)? check DOCKER_HOST and that you may use the "
    "socket (root or the docker group)"
)


class EngineFailure(Exception):
    """The root of the engine's failures: cleanup code catches this, never ``Exception``."""


class EngineUnreachable(EngineFailure):
    """No answer from the engine (socket missing, refused, or the connection dropped)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"cannot reach the Docker engine at {where}: {reason}")
        self.where = where
        self.reason = reason

    def as_nodus_error(self) -> NodusError:
        return NodusError(str(self), hint=_HINT)


class EngineError(EngineFailure):
    """The engine answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class EngineTimeout(EngineFailure):
    """A call with a deadline (a container wait, a silent pull) ran past it."""


class Engine:
    """The Engine-API calls of a run (the SDK's client for pulls)."""

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

    @contextmanager
    def answer(self, what: str = "waiting for the engine") -> Iterator[None]:
        """The transport's failures (:mod:`.http`) as nodus's."""
        try:
            yield
        except http.Status as exc:
            raise EngineError(exc.status, exc.message) from None
        except http.Timeout:
            raise EngineTimeout(what) from None
        except http.Failure as exc:
            raise EngineUnreachable(self.where, str(exc)) from None

    @contextmanager
    def mapped(self, what: str = "waiting for the engine") -> Iterator[None]:
        """The one place the SDK's errors (and those of requests under it) become nodus's."""
        import requests
        import urllib3
        from docker.errors import APIError, DockerException

        timeouts = (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)
        try:
            yield
        except APIError as exc:
            raise EngineError(exc.status_code or 500, str(exc.explanation or exc)) from None
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            # Over a unix socket a read timeout comes as a ConnectionError around it.
            if isinstance(exc, timeouts) or isinstance((exc.args or (None,))[0], timeouts):
                raise EngineTimeout(what) from None
            raise EngineUnreachable(self.where, _reason(exc)) from None
        except DockerException as exc:
            raise EngineError(500, str(exc)) from None

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
            with self.answer():
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

        with self.mapped("reading the Docker credentials"):
            registry, _ = auth.resolve_repository_name(image)
            found = auth.resolve_authconfig(auth.load_config(), registry)
            return {"X-Registry-Auth": auth.encode_header(found).decode()} if found else {}

    # -- calls ---------------------------------------------------------------------

    def ping(self, timeout: float | None = None) -> str:
        """Check the engine answers; adopt its API version (capped at :data:`MAX_API`)."""
        with self.answer("the ping"):
            _, headers, _ = self.http.call(
                "GET", "/_ping", timeout=timeout or self.connect_timeout, versioned=False
            )
        version = str(headers.get("api-version") or "1.41")  # names are lowercased
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
        with self.answer():
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
        with self.answer():
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
        with self.answer():
            stream = self.http.stream(path, params, None if follow else 15.0)
        return _Frames(self, stream)

    def pull(
        self,
        image: str,
        on_event: Callable[[dict[str, Any]], None],
        idle_timeout: float = PULL_IDLE_TIMEOUT,
    ) -> None:
        """Pull ``image``; EngineError on a failed pull, EngineTimeout when it stalls.

        The request ``docker pull`` makes, credentials included, with a bound on each wait
        for progress (a registry that stops answering is an error, not a hang)."""
        repository, tag = _repository_tag(image)
        params = {"fromImage": repository, "tag": tag or "latest"}
        auth = self.registry_auth(repository)
        try:
            with self.answer("pulling"):
                stream = self.http.stream("/images/create", params, idle_timeout, "POST", auth)
                try:
                    for event in stream.documents():
                        if event.get("error"):
                            raise EngineError(500, str(event["error"]))
                        on_event(event)
                except ValueError as exc:
                    raise EngineError(500, f"the engine's answer is not JSON: {exc}") from None
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

    def __init__(self, engine: Engine, stream: http.Stream) -> None:
        self.engine = engine
        self.stream = stream

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        with self.engine.answer("reading the log"):
            yield from self.stream.frames()

    def close(self) -> None:
        self.stream.close()


def _repository_tag(image: str) -> tuple[str, str | None]:
    """``registry:5000/team/img:2`` -> (``registry:5000/team/img``, ``2``); a digest
    (``img@sha256:...``) is the tag; no tag: None (as the Docker CLI splits them)."""
    if "@" in image:
        repository, _, digest = image.rpartition("@")
        return repository, digest
    repository, _, tag = image.rpartition(":")
    if repository and "/" not in tag:
        return repository, tag
    return image, None


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
    ``DOCKER_HOST`` (None: read with its TLS variables by the SDK), else the current Docker
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


def local(timeout: float = 10.0) -> Engine:
    """The engine local runs use, checked with a ping: one clear message when it is down."""
    engine = connect(timeout)
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
    return engine


def _parse_version(text: str) -> tuple[int, int]:
    try:
        major, minor = text.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (1, 41)


_REASONS = (
    ("No such file or directory", "no such socket (No such file or directory)"),
    ("Connection refused", "connection refused"),
    ("Permission denied", "permission denied"),
    ("timed out", "timed out"),
    ("RemoteDisconnected", "the engine closed the connection"),
    ("Connection broken", "the engine closed the connection"),
    ("Connection reset", "the engine closed the connection"),
)


def _reason(exc: BaseException) -> str:
    """What went wrong with the connection, in a few words (the SDK nests the cause)."""
    text = f"{exc!s} {exc.__cause__ or ''} {exc.__context__ or ''}"
    for needle, reason in _REASONS:
        if needle in text:
            return reason
    first = str(exc).splitlines()[0][:200] if str(exc) else ""
    return first or type(exc).__name__
