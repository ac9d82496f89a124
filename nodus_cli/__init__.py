"""nodus: validate, price and run GPU workloads described in TOML files.

The Python API (``from nodus_cli import Client, Requirements, InvalidWorkload``) is
imported on first use, so ``import nodus_cli`` stays cheap: it imports neither the
Docker SDK nor httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Client",
    "InvalidWorkload",
    "ItemResult",
    "NodusError",
    "Requirements",
    "Run",
    "RunResult",
    "RunStatus",
    "StageResult",
    "StageStatus",
    "__version__",
]

if TYPE_CHECKING:
    from nodus_cli.api.client import Client, ItemResult, Requirements, Run, RunResult, StageResult
    from nodus_cli.errors import InvalidWorkload, NodusError
    from nodus_cli.records.model import RunStatus, StageStatus

_WHERE = {
    "Client": "nodus_cli.api.client",
    "ItemResult": "nodus_cli.api.client",
    "Requirements": "nodus_cli.api.client",
    "Run": "nodus_cli.api.client",
    "RunResult": "nodus_cli.api.client",
    "StageResult": "nodus_cli.api.client",
    "InvalidWorkload": "nodus_cli.errors",
    "NodusError": "nodus_cli.errors",
    "RunStatus": "nodus_cli.records.model",
    "StageStatus": "nodus_cli.records.model",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'nodus_cli' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
