"""Terminal output shared by the commands: one rich console, JSON on stdout, errors on stderr.

rich is imported lazily so that ``--json`` paths and start-up stay cheap.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


@cache
def console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


@cache
def error_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def fail(message: str, hint: str | None = None) -> None:
    """Print an actionable error to stderr (no traceback, no markup surprises)."""
    from rich.markup import escape

    err = error_console()
    err.print(f"[bold red]error:[/] {escape(message)}")
    if hint:
        err.print(f"[dim]hint:[/] {escape(hint)}")


def money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}" if value >= 0.1 else f"${value:,.4f}"
