"""Spending limits across runs (``[limits]`` in the configuration file).

``max_spend_per_day`` and ``max_spend_per_month`` hold across every run recorded in one
``NODUS_HOME``, concurrent runs included; ``max_price_per_hour`` is a ceiling no
workload can raise (the planner applies it). The rules:

1. **Periods** are the UTC calendar day and the UTC calendar month. The spend of a
   period is the recorded cost of every run *started* in it, whatever its status; a run
   still running counts with the running cost its supervisor records (every
   :data:`nodus_cli.run.budget.COST_EVERY` seconds). A run started before midnight UTC counts
   wholly in the day (and month) it started in.
2. **Before a run starts** (:func:`check`, from :func:`nodus_cli.run.launcher.prepare`), for
   each configured limit, a run that costs something is refused (:class:`OverBudget`,
   exit 4, the limit, the spend so far and what would pass it named) when:

   - it has a ``budget`` and spend so far + the budgets other runs not yet ended still
     reserve (each pending or running run with a budget and a price reserves ``budget -
     its cost so far``) + its budget would pass the limit;
   - it has no budget and spend so far + those reservations already reach the limit.

   A run whose target charges nothing for it (``[local] price_per_hour = 0``, a free
   configuration) is never refused: it cannot pass a limit, even one already reached.
3. **While a run runs** (:class:`Spending`, the driver's allowance), it may still spend
   ``limit - (others' spend in the period) - its own cost`` for the tightest limit;
   the driver stops it, ``budget_exhausted`` with exit 4, when that reaches 0, with the
   limit named ("the daily spending limit of $200.00 (max_spend_per_day in FILE) is
   reached: $200.01 spent today (UTC) across runs").
4. **Concurrent runs.** The reservation in rule 2 is read, not locked: two runs checked
   at the same moment may both pass it. A background supervisor checks again once its
   run is recorded, counting only the reservations of runs recorded before it, so of two
   budgeted submissions at once the one recorded later is refused. Whatever passes the
   checks, rule 3 holds the limit: each run sees the others' recorded running cost, so
   runs that together would pass a limit are stopped when their sum reaches it; none
   runs on past it.

   **Overshoot.** A run notices that the runs together reached a limit at most
   :data:`LAG_SECONDS` (1.5 s) late: another run records its cost every
   :data:`nodus_cli.run.budget.COST_EVERY` (0.5 s) when its driver wakes (every
   :data:`nodus_cli.run.driver.TICK`, 0.25 s), this module re-reads the records every
   :data:`REFRESH_SECONDS` (0.5 s), and the driver checks every TICK (0.25 s). So the
   spend of a period can pass a limit by at most what the runs running together spend
   in 1.5 s at their combined hourly price, plus, as for a ``budget``, what they spend
   while their tasks stop (a task's cost counts until it has stopped: under a second on
   the local engine).
"""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from nodus_cli import config
from nodus_cli.errors import NodusError, OverBudget
from nodus_cli.structs import struct

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodus_cli.planning.plan import Plan
    from nodus_cli.records import RunStore, SpendRow
    from nodus_cli.run.budget import Allowance
    from nodus_cli.workload import Workload

#: How often a running run re-reads the other runs' spend from the records (seconds).
REFRESH_SECONDS = 0.5
#: How late, at most, a run notices that the runs together reached a limit (seconds; see
#: the module docstring): budget.COST_EVERY + driver.TICK (another run's record) +
#: REFRESH_SECONDS (this cache) + driver.TICK (this run's check).
LAG_SECONDS = 1.5

_ISO = "%Y-%m-%dT%H:%M:%S+00:00"


def utc_now() -> datetime:
    """Now, UTC (tests replace it to cross a period's boundary)."""
    return datetime.now(UTC)


