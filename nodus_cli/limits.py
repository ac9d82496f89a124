"""Spending limits across runs (``[limits]`` in the configuration file).

``max_spend_per_day`` and ``max_spend_per_month`` hold across every run recorded in one
``NODUS_HOME``, concurrent runs included: a run whose budget (or, without one, whose
running cost) would pass a limit is refused before it starts, or stopped when it reaches
it, with the limit named (exit 4). ``max_price_per_hour`` is a ceiling no workload can
raise; the planner applies it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodus_cli.planner import Plan
    from nodus_cli.records import RunStore
    from nodus_cli.runner import Allowance
    from nodus_cli.workload import Workload


def check(
    store: RunStore, workload: Workload, plan: Plan, price_per_hour: float
) -> Allowance | None:
    """Refuse a run the limits cannot allow; else what it may spend while it runs."""
    return None
