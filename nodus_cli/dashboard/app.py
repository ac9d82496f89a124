"""The dashboard's web application: its routes, pages and ``/api/`` twins.

Contract: :func:`create_app` returns an ASGI application behind :class:`.access.TokenGate`
(every request needs the token). ``GET`` routes only read; the one action that changes
state is ``POST /runs/RUN_ID/stop`` (and ``POST /api/runs/RUN_ID/stop``); ``POST /plan``
and ``POST /api/plan`` plan a text and write nothing. A failure a user can act on
(:class:`~nodus_cli.errors.NodusError`) becomes a page or a JSON document with its
message and hint: an unknown run is a 404, damaged records a 503, a bad workload a 422,
a text over :data:`MAX_UPLOAD` a 413. Never a traceback.

Why sync handlers for the reads: the API is synchronous (SQLite, the Engine API over
``http.client``); Starlette runs them on its thread pool. The log stream is the one
``async`` handler: it waits with ``asyncio.sleep`` between reads of the log, so an open
page holds no thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from nodus_cli.api import CATALOG, target_names
from nodus_cli.dashboard import data, pages
from nodus_cli.dashboard.access import TokenGate
from nodus_cli.errors import InvalidWorkload, NodusError, UsageError

__all__ = ["LOG_POLL", "MAX_UPLOAD", "create_app"]

#: The largest workload text the plan page takes (bytes): a workload file's own limit.
MAX_UPLOAD = 1024 * 1024
#: How often a live log looks for new lines (seconds): lines reach the page within it.
LOG_POLL = 0.2
STATIC = Path(__file__).with_name("static")


def create_app(token: str, home: Path | None = None) -> TokenGate:
    """The dashboard over the records in ``home`` (default ``NODUS_HOME``), open to the
    holder of ``token``."""

    def api_or_page(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    def failure(request: Request, exc: NodusError, title: str) -> Response:
        if isinstance(exc, UsageError) and exc.message.startswith("no run "):
            status = 404
        elif isinstance(exc, InvalidWorkload):
            status = 422
        else:
            status = 503
        if api_or_page(request):
            return JSONResponse({"error": exc.message, "hint": exc.hint}, status_code=status)
        return HTMLResponse(pages.error_page(title, exc.message, exc.hint), status_code=status)

    def filters(request: Request) -> dict[str, Any]:
        q = request.query_params
        try:
            page = int(q.get("page") or 1)
        except ValueError:
            page = 1
        status = q.get("status") or None
        if status is not None and status not in data.STATUSES:
            raise UsageError(
                f"no run status {status!r}", hint=f"one of: {', '.join(data.STATUSES)}"
            )
        return {
            "page": page,
            "status": status,
            "target": q.get("target") or None,
            "workload": q.get("workload") or None,
        }

    def gpus(request: Request) -> Response:
        doc = data.gpus(home)
        if api_or_page(request):
            return JSONResponse(doc)
        return HTMLResponse(pages.gpus_page(doc))

    def runs(request: Request) -> Response:
        empty = {"page": 1, "more": False, "runs": [], "filters": {}}
        try:
            chosen = filters(request)
            doc = data.runs(home, **chosen)
        except NodusError as exc:
            if api_or_page(request):
                return failure(request, exc, "Runs")
            shown = {k: request.query_params.get(k) for k in ("status", "target", "workload")}
            page = pages.runs_page({**empty, "filters": shown}, (exc.message, exc.hint))
            return HTMLResponse(page, status_code=400 if isinstance(exc, UsageError) else 503)
        if api_or_page(request):
            return JSONResponse(doc)
        return HTMLResponse(pages.runs_page(doc))

    def run(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            doc = data.run(home, run_id)
            if api_or_page(request):
                return JSONResponse(doc)
            gpu = data.gpu(home, doc["id"])
        except NodusError as exc:
            return failure(request, exc, f"Run {run_id}")
        return HTMLResponse(pages.run_page(doc, gpu))

    def gpu(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            return JSONResponse(data.gpu(home, run_id))
        except NodusError as exc:
            return failure(request, exc, f"Run {run_id}")

    def stop(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            doc = data.stop(home, run_id)
        except NodusError as exc:
            return failure(request, exc, f"Stop {run_id}")
        status = 200 if doc["result"] == "stopped" else 409
        if api_or_page(request):
            return JSONResponse(doc, status_code=status)
        return HTMLResponse(pages.stopped_page(doc), status_code=status)

    def spend(request: Request) -> Response:
        try:
            doc = data.spend(home)
        except NodusError as exc:
            return failure(request, exc, "Spend")
        if api_or_page(request):
            return JSONResponse(doc)
        return HTMLResponse(pages.spend_page(doc))

    plannable = [*(n for n in target_names() if n != CATALOG), CATALOG]

    def plan_form(request: Request) -> Response:
        return HTMLResponse(pages.plan_page(plannable))

    async def plan(request: Request) -> Response:
        as_json = api_or_page(request)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_UPLOAD:
                words = (
                    f"the workload text is over {MAX_UPLOAD // 1024} KiB, the most the plan "
                    "page takes (a workload file's own limit)"
                )
                hint = "plan a smaller file, or run `nodus plan FILE` on it"
                if as_json:
                    return JSONResponse({"error": words, "hint": hint}, status_code=413)
                return HTMLResponse(pages.plan_page(plannable, error=(words, hint)), 413)
        kind = request.headers.get("content-type", "").split(";")[0].strip()
        fields: dict[str, str] = {}
        if kind == "application/x-www-form-urlencoded":
            try:
                parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True)
            except UnicodeDecodeError:
                parsed = {}
            fields = {k: v[0] for k, v in parsed.items()}
            text = fields.get("text", "")
        else:
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                text = ""
                fields["undecodable"] = "1"
        name = (fields.get("name") or request.query_params.get("name") or "workload.toml")[:200]
        target = fields.get("target") or request.query_params.get("target") or "local"

        def refused(words: str, hint: str | None, status: int, problems: list[str]) -> Response:
            if as_json:
                doc = {"error": words, "hint": hint, "problems": problems}
                return JSONResponse(doc, status_code=status)
            page = pages.plan_page(
                plannable, text, name, target, error=(words, hint), problems=problems
            )
            return HTMLResponse(page, status_code=status)

        if target not in plannable:
            return refused(f"no target {target!r}", f"one of: {', '.join(plannable)}", 400, [])
        if "undecodable" in fields or not text.strip():
            why = "not UTF-8 text" if "undecodable" in fields else "empty"
            return refused(f"the workload text is {why}", "paste a workload file", 400, [])
        try:
            doc = await run_in_threadpool(data.plan, home, text, name, target)
        except InvalidWorkload as exc:
            problems = [str(p) for p in exc.problems]
            return refused(exc.message, exc.hint, 422, problems)
        except NodusError as exc:
            return refused(exc.message, exc.hint, 503, [])
        if as_json:
            return JSONResponse(doc)
        return HTMLResponse(pages.plan_page(plannable, text, name, target, doc))

    async def events(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            tail = await run_in_threadpool(data.LogTail, home, run_id)
        except NodusError as exc:
            return failure(request, exc, f"Run {run_id}")

        async def stream() -> AsyncIterator[str]:
            quiet = 0.0
            try:
                while True:
                    lines, ended = await run_in_threadpool(tail.read)
                    for line in lines:
                        yield f"data: {json.dumps(line, ensure_ascii=False)}\n\n"
                    if ended:
                        yield f"event: end\ndata: {tail.status}\n\n"
                        return
                    quiet = 0.0 if lines else quiet + LOG_POLL
                    if quiet >= 15:  # a comment keeps proxies and the browser from giving up
                        quiet = 0.0
                        yield ": still running\n\n"
                    if await request.is_disconnected():
                        return
                    await asyncio.sleep(LOG_POLL)
            finally:
                tail.close()

        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    def not_found(request: Request, exc: Exception) -> Response:
        words = f"no page {request.url.path}"
        if api_or_page(request):
            return JSONResponse({"error": words, "hint": None}, status_code=404)
        return HTMLResponse(
            pages.error_page("Not found", words, "the links above lead to every page"), 404
        )

    routes = [
        Route("/", gpus),
        Route("/runs", runs),
        Route("/runs/{run_id}", run),
        Route("/runs/{run_id}/events", events),
        Route("/runs/{run_id}/stop", stop, methods=["POST"]),
        Route("/spend", spend),
        Route("/plan", plan_form),
        Route("/plan", plan, methods=["POST"]),
        Route("/api/gpus", gpus),
        Route("/api/runs", runs),
        Route("/api/runs/{run_id}", run),
        Route("/api/runs/{run_id}/gpu", gpu),
        Route("/api/runs/{run_id}/stop", stop, methods=["POST"]),
        Route("/api/spend", spend),
        Route("/api/plan", plan, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found})
    return TokenGate(app, token)
