"""Access to the Docker engine, with one clear message when it cannot be reached.

:class:`Engine` is a small Engine-API client on the standard library (HTTP/1.1 over the
unix socket, or TCP with optional TLS); local runs and the Swarm target use it. It costs
next to no import time, which matters for a command whose own overhead is measured
against ``docker run`` (benchmarks/run_overhead.py); the Docker SDK is imported only to
read registry credentials for a pull.

It reads ``DOCKER_HOST`` (default ``unix:///var/run/docker.sock``) and, for TCP,
``DOCKER_TLS_VERIFY`` / ``DOCKER_CERT_PATH`` like the ``docker`` CLI.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from nodus_cli.problems import NodusError

if TYPE_CHECKING:
    import http.client

DEFAULT_HOST = "unix:///var/run/docker.sock"
#: Device requests (GPUs) need API 1.40 (Docker 19.03).
MIN_GPU_API = (1, 40)
#: The newest API version nodus was checked against; newer engines speak it too.
MAX_API = (1, 44)
#: Seconds a pull may go without any progress from the engine before nodus gives up.
PULL_IDLE_TIMEOUT = 120.0
_UNSET: Any = object()


class EngineUnreachable(Exception):
    """No answer from the engine (socket missing, refused, or the connection dropped)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"cannot reach the Docker engine at {where}: {reason}")
        self.where = where
        self.reason = reason

    def as_nodus_error(self) -> NodusError:
        return NodusError(str(self), hint=_HINT)


