"""What has been spent, from the run records, against the spending limits (``nodus spend``).

Periods are the UTC calendar day and month (:mod:`nodus_cli.run.limits`): a run counts in
the period it started in, with its recorded cost; a run still running counts with the
cost it has recorded so far. Per workload and per target, the report covers this month.

A run with a stage on a node whose price was not set (a cluster node nothing prices) has
an unknown cost: its record holds 0 for that part, so the figures leave it out, and each
period and group counts such runs apart (``unknown_runs``) so that what shows the spend
can say so rather than pass them off as free. Nothing holds them to a limit or a budget:
at a price of 0 nothing accrues (:mod:`nodus_cli.run.budget`, :mod:`nodus_cli.run.limits`).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_cli import config
from nodus_cli.records import RunStatus
from nodus_cli.run.limits import Period, period
from nodus_cli.structs import field, struct

if TYPE_CHECKING:
    from collections.abc import Sequence

    from nodus_cli.records import RunStore, SpendRow


def _cents(value: float) -> float:
    return round(value, 6)


@struct
class PeriodSpend:
    """A day's or a month's spend, against its limit (None: no limit set)."""

    period: Period
    limit: float | None
    spent: float = 0.0
    runs: int = 0
    running: int = 0
    #: What the budgets of runs still pending or running may yet spend.
    reserved: float = 0.0
    #: Runs with a stage on a node whose price was not set: ``spent`` leaves that out.
    unknown_runs: int = 0

    @property
    def left(self) -> float | None:
        return None if self.limit is None else max(0.0, self.limit - self.spent)

    @property
    def percent(self) -> float | None:
        return None if self.limit is None else round(self.spent / self.limit * 100, 1)

    def as_json(self) -> dict[str, Any]:
        left = self.left
        return {
            "period": self.period.label,
            "since": self.period.since,
            "until": self.period.until,
            "config_key": self.period.key,
            "limit": self.limit,
            "spent": _cents(self.spent),
            "left": None if left is None else _cents(left),
            "percent": self.percent,
            "runs": self.runs,
            "running": self.running,
            "reserved": _cents(self.reserved),
            "unknown_runs": self.unknown_runs,
        }


@struct
class GroupSpend:
    """This month's spend of one workload (by name) or one target."""

    name: str
    spent: float = 0.0
    runs: int = 0
    running: int = 0
    #: Runs with a stage on a node whose price was not set: ``spent`` leaves that out.
    unknown_runs: int = 0

    def percent_of(self, limit: float | None) -> float | None:
        return None if limit is None else round(self.spent / limit * 100, 1)


@struct
class Report:
    day: PeriodSpend
    month: PeriodSpend
    workloads: list[GroupSpend]
    targets: list[GroupSpend]
    #: Runs started this month and still pending or running.
    active: list[SpendRow]
    max_price_per_hour: float | None
    #: The configuration file that sets the limits, or where it would be.
    config: Path
    configured: bool = field(default=False)

    def as_json(self) -> dict[str, Any]:
        monthly = self.month.limit

        def group(key: str, g: GroupSpend) -> dict[str, Any]:
            return {
                key: g.name,
                "spent": _cents(g.spent),
                "runs": g.runs,
                "running": g.running,
                "percent_of_monthly_limit": g.percent_of(monthly),
                "unknown_runs": g.unknown_runs,
            }

        return {
            "version": 1,
            "timezone": "UTC",
            "config": str(self.config),
            "day": self.day.as_json(),
            "month": self.month.as_json(),
            "max_price_per_hour": self.max_price_per_hour,
            "workloads": [group("workload", g) for g in self.workloads],
            "targets": [group("target", g) for g in self.targets],
            "active": [
                {
                    "id": r.id,
                    "workload": r.workload,
                    "target": r.target,
                    "status": str(r.status),
                    "started_at": r.started_at,
                    "cost": _cents(r.cost),
                    "budget": r.budget,
                    "cost_known": r.cost_known,
                }
                for r in self.active
            ],
        }


def _add(spend: PeriodSpend, row: SpendRow) -> None:
    spend.spent += row.cost
    spend.runs += 1
    spend.running += row.status == RunStatus.RUNNING
    spend.unknown_runs += not row.cost_known
    if row.status.active and row.budget is not None and row.price_per_hour > 0:
        spend.reserved += max(0.0, row.budget - row.cost)


def _groups(rows: Sequence[SpendRow], key: str) -> list[GroupSpend]:
    found: dict[str, GroupSpend] = {}
    for row in rows:
        name = row.workload if key == "workload" else row.target
        g = found.setdefault(name, GroupSpend(name))
        g.spent += row.cost
        g.runs += 1
        g.running += row.status == RunStatus.RUNNING
        g.unknown_runs += not row.cost_known
    return sorted(found.values(), key=lambda g: (-g.spent, g.name))


def report(
    store: RunStore,
    settings: config.LimitsConfig | None = None,
    now: datetime | None = None,
) -> Report:
    """Today's and this month's spend (UTC), per workload and target, and the limits."""
    settings = config.limits() if settings is None else settings
    day = PeriodSpend(period("day", now), settings.max_spend_per_day)
    month = PeriodSpend(period("month", now), settings.max_spend_per_month)
    rows = [r for r in store.spending(month.period.since) if r.started_at < month.period.until]
    for row in rows:
        _add(month, row)
        if day.period.since <= row.started_at < day.period.until:
            _add(day, row)
    return Report(
        day,
        month,
        _groups(rows, "workload"),
        _groups(rows, "target"),
        [r for r in rows if r.status.active],
        settings.max_price_per_hour,
        settings.path or config.config_path(),
        settings.any,
    )
