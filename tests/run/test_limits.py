"""Spending limits across runs, without an engine: the periods (UTC day and month), the
refusals before a run starts (with the words a user reads), the reservations of budgets
of runs not yet ended, the allowance the driver consults while a run runs (a scripted
target, two runs at once sharing one NODUS_HOME), and the spend report."""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from records_support import priced_stage

from nodus_cli.catalog import Offer
from nodus_cli.errors import OverBudget
from nodus_cli.planning.plan import Plan
from nodus_cli.planning.planner import plan_workload
from nodus_cli.planning.ranking import no_history
from nodus_cli.records import RunStatus, RunStore
from nodus_cli.run import launcher, limits, spending
from nodus_cli.run.driver import RunEnd
from nodus_cli.targets.base import (
    Cleanup,
    NodeInfo,
    Preparation,
    Started,
    Target,
    Task,
    TaskContext,
    TaskEnd,
    TaskState,
)
from nodus_cli.workload import Workload, load_text

#: A fixed "now" for the tests that stamp records by hand: 2025-01-15 12:00 UTC.
NOW = datetime(2025, 1, 15, 12, 0, 0, tzinfo=UTC)
DOLLAR_A_SECOND = 3600.0


# -- helpers -----------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore.open(tmp_path / "home")


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The configuration file (NODUS_CONFIG); tests write ``[limits]`` into it."""
    path = tmp_path / "config.toml"
    monkeypatch.setenv("NODUS_CONFIG", str(path))
    return path


@pytest.fixture
def fixed_now(monkeypatch: pytest.MonkeyPatch) -> datetime:
    monkeypatch.setattr(limits, "utc_now", lambda: NOW)
    return NOW


def set_limits(conf: Path, **values: float) -> None:
    conf.write_text(
        "[limits]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()), encoding="utf-8"
    )


def workload(name: str = "w", extra: str = "") -> Workload:
    result = load_text(f'name = "{name}"\nimage = "img:1"\ncommand = "true"\n{extra}')
    assert result.workload is not None, result.problems
    return result.workload


def plan_for(w: Workload, price: float) -> Plan:
    offer = Offer("test", "box", "local", "H100", 8, 80.0, 64, 512.0, None, "x86_64", price)
    return plan_workload(w, (offer,), target="local", history=no_history, ceiling=None)


def record(
    store: RunStore,
    cost: float,
    *,
    name: str = "old",
    target: str = "local",
    status: RunStatus = RunStatus.SUCCEEDED,
    budget: float | None = None,
    price: float = DOLLAR_A_SECOND,
    started_at: str | None = None,
) -> str:
    """A run in the records, as if it had run: its cost, status and start."""
    extra = f"budget = {budget}\n" if budget is not None else ""
    run = store.create_run(workload(name, extra), target, price, None)
    if status.active:
        if status == RunStatus.RUNNING:
            store.set_running(run.id)
        store.update_cost(run.id, cost)
    else:
        store.finish_run(run.id, status, 0, cost)
    if started_at is not None:
        with sqlite3.connect(store.db_path) as db:
            db.execute("UPDATE runs SET started_at=? WHERE id=?", (started_at, run.id))
    return run.id


def at(day: int, hour: int = 10, month: int = 1, year: int = 2025) -> str:
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:00:00+00:00"


# -- periods -------------------------------------------------------------------------------


def test_periods_are_the_utc_calendar_day_and_month() -> None:
    day = limits.period("day", datetime(2024, 12, 31, 23, 59, tzinfo=UTC))
    assert (day.label, day.since, day.until) == (
        "2024-12-31",
        "2024-12-31T00:00:00+00:00",
        "2025-01-01T00:00:00+00:00",
    )
    month = limits.period("month", datetime(2024, 12, 31, 23, 59, tzinfo=UTC))
    assert (month.label, month.since, month.until) == (
        "2024-12",
        "2024-12-01T00:00:00+00:00",
        "2025-01-01T00:00:00+00:00",
    )
    feb = limits.period("month", datetime(2024, 2, 10, tzinfo=UTC))
    assert (feb.since, feb.until) == ("2024-02-01T00:00:00+00:00", "2024-03-01T00:00:00+00:00")


def test_a_time_elsewhere_is_placed_in_its_utc_day() -> None:
    from datetime import timedelta, timezone

    tokyo = datetime(2025, 1, 16, 8, 0, tzinfo=timezone(timedelta(hours=9)))  # 23:00 UTC
    assert limits.period("day", tokyo).label == "2025-01-15"


def test_a_period_is_named_today_or_by_its_date(fixed_now: datetime) -> None:
    assert limits.period("day").when() == "today (UTC)"
    assert limits.period("month").when() == "this month (UTC)"
    earlier = datetime(2025, 1, 14, tzinfo=UTC)
    assert limits.period("day", earlier).when() == "on 2025-01-14 (UTC)"
    assert limits.period("month", datetime(2024, 12, 3, tzinfo=UTC)).when() == "in 2024-12 (UTC)"


def test_no_limits_no_check(store: RunStore, conf: Path) -> None:
    record(store, 1000.0)
    w = workload(extra="budget = 500.0\n")
    assert limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND) is None
    conf.write_text("[local]\nprice_per_hour = 3600\n", encoding="utf-8")
    assert limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND) is None
    assert limits.note() is None


# -- refused before it starts ----------------------------------------------------------------


def test_a_budget_that_would_pass_the_daily_limit_is_refused(
    store: RunStore, conf: Path, fixed_now: datetime
) -> None:
    set_limits(conf, max_spend_per_day=2.0)
    record(store, 0.75, started_at=at(15, 9))
    w = workload(extra="budget = 1.5\n")
    with pytest.raises(OverBudget) as caught:
        limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND)
    assert caught.value.exit_code == 4
    assert caught.value.message == (
        "refused to start: the run's budget would pass the daily spending limit of $2.00 "
        f"(max_spend_per_day in {conf}): $0.75 spent today (UTC) across runs + this run's "
        "budget of $1.50 = $2.25"
    )
    assert caught.value.hint == (
        "lower the workload's budget to $1.25 or less, wait for the next UTC day, or raise "
        f"max_spend_per_day in {conf}"
    )


def test_a_budget_that_fits_is_allowed(store: RunStore, conf: Path, fixed_now: datetime) -> None:
    set_limits(conf, max_spend_per_day=2.0)
    record(store, 0.75, started_at=at(15, 9))
    w = workload(extra="budget = 1.25\n")  # exactly up to the limit
    allowance = limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND)
    assert isinstance(allowance, limits.Spending)


def test_without_a_budget_a_run_is_refused_only_once_the_limit_is_reached(
    store: RunStore, conf: Path, fixed_now: datetime
) -> None:
    set_limits(conf, max_spend_per_day=2.0)
    record(store, 1.99, started_at=at(15, 9))
    w = workload()
    assert limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND) is not None
    record(store, 0.02, started_at=at(15, 10))
    with pytest.raises(OverBudget) as caught:
        limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND)
    assert caught.value.message == (
        f"refused to start: the daily spending limit of $2.00 (max_spend_per_day in {conf}) "
        "is reached: $2.01 spent today (UTC) across runs"
    )
    assert caught.value.hint == f"wait for the next UTC day, or raise max_spend_per_day in {conf}"


def test_only_runs_started_in_the_period_count(
    store: RunStore, conf: Path, fixed_now: datetime
) -> None:
    set_limits(conf, max_spend_per_day=2.0, max_spend_per_month=10.0)
    record(store, 50.0, started_at=at(31, 23, month=12, year=2024))  # last month
    record(store, 5.0, started_at=at(14, 23))  # yesterday: this month only
    record(store, 1.0, started_at=at(15, 0))  # today
    w = workload(extra="budget = 1.0\n")
    assert limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND) is not None
    w = workload(extra="budget = 1.01\n")
    with pytest.raises(OverBudget, match=r"daily spending limit of \$2\.00"):
        limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND)


def test_the_monthly_limit(store: RunStore, conf: Path, fixed_now: datetime) -> None:
    set_limits(conf, max_spend_per_day=100.0, max_spend_per_month=10.0)
    record(store, 9.5, started_at=at(2))
    w = workload(extra="budget = 1.0\n")
    with pytest.raises(OverBudget) as caught:
        limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND)
    assert caught.value.message == (
        "refused to start: the run's budget would pass the monthly spending limit of $10.00 "
        f"(max_spend_per_month in {conf}): $9.50 spent this month (UTC) across runs + this "
        "run's budget of $1.00 = $10.50"
    )
    assert "wait for the next UTC month" in (caught.value.hint or "")
    record(store, 0.5, started_at=at(3))
    with pytest.raises(OverBudget) as caught:
        limits.check(store, workload(), plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND)
    assert caught.value.message == (
        "refused to start: the monthly spending limit of $10.00 (max_spend_per_month in "
        f"{conf}) is reached: $10.00 spent this month (UTC) across runs"
    )


def test_budgets_of_runs_not_yet_ended_are_reserved(
    store: RunStore, conf: Path, fixed_now: datetime
) -> None:
    set_limits(conf, max_spend_per_day=3.0)
    # Running, $0.50 spent of a $2.00 budget: it may spend $1.50 more.
    record(store, 0.5, status=RunStatus.RUNNING, budget=2.0, started_at=at(15, 11))
    w = workload(extra="budget = 1.1\n")
    with pytest.raises(OverBudget) as caught:
        limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND)
    assert caught.value.message == (
        "refused to start: the run's budget would pass the daily spending limit of $3.00 "
        f"(max_spend_per_day in {conf}): $0.50 spent today (UTC) across runs + $1.50 still "
        "reserved by the budgets of 1 run not yet ended + this run's budget of $1.10 = $3.10"
    )
    assert (caught.value.hint or "").startswith("lower the workload's budget to $1.00 or less")
    w = workload(extra="budget = 1.0\n")  # fits beside the reservation
    assert limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND) is not None
    # Without a budget: refused once the spend and the reservations reach the limit.
    record(store, 1.0, started_at=at(15, 10))
    with pytest.raises(OverBudget) as caught:
        limits.check(store, workload(), plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND)
    assert caught.value.message == (
        f"refused to start: the daily spending limit of $3.00 (max_spend_per_day in {conf}) "
        "is reached: $1.50 spent today (UTC) across runs + $1.50 still reserved by the "
        "budgets of 1 run not yet ended"
    )


def test_a_free_run_reserves_nothing_and_an_ended_run_only_what_it_spent(
    store: RunStore, conf: Path, fixed_now: datetime
) -> None:
    set_limits(conf, max_spend_per_day=3.0)
    record(store, 0.0, status=RunStatus.RUNNING, budget=100.0, price=0.0, started_at=at(15, 1))
    record(store, 0.5, status=RunStatus.FAILED, budget=100.0, started_at=at(15, 2))
    w = workload(extra="budget = 2.5\n")
    assert limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND) is not None


def test_a_supervisor_checking_again_counts_only_runs_recorded_before_its_own(
    store: RunStore, conf: Path, fixed_now: datetime
) -> None:
    """Two budgeted submissions at once both passed the first check; once both are
    recorded, the one recorded first goes on and the later one is refused."""
    set_limits(conf, max_spend_per_day=3.0)
    first = record(store, 0.0, status=RunStatus.PENDING, budget=2.0, started_at=at(15, 11))
    later = record(store, 0.0, status=RunStatus.PENDING, budget=2.0, started_at=at(15, 11))
    # The same second, and ids whose random part sorts the later one first: the order of
    # recording decides, not the ids (else each would count the other as after it, and
    # both would start).
    with sqlite3.connect(store.db_path) as db:
        for run_id, suffix in ((first, "ffffff"), (later, "000000")):
            db.execute("UPDATE runs SET id=? WHERE id=?", (run_id[:-6] + suffix, run_id))
    first, later = first[:-6] + "ffffff", later[:-6] + "000000"
    w = workload(extra="budget = 2.0\n")
    plan = plan_for(w, DOLLAR_A_SECOND)
    assert limits.check(store, w, plan, DOLLAR_A_SECOND, run_id=first) is not None
    with pytest.raises(OverBudget, match="still reserved by the budgets of 1 run not yet ended"):
        limits.check(store, w, plan, DOLLAR_A_SECOND, run_id=later)


def test_a_run_that_costs_nothing_is_never_refused(
    store: RunStore, conf: Path, fixed_now: datetime
) -> None:
    set_limits(conf, max_spend_per_day=1.0, max_spend_per_month=1.0)
    record(store, 25.0, started_at=at(15, 9))  # both limits long passed
    w = workload(extra="budget = 5.0\n")
    allowance = limits.check(store, w, plan_for(w, 0.0), 0.0)
    assert allowance is not None
    assert allowance.left("new", 0.0) is None  # nothing spent: no limit applies
    # Should a task report a price after all, the limit holds from its first cent.
    left = allowance.left("new", 0.01)
    assert left is not None and left[0] < 0


def test_the_plan_note_names_the_limits_and_the_spend(
    store: RunStore, conf: Path, fixed_now: datetime
) -> None:
    set_limits(conf, max_spend_per_day=200.0, max_spend_per_month=3000.0)
    record(store, 12.5, started_at=at(15, 9))
    record(store, 100.0, started_at=at(3))
    assert limits.note() == (
        "spending limits: $200.00 per UTC day, $3,000.00 per UTC month across runs "
        f"(max_spend_per_day and max_spend_per_month in {conf}); a run that would pass one "
        "is refused or stopped (exit 4)"
    )
    assert limits.note(store) == (
        "spending limits: $200.00 per UTC day ($12.50 spent today (UTC)), $3,000.00 per UTC "
        "month ($112.50 spent this month (UTC)) across runs (max_spend_per_day and "
        f"max_spend_per_month in {conf}); a run that would pass one is refused or stopped "
        "(exit 4)"
    )


# -- while it runs: the allowance ------------------------------------------------------------


def test_the_allowance_counts_the_others_and_this_runs_cost_once(
    store: RunStore, conf: Path, fixed_now: datetime
) -> None:
    set_limits(conf, max_spend_per_day=5.0, max_spend_per_month=6.0)
    record(store, 1.0, started_at=at(15, 9))
    record(store, 2.0, started_at=at(3))
    me = record(store, 0.7, status=RunStatus.RUNNING, started_at=at(15, 11))  # its stale record
    w = workload()
    allowance = limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND, me)
    assert allowance is not None
    left = allowance.left(me, 1.0)
    assert left is not None
    assert left[0] == pytest.approx(2.0)  # month: 6 - (1 + 2) - 1; day: 5 - 1 - 1 = 3
    assert left[1] == (
        f"the monthly spending limit of $6.00 (max_spend_per_month in {conf}) is reached: "
        "$4.00 spent this month (UTC) across runs"
    )
    left = allowance.left(me, 3.1)
    assert left is not None and left[0] == pytest.approx(-0.1)
    assert left[1].endswith("is reached: $6.10 spent this month (UTC) across runs")


def test_the_allowance_reads_the_records_at_most_every_refresh(
    store: RunStore, conf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_limits(conf, max_spend_per_day=5.0)
    w = workload()
    allowance = limits.check(store, w, plan_for(w, DOLLAR_A_SECOND), DOLLAR_A_SECOND)
    assert isinstance(allowance, limits.Spending)
    reads: list[str] = []
    real = store.spent

    def counted(since: str, until: str, exclude: str | None = None) -> float:
        reads.append(since)
        return real(since, until, exclude)

    monkeypatch.setattr(store, "spent", counted)
    started = time.monotonic()
    while time.monotonic() - started < 1.2:
        allowance.left("me", 0.5)
    assert 2 <= len(reads) <= 4  # every 0.5 s, not at every call
    other = record(store, 4.0)
    time.sleep(limits.REFRESH_SECONDS)
    left = allowance.left("me", 0.5)
    assert left is not None and left[0] == pytest.approx(0.5)
    left = allowance.left(other, 0.0)  # another run: read anew, without its own record
    assert left is not None and left[0] == pytest.approx(5.0)


# -- while it runs: the driver, one run and two at once ----------------------------------------


class Metered(Target):
    """Each task runs ``seconds`` at ``price`` unless stopped (a stand-in machine)."""

    name = "local"
    description = "the test machine"

    def __init__(self, store: RunStore, price: float, seconds: float = 30.0) -> None:
        super().__init__(store)
        self.price = price
        self.seconds = seconds
        self.stopped: list[str] = []
        self._stops: dict[str, threading.Event] = {}

    def offers(self, workload: Workload) -> tuple[Offer, ...]:
        return (Offer("test", "box", "local", "H100", 8, 80.0, 64, 512.0, None, "x86_64", 1.0),)

    def prepare(self, workload: Workload, plan: Plan) -> Preparation:
        return Preparation(price_per_hour=self.price)

    def run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        stop = self._stops.setdefault(task.key, threading.Event())
        ctx.submitted()
        ctx.started(Started(node="box", price_per_hour=self.price))
        if stop.wait(self.seconds):
            return TaskEnd(TaskState.STOPPED, 137, "stopped by nodus")
        return TaskEnd(TaskState.EXITED, 0)

    def stop_task(self, task: Task) -> None:
        self.stopped.append(task.key)
        self._stops.setdefault(task.key, threading.Event()).set()

    def cleanup(self, run_id: str) -> Cleanup:
        return Cleanup()

    def nodes(self) -> list[NodeInfo]:
        return []


def drive(root: Path, w: Workload, price: float, seconds: float = 30.0) -> tuple[RunEnd, Any]:
    """Check and run ``w`` as ``nodus run`` does, with its own store on ``root``."""
    store = RunStore.open(root)
    target = Metered(store, price, seconds)
    plan = plan_for(w, price)
    allowance = limits.check(store, w, plan, price)
    launch = launcher.Launch(w, target, plan, target.prepare(w, plan), {}, allowance=allowance)
    rec, outcome = launcher.execute(launch, store)
    return outcome, store.get(rec.id)


def test_a_run_is_stopped_when_the_daily_limit_is_reached(store: RunStore, conf: Path) -> None:
    set_limits(conf, max_spend_per_day=1.5)
    record(store, 0.5)
    started = time.monotonic()
    outcome, rec = drive(store.root, workload("alone"), DOLLAR_A_SECOND)
    assert time.monotonic() - started < 5
    assert (outcome.status, outcome.exit_code) == (RunStatus.BUDGET_EXHAUSTED, 4)
    # Its own cost is counted once: it ran until 0.5 + its cost reached 1.5.
    assert 0.95 <= rec.cost <= 1.0 + 0.25
    assert rec.message.startswith(
        f"stage 'main' stopped: the daily spending limit of $1.50 (max_spend_per_day in {conf}) "
        "is reached: $1.5"
    )
    assert rec.message.endswith(" spent today (UTC) across runs")
    assert rec.stages[0].status == "budget_exhausted"


def test_two_runs_at_once_stop_when_together_they_reach_the_limit(
    store: RunStore, conf: Path
) -> None:
    limit = 2.0
    set_limits(conf, max_spend_per_day=limit)
    results: list[tuple[RunEnd, Any]] = []

    def one(name: str) -> None:
        results.append(drive(store.root, workload(name), DOLLAR_A_SECOND))

    threads = [threading.Thread(target=one, args=(n,)) for n in ("a", "b")]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert time.monotonic() - started < 10
    assert len(results) == 2
    assert {o.status for o, _ in results} == {RunStatus.BUDGET_EXHAUSTED}
    total = sum(rec.cost for _, rec in results)
    # Never both past it: at most what both spend in LAG_SECONDS beyond it (the scripted
    # machine stops at once).
    assert limit - 0.1 <= total <= limit + 2 * limits.LAG_SECONDS
    for _, rec in results:
        assert "the daily spending limit of $2.00 (max_spend_per_day in" in rec.message
    assert sum(r.cost for r in store.spending("2000-01-01T00:00:00+00:00")) == pytest.approx(total)


def test_a_free_run_runs_past_a_reached_limit(store: RunStore, conf: Path) -> None:
    set_limits(conf, max_spend_per_day=1.0)
    record(store, 3.0)
    outcome, rec = drive(store.root, workload("free"), 0.0, seconds=0.3)
    assert (outcome.status, outcome.exit_code) == (RunStatus.SUCCEEDED, 0)
    assert rec.cost == 0.0


def test_a_priced_run_is_refused_once_the_limit_is_reached(store: RunStore, conf: Path) -> None:
    set_limits(conf, max_spend_per_day=1.0)
    record(store, 1.0)
    with pytest.raises(
        OverBudget, match=re.escape("is reached: $1.00 spent today (UTC) across runs")
    ):
        drive(store.root, workload("late"), DOLLAR_A_SECOND)
    assert len(store.list_runs()) == 1  # nothing recorded for it


# -- the report ------------------------------------------------------------------------------


def test_the_report_per_period_workload_and_target(
    store: RunStore, conf: Path, fixed_now: datetime
) -> None:
    set_limits(conf, max_spend_per_day=10.0, max_spend_per_month=100.0, max_price_per_hour=40.0)
    record(store, 99.0, name="old", started_at=at(31, month=12, year=2024))  # not counted
    record(store, 20.0, name="train", started_at=at(3))
    record(store, 2.5, name="train", target="swarm", started_at=at(15, 1))
    running = record(
        store, 1.5, name="eval", status=RunStatus.RUNNING, budget=4.0, started_at=at(15, 11)
    )
    found = spending.report(store, now=NOW)
    doc = found.as_json()
    assert doc["version"] == 1 and doc["timezone"] == "UTC" and doc["config"] == str(conf)
    assert doc["day"] == {
        "period": "2025-01-15",
        "since": "2025-01-15T00:00:00+00:00",
        "until": "2025-01-16T00:00:00+00:00",
        "config_key": "max_spend_per_day",
        "limit": 10.0,
        "spent": 4.0,
        "left": 6.0,
        "percent": 40.0,
        "runs": 2,
        "running": 1,
        "reserved": 2.5,
        "unknown_runs": 0,
    }
    assert doc["month"]["spent"] == 24.0 and doc["month"]["percent"] == 24.0
    assert doc["month"]["runs"] == 3 and doc["month"]["left"] == 76.0
    assert doc["max_price_per_hour"] == 40.0
    assert doc["workloads"] == [
        {
            "workload": "train",
            "spent": 22.5,
            "runs": 2,
            "running": 0,
            "percent_of_monthly_limit": 22.5,
            "unknown_runs": 0,
        },
        {
            "workload": "eval",
            "spent": 1.5,
            "runs": 1,
            "running": 1,
            "percent_of_monthly_limit": 1.5,
            "unknown_runs": 0,
        },
    ]
    assert [(t["target"], t["spent"], t["runs"]) for t in doc["targets"]] == [
        ("local", 21.5, 2),
        ("swarm", 2.5, 1),
    ]
    assert [(r["id"], r["status"], r["cost"], r["budget"]) for r in doc["active"]] == [
        (running, "running", 1.5, 4.0)
    ]


def test_the_report_counts_the_runs_whose_cost_is_unknown_apart(
    store: RunStore, conf: Path, fixed_now: datetime
) -> None:
    """A run with a stage on a node whose price was not set counts in ``unknown_runs`` of
    its periods and groups (its recorded cost, the priced part, still counts in ``spent``);
    a stage on a priced cluster node does not."""
    record(store, 3.0, name="train", started_at=at(15, 1))
    today = record(store, 1.25, name="train", target="kubernetes", started_at=at(15, 2))
    priced_stage(store, today, known=False)
    earlier = record(store, 0.0, name="eval", target="slurm", started_at=at(3))
    priced_stage(store, earlier, known=False)
    priced = record(store, 2.0, name="eval", target="kubernetes", started_at=at(4))
    priced_stage(store, priced, known=True)
    running = record(
        store, 0.0, name="eval", target="slurm", status=RunStatus.RUNNING, started_at=at(15, 3)
    )
    priced_stage(store, running, known=False)
    found = spending.report(store, now=NOW)
    assert (found.day.unknown_runs, found.month.unknown_runs) == (2, 3)
    assert (found.day.spent, found.month.spent) == (4.25, 6.25)
    doc = found.as_json()
    assert (doc["day"]["unknown_runs"], doc["month"]["unknown_runs"]) == (2, 3)
    assert {w["workload"]: w["unknown_runs"] for w in doc["workloads"]} == {"train": 1, "eval": 2}
    assert {t["target"]: (t["runs"], t["unknown_runs"]) for t in doc["targets"]} == {
        "local": (1, 0),
        "kubernetes": (2, 1),
        "slurm": (2, 2),
    }
    assert [(r["id"], r["cost_known"]) for r in doc["active"]] == [(running, False)]


def test_the_report_without_limits(store: RunStore, conf: Path, fixed_now: datetime) -> None:
    record(store, 3.0, started_at=at(15, 1))
    doc = spending.report(store, now=NOW).as_json()
    assert doc["day"]["limit"] is None and doc["day"]["left"] is None
    assert doc["day"]["percent"] is None and doc["day"]["spent"] == 3.0
    assert doc["max_price_per_hour"] is None and doc["config"] == str(conf)
