"""The money clock: a task costs from its start at its price, the tightest of the budget
and the spending limits decides, and a free run never reaches a budget."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from nodus_cli.run.budget import COST_EVERY, BudgetClock


@dataclass
class _Task:
    started: float | None = None
    rate: float = 0.0


class _Limit:
    def __init__(self, limit: float, words: str = "the daily limit") -> None:
        self.limit, self.words = limit, words
        self.asked: list[tuple[str, float]] = []

    def left(self, run_id: str, run_cost: float, fresh: bool = False) -> tuple[float, str] | None:
        self.asked.append((run_id, run_cost))
        return self.limit - run_cost, self.words


def _hour_ago(rate: float) -> _Task:
    return _Task(time.monotonic() - 3600, rate)


def test_a_running_task_costs_from_its_start_at_its_price() -> None:
    running = {"a": _hour_ago(2.0), "b": _Task(None, 5.0)}  # b not started: costs nothing
    clock = BudgetClock("r", None, None, running)
    assert clock.cost_now() == pytest.approx(2.0, abs=1e-3)
    assert clock.rate() == 2.0


def test_an_ended_task_is_charged_once_and_counts_on() -> None:
    running = {"a": _hour_ago(3.0)}
    clock = BudgetClock("r", None, None, running)
    charge = clock.charge(running.pop("a"))
    assert charge.runtime == pytest.approx(3600, abs=1) and charge.cost == pytest.approx(3.0)
    assert clock.cost_now() == pytest.approx(3.0)
    never = clock.charge(_Task(None, 3.0))
    assert (never.runtime, never.cost) == (0.0, 0.0)


def test_the_tightest_limit_decides_with_its_words() -> None:
    running = {"a": _hour_ago(1.0)}
    limit = _Limit(0.5)
    clock = BudgetClock("r", 10.0, limit, running)
    left = clock.left()
    assert left is not None and left[1] == "the daily limit"
    assert left[0] == pytest.approx(-0.5, abs=1e-3)
    assert clock.exhausted() == "the daily limit"
    assert limit.asked and limit.asked[0][0] == "r"
    roomy = BudgetClock("r", 0.5, _Limit(100.0), running)
    assert roomy.exhausted() == "the run's cost reached its budget $0.50"


def test_without_a_budget_or_limit_nothing_is_left_to_reach() -> None:
    clock = BudgetClock("r", None, None, {"a": _hour_ago(1.0)})
    assert clock.left() is None and clock.exhausted() is None


def test_a_free_run_never_reaches_its_budget() -> None:
    clock = BudgetClock("r", 1.0, None, {"a": _hour_ago(0.0)})
    assert clock.cost_now() == 0.0 and clock.exhausted() is None


def test_the_loop_wakes_when_the_money_would_run_out() -> None:
    started = time.monotonic()
    clock = BudgetClock("r", 0.001, None, {"a": _Task(started, 3600.0)})  # $1 a second
    assert 0.01 <= clock.next_check(0.25) < 0.25
    free = BudgetClock("r", 1.0, None, {"a": _Task(started, 0.0)})
    assert free.next_check(0.25) == 0.25
    spent = BudgetClock("r", 0.0, None, {"a": _Task(started - 10, 3600.0)})
    assert spent.next_check(0.25) == 0.01


def test_the_cost_is_recorded_at_most_every_cost_every_and_only_when_changed() -> None:
    running = {"a": _hour_ago(1.0)}
    clock = BudgetClock("r", None, None, running)
    first = clock.to_record()
    assert first is not None and first == pytest.approx(1.0, abs=1e-3)
    assert clock.to_record() is None  # too soon
    running.clear()
    clock.ended = first
    time.sleep(COST_EVERY + 0.05)
    assert clock.to_record() is None  # due, but unchanged
    free = BudgetClock("r", None, None, {}, recorded=0.0)
    assert free.to_record() is None  # a free run's record is never rewritten
