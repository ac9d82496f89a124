"""The Engine API over its socket, with the standard library alone.

Why not through the Docker SDK for every call: the SDK (and ``requests`` under it) costs
every ``nodus run`` some 60-120 ms to import and about a millisecond of CPU per call, where
a fan-out makes eight calls a task and a single run is measured against ``docker run``.
The calls a local run makes are few and plain HTTP/1.1, so they go straight to the socket:
one persistent connection per thread (a thread's calls never wait for another's), and a
connection of its own for each stream (logs, events), which ``close()`` cuts from any
thread. Even ``http.client`` is more than this needs (it parses headers with the email
package: 15 ms of every start), so the little HTTP/1.1 a client of dockerd speaks is
written here: a request, a status line, headers, a body of a known length or in chunks.
The SDK stays for what it does that this does not: pulling, with its progress stream.

Contract: :class:`Http` raises only :class:`Failure` (the engine unreachable, or the
connection dropped), :class:`Timeout`, and :class:`Status` (an error answer, with the
engine's message); :mod:`.engine` turns these into its own errors in one place.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import quote, urlencode, urlsplit

from nodus_cli.structs import struct

if TYPE_CHECKING:
    import ssl

__all__ = ["Failure", "Http", "Status", "Stream", "Timeout", "Tls", "path_of"]

#: The longest status or header line an engine sends (a guard against a wrong peer).
_MAX_LINE = 65536
#: An answer whose connection ended before its body did: never taken for a whole answer
#: (a container wait cut short is not an exit code).
_CUT = "the engine closed the connection in the middle of its answer"


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


class _Closed(Exception):
    """The peer closed a kept-alive connection before answering (worth one retry)."""


@struct(frozen=True)
class Tls:
    """TLS to a ``tcp://`` engine: the CA to verify it with, a client certificate."""

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


