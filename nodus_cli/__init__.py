"""nodus: validate, price and run GPU workloads described in TOML files.

This module is the one public door: the names in ``__all__`` are the Python API
(``from nodus_cli import Client, Requirements, InvalidWorkload``), imported on first use
so that ``import nodus_cli`` stays cheap (neither the Docker SDK nor httpx). Every other
module under ``nodus_cli`` is internal: docs/architecture.md says how they are laid out,
and they may change between releases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodus_cli.lazy import exports
from nodus_cli.version import VERSION as __version__

__all__ = [
    "Call",
    "CallFailed",
    "CallResult",
    "Calls",
    "Client",
    "Function",
    "InvalidWorkload",
    "ItemResult",
    "NodusError",
    "RemoteError",
    "Requirements",
    "Run",
    "RunResult",
    "RunStatus",
    "StageResult",
    "StageStatus",
    "__version__",
    "function",
]

if TYPE_CHECKING:
    from nodus_cli.api.arguments import Requirements
    from nodus_cli.api.calls import Call, CallResult, Calls
    from nodus_cli.api.client import Client
    from nodus_cli.api.functions import Function, function
    from nodus_cli.api.runs import ItemResult, Run, RunResult, StageResult
    from nodus_cli.errors import CallFailed, InvalidWorkload, NodusError
    from nodus_cli.functions.outcome import RemoteError
    from nodus_cli.records.model import RunStatus, StageStatus

_WHERE = {
    "Function": "nodus_cli.api.functions",
    "function": "nodus_cli.api.functions",
    "Call": "nodus_cli.api.calls",
    "CallFailed": "nodus_cli.errors",
    "CallResult": "nodus_cli.api.calls",
    "Calls": "nodus_cli.api.calls",
    "RemoteError": "nodus_cli.functions.outcome",
    "Client": "nodus_cli.api.client",
    "ItemResult": "nodus_cli.api.runs",
    "Requirements": "nodus_cli.api.arguments",
    "Run": "nodus_cli.api.runs",
    "RunResult": "nodus_cli.api.runs",
    "StageResult": "nodus_cli.api.runs",
    "InvalidWorkload": "nodus_cli.errors",
    "NodusError": "nodus_cli.errors",
    "RunStatus": "nodus_cli.records.model",
    "StageStatus": "nodus_cli.records.model",
}


__getattr__, __dir__ = exports(__name__, _WHERE)
