# ruff: noqa: F811 - the fixtures imported from docker_support are test parameters here
"""Spending limits on the command line, against a real dockerd (tests/harness/engine.sh up),
and ``nodus spend``.

A run refused before it starts (with a budget; once a limit is reached), a run stopped when
the daily or monthly limit is reached, two detached runs at once that together would pass
the daily limit (never both past it), a free local run that is never refused, and the
spend report in words and in JSON. Earlier spend is recorded straight into the test's
NODUS_HOME; ``[local] price_per_hour = 3600`` makes a running second cost $1.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any

import pytest
from docker_support import (  # noqa: F401 - fixtures
    IMAGE,
    Nodus,
    docker_client,
    engine_clean,
    nodus_env,
)

from nodus_cli.records import RunStatus, RunStore
from nodus_cli.run import limits
from nodus_cli.workload import load_text

pytestmark = pytest.mark.docker

#: How long the local engine takes to stop a run's container, at most (seconds): its
#: cost counts until then, as for a budget.
STOP_SECONDS = 1.0


def workload(name: str, command: str = "echo start; sleep 30", extra: str = "") -> str:
    return f'name = "{name}"\nimage = "{IMAGE}"\ncommand = {json.dumps(command)}\n{extra}'


def configure(env: Nodus, price: float = 3600, **limits_: float) -> None:
    """The whole configuration file: ``[local]`` price and ``[limits]``."""
    env.config.write_text(
        f"[local]\nprice_per_hour = {price}\n[limits]\n"
        + "".join(f"{k} = {v}\n" for k, v in limits_.items()),
        encoding="utf-8",
    )


def spent_before(
    env: Nodus,
    cost: float,
    name: str = "earlier",
    target: str = "local",
    status: RunStatus = RunStatus.SUCCEEDED,
    budget: float | None = None,
    started_at: str | None = None,
) -> str:
    """A run recorded in the test's NODUS_HOME as if it had run and cost ``cost``."""
    text = f'name = "{name}"\nimage = "{IMAGE}"\ncommand = "true"\n'
    if budget is not None:
        text += f"budget = {budget}\n"
    parsed = load_text(text)
    assert parsed.workload is not None
    store = RunStore.open(env.home)
    try:
        run = store.create_run(parsed.workload, target, 3600.0, None)
        if status.active:
            store.claim(run.id, os.getpid())  # supervised by a live process: this one
            store.set_running(run.id)
            store.update_cost(run.id, cost)
        else:
            store.finish_run(run.id, status, 0, cost)
    finally:
        store.close()
    if started_at is not None:
        with sqlite3.connect(env.home / "runs.sqlite3") as db:
            db.execute("UPDATE runs SET started_at=? WHERE id=?", (started_at, run.id))
    return run.id


def containers_of(client: Any, workload_name: str) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"nodus.workload={workload_name}"})


# -- refused before it starts ----------------------------------------------------------------


def test_a_budget_that_would_pass_the_daily_limit_is_refused_before_anything_starts(
    nodus_env: Nodus, docker_client: Any
) -> None:
    configure(nodus_env, max_spend_per_day=2.0)
    spent_before(nodus_env, 1.5)
    path = nodus_env.write(workload("refused", extra="budget = 1.0\n"))
    done = nodus_env.run("run", path)
    assert done.returncode == 4, done.stderr
    assert (
        "error: refused to start: the run's budget would pass the daily spending limit of "
        f"$2.00 (max_spend_per_day in {nodus_env.config}): $1.50 spent today (UTC) across "
        "runs + this run's budget of $1.00 = $2.50"
    ) in done.stderr
    assert (
        "hint: lower the workload's budget to $0.50 or less, wait for the next UTC day, or "
        f"raise max_spend_per_day in {nodus_env.config}"
    ) in done.stderr
    assert "Traceback" not in done.stderr
    assert [r["workload"] for r in nodus_env.runs()] == ["earlier"]  # nothing recorded
    assert containers_of(docker_client, "refused") == []
    # Detached: refused the same way, before anything is recorded.
    done = nodus_env.run("run", "--detach", path)
    assert done.returncode == 4 and done.stdout == ""
    assert "refused to start: the run's budget would pass the daily spending limit" in done.stderr
    assert len(nodus_env.runs()) == 1


