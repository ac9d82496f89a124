"""``nodus spend`` on runs whose cost is unknown (a stage on a cluster node whose price was
not set), in words and in JSON: records written through the store, so no engine is
needed (the runs have ended)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from records_support import make_workload, priced_stage

from nodus_cli.records import RunStatus, RunStore

Done = CompletedProcess[str]


@pytest.fixture
def spend(nodus: Callable[..., Done], tmp_path: Path) -> Callable[..., Done]:
    """``nodus spend ARGS`` (conftest's ``nodus``) on the test's ``home`` and
    configuration, without the developer's NODUS_* variables, wide enough that a table row
    stays one line."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("NODUS_")}
    env.update(
        NODUS_HOME=str(tmp_path / "home"),
        NODUS_CONFIG=str(tmp_path / "config.toml"),
        NO_COLOR="1",
        COLUMNS="200",
    )
    return lambda *args: nodus("spend", *args, env=env)


def ended(store: RunStore, target: str, cost: float, known: bool | None) -> str:
    run = store.create_run(make_workload(), target, 0.0, None)
    store.finish_run(run.id, RunStatus.SUCCEEDED, 0, cost)
    if known is not None:
        priced_stage(store, run.id, known=known, idx=1)
    return run.id


def test_spend_says_how_many_runs_cost_an_unknown_amount_and_how_to_price_them(
    tmp_path: Path, spend: Callable[..., Done]
) -> None:
    home = tmp_path / "home"
    store = RunStore.open(home)
    try:
        ended(store, "local", 2.0, None)
        ended(store, "kubernetes", 1.2, False)
        ended(store, "kubernetes", 0.0, False)
        ended(store, "slurm", 3.0, True)
    finally:
        store.close()
    done = spend()
    assert done.returncode == 0, done.stderr
    conf = tmp_path / "config.toml"
    assert (
        "2 runs this month (2 today) ran on nodes whose price is not set: their cost is not "
        "counted, nor held to a limit or budget (set [kubernetes] price_per_hour or "
        f"[kubernetes] prices in {conf})"
    ) in " ".join(done.stdout.split())  # wrapped at the terminal's width
    kubernetes = next(line for line in done.stdout.splitlines() if line.startswith("kubernetes"))
    assert "$1.20 + unknown" in kubernetes
    slurm = next(line for line in done.stdout.splitlines() if line.startswith("slurm"))
    assert "$3.00" in slurm and "unknown" not in slurm

    doc = json.loads(spend("--json").stdout)
    assert (doc["day"]["unknown_runs"], doc["month"]["unknown_runs"]) == (2, 2)
    assert doc["month"]["spent"] == 6.2  # what was priced still counts
    assert {t["target"]: t["unknown_runs"] for t in doc["targets"]} == {
        "local": 0,
        "kubernetes": 2,
        "slurm": 0,
    }


def test_spend_says_nothing_of_unknown_costs_when_every_price_is_set(
    tmp_path: Path, spend: Callable[..., Done]
) -> None:
    home = tmp_path / "home"
    store = RunStore.open(home)
    try:
        ended(store, "slurm", 3.0, True)
    finally:
        store.close()
    done = spend()
    assert done.returncode == 0, done.stderr
    assert "price is not set" not in done.stdout and "unknown" not in done.stdout
    assert json.loads(spend("--json").stdout)["month"]["unknown_runs"] == 0