@struct(frozen=True)
class Period:
    """A UTC calendar day or month: runs started in ``[since, until)`` belong to it."""

    kind: str  # "day" or "month"
    #: ``2025-01-31`` or ``2025-01``.
    label: str
    since: str
    until: str

    @property
    def key(self) -> str:
        return "max_spend_per_day" if self.kind == "day" else "max_spend_per_month"

    @property
    def adjective(self) -> str:
        return "daily" if self.kind == "day" else "monthly"

    def when(self, now: datetime | None = None) -> str:
        """``today (UTC)``, ``this month (UTC)``; a past period by its date."""
        current = period(self.kind, now)
        if current.label == self.label:
            return "today (UTC)" if self.kind == "day" else "this month (UTC)"
        return f"on {self.label} (UTC)" if self.kind == "day" else f"in {self.label} (UTC)"

    @property
    def next(self) -> str:
        return "the next UTC day" if self.kind == "day" else "the next UTC month"


def period(kind: str, now: datetime | None = None) -> Period:
    """The UTC day (``kind="day"``) or month (``"month"``) that ``now`` falls in."""
    now = (now or utc_now()).astimezone(UTC)
    if kind == "day":
        start = datetime(now.year, now.month, now.day, tzinfo=UTC)
        end = start + timedelta(days=1)
        label = start.strftime("%Y-%m-%d")
    else:
        start = datetime(now.year, now.month, 1, tzinfo=UTC)
        end = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
        label = start.strftime("%Y-%m")
    return Period(kind, label, start.strftime(_ISO), end.strftime(_ISO))


@struct(frozen=True)
class SpendLimit:
    """One configured spending limit, for the period a run starts in."""

    period: Period
    amount: float
    #: The configuration file that sets it.
    path: Path

    @property
    def key(self) -> str:
        return self.period.key

    @property
    def named(self) -> str:
        """``the daily spending limit of $200.00 (max_spend_per_day in FILE)``."""
        return (
            f"the {self.period.adjective} spending limit of {_usd(self.amount)} "
            f"({self.key} in {self.path})"
        )


def configured(
    settings: config.LimitsConfig | None = None, now: datetime | None = None
) -> list[SpendLimit]:
    """The spending limits set in the configuration file, for the periods ``now`` is in."""
    settings = config.limits() if settings is None else settings
    path = settings.path or config.config_path()
    found = []
    for kind, amount in (
        ("day", settings.max_spend_per_day),
        ("month", settings.max_spend_per_month),
    ):
        if amount is not None:
            found.append(SpendLimit(period(kind, now), amount, path))
    return found


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _runs(count: int) -> str:
    return f"{count} run{'s' if count != 1 else ''} not yet ended"


def priced(plan: Plan, price_per_hour: float) -> bool:
    """Whether the run costs anything where it is planned to run."""
    if price_per_hour > 0:
        return True
    return any(
        sp.selected is not None and sp.selected.offer.price_per_hour > 0 for sp in plan.stages
    )


def note(store: RunStore | None = None) -> str | None:
    """One line for a plan: the spending limits that apply (with the spend so far when
    ``store`` is given); None when none is set."""
    limits = configured()
    if not limits:
        return None
    parts = []
    for limit in limits:
        text = f"{_usd(limit.amount)} per UTC {limit.period.kind}"
        if store is not None:
            p = limit.period
            spent = sum(r.cost for r in store.spending(p.since) if r.started_at < p.until)
            text += f" ({_usd(spent)} spent {p.when()})"
        parts.append(text)
    keys = " and ".join(limit.key for limit in limits)
    return (
        f"spending limits: {', '.join(parts)} across runs ({keys} in {limits[0].path}); "
        "a run that would pass one is refused or stopped (exit 4)"
    )


# -- before a run starts ---------------------------------------------------------------


def check(
    store: RunStore,
    workload: Workload,
    plan: Plan,
    price_per_hour: float,
    run_id: str | None = None,
) -> Allowance | None:
    """Refuse a run the limits cannot allow; else what it may spend while it runs.

    ``run_id``: the run is already recorded (a background supervisor checking again); it
    is left out of the spend, and only runs recorded before it count as reserving. Of two
    runs submitted at once, the one recorded later therefore always sees the other: by
    its reservation while it runs, by its cost once it ended.
    """
    limits = configured()
    if not limits:
        return None
    costs = priced(plan, price_per_hour)
    if costs:
        rows = store.spending(min(limit.period.since for limit in limits))
        for limit in limits:
            _refuse_over(limit, rows, workload.budget, run_id)
    return Spending(store, limits, costs)


