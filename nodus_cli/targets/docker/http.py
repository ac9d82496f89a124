"""The Engine API over its socket, with the standard library alone.

Why not through the Docker SDK for every call: the SDK (and ``requests`` under it) costs
every ``nodus run`` some 60-120 ms to import and about a millisecond of CPU per call, where
a fan-out makes eight calls a task and a single run is measured against ``docker run``.
The calls a local run makes are few and plain HTTP/1.1, so they go straight to the socket:
one persistent connection per thread (a thread's calls never wait for another's), and a
connection of its own for each stream (logs, events), which ``close()`` cuts from any
thread. The SDK stays for what it does that this does not: pulling with the registry
credentials of the Docker CLI's configuration, and the Swarm calls.

Contract: :class:`Http` raises only :class:`Failure` (the engine unreachable, or the
connection dropped), :class:`Timeout`, and :class:`Status` (an error answer, with the
engine's message); :mod:`.engine` turns these into its own errors in one place.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

__all__ = ["Failure", "Http", "Status", "Stream", "Timeout", "Tls"]


class Failure(Exception):
    """No answer: the socket is missing or refused, or the connection dropped."""


class Timeout(Failure):
    """No answer within the call's deadline."""


class Status(Exception):
    """The engine answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Tls:
    """TLS to a ``tcp://`` engine: the CA to verify it with, a client certificate."""

    ca: str | None = None
    cert: tuple[str, str] | None = None
    verify: bool = True

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert is not None:
            ctx.load_cert_chain(*self.cert)
        return ctx


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Stream:
    """An answer read as it comes (a followed log, the engine's events); ``close()`` from
    any thread ends it, and whoever reads it sees the end."""

    def __init__(self, connection: http.client.HTTPConnection, response: Any) -> None:
        self.connection = connection
        self.response = response
        self._closed = False

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes (fewer only at the end); b"" once it ended or was closed."""
        if self._closed:
            return b""
        try:
            data: bytes = self.response.read(size)
            return data
        except TimeoutError:
            raise Timeout("no answer in time") from None
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            if self._closed:
                return b""
            raise Failure("the engine closed the stream") from None

    def readline(self) -> bytes:
        if self._closed:
            return b""
        try:
            line: bytes = self.response.readline()
            return line
        except TimeoutError:
            raise Timeout("no answer in time") from None
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            if self._closed:
                return b""
            raise Failure("the engine closed the stream") from None

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """A non-TTY container's output: (1 stdout | 2 stderr, bytes) frames."""
        while len(header := self.read(8)) == 8:
            size = int.from_bytes(header[4:8], "big")
            yield header[0], self.read(size) if size else b""

    def documents(self) -> Iterator[dict[str, Any]]:
        """One JSON document per line (the engine's events, a pull's progress)."""
        while line := self.readline():
            if line.strip():
                yield json.loads(line)

    def close(self) -> None:
        self._closed = True
        sock = self.connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading it
        self.connection.close()


class Http:
    """Calls of the Engine API at ``where`` (``unix:///path`` or ``tcp://host:port``)."""

    def __init__(self, where: str, timeout: float = 10.0, tls: Tls | None = None) -> None:
        url = urlsplit(where)
        self.unix = url.scheme == "unix"
        self.socket_path = url.path
        self.host = url.hostname or "localhost"
        self.port = url.port or (2376 if tls is not None else 2375)
        self.tls = tls
        self.timeout = timeout
        self.version = "1.41"
        self._local = threading.local()
        self._ssl: ssl.SSLContext | None = None

    # -- connections ----------------------------------------------------------------

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.unix:
            return _UnixConnection(self.socket_path, timeout or self.timeout)
        if self.tls is not None:
            if self._ssl is None:
                self._ssl = self.tls.context()
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout or self.timeout, context=self._ssl
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)

    def _pooled(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect(None)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def url(
        self, path: str, params: Mapping[str, Any] | None = None, versioned: bool = True
    ) -> str:
        prefix = f"/v{self.version}" if versioned else ""
        query = urlencode({k: _param(v) for k, v in (params or {}).items() if v is not None})
        return f"{prefix}{path}" + (f"?{query}" if query else "")

    # -- calls ----------------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        timeout: float | None = None,
        versioned: bool = True,
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One request on this thread's connection: (status, headers, body); Status for
        an error answer. A connection the engine closed while idle is made again once."""
        target = self.url(path, params, versioned)
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        for attempt in (1, 2):
            conn = self._pooled()
            reused = conn.sock is not None
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(timeout or self.timeout)
                elif timeout is not None:
                    conn.timeout = timeout
                conn.request(method, target, body=payload, headers=headers)
                response = conn.getresponse()
                data = response.read()
            except TimeoutError:
                self._drop()
                raise Timeout(f"{method} {path}: no answer in time") from None
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self._drop()
                if reused and attempt == 1:
                    continue  # the engine closed an idle kept-alive connection
                raise Failure(_words(exc)) from None
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                raise Failure(_words(exc)) from None
            if response.will_close:
                self._drop()
            if response.status >= 400:
                raise Status(response.status, _message(data, response.status))
            return response.status, response.headers, data
        raise AssertionError("unreachable")  # pragma: no cover

    def json(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        timeout: float | None = None,
    ) -> Any:
        _, _, data = self.call(method, path, params, body, timeout)
        return json.loads(data) if data.strip() else None

    def stream(
        self, path: str, params: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> Stream:
        """A GET answered as a stream, on a connection of its own. ``timeout`` bounds
        each wait for more (None: wait as long as it takes)."""
        conn = self._connect(self.timeout)
        try:
            conn.request("GET", self.url(path, params))
            response = conn.getresponse()
        except TimeoutError:
            conn.close()
            raise Timeout(f"GET {path}: no answer in time") from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise Failure(_words(exc)) from None
        if response.status >= 400:
            data = response.read()
            conn.close()
            raise Status(response.status, _message(data, response.status))
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return Stream(conn, response)


def path_of(name: str) -> str:
    """A name or reference as a path segment (``registry:5000/team/img:2`` stays readable)."""
    return quote(name, safe="/:@")


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _message(data: bytes, status: int) -> str:
    try:
        doc = json.loads(data)
        if isinstance(doc, dict) and doc.get("message"):
            return str(doc["message"])
    except ValueError:
        pass
    text = data.decode("utf-8", "replace").strip()
    return text or f"HTTP {status}"


_REASONS = (
    (FileNotFoundError, "no such socket (No such file or directory)"),
    (ConnectionRefusedError, "connection refused"),
    (PermissionError, "permission denied"),
    (http.client.RemoteDisconnected, "the engine closed the connection"),
    (ConnectionResetError, "the engine closed the connection"),
    (BrokenPipeError, "the engine closed the connection"),
    (http.client.IncompleteRead, "the engine closed the connection"),
)


def _words(exc: BaseException) -> str:
    for kind, words in _REASONS:
        if isinstance(exc, kind):
            return words
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return text or type(exc).__name__
