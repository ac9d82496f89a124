"""Names a package exports but loads when first used (PEP 562).

Why: ``import nodus_cli`` and ``nodus validate`` must not pay for the client, the records
or SQLite (start-up is felt in CI), yet ``from nodus_cli import Client`` and
``from nodus_cli.records import RunStore`` must work. A package lists where each name
lives and takes its ``__getattr__`` and ``__dir__`` from :func:`exports`; type checkers
see the names through the package's ``if TYPE_CHECKING:`` imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose name ``n`` is loaded from
    the module ``where[n]`` when first asked for (then kept in the package)."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *where])

    return __getattr__, __dir__