def _refuse_over(
    limit: SpendLimit, rows: Sequence[SpendRow], budget: float | None, run_id: str | None
) -> None:
    p = limit.period
    inside = [r for r in rows if p.since <= r.started_at < p.until and r.id != run_id]
    spent = sum(r.cost for r in inside)
    own = next((r for r in rows if r.id == run_id), None)
    reserving = [
        r
        for r in inside
        if r.status.active
        and r.budget is not None
        and r.price_per_hour > 0
        and (own is None or r.recorded < own.recorded)
    ]
    reserved = sum(max(0.0, (r.budget or 0.0) - r.cost) for r in reserving)
    so_far = f"{_usd(spent)} spent {p.when()} across runs"
    if reserved > 0:
        so_far += f" + {_usd(reserved)} still reserved by the budgets of {_runs(len(reserving))}"
    raise_key = f"raise {limit.key} in {limit.path}"
    if budget is not None:
        total = spent + reserved + budget
        if total <= limit.amount:
            return
        room = limit.amount - spent - reserved
        hint = f"wait for {p.next}, or {raise_key}"
        if room > 0:
            hint = f"lower the workload's budget to {_usd(room)} or less, " + hint
        raise OverBudget(
            f"refused to start: the run's budget would pass {limit.named}: {so_far} "
            f"+ this run's budget of {_usd(budget)} = {_usd(total)}",
            hint=hint,
        )
    if spent + reserved < limit.amount:
        return
    raise OverBudget(
        f"refused to start: {limit.named} is reached: {so_far}",
        hint=f"wait for {p.next}, or {raise_key}",
    )


# -- while a run runs ------------------------------------------------------------------


class Spending:
    """The driver's allowance (:class:`nodus_cli.run.budget.Allowance`): what a run may still
    spend before a spending limit, from the others' spend in the records.

    The driver asks several times a second; the others' spend is re-read at most every
    :data:`REFRESH_SECONDS` (one ``SUM`` per limit) and cached in between.
    """

    def __init__(self, store: RunStore, limits: Sequence[SpendLimit], priced: bool) -> None:
        self.store = store
        self.limits = list(limits)
        #: False: planned on a free configuration; limited only once it costs something.
        self.priced = priced
        self._others: list[float] = [0.0] * len(self.limits)
        self._read_at: float | None = None
        self._read_for: str | None = None

    def others(self, run_id: str, fresh: bool = False) -> list[float]:
        """Each limit's period's spend by every run but ``run_id`` (cached briefly, unless
        ``fresh``)."""
        now = time.monotonic()
        recent = self._read_at is not None and now - self._read_at < REFRESH_SECONDS
        if recent and not fresh and self._read_for == run_id:
            return self._others
        # The records busy or unreadable for a moment: the last known spend stands.
        with contextlib.suppress(NodusError):
            self._others = [
                self.store.spent(limit.period.since, limit.period.until, run_id)
                for limit in self.limits
            ]
        self._read_at, self._read_for = now, run_id
        return self._others

    def left(self, run_id: str, run_cost: float, fresh: bool = False) -> tuple[float, str] | None:
        if not self.limits or (not self.priced and run_cost <= 0):
            return None  # a run that costs nothing never passes a limit
        tightest: tuple[float, str] | None = None
        for limit, others in zip(self.limits, self.others(run_id, fresh), strict=True):
            left = limit.amount - others - run_cost
            if tightest is None or left < tightest[0]:
                spent = others + run_cost
                tightest = (
                    left,
                    f"{limit.named} is reached: {_usd(spent)} spent "
                    f"{limit.period.when()} across runs",
                )
        return tightest
