"""A scripted Docker engine on a unix socket: the engine client at its HTTP boundary.

What a real dockerd cannot be made to do on demand (answer a newer API version, stall a
pull, drop a connection mid-answer, split a log frame across chunks) is scripted here::

    with FakeEngine() as fake:
        fake.route("GET", "/_ping", ping("1.45"))
        fake.route("POST", r"/v1\\.4\\d/containers/c/wait", stall())
        eng = engine.Engine(fake.host)

Each route is a method and a regular expression the whole request path (without its
query) must match; the first match answers. ``fake.requests`` lists what was asked
(method, path with query). Unmatched requests get a 404 like dockerd's. ``FakeEngine(tcp=True)``
listens on 127.0.0.1 instead (``tcp://``), with TLS when given a server ``ssl`` context.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import shutil
import socket
import socketserver
import ssl
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

Answer = Callable[["Handler"], None]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server | TcpServer

    def do_GET(self) -> None:
        self.server.fake.dispatch(self)

    do_POST = do_DELETE = do_HEAD = do_GET

    def log_message(self, *args: Any) -> None:
        pass

    def address_string(self) -> str:
        return "fake-engine"


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeEngine

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up on a stalled answer


class TcpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeEngine

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class FakeEngine:
    def __init__(self, tcp: bool = False, tls: ssl.SSLContext | None = None) -> None:
        # AF_UNIX paths are short (108 bytes): not under pytest's long tmp_path.
        self.folder = Path(tempfile.mkdtemp(prefix="nodus-fake-engine-"))
        self.path = self.folder / "docker.sock"
        self.routes: list[tuple[str, re.Pattern[str], Answer]] = []
        self.requests: list[tuple[str, str]] = []
        self.bodies: list[bytes] = []
        self.release = threading.Event()  # ends every stalled answer
        self.connections: list[socket.socket] = []
        self.server: Server | TcpServer
        if tcp:
            self.server = TcpServer(("127.0.0.1", 0), Handler)
            if tls is not None:
                self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        else:
            self.server = Server(str(self.path), Handler)
        self.server.fake = self

    @property
    def host(self) -> str:
        if isinstance(self.server, TcpServer):
            return f"tcp://127.0.0.1:{self.server.server_address[1]}"
        return f"unix://{self.path}"

    def route(self, method: str, path: str, answer: Answer) -> None:
        self.routes.append((method, re.compile(path), answer))

    def drop_connections(self) -> None:
        """Close every connection a client kept alive, as an engine restart does."""
        for conn in self.connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self.connections.clear()

    def dispatch(self, handler: Handler) -> None:
        self.connections.append(handler.connection)
        self.requests.append((handler.command, handler.path))
        length = int(handler.headers.get("Content-Length") or 0)
        self.bodies.append(handler.rfile.read(length) if length else b"")
        path = handler.path.split("?", 1)[0]
        for method, pattern, answer in self.routes:
            if method == handler.command and pattern.fullmatch(path):
                answer(handler)
                return
        reply(404, {"message": f"page not found: {path}"})(handler)

    def __enter__(self) -> FakeEngine:
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        shutil.rmtree(self.folder, ignore_errors=True)


# -- answers ---------------------------------------------------------------------------


def reply(status: int, doc: Any = None, headers: dict[str, str] | None = None) -> Answer:
    """A JSON answer (no body when ``doc`` is None)."""

    def answer(h: Handler) -> None:
        body = b"" if doc is None else json.dumps(doc).encode()
        h.send_response(status)
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        if doc is not None:
            h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return answer


def ping(api_version: str) -> Answer:
    return reply(200, None, {"Api-Version": api_version})


def chunked(parts: list[bytes], content_type: str, then_stall: bool = False) -> Answer:
    """A streamed answer, one chunk per part; ``then_stall``: it never ends by itself."""

    def answer(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", content_type)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for part in parts:
            h.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            h.wfile.flush()
        if then_stall:
            h.server.fake.release.wait(60)
        h.wfile.write(b"0\r\n\r\n")

    return answer


def stall(after_headers: bool = False) -> Answer:
    """No answer until the fake engine ends; ``after_headers``: headers first, as dockerd
    answers a container wait (the body comes when the container exits)."""

    def answer(h: Handler) -> None:
        if after_headers:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            h.wfile.flush()
        h.server.fake.release.wait(60)
        h.close_connection = True

    return answer


def hang_up() -> Answer:
    """The connection drops before any answer (an engine that died mid-call)."""

    def answer(h: Handler) -> None:
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)

    return answer


def frames(*items: tuple[int, bytes]) -> bytes:
    """A multiplexed log stream: each (1 stdout | 2 stderr, bytes) with its 8-byte header."""
    return b"".join(
        bytes([kind, 0, 0, 0]) + len(data).to_bytes(4, "big") + data for kind, data in items
    )