def test_without_a_budget_a_run_is_refused_once_the_limit_is_reached(nodus_env: Nodus) -> None:
    configure(nodus_env, max_spend_per_day=2.0)
    spent_before(nodus_env, 2.0)
    done = nodus_env.run("run", nodus_env.write(workload("late")))
    assert done.returncode == 4, done.stderr
    assert (
        "error: refused to start: the daily spending limit of $2.00 (max_spend_per_day in "
        f"{nodus_env.config}) is reached: $2.00 spent today (UTC) across runs"
    ) in done.stderr
    assert len(nodus_env.runs()) == 1


def test_a_free_local_run_is_never_refused(nodus_env: Nodus) -> None:
    configure(nodus_env, price=0, max_spend_per_day=1.0, max_spend_per_month=1.0)
    spent_before(nodus_env, 5.0)  # both limits passed already
    done = nodus_env.run("run", nodus_env.write(workload("free", "echo free", "budget = 3.0\n")))
    assert done.returncode == 0, done.stderr
    assert "main | free" in done.stdout
    assert nodus_env.runs()[0]["status"] == "succeeded"


# -- stopped when it reaches a limit ----------------------------------------------------------


def test_a_run_without_budget_is_stopped_when_the_daily_limit_is_reached(
    nodus_env: Nodus, docker_client: Any
) -> None:
    configure(nodus_env, max_spend_per_day=2.0)
    spent_before(nodus_env, 0.5)
    started = time.monotonic()
    done = nodus_env.run("run", nodus_env.write(workload("capped")))
    assert done.returncode == 4, done.stderr
    assert time.monotonic() - started < 15
    reason = (
        f"the daily spending limit of $2.00 (max_spend_per_day in {nodus_env.config}) is "
        "reached: $2."
    )
    assert f"nodus: {reason}" in done.stderr
    assert "spent today (UTC) across runs (at $3,600.00/h); stopping the running tasks" in (
        done.stderr
    )
    run = nodus_env.runs()[0]
    assert run["workload"] == "capped"
    assert run["status"] == "budget_exhausted" and run["exit_code"] == 4
    assert run["message"].startswith(f"stage 'main' stopped: {reason}")
    assert run["stages"][0]["status"] == "budget_exhausted"
    assert 1.4 <= run["cost"] <= 1.5 + STOP_SECONDS
    assert containers_of(docker_client, "capped") == []


def test_the_monthly_limit_stops_a_run(nodus_env: Nodus, docker_client: Any) -> None:
    configure(nodus_env, max_spend_per_day=100.0, max_spend_per_month=2.0)
    spent_before(nodus_env, 1.0)
    done = nodus_env.run("run", nodus_env.write(workload("monthly")))
    assert done.returncode == 4, done.stderr
    run = nodus_env.runs()[0]
    assert run["status"] == "budget_exhausted"
    assert run["message"].startswith(
        f"stage 'main' stopped: the monthly spending limit of $2.00 (max_spend_per_month in "
        f"{nodus_env.config}) is reached: $2."
    )
    assert run["message"].endswith(" spent this month (UTC) across runs")
    assert containers_of(docker_client, "monthly") == []


# -- two runs at once --------------------------------------------------------------------------


def _two_detached(env: Nodus, extra: str) -> list[tuple[int, str, str]]:
    """Start two detached runs at the same moment, each of ten minutes unless something
    stops it; their (exit code, stdout, stderr)."""
    procs = [
        env.popen(
            "run",
            "--detach",
            env.write(workload(name, "echo start; sleep 600", extra), f"{name}.toml"),
        )
        for name in ("first", "second")
    ]
    found = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        found.append((proc.returncode, out, err))
    return found


def _wait_all(env: Nodus, timeout: float = 120) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while any(env.db_status(r["id"])[0] in ("pending", "running") for r in env.runs()):
        assert time.monotonic() < deadline, "runs still going"
        time.sleep(0.2)
    return env.runs()