class _Connection:
    """One socket to the engine, answers read from it one after another."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.file: BinaryIO = sock.makefile("rb")
        self.open = True
        #: Not used yet: a close by the peer now is not an idle connection timing out.
        self.fresh = True

    def send(self, head: bytes, body: bytes | None) -> None:
        self.sock.sendall(head + body if body else head)

    def close(self) -> None:
        self.open = False
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(OSError):
            self.sock.close()


class _Answer:
    """An answer's status and headers, and its body, whole or as it comes."""

    def __init__(self, conn: _Connection, fresh: bool) -> None:
        self.conn = conn
        line = conn.file.readline(_MAX_LINE)
        if not line:
            if fresh:
                raise Failure("the engine closed the connection")
            raise _Closed()
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise Failure(f"not an HTTP answer: {line[:80]!r}")
        self.status = int(parts[1])
        self.headers: dict[str, str] = {}
        while True:
            header = conn.file.readline(_MAX_LINE)
            if header in (b"\r\n", b"\n", b""):
                break
            name, _, value = header.decode("latin-1").partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        length = self.headers.get("content-length")
        self.left: int | None = int(length) if length is not None and not self.chunked else None
        self.keep = self.headers.get("connection", "").lower() != "close"
        self._chunk = 0  # bytes left of the chunk being read
        self.done = self.status in (204, 304) or self.left == 0

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes of the body (all of it for -1); b"" at its end."""
        if self.done:
            return b""
        f = self.conn.file
        if self.left is not None:
            want = self.left if size < 0 else min(size, self.left)
            data = f.read(want)
            self.left -= len(data)
            if not data and want:
                raise Failure(_CUT)
            self.done = self.left == 0
            return data
        if not self.chunked:  # up to the connection's end
            data = f.read() if size < 0 else f.read(size)
            if not data or size < 0:
                self.done, self.keep = True, False
            return data
        parts: list[bytes] = []
        wanted = size
        while not self.done and (wanted < 0 or wanted > 0):
            if self._chunk == 0:
                line = f.readline(_MAX_LINE)
                if not line:  # the connection ended before the last chunk
                    raise Failure(_CUT)
                self._chunk = int(line.split(b";")[0].strip() or b"0", 16)
                if self._chunk == 0:
                    while f.readline(_MAX_LINE) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    self.done = True
                    break
            take = self._chunk if wanted < 0 else min(wanted, self._chunk)
            data = f.read(take)
            if not data:
                raise Failure(_CUT)
            parts.append(data)
            self._chunk -= len(data)
            if wanted > 0:
                wanted -= len(data)
            if self._chunk == 0:
                f.readline(_MAX_LINE)  # the chunk's own line end
        return b"".join(parts)


class Stream:
    """An answer read as it comes (a followed log, the engine's events); ``close()`` from
    any thread ends it, and whoever reads it sees the end."""

    def __init__(self, answer: _Answer) -> None:
        self.answer = answer
        self._closed = False

    def read(self, size: int) -> bytes:
        """Exactly ``size`` bytes (fewer only at the end); b"" once it ended or was closed."""
        parts: list[bytes] = []
        while size > 0:
            part = self._read(size)
            if not part:
                break
            parts.append(part)
            size -= len(part)
        return b"".join(parts)

    def _read(self, size: int) -> bytes:
        return self._guarded(lambda: self.answer.read(size))

    def readline(self) -> bytes:
        return self._guarded(self._line)

    def _guarded(self, read: Callable[[], bytes]) -> bytes:
        """``read()``, as the stream's reader needs it: b"" once closed (by :meth:`close`
        from another thread too), :class:`Timeout` or :class:`Failure` otherwise."""
        if self._closed:
            return b""
        try:
            return read()
        except TimeoutError:
            raise Timeout("no answer in time") from None
        except (OSError, ValueError, Failure):
            if self._closed:  # cut by close(): the end, not a failure
                return b""
            raise Failure("the engine closed the stream") from None

    def _line(self) -> bytes:
        parts: list[bytes] = []
        while True:
            part = self.answer.read(1)
            if not part:
                return b"".join(parts)
            parts.append(part)
            if part == b"\n":
                return b"".join(parts)

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """A non-TTY container's output: (1 stdout | 2 stderr, bytes) frames."""
        while len(header := self.read(8)) == 8:
            size = int.from_bytes(header[4:8], "big")
            yield header[0], self.read(size) if size else b""

    def documents(self) -> Iterator[dict[str, Any]]:
        """The JSON documents of the answer (the engine's events, a pull's progress): one
        a line, or several run together; ValueError for what is not JSON."""
        decoder = json.JSONDecoder()
        while line := self.readline():
            text = line.decode("utf-8", "replace").strip()
            while text:
                doc, end = decoder.raw_decode(text)
                yield doc
                text = text[end:].lstrip()

    def close(self) -> None:
        self._closed = True
        sock = self.answer.conn.sock
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading it
        self.answer.conn.close()


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

    def _connect(self, timeout: float | None) -> _Connection:
        try:
            if self.unix:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                try:
                    sock.connect(self.socket_path)
                except OSError:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection((self.host, self.port), timeout)
                if self.tls is not None:
                    if self._ssl is None:
                        self._ssl = self.tls.context()
                    sock = self._ssl.wrap_socket(sock, server_hostname=self.host)
        except TimeoutError:
            raise Timeout("connecting: no answer in time") from None
        except OSError as exc:
            raise Failure(_words(exc)) from None
        return _Connection(sock)

    def _pooled(self) -> _Connection:
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is None or not conn.open:
            conn = self._local.conn = self._connect(self.timeout)
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

    def _head(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host}", "User-Agent: nodus"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        elif method in ("POST", "PUT"):
            lines.append("Content-Length: 0")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

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
    ) -> tuple[int, dict[str, str], bytes]:
        """One request on this thread's connection: (status, headers, body); Status for
        an error answer. A kept-alive connection the engine closed meanwhile is made
        again, once."""
        payload = json.dumps(body).encode() if body is not None else None
        head = self._head(method, self.url(path, params, versioned), payload, headers)
        for attempt in (1, 2):
            conn = self._pooled()
            fresh, conn.fresh = conn.fresh, False
            try:
                conn.sock.settimeout(timeout or self.timeout)
                conn.send(head, payload)
                answer = _Answer(conn, fresh)
                data = answer.read()
            except _Closed:
                self._drop()
                if attempt == 1:
                    continue  # the engine closed an idle kept-alive connection
                raise Failure("the engine closed the connection") from None
            except TimeoutError:
                self._drop()
                raise Timeout(f"{method} {path}: no answer in time") from None
            except (BrokenPipeError, ConnectionResetError) as exc:
                self._drop()
                if not fresh and attempt == 1:
                    continue
                raise Failure(_words(exc)) from None
            except (OSError, ValueError) as exc:
                self._drop()
                raise Failure(_words(exc)) from None
            except Failure:
                self._drop()
                raise
            if not answer.keep or not answer.done:
                self._drop()
            if answer.status >= 400:
                raise Status(answer.status, _message(data, answer.status))
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
    ) -> Stream:
        """A request (without a body) answered as a stream, on a connection of its own.
        ``timeout`` bounds each wait for more (None: wait as long as it takes)."""
        conn = self._connect(self.timeout)
        try:
            conn.send(self._head(method, self.url(path, params), None, headers), None)
            answer = _Answer(conn, True)
        except TimeoutError:
            conn.close()
            raise Timeout(f"{method} {path}: no answer in time") from None
        except (OSError, ValueError, _Closed) as exc:
            conn.close()
            raise Failure(_words(exc)) from None
        if answer.status >= 400:
            data = answer.read()
            conn.close()
            raise Status(answer.status, _message(data, answer.status))
        conn.sock.settimeout(timeout)
        return Stream(answer)


def path_of(name: str) -> str:
    """A name or reference as a path segment (``registry:5000/team/img:2`` stays readable)."""
    return quote(name, safe="/:@")


@lru_cache(maxsize=256)
def _query(pairs: tuple[tuple[str, str], ...]) -> str:
    """A query string, remembered: a task's calls repeat a few (its listings' filters,
    ``stdout=1&stderr=1``...), and ``urlencode`` quotes a JSON filter a character at a
    time in Python (a listing's URL: 13.6 us, 5.0 remembered)."""
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


_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (FileNotFoundError, "no such socket (No such file or directory)"),
    (ConnectionRefusedError, "connection refused"),
    (PermissionError, "permission denied"),
    (ConnectionResetError, "the engine closed the connection"),
    (BrokenPipeError, "the engine closed the connection"),
    (_Closed, "the engine closed the connection"),
)


def _words(exc: BaseException) -> str:
    for kind, words in _REASONS:
        if isinstance(exc, kind):
            return words
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return text or type(exc).__name__
