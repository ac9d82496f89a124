"""``nodus dashboard``: a local web page over the Python API, one more client of
:class:`~nodus_cli.api.Client` beside the command line.

GPUs of each target (who holds them, who waits), the queue, the runs (filtered, paged),
one run (stages, items, cost, GPU use, its log live), spend over time, and a plan page;
the same documents as JSON under ``/api/`` (docs/json.md). One action changes state:
stopping a run. Every request needs the access token :func:`serve` prints
(:mod:`.access`).

This package imports Starlette and uvicorn, which only ``nodus dashboard`` loads: the
command line imports it from that command alone, so no other command pays for them.
It reaches the rest of nodus through ``nodus_cli.api`` (and the errors, text and
structs every layer shares), as the command line does.
"""

from __future__ import annotations

from nodus_cli.dashboard.access import new_token
from nodus_cli.dashboard.app import create_app
from nodus_cli.dashboard.server import address, serve

__all__ = ["address", "create_app", "new_token", "serve"]