class EngineError(Exception):
    """The engine answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class EngineTimeout(Exception):
    """A call with a deadline (a container wait, a silent pull) ran past it."""


_HINT = (
    "is dockerd running (`docker info`)? check DOCKER_HOST and that you may use the "
    "socket (root or the docker group)"
)


def _where() -> str:
    return os.environ.get("DOCKER_HOST") or DEFAULT_HOST


@cache
def _unix_connection_class() -> Any:
    import http.client

    class _UnixConnection(http.client.HTTPConnection):
        def __init__(self, path: str, timeout: float | None) -> None:
            super().__init__("localhost", timeout=timeout)
            self._path = path

        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self._path)
            except BaseException:
                sock.close()
                raise
            self.sock = sock

    return _UnixConnection


class Response:
    """An HTTP/1.1 response read straight off the socket (Content-Length, chunked, or EOF).

    The standard library's ``http.client`` would do, but importing it (with ``ssl`` and
    ``email``) costs more than the rest of a local run's bookkeeping.
    """

    def __init__(self, sock: socket.socket, method: str) -> None:
        self._sock = sock
        self._fp = sock.makefile("rb")
        line = self._fp.readline(65537)
        parts = line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ConnectionError(f"not an HTTP answer: {line[:60]!r}")
        self.status = int(parts[1])
        self.headers: dict[str, str] = {}
        while True:
            raw = self._fp.readline(65537)
            if not raw:
                raise ConnectionError("the engine closed the connection mid-answer")
            if raw in (b"\r\n", b"\n"):
                break
            name, _, value = raw.decode("latin-1").partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        length = self.headers.get("content-length")
        self._remaining: int | None = int(length) if length and not self._chunked else None
        if method == "HEAD" or self.status in (204, 304) or 100 <= self.status < 200:
            self._remaining = 0
        self._chunk_left = 0
        self._eof = self._remaining == 0

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    def read1(self, size: int = 65536) -> bytes:
        """Up to ``size`` bytes as soon as any are there; b"" at the end of the body."""
        if self._eof:
            return b""
        if self._chunked:
            if self._chunk_left == 0:
                line = self._fp.readline(65537)
                if not line:
                    raise ConnectionError("the engine closed the connection mid-answer")
                self._chunk_left = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if self._chunk_left == 0:
                    while self._fp.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    self._eof = True
                    return b""
            data = self._fp.read1(min(size, self._chunk_left))
            if not data:
                raise ConnectionError("the engine closed the connection mid-answer")
            self._chunk_left -= len(data)
            if self._chunk_left == 0:
                self._fp.readline(65537)  # the CRLF after the chunk
            return data
        if self._remaining is not None:
            data = self._fp.read1(min(size, self._remaining))
            if not data:
                raise ConnectionError("the engine closed the connection mid-answer")
            self._remaining -= len(data)
            self._eof = self._remaining == 0
            return data
        data = self._fp.read1(size)
        if not data:
            self._eof = True
        return data

    def read(self, size: int = -1) -> bytes:
        """Exactly ``size`` bytes (fewer only at the end of the body); all with -1."""
        parts: list[bytes] = []
        got = 0
        while size < 0 or got < size:
            data = self.read1(65536 if size < 0 else size - got)
            if not data:
                break
            parts.append(data)
            got += len(data)
        return b"".join(parts)

    def close(self) -> None:
        self._fp.close()
        self._sock.close()


class Engine:
    """The handful of Engine-API calls a local run needs; one connection per call."""

    def __init__(self, host: str | None = None, connect_timeout: float = 10.0) -> None:
        self.where = host or _where()
        self.connect_timeout = connect_timeout
        self.api = "1.41"
        url = urlsplit(self.where)
        self._scheme = url.scheme
        self._ssl: Any = None
        if url.scheme == "unix":
            self._path = url.path or "/var/run/docker.sock"
        elif url.scheme in ("tcp", "http", "https"):
            self._host = url.hostname or "localhost"
            tls = url.scheme == "https" or bool(
                os.environ.get("DOCKER_TLS_VERIFY") or os.environ.get("DOCKER_CERT_PATH")
            )
            self._port = url.port or (2376 if tls else 2375)
            if tls:
                self._ssl = _tls_context()
        else:
            raise NodusError(
                f"DOCKER_HOST={self.where}: nodus reaches the engine over a unix socket or "
                "tcp:// (with DOCKER_TLS_VERIFY/DOCKER_CERT_PATH for TLS)",
                hint="for ssh://, forward the socket (`ssh -NL /tmp/docker.sock:"
                "/var/run/docker.sock HOST`) and set DOCKER_HOST=unix:///tmp/docker.sock",
            )

    # -- transport -----------------------------------------------------------------

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        """An ``http.client`` connection to the engine (for callers that want one)."""
        import http.client

        if self._scheme == "unix":
            conn: http.client.HTTPConnection = _unix_connection_class()(self._path, timeout)
            return conn
        if self._ssl is not None:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=self._ssl
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _socket(self, timeout: float | None) -> socket.socket:
        if self._scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.connect_timeout if timeout is None else timeout)
            try:
                sock.connect(self._path)
            except BaseException:
                sock.close()
                raise
        else:
            sock = socket.create_connection((self._host, self._port), self.connect_timeout)
            if self._ssl is not None:
                sock = self._ssl.wrap_socket(sock, server_hostname=self._host)
        sock.settimeout(timeout)
        return sock

    @contextmanager
    def _call(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        body: Any = None,
        timeout: float | None = _UNSET,
        headers: dict[str, str] | None = None,
        versioned: bool = True,
    ) -> Iterator[Response]:
        """One request; yields the response (status < 400) and closes the connection.

        ``timeout`` bounds every wait for the engine (None: wait as long as it takes).
        """
        url = (f"/v{self.api}" if versioned else "") + path
        if params:
            url += "?" + urlencode(params)
        data = b""
        lines = [f"{method} {url} HTTP/1.1", "Host: docker", "User-Agent: nodus"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body is not None:
            data = json.dumps(body).encode()
            lines.append("Content-Type: application/json")
        if body is not None or method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(data)}")
        lines.append("Connection: close")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data
        resp: Response | None = None
        sock: socket.socket | None = None
        try:
            try:
                sock = self._socket(self.connect_timeout if timeout is _UNSET else timeout)
                sock.sendall(request)
                resp = Response(sock, method)
            except TimeoutError:
                raise EngineTimeout(f"{method} {path}") from None
            except OSError as exc:
                raise EngineUnreachable(self.where, _reason(exc)) from None
            if resp.status >= 400:
                raise EngineError(resp.status, _error_message(_read(resp, self.where)))
            yield resp
        finally:
            if resp is not None:
                resp.close()
            elif sock is not None:
                sock.close()

    def _json(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        body: Any = None,
        timeout: float | None = _UNSET,
    ) -> Any:
        with self._call(method, path, params, body, timeout) as resp:
            raw = _read(resp, self.where)
        return json.loads(raw) if raw.strip() else None

    # -- calls ---------------------------------------------------------------------

    def ping(self) -> str:
        """Check the engine answers; adopt its API version (capped at :data:`MAX_API`)."""
        with self._call("GET", "/_ping", versioned=False) as resp:
            _read(resp, self.where)
            version = resp.getheader("Api-Version") or "1.41"
        self.api = _cap(version)
        return version

    def api_at_least(self, wanted: tuple[int, int]) -> bool:
        return _parse_version(self.api) >= wanted

    def image_present(self, image: str) -> bool:
        try:
            self._json("GET", f"/images/{quote(image, safe='/:@')}/json")
        except EngineError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def create(self, name: str, config: dict[str, Any]) -> str:
        doc = self._json("POST", "/containers/create", {"name": name}, config)
        return str(doc["Id"])

    def start(self, cid: str) -> None:
        self._json("POST", f"/containers/{cid}/start")

    def wait(self, cid: str, timeout: float | None = None) -> int:
        """Block until the container exits; its exit status. EngineTimeout past ``timeout``."""
        doc = self._json("POST", f"/containers/{cid}/wait", timeout=timeout)
        return int(doc.get("StatusCode", 1)) if isinstance(doc, dict) else 1

    def kill(self, cid: str, signal: str = "KILL") -> None:
        try:
            self._json("POST", f"/containers/{cid}/kill", {"signal": signal})
        except EngineError as exc:
            if exc.status not in (404, 409):  # gone already, or not running
                raise

    def remove(self, cid: str) -> None:
        """Force-remove a container and its anonymous volumes; a missing one is fine."""
        try:
            self._json("DELETE", f"/containers/{cid}", {"force": "1", "v": "1"})
        except EngineError as exc:
            if exc.status != 404:
                raise

    def inspect(self, cid: str) -> dict[str, Any]:
        doc: dict[str, Any] = self._json("GET", f"/containers/{cid}/json")
        return doc

    def containers(self, filters: dict[str, list[str]], all: bool = True) -> list[dict[str, Any]]:
        params = {"all": "1" if all else "0", "filters": json.dumps(filters)}
        found: list[dict[str, Any]] = self._json("GET", "/containers/json", params)
        return found

    def events(
        self, since: float, until: float, filters: dict[str, list[str]]
    ) -> list[dict[str, Any]]:
        """Past events between two wall-clock times (the call ends at ``until``)."""
        params = {
            "since": f"{since:.9f}",
            "until": f"{until:.9f}",
            "filters": json.dumps(filters),
        }
        with self._call("GET", "/events", params, timeout=30) as resp:
            return list(_json_stream(resp))

    def logs(self, cid: str) -> Iterator[tuple[int, bytes]]:
        """Follow a (non-TTY) container's output: (1 stdout | 2 stderr, bytes) frames."""
        params = {"follow": "1", "stdout": "1", "stderr": "1"}
        with self._call("GET", f"/containers/{cid}/logs", params, timeout=None) as resp:
            while True:
                header = resp.read(8)
                if len(header) < 8:
                    return
                size = int.from_bytes(header[4:8], "big")
                payload = resp.read(size) if size else b""
                yield header[0], payload
                if len(payload) < size:
                    return

    def pull(
        self,
        image: str,
        on_event: Callable[[dict[str, Any]], None],
        idle_timeout: float = PULL_IDLE_TIMEOUT,
    ) -> None:
        """Pull ``image``; EngineError on a failed pull, EngineTimeout when it stalls."""
        repository, tag = split_image(image)
        params = {"fromImage": repository}
        if tag:
            params["tag"] = tag
        headers = {}
        auth = _registry_auth(repository)
        if auth:
            headers["X-Registry-Auth"] = auth
        try:
            with self._call(
                "POST", "/images/create", params, timeout=idle_timeout, headers=headers
            ) as resp:
                for event in _json_stream(resp):
                    if event.get("error"):
                        raise EngineError(500, str(event["error"]))
                    on_event(event)
        except EngineUnreachable as exc:
            # A dropped stream in the middle of a pull is a timeout or an engine restart.
            raise EngineError(500, exc.reason) from None

    def alive(self) -> bool:
        try:
            with self._call("GET", "/_ping", timeout=5, versioned=False) as resp:
                _read(resp, self.where)
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


