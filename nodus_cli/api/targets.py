"""The places nodus plans and runs on, by name: every registered target, and the catalog.

Reading the names imports no target code (the registry holds plain strings), so the
command line can offer them in ``--target``'s help at no start-up cost.
"""

from __future__ import annotations

__all__ = ["CATALOG", "target_names"]

#: The market of quotes: a client on it plans, and never runs.
CATALOG = "catalog"


def target_names() -> list[str]:
    """The places a run can go (``--target``, ``Client(target=...)``), from the registry."""
    from nodus_cli import targets

    return targets.names()
