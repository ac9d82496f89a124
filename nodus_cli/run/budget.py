"""The run's money on one clock: what it has cost so far, what it may still spend, and
when the loop must look again.

Contract: a task costs from the moment its target says it runs until it ends, on the
driver's monotonic clock, at the price per hour the target reported for it.
:meth:`BudgetClock.cost_now` is the cost of the ended tasks plus the running ones so far;
:meth:`BudgetClock.left` is the smallest of what the run's budget and the spending
limits across runs (an :class:`Allowance`) still allow, with the words for the limit
that decides. A free target never reaches a budget: nothing accrues at a price of 0.

Why apart from the loop: the loop decides what to do when money runs out (stop the
running tasks, start nothing new); how money is counted, and how soon it may run out,
is arithmetic with its own rules, and the spending limits (:mod:`nodus_cli.run.limits`)
depend on its timing (:data:`COST_EVERY`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol

from nodus_cli.structs import struct

__all__ = ["COST_EVERY", "Allowance", "BudgetClock", "Charge", "Metered"]

#: How often the running cost is written to the records. Spending limits read it: other
#: runs see this run's cost at most this late, which bounds how far concurrent runs can
#: pass a limit together (nodus_cli.run.limits: 0.5 s here + 0.5 s there + the loop's
#: TICK).
COST_EVERY = 0.5


class Allowance(Protocol):
    """Spending limits across runs: how much run ``run_id`` may still spend, having spent
    ``run_cost``, and the words naming the limit (None: no limit applies); ``fresh``: read
    the others' spend now, not from a moment ago."""

    def left(
        self, run_id: str, run_cost: float, fresh: bool = False
    ) -> tuple[float, str] | None: ...


class Metered(Protocol):
    """A task as the clock sees it: since when it runs (monotonic; None: not yet) and at
    what price."""

    started: float | None
    #: USD per hour.
    rate: float


@struct(frozen=True)
class Charge:
    """What an ended task ran and cost: seconds since it started (0 when it never did)."""

    runtime: float
    cost: float


class BudgetClock:
    """The money of one run; ``running`` is the loop's live view of its running tasks."""

    def __init__(
        self,
        run_id: str,
        budget: float | None,
        allowance: Allowance | None,
        running: Mapping[str, Metered],
        recorded: float = 0.0,
    ) -> None:
        self.run_id = run_id
        self.budget = budget
        self.allowance = allowance
        self.running = running
        self.ended = 0.0  # the cost of ended tasks; running ones are added by cost_now()
        self._saved_at = 0.0
        self._recorded = recorded  # what the record holds: a free run is not rewritten

    def cost_now(self) -> float:
        now = time.monotonic()
        return self.ended + sum(
            (now - r.started) / 3600 * r.rate
            for r in self.running.values()
            if r.started is not None
        )

    def charge(self, task: Metered) -> Charge:
        """Count an ended task's cost among the ended ones."""
        runtime = time.monotonic() - task.started if task.started is not None else 0.0
        cost = runtime / 3600 * task.rate
        self.ended += cost
        return Charge(runtime, cost)

    def rate(self) -> float:
        """USD per hour of the tasks running now."""
        return sum(r.rate for r in self.running.values() if r.started is not None)

    def left(self, fresh: bool = False) -> tuple[float, str] | None:
        """What the run may still spend and the words for the limit that decides."""
        cost = self.cost_now()
        found: list[tuple[float, str]] = []
        if self.budget is not None:
            found.append(
                (self.budget - cost, f"the run's cost reached its budget ${self.budget:,.2f}")
            )
        if self.allowance is not None:
            limit = self.allowance.left(self.run_id, cost, fresh)
            if limit is not None:
                found.append(limit)
        return min(found, key=lambda f: f[0]) if found else None

    def exhausted(self, fresh: bool = False) -> str | None:
        """The words for the limit the run has reached, or None while money is left
        (``fresh``: the others' spend read now)."""
        left = self.left(fresh)
        if left is None:
            return None
        # Only a price makes a budget bite: a free target never reaches it.
        return left[1] if left[0] <= 0 else None

    def next_check(self, tick: float) -> float:
        """Seconds until the money would run out at the running rate, at most ``tick``."""
        rate = self.rate()
        left = self.left()
        if left is None or rate <= 0:
            return tick
        return max(0.01, min(tick, left[0] / rate * 3600))

    def to_record(self) -> float | None:
        """The cost to write to the run's record now: None when it was written less than
        :data:`COST_EVERY` ago, or has not changed since."""
        now = time.monotonic()
        if now - self._saved_at < COST_EVERY:
            return None
        self._saved_at = now
        cost = self.cost_now()
        if cost == self._recorded:
            return None
        self._recorded = cost
        return cost
