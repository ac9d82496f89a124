"""A real HTTP server on 127.0.0.1 (random port, in a thread) for ``nodus catalog update``.

Each path answers as its :class:`Route` says: a file (with an ETag and Last-Modified, and
304 to a matching conditional request), an error status, silence (never answers) or a
body cut short of its Content-Length. Every request is recorded with its headers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LAST_MODIFIED = "Tue, 01 Dec 2026 00:00:00 GMT"


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    etag: str | None = '"v1"'
    last_modified: str | None = LAST_MODIFIED
    #: "ok", "hang" (never answer), "partial" (half the body, then close)
    mode: str = "ok"
    content_type: str = "text/csv"


@dataclass
class Seen:
    path: str
    headers: dict[str, str]


@dataclass
class CatalogServer:
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    port: int = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def hits(self, path: str) -> list[Seen]:
        return [r for r in self.requests if r.path == path]


def _handler(server: CatalogServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            server.requests.append(Seen(self.path, {k: v for k, v in self.headers.items()}))
            route = server.routes.get(self.path)
            if route is None:
                self._send(404, b"not found\n")
                return
            if route.mode == "hang":
                server.release.wait(30)
                self.close_connection = True
                return
            if route.status != 200:
                self._send(route.status, b"server error\n")
                return
            match = route.etag is not None and self.headers.get("If-None-Match") == route.etag
            since = route.last_modified is not None and (
                self.headers.get("If-Modified-Since") == route.last_modified
            )
            if match or (since and self.headers.get("If-None-Match") is None):
                self.send_response(304)
                self._validators(route)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", route.content_type)
            self._validators(route)
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            if route.mode == "partial":
                self.wfile.write(route.body[: len(route.body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(route.body)

        def _validators(self, route: Route) -> None:
            if route.etag:
                self.send_header("ETag", route.etag)
            if route.last_modified:
                self.send_header("Last-Modified", route.last_modified)

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@contextmanager
def serving() -> Iterator[CatalogServer]:
    state = CatalogServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        time.sleep(0.01)
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
