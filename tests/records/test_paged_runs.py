"""The runs a page lists: newest first, from an offset, filtered by status, target and
workload, through an index (schema version 3) rather than a scan of every run."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from records_support import make_workload

from nodus_cli import records
from nodus_cli.api import Client
from nodus_cli.errors import InvalidWorkload
from nodus_cli.records import RunStatus, RunStore


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    s = RunStore.open(tmp_path)
    for i in range(7):
        r = s.create_run(make_workload(), "local" if i % 2 else "swarm", 1.0, None)
        s.finish_run(r.id, RunStatus.FAILED if i == 3 else RunStatus.SUCCEEDED, 0, float(i))
    return s


def test_pages_follow_each_other_newest_first(store: RunStore) -> None:
    every = [r.id for r in store.list_runs(100)]
    assert len(every) == 7
    pages = [[r.id for r in store.list_runs(3, offset)] for offset in (0, 3, 6)]
    assert [i for p in pages for i in p] == every


def test_filters_keep_only_their_runs(store: RunStore) -> None:
    assert [r.status for r in store.list_runs(10, status="failed")] == [RunStatus.FAILED]
    assert {r.target for r in store.list_runs(10, target="local")} == {"local"}
    assert len(store.list_runs(10, target="local")) == 3
    assert store.list_runs(10, workload="rec", target="swarm", status="failed") == []
    assert store.list_runs(10, workload="nothing") == []


@pytest.mark.parametrize(
    ("where", "index"),
    [
        ("", "runs_by_start"),
        ("WHERE status = 'failed'", "runs_by_status_start"),
        ("WHERE target = 'local'", "runs_by_target_start"),
        ("WHERE workload = 'rec'", "runs_by_workload_start"),
    ],
)
def test_a_page_is_read_through_an_index(store: RunStore, where: str, index: str) -> None:
    db = sqlite3.connect(store.db_path)
    plan = " ".join(
        str(row[-1])
        for row in db.execute(
            f"EXPLAIN QUERY PLAN SELECT id FROM runs {where} "
            "ORDER BY started_at DESC, rowid DESC LIMIT 50 OFFSET 0"
        )
    )
    db.close()
    assert index in plan, plan
    assert "TEMP B-TREE FOR ORDER BY" not in plan, plan


def test_the_client_pages_and_filters(store: RunStore, tmp_path: Path) -> None:
    with Client(home=tmp_path) as client:
        assert len(client.runs(3, offset=6)) == 1
        assert [r.status for r in client.runs(status="failed")] == [RunStatus.FAILED]
        assert {r.target for r in client.runs(target="swarm")} == {"swarm"}


def test_spend_by_day_has_every_day_and_today_last(store: RunStore, tmp_path: Path) -> None:
    with Client(home=tmp_path) as client:
        days = client.spend_by_day(7)
    assert len(days) == 7
    assert days[-1][1] == pytest.approx(sum(range(7)))
    assert all(cost == 0 for _, cost in days[:-1])


def test_plan_text_plans_as_a_file_does_and_names_the_text(tmp_path: Path) -> None:
    text = 'image = "nodus-test/busybox:1"\ncommand = "true"\ngpu = "H100"\n'
    with Client(target="catalog", home=tmp_path) as client:
        plan = client.plan_text(text, "mine.toml")
        assert plan.workload.name == "mine"
        assert plan.stages[0].candidates
        with pytest.raises(InvalidWorkload) as caught:
            client.plan_text('gpu_type = "H100"\n', "bad.toml")
    assert "bad.toml" in str(caught.value)
    assert not (tmp_path / "runs.sqlite3").exists()  # nothing written


def test_the_active_runs_are_found_without_reading_every_run(store: RunStore) -> None:
    db = sqlite3.connect(store.db_path)
    plan = " ".join(
        str(row[-1])
        for row in db.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM runs "
            "WHERE status IN ('pending', 'queued', 'running') OR cleanup_pending=1"
        )
    )
    db.close()
    assert "runs_by_cleanup" in plan and "SCAN runs" not in plan, plan


def test_records_of_version_two_get_the_indexes(tmp_path: Path) -> None:
    store = RunStore.open(tmp_path)
    store.create_run(make_workload(), "local", 0.0, None)
    store.close()
    names = ("runs_by_start", "runs_by_status_start", "runs_by_target_start")
    names += ("runs_by_workload_start", "runs_by_cleanup")
    with sqlite3.connect(tmp_path / "runs.sqlite3") as db:
        for name in names:
            db.execute(f"DROP INDEX {name}")
        db.execute("PRAGMA user_version=2")
    RunStore.open(tmp_path).close()
    with sqlite3.connect(tmp_path / "runs.sqlite3") as db:
        have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert set(names) <= have
        assert db.execute("PRAGMA user_version").fetchone()[0] == records.schema.SCHEMA_VERSION
    assert len(RunStore.open(tmp_path).list_runs()) == 1
