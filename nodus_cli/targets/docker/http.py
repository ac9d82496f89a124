"""The Engine API over its socket: the standard library's HTTP client, the engine's errors.

Every call nodus makes to a Docker engine (a local run's, a Swarm manager's, a pull) goes
through :class:`Http`: the standard library's :mod:`http.client` does the HTTP/1.1 (the
status line, the headers, chunked bodies), connected to the engine's unix socket, or over
TCP, with TLS when :class:`Tls` says so. The Docker SDK is not used for any call: importing
it (and ``requests`` under it) costs every ``nodus run`` more than its calls do. One
kept-alive connection per thread (a thread's calls never wait for another's), and a
connection of its own for each stream (logs, events, a pull's progress), which
``close()`` cuts from any thread. What is Docker's own protocol stays here too: the
multiplexed frames of a container's output, and the JSON documents of a progress stream.

Contract: whatever goes wrong, :class:`Http` raises one of the engine's failures, made in
one place (:func:`_failure`, by one table): :class:`EngineUnreachable` (no answer: the
socket missing or refused, the connection dropped), :class:`EngineTimeout` (no answer
within the call's deadline) and :class:`EngineError` (an error answer, with its status and
the engine's message). :mod:`.engine` names them for its callers.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote, urlencode, urlsplit

from nodus_cli.errors import NodusError

if TYPE_CHECKING:
    import ssl

__all__ = [
    "UNREACHABLE_HINT",
    "EngineError",
    "EngineFailure",
    "EngineTimeout",
    "EngineUnreachable",
    "Http",
    "Stream",
    "Tls",
    "path_of",
]

#: An answer whose connection ended before its body did: never taken for a whole answer
#: (a container wait cut short is not an exit code).
_CUT = "the engine closed the connection in the middle of its answer"
_CLOSED = "the engine closed the connection"
#: A stream (a log, the events) that ended other than by its end or by ``close()``.
_STREAM_CUT = "the engine closed the stream"
#: What to check when the engine does not answer as it should.
UNREACHABLE_HINT = (
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
        return NodusError(str(self), hint=UNREACHABLE_HINT)


class EngineError(EngineFailure):
    """The engine answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class EngineTimeout(EngineFailure):
    """A call with a deadline (a container wait, a silent pull) ran past it."""


#: What the transport saw, in the words of :class:`EngineUnreachable` (first match wins).
_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (http.client.IncompleteRead, _CUT),
    (FileNotFoundError, "no such socket (No such file or directory)"),
    (ConnectionRefusedError, "connection refused"),
    (PermissionError, "permission denied"),
    (ConnectionResetError, _CLOSED),  # http.client.RemoteDisconnected among them
    (BrokenPipeError, _CLOSED),
)


def _failure(exc: BaseException, where: str, doing: str) -> EngineFailure:
    """The one translation of what went wrong on the way to the engine and back."""
    if isinstance(exc, EngineFailure):
        return exc
    if isinstance(exc, TimeoutError):
        return EngineTimeout(f"{doing}: no answer in time")
    for kind, words in _REASONS:
        if isinstance(exc, kind):
            return EngineUnreachable(where, words)
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return EngineUnreachable(where, text or type(exc).__name__)


#: What a call to the engine can raise on its way, all of it turned by :func:`_failure`.
_TRANSPORT = (OSError, http.client.HTTPException, ValueError)


class Tls(NamedTuple):
    """TLS to a ``tcp://`` engine: the CA to verify it with, a client certificate. The one
    description of it (``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH`` and a Docker context's
    folder both become one of these)."""

    ca: str | None = None
    cert: tuple[str, str] | None = None
    verify: bool = True

    def context(self) -> ssl.SSLContext:
        import ssl

        ctx = ssl.create_default_context(cafile=self.ca)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert is not None:
            ctx.load_cert_chain(*self.cert)
        return ctx


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection to the engine's unix socket."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Stream:
    """An answer read as it comes (a followed log, the engine's events, a pull's progress);
    ``close()`` from any thread ends it, and whoever reads it sees the end."""

    def __init__(
        self, conn: http.client.HTTPConnection, answer: http.client.HTTPResponse, where: str
    ) -> None:
        self._conn = conn
        self._sock: socket.socket = conn.sock
        self._answer = answer
        self._where = where
        self._closed = False

    def read(self, size: int) -> bytes:
        """Exactly ``size`` bytes (fewer only at the end); b"" once it ended or was closed."""
        return self._guarded(lambda: self._answer.read(size))

    def _guarded(self, read: Callable[[], bytes]) -> bytes:
        """``read()``, as the stream's reader needs it: b"" once closed (by :meth:`close`
        from another thread too), else the engine's failure."""
        if self._closed:
            return b""
        try:
            return read()
        except _TRANSPORT as exc:
            if self._closed:  # cut by close(): the end, not a failure
                return b""
            if isinstance(exc, TimeoutError):
                raise _failure(exc, self._where, "reading a stream") from None
            raise EngineUnreachable(self._where, _STREAM_CUT) from None
        except AttributeError:
            # close() from another thread took the answer's file away in the middle of
            # a read (http.client then reads from None): the end, as above.
            if self._closed:
                return b""
            raise

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """A non-TTY container's output: (1 stdout | 2 stderr, bytes) frames (Docker's
        multiplexed stream: an 8-byte header, the stream and then the size of what follows
        in its last four bytes)."""
        while len(header := self.read(8)) == 8:
            size = int.from_bytes(header[4:8], "big")
            yield header[0], self.read(size) if size else b""

    def documents(self) -> Iterator[dict[str, Any]]:
        """The JSON documents of the answer (the engine's events, a pull's progress), each
        as soon as its line ends; documents that share a line are read apart too."""
        pending = b""
        while True:
            part = self._guarded(lambda: self._answer.read1(65536))
            if part:
                pending += part
                if b"\n" not in part:
                    continue
                whole, _, pending = pending.rpartition(b"\n")
            else:
                whole, pending = pending, b""
            yield from _documents(whole)
            if not part:
                return

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading it
        with contextlib.suppress(OSError):
            self._answer.close()
        with contextlib.suppress(OSError):
            self._conn.close()