def local(timeout: float = 10.0) -> Engine:
    """The engine local runs use, checked with a ping: one clear message when it is down."""
    engine = Engine(connect_timeout=timeout)
    try:
        engine.ping()
    except EngineUnreachable as exc:
        raise exc.as_nodus_error() from None
    except EngineTimeout:
        raise NodusError(
            f"the Docker engine at {engine.where} did not answer within {timeout:g} s",
            hint=_HINT,
        ) from None
    except EngineError as exc:
        raise NodusError(
            f"the Docker engine at {engine.where} answered the ping with an error: {exc}",
            hint=_HINT,
        ) from None
    return engine


def ensure_image(engine: Engine, image: str, progress: bool = True) -> None:
    """Pull ``image`` when the engine does not have it, showing progress on a terminal.

    A pull that fails, or that makes no progress for ``NODUS_PULL_TIMEOUT`` seconds
    (default 120), is one clear error: nothing has started yet.
    """
    try:
        if engine.image_present(image):
            return
    except EngineUnreachable as exc:
        raise exc.as_nodus_error() from None
    except EngineError as exc:
        raise NodusError(f"cannot inspect image {image}: {exc}") from None
    idle = _pull_timeout()
    try:
        with _PullDisplay(image, progress) as display:
            engine.pull(image, display.event, idle_timeout=idle)
        if not engine.image_present(image):
            raise EngineError(404, "the engine reports the pull done but has no such image")
    except EngineTimeout:
        raise NodusError(
            f"cannot get image {image}: the engine made no progress pulling it for {idle:g} s",
            hint="is a registry reachable from the Docker engine? without one, `docker load` "
            "the image first (NODUS_PULL_TIMEOUT sets this limit)",
        ) from None
    except (EngineError, EngineUnreachable) as exc:
        detail = exc.message if isinstance(exc, EngineError) else exc.reason
        raise NodusError(
            f"cannot get image {image}: {detail}",
            hint="check the name and tag; for a private registry run `docker login`; "
            "without a registry, `docker load` the image first",
        ) from None


