"""Serving the dashboard: the socket, the address with its token, and uvicorn.

Contract: :func:`serve` binds ``host:port`` itself before anything else (a port in use
is a :class:`~nodus_cli.errors.UsageError` naming the port, exit 2, before a line is
printed), announces the address with its token through ``announce`` (as Jupyter does),
and serves until interrupted. Port 0 picks a free port; the address says which.

Why bind first: uvicorn reports a port in use by logging and exiting; binding the
socket here turns it into nodus's own error, with a hint, and no traceback.
"""

from __future__ import annotations

import errno
import socket
import webbrowser
from collections.abc import Callable
from pathlib import Path

from nodus_cli.dashboard.access import new_token
from nodus_cli.dashboard.app import create_app
from nodus_cli.errors import UsageError

__all__ = ["LOOPBACK", "address", "bind", "serve"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def address(host: str, port: int, token: str) -> str:
    """The dashboard's address with its token (IPv6 hosts in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?token={token}"


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (UsageError naming the port otherwise)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            why = "in use" if exc.errno == errno.EADDRINUSE else "not yours to use"
            raise UsageError(
                f"port {port} on {host} is {why}",
                hint=f"choose another with --port (e.g. --port {port + 1 if port else 8765}, "
                "or --port 0 for any free one)",
            ) from None
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror}",
            hint="--host takes an address of this machine (127.0.0.1 by default)",
        ) from None
    return sock


def serve(
    host: str,
    port: int,
    open_browser: bool,
    announce: Callable[[str], None],
    home: Path | None = None,
) -> None:
    """Serve the dashboard on ``host:port`` until interrupted; see the module."""
    import uvicorn

    sock = bind(host, port)
    token = new_token()
    url = address(host, sock.getsockname()[1], token)
    announce(url)
    if open_browser:
        webbrowser.open(url)
    config = uvicorn.Config(
        create_app(token, home), log_level="warning", access_log=False, lifespan="off"
    )
    uvicorn.Server(config).run(sockets=[sock])