class Http:
    """Calls of the Engine API at ``where`` (``unix:///path`` or ``tcp://host:port``)."""

    def __init__(self, where: str, timeout: float = 10.0, tls: Tls | None = None) -> None:
        url = urlsplit(where)
        self.where = where
        self.unix = url.scheme == "unix"
        self.socket_path = url.path
        self.host = url.hostname or "localhost"
        #: The docker CLI's default ports.
        self.port = url.port or (2376 if tls is not None else 2375)
        self.tls = tls
        self.timeout = timeout
        self.version = "1.41"
        self._local = threading.local()
        self._ssl: ssl.SSLContext | None = None

    # -- connections ----------------------------------------------------------------

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        """A new connection, not yet connected."""
        if self.unix:
            return _UnixConnection(self.socket_path, timeout)
        if self.tls is None:
            return http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        if self._ssl is None:
            self._ssl = self.tls.context()
        return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._ssl)

    def _pooled(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connection(self.timeout)
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
        if not params:
            return f"{prefix}{path}"
        query = _query(tuple((k, _param(v)) for k, v in params.items() if v is not None))
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
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One request on this thread's connection: (status, headers, body); EngineError
        for an error answer. A kept-alive connection the engine closed meanwhile (before
        any answer began) is made again, once."""
        payload = json.dumps(body).encode() if body is not None else None
        sent = {"User-Agent": "nodus", **(headers or {})}
        if payload is not None:
            sent["Content-Type"] = "application/json"
        target = self.url(path, params, versioned)
        for attempt in (1, 2):
            conn = self._pooled()
            fresh = conn.sock is None  # a close by the peer now is not an idle timeout
            answer = None
            try:
                if fresh:
                    conn.connect()
                conn.sock.settimeout(timeout or self.timeout)
                conn.request(method, target, payload, sent)
                answer = conn.getresponse()
                data = answer.read()
            except _TRANSPORT as exc:
                self._drop()
                closed = isinstance(exc, ConnectionResetError | BrokenPipeError)
                if closed and answer is None and not fresh and attempt == 1:
                    continue  # the engine closed an idle kept-alive connection
                raise _failure(exc, self.where, f"{method} {path}") from None
            if answer.status >= 400:
                raise EngineError(answer.status, _message(data, answer.status))
            return answer.status, answer.headers, data
        raise AssertionError("unreachable")  # pragma: no cover

    def json(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        _, _, data = self.call(method, path, params, body, timeout, headers=headers)
        return json.loads(data) if data.strip() else None

    def stream(
        self,
        path: str,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        wait: float | None = None,
    ) -> Stream:
        """A request answered as a stream, on a connection of its own. ``wait`` bounds the
        wait for the answer to begin (None: the connection's timeout), ``timeout`` each
        wait for more after that (None: as long as it takes)."""
        conn = self._connection(self.timeout)
        sent = {"User-Agent": "nodus", **(headers or {})}
        try:
            conn.connect()
            conn.sock.settimeout(wait or self.timeout)
            conn.request(method, self.url(path, params), None, sent)
            answer = conn.getresponse()
            if answer.status >= 400:
                data = answer.read()
                conn.close()
                raise EngineError(answer.status, _message(data, answer.status))
        except _TRANSPORT as exc:
            conn.close()
            raise _failure(exc, self.where, f"{method} {path}") from None
        stream = Stream(conn, answer, self.where)
        stream._sock.settimeout(timeout)
        return stream


def _documents(data: bytes) -> Iterator[dict[str, Any]]:
    """The JSON documents in ``data``, one after another (whitespace between them)."""
    text = data.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    at, end = 0, len(text)
    while True:
        while at < end and text[at].isspace():
            at += 1
        if at == end:
            return
        try:
            doc, at = decoder.raw_decode(text, at)
        except ValueError:
            said = f"the engine's answer is not JSON: {text[at : at + 80]!r}"
            raise EngineError(500, said) from None
        yield doc


def path_of(name: str) -> str:
    """A name or reference as a path segment (``registry:5000/team/img:2`` stays readable)."""
    return quote(name, safe="/:@")


@lru_cache(maxsize=256)
def _query(pairs: tuple[tuple[str, str], ...]) -> str:
    """A query string, remembered: a task's calls repeat a few (its listings' filters,
    ``stdout=1&stderr=1``...), and ``urlencode`` quotes a JSON filter a character at a
    time in Python."""
    return urlencode(pairs)


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
