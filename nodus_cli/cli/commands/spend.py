"""``nodus spend``: today's and this month's spend (UTC) against the spending limits.

The figures are the client's (:meth:`~nodus_cli.api.client.Client.spend`); this module
only shows them. Runs whose supervisor died are first recorded as such, so a run counted
as running is one that is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodus_cli.api import Client
from nodus_cli.cli.output import Writer, emit_json, stderr_line
from nodus_cli.text import clipped, cost_text, money, safe, unpriced_runs_text

if TYPE_CHECKING:
    from nodus_cli.api import GroupSpend, PeriodSpend, Report

#: Names longer than this are clipped in the table (80 columns).
_NAME = 28


def run(as_json: bool) -> int:
    client = Client()
    for note in client.reconcile():
        stderr_line(f"nodus: {safe(note)}")
    found = client.spend()
    if as_json:
        emit_json(found.as_json())
        return 0
    _show(found)
    return 0


def _clip(text: str, width: int = _NAME) -> str:
    return clipped(safe(text, newlines=False), width)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _period_row(name: str, p: PeriodSpend) -> list[str]:
    return [
        name,
        money(p.limit),
        money(p.spent),
        money(p.left),
        _percent(p.percent),
        str(p.runs),
        str(p.running),
    ]


def _group_rows(groups: list[GroupSpend], limit: float | None) -> list[list[str]]:
    return [
        [
            _clip(g.name),
            str(g.runs),
            str(g.running),
            cost_text(g.spent, known=not g.unknown_runs),
            _percent(g.percent_of(limit)),
        ]
        for g in groups
    ]


def _unknown(found: Report) -> str | None:
    """The line on the runs this month whose cost is unknown; None when none."""
    if not found.month.unknown_runs:
        return None
    return unpriced_runs_text(
        found.month.unknown_runs,
        found.day.unknown_runs,
        [_clip(g.name) for g in found.targets if g.unknown_runs],
        safe(str(found.config)),
    )


def _show(found: Report) -> None:
    out = Writer()
    day, month = found.day, found.month
    out.line(out.paint("spend (UTC; a running run counts at its cost so far)", "bold"))
    rows = [
        _period_row(f"today {day.period.label}", day),
        _period_row(f"month {month.period.label}", month),
    ]
    for row, p in zip(rows, (day, month), strict=True):
        if p.limit is not None and p.spent >= p.limit:
            row[4] = out.paint(row[4], "red")
    out.table(
        ["period", "limit", "spent", "left", "used", "runs", "running"],
        rows,
        right=(1, 2, 3, 4, 5, 6),
    )
    if month.reserved > 0:  # the month's holds the day's
        out.line(f"budgets of runs not yet ended may still spend {money(month.reserved)}")
    unknown = _unknown(found)
    if unknown is not None:
        out.line(out.paint(unknown, "yellow"))
    if found.workloads:
        out.line()
        out.line(out.paint(f"this month ({month.period.label}) by workload", "bold"))
        out.table(
            ["workload", "runs", "running", "spent", "of limit"],
            _group_rows(found.workloads, month.limit),
            right=(1, 2, 3, 4),
        )
        out.line()
        out.line(out.paint(f"this month ({month.period.label}) by target", "bold"))
        out.table(
            ["target", "runs", "running", "spent", "of limit"],
            _group_rows(found.targets, month.limit),
            right=(1, 2, 3, 4),
        )
    else:
        out.line()
        out.line(f"no runs recorded this month ({month.period.label})")
    if found.active:
        out.line()
        count = len(found.active)
        out.line(
            f"{count} run{'s' if count != 1 else ''} not yet ended, counted at the cost "
            "recorded so far:"
        )
        out.table(
            ["id", "workload", "status", "cost", "budget"],
            [
                [
                    r.id,
                    _clip(r.workload, 20),
                    str(r.status),
                    cost_text(r.cost, r.cost_known),
                    money(r.budget),
                ]
                for r in found.active[:10]
            ],
            right=(3, 4),
            indent="  ",
        )
        if count > 10:
            out.line(f"  … and {count - 10} more (`nodus runs` lists them)")
    out.line()
    if found.max_price_per_hour is not None:
        out.line(
            f"max_price_per_hour: {money(found.max_price_per_hour)} "
            "(no configuration above it is chosen)"
        )
    if found.configured:
        out.line(f"limits set in {safe(str(found.config))}")
    else:
        out.line(
            f"no spending limits set: add [limits] max_spend_per_day or "
            f"max_spend_per_month to {safe(str(found.config))}"
        )
    out.flush()
