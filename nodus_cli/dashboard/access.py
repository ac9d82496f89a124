"""Who may use the dashboard: the holder of its access token, and only from its own pages.

Contract: every request carries the token, as ``?token=TOKEN`` (a first visit: answered
with an HttpOnly, SameSite=Strict cookie and a redirect to the same address without the
token, so that it leaves the address bar and the history), as that cookie, or as
``Authorization: Bearer TOKEN`` (programs). Anything else is refused (401) with words
that say how to get in. A POST (the stop action, the plan form) must also come from the
dashboard's own pages: a browser sends ``Origin`` (or ``Referer``) with a POST, and it
must be the dashboard's own address; a POST with neither is accepted only with the bearer
token (a program, which no other site can make a browser send).

Why a pure ASGI middleware: it sees every request (pages, ``/api/``, the static files and
the log streams) before any route, and never buffers a streamed answer.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

__all__ = ["TokenGate", "new_token"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

REFUSED = (
    "this dashboard needs its access token: open the address `nodus dashboard` printed "
    "(it ends with ?token=...), or send the header `Authorization: Bearer TOKEN`"
)
CROSS_SITE = (
    "refused: this request did not come from the dashboard's own pages (its Origin or "
    "Referer is another site's, or a POST came with neither and no bearer token)"
)


def new_token() -> str:
    """A fresh access token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)


class TokenGate:
    """The middleware: lets through requests that carry ``token``; see the module."""

    def __init__(self, app: App, token: str) -> None:
        self.app = app
        self.token = token
        #: One cookie per dashboard (two on one host, on other ports, keep theirs).
        self.cookie = "nodus_dashboard_" + hashlib.sha256(token.encode()).hexdigest()[:10]

    def _same(self, given: str | None) -> bool:
        return given is not None and secrets.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = dict(query).get("token")
        bearer = headers.get("authorization", "")
        by_bearer = bearer.lower().startswith("bearer ") and self._same(bearer[7:].strip())
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no token
            cookie = SimpleCookie()
        by_cookie = self.cookie in cookie and self._same(cookie[self.cookie].value)
        if given is not None and self._same(given) and scope["method"] in ("GET", "HEAD"):
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            where = scope.get("root_path", "") + scope["path"] + (f"?{rest}" if rest else "")
            await _answer(
                send,
                303,
                "to the dashboard",
                [
                    ("location", where),
                    (
                        "set-cookie",
                        f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict",
                    ),
                ],
            )
            return
        if not (by_bearer or by_cookie):
            await _answer(send, 401, REFUSED, [("www-authenticate", "Bearer")])
            return
        if scope["method"] not in ("GET", "HEAD") and not _own(headers, scope, by_bearer):
            await _answer(send, 403, CROSS_SITE, [])
            return
        await self.app(scope, receive, send)


def _own(headers: dict[str, str], scope: Scope, by_bearer: bool) -> bool:
    """Whether a state-changing request comes from the dashboard's own pages."""
    came = headers.get("origin") or headers.get("referer")
    if not came or came == "null":
        return by_bearer and not came
    parts = urlsplit(came)
    host = headers.get("host", "")
    scheme = scope.get("scheme", "http")
    return f"{parts.scheme}://{parts.netloc}" == f"{scheme}://{host}"


async def _answer(send: Send, status: int, text: str, headers: list[tuple[str, str]]) -> None:
    body = (text + "\n").encode()
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    raw += [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