class _PullDisplay:
    """Layer-by-layer progress on a terminal; one line otherwise."""

    def __init__(self, image: str, progress: bool) -> None:
        self.image = image
        self.progress = progress
        self._bar: Any = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> _PullDisplay:
        from nodus_cli.output import error_console

        err = error_console()
        if self.progress and err.is_terminal:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                console=err,
                transient=True,
            )
            self._bar.__enter__()
        else:
            err.print(f"pulling {self.image} …")
        return self

    def event(self, event: dict[str, Any]) -> None:
        if self._bar is None:
            return
        layer = event.get("id")
        detail = event.get("progressDetail") or {}
        if layer and detail.get("total"):
            if layer not in self._tasks:
                self._tasks[layer] = self._bar.add_task(
                    f"{self.image} {layer}", total=detail["total"]
                )
            self._bar.update(self._tasks[layer], completed=detail.get("current", 0))

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


def split_image(image: str) -> tuple[str, str | None]:
    """``repo[:tag][@digest]`` -> (what to pull, tag); a digest is pulled as given."""
    if "@" in image:
        return image, None
    name, sep, tag = image.rpartition(":")
    if sep and "/" not in tag:
        return name, tag
    return image, "latest"


def _registry_auth(repository: str) -> str | None:
    """The X-Registry-Auth header `docker pull` would send, from ~/.docker/config.json."""
    try:
        from docker import auth

        registry, _ = auth.resolve_repository_name(repository)
        found = auth.resolve_authconfig(auth.load_config(), registry)
        return auth.encode_header(found).decode() if found else None
    except Exception:  # no credentials is the common case; the pull says if they are needed
        return None