def test_two_detached_runs_that_together_pass_the_daily_limit_never_both_run_past_it(
    nodus_env: Nodus, docker_client: Any
) -> None:
    limit = 3.0
    configure(nodus_env, max_spend_per_day=limit)
    started = time.monotonic()
    for code, _out, err in _two_detached(nodus_env, ""):
        assert code == 0, err
    runs = _wait_all(nodus_env)
    assert time.monotonic() - started < 90  # each alone would run 10 minutes
    assert len(runs) == 2
    assert {r["status"] for r in runs} == {"budget_exhausted"}  # both stopped
    for r in runs:
        assert "the daily spending limit of $3.00 (max_spend_per_day in" in r["message"]
    total = sum(r["cost"] for r in runs)
    # The documented overshoot: what both spend in LAG_SECONDS, and while they stop.
    assert limit - 0.1 <= total <= limit + 2 * (limits.LAG_SECONDS + STOP_SECONDS)
    assert containers_of(docker_client, "first") == containers_of(docker_client, "second") == []


def test_two_detached_budgeted_runs_that_together_pass_the_limit_one_is_refused_or_stopped(
    nodus_env: Nodus, docker_client: Any
) -> None:
    limit = 3.0
    configure(nodus_env, max_spend_per_day=limit)
    results = _two_detached(nodus_env, "budget = 2.0\n")
    runs = _wait_all(nodus_env)
    # Refused when it was submitted (nothing recorded), or by its supervisor's second look
    # once both were recorded (recorded, never started), or stopped by the limit.
    at_submit = [err for code, out, err in results if code == 4 and not out.strip()]
    by_supervisor = [
        r for r in runs if r["stages"][0]["started_at"] is None and r["exit_code"] == 4
    ]
    by_limit = [r for r in runs if "the daily spending limit" in (r["message"] or "")]
    assert len(at_submit) + len(by_supervisor) + len(by_limit) >= 1, (results, runs)
    for err in at_submit:
        assert (
            "refused to start: the run's budget would pass the daily spending limit of $3.00"
        ) in err
        assert "still reserved by the budgets of 1 run not yet ended" in err
    for r in by_supervisor:
        assert r["status"] == "budget_exhausted"
        assert r["message"].startswith(
            "refused to start: the run's budget would pass the daily spending limit of $3.00"
        )
    total = sum(r["cost"] for r in runs)
    assert total <= limit + 2 * (limits.LAG_SECONDS + STOP_SECONDS)
    assert containers_of(docker_client, "first") == containers_of(docker_client, "second") == []


def test_a_background_supervisor_refuses_a_run_recorded_after_a_reserving_one(
    nodus_env: Nodus, docker_client: Any
) -> None:
    """Both submissions passed the first check at once; the supervisor of the one recorded
    later looks again, sees the earlier one's budget, and records its run refused."""
    configure(nodus_env, max_spend_per_day=3.0)
    spent_before(nodus_env, 0.0, name="earlier", status=RunStatus.PENDING, budget=2.0)
    time.sleep(1.1)  # recorded a second later: surely after it
    later = spent_before(nodus_env, 0.0, name="later", status=RunStatus.PENDING, budget=2.0)
    done = nodus_env.run("_exec", later)
    assert done.returncode == 4, done.stderr
    run = nodus_env.record(later)
    assert (run["status"], run["exit_code"]) == ("budget_exhausted", 4)
    assert run["message"] == (
        "refused to start: the run's budget would pass the daily spending limit of $3.00 "
        f"(max_spend_per_day in {nodus_env.config}): $0.00 spent today (UTC) across runs "
        "+ $2.00 still reserved by the budgets of 1 run not yet ended + this run's budget "
        "of $2.00 = $4.00"
    )
    assert run["stages"][0]["started_at"] is None
    assert containers_of(docker_client, "later") == []


# -- nodus spend ---------------------------------------------------------------------------