def _tls_context() -> Any:
    import ssl

    cert_dir = os.environ.get("DOCKER_CERT_PATH") or os.path.expanduser("~/.docker")
    verify = bool(os.environ.get("DOCKER_TLS_VERIFY"))
    ca = os.path.join(cert_dir, "ca.pem")
    ctx = ssl.create_default_context(cafile=ca if verify and os.path.exists(ca) else None)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    cert, key = os.path.join(cert_dir, "cert.pem"), os.path.join(cert_dir, "key.pem")
    if os.path.exists(cert) and os.path.exists(key):
        ctx.load_cert_chain(cert, key)
    return ctx


def _read(resp: Response, where: str) -> bytes:
    try:
        return resp.read()
    except TimeoutError:
        raise EngineTimeout("reading the answer") from None
    except (OSError, ValueError) as exc:
        raise EngineUnreachable(where, _reason(exc)) from None


def _json_stream(resp: Response) -> Iterator[dict[str, Any]]:
    """JSON objects one after another (events, pull progress)."""
    decoder = json.JSONDecoder()
    buffer = ""
    while True:
        try:
            chunk = resp.read1(65536)
        except TimeoutError:
            raise EngineTimeout("waiting for the engine") from None
        except (OSError, ValueError) as exc:
            raise EngineUnreachable("the engine", _reason(exc)) from None
        if not chunk:
            return
        buffer += chunk.decode("utf-8", "replace")
        while True:
            buffer = buffer.lstrip()
            if not buffer:
                break
            try:
                obj, end = decoder.raw_decode(buffer)
            except ValueError:
                break  # incomplete: wait for more
            buffer = buffer[end:]
            if isinstance(obj, dict):
                yield obj


def _error_message(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        return text or "no detail"
    if isinstance(doc, dict) and doc.get("message"):
        return str(doc["message"])
    return text


def _parse_version(text: str) -> tuple[int, int]:
    try:
        major, minor = text.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (1, 41)


def _cap(version: str) -> str:
    parsed = min(_parse_version(version), MAX_API)
    return f"{parsed[0]}.{parsed[1]}"


def _pull_timeout() -> float:
    try:
        value = float(os.environ.get("NODUS_PULL_TIMEOUT", PULL_IDLE_TIMEOUT))
    except ValueError:
        return PULL_IDLE_TIMEOUT
    return value if value > 0 else PULL_IDLE_TIMEOUT


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, FileNotFoundError) or "No such file or directory" in text:
        return "no such socket (No such file or directory)"
    if isinstance(exc, ConnectionRefusedError) or "Connection refused" in text:
        return "connection refused"
    if isinstance(exc, PermissionError) or "Permission denied" in text:
        return "permission denied"
    if isinstance(exc, TimeoutError) or "timed out" in text:
        return "timed out"
    if isinstance(exc, ConnectionResetError) or type(exc).__name__ in (
        "RemoteDisconnected",
        "IncompleteRead",
    ):
        return "the engine closed the connection"
    return text.splitlines()[0][:200] if text else type(exc).__name__