def test_spend_reports_today_this_month_workloads_and_targets(nodus_env: Nodus) -> None:
    configure(nodus_env, max_spend_per_day=10.0, max_spend_per_month=100.0)
    nodus_env.config.write_text(
        nodus_env.config.read_text("utf-8") + "max_price_per_hour = 40.0\n", "utf-8"
    )
    month = limits.period("month")
    last_month = limits.period("month", _before(month.since))
    spent_before(nodus_env, 99.0, name="ancient", started_at=last_month.since)
    spent_before(nodus_env, 2.5, name="train")
    spent_before(nodus_env, 1.25, name="train", target="swarm")
    running = spent_before(nodus_env, 0.25, name="eval", status=RunStatus.RUNNING, budget=4.0)
    done = nodus_env.run("spend", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["version"] == 1 and doc["timezone"] == "UTC"
    assert doc["config"] == str(nodus_env.config)
    day = doc["day"]
    assert (day["limit"], day["spent"], day["left"], day["percent"]) == (10.0, 4.0, 6.0, 40.0)
    assert (day["runs"], day["running"], day["reserved"]) == (3, 1, 3.75)
    assert day["config_key"] == "max_spend_per_day"
    assert day["period"] == limits.period("day").label
    assert doc["month"]["spent"] == 4.0 and doc["month"]["limit"] == 100.0
    assert doc["month"]["percent"] == 4.0 and doc["month"]["period"] == month.label
    assert doc["max_price_per_hour"] == 40.0
    assert [(w["workload"], w["spent"], w["runs"], w["running"]) for w in doc["workloads"]] == [
        ("train", 3.75, 2, 0),
        ("eval", 0.25, 1, 1),
    ]
    assert doc["workloads"][0]["percent_of_monthly_limit"] == 3.8
    assert [(t["target"], t["spent"], t["runs"]) for t in doc["targets"]] == [
        ("local", 2.75, 2),
        ("swarm", 1.25, 1),
    ]
    assert [(r["id"], r["status"], r["budget"]) for r in doc["active"]] == [
        (running, "running", 4.0)
    ]

    done = nodus_env.run("spend")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines if str(nodus_env.config) not in line), lines
    assert lines[0] == "spend (UTC; a running run counts at its cost so far)"
    assert lines[1].split() == ["period", "limit", "spent", "left", "used", "runs", "running"]
    today = limits.period("day").label
    assert lines[2].split() == ["today", today, "$10.00", "$4.00", "$6.00", "40%", "3", "1"]
    assert lines[3].split() == ["month", month.label, "$100.00", "$4.00", "$96.00", "4%", "3", "1"]
    text = done.stdout
    assert "budgets of runs not yet ended may still spend $3.75" in text
    assert f"this month ({month.label}) by workload" in text
    assert f"this month ({month.label}) by target" in text
    assert "1 run not yet ended, counted at the cost recorded so far:" in text
    row = next(line for line in lines if running in line)
    assert row.split() == [running, "eval", "running", "$0.25", "$4.00"]
    assert "max_price_per_hour: $40.00 (no configuration above it is chosen)" in text
    assert f"limits set in {nodus_env.config}" in text
    assert "ancient" not in text


def test_spend_without_limits_or_runs(nodus_env: Nodus) -> None:
    done = nodus_env.run("spend")
    assert done.returncode == 0, done.stderr
    assert f"no runs recorded this month ({limits.period('month').label})" in done.stdout
    assert (
        "no spending limits set: add [limits] max_spend_per_day or max_spend_per_month to "
        f"{nodus_env.config}"
    ) in done.stdout
    doc = json.loads(nodus_env.run("spend", "--json").stdout)
    assert doc["day"]["limit"] is None and doc["day"]["spent"] == 0.0
    assert doc["workloads"] == [] and doc["active"] == []


def test_spend_counts_a_real_run(nodus_env: Nodus) -> None:
    configure(nodus_env, max_spend_per_day=50.0)
    done = nodus_env.run("run", nodus_env.write(workload("short", "sleep 1")))
    assert done.returncode == 0, done.stderr
    cost = nodus_env.runs()[0]["cost"]
    assert cost > 0.5
    doc = json.loads(nodus_env.run("spend", "--json").stdout)
    assert doc["day"]["spent"] == pytest.approx(cost) and doc["day"]["runs"] == 1


def _before(iso: str) -> Any:
    from datetime import datetime, timedelta

    return datetime.fromisoformat(iso) - timedelta(hours=1)


def test_spend_help_names_its_option(nodus_env: Nodus) -> None:
    done = nodus_env.run("spend", "--help")
    assert done.returncode == 0
    assert "--json" in done.stdout and "against the spending limits" in done.stdout
