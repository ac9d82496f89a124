"""The store's reads: runs by id, the newest and the active ones, a stage's tasks, and the
queries the planner and the spending limits ask (runtimes, spending, money spent).

Contract: each function reads through the connection it is handed and returns records
(:mod:`~nodus_cli.records.model`) or small frozen rows (:class:`SpendRow`); none writes.
The connection, its failures and a store that does not exist yet are the caller's
(:class:`~nodus_cli.records.store.RunStore`, whose methods are the public way in).

Why apart from the store: the store is about keeping records safely (the folder, the
connection, transactions, writes); what is asked of them grows with every command and
limit, and reads better on its own.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from nodus_cli.errors import UsageError
from nodus_cli.records.model import (
    ACTIVE_RUN,
    PRICE_KNOWN,
    RunRecord,
    RunStatus,
    StageRecord,
    TaskRecord,
)
from nodus_cli.records.rows import RUNS, STAGES, TASKS
from nodus_cli.structs import struct

__all__ = [
    "Key",
    "SpendRow",
    "active",
    "daily_spend",
    "get",
    "recent",
    "runtime_samples",
    "spending",
    "spent",
    "stop_requested",
    "tasks",
]


@struct(frozen=True)
class SpendRow:
    """One run's spending, for ``nodus spend`` and the spending limits."""

    id: str
    workload: str
    target: str
    status: RunStatus
    started_at: str
    cost: float
    budget: float | None
    #: The price per hour the run was recorded with (0: its target charges nothing).
    price_per_hour: float = 0.0
    #: Its place in the order runs were recorded in (SQLite serializes the inserts):
    #: ``started_at`` has whole seconds, and ids of one second sort by their random part.
    recorded: int = 0
    #: False when a stage ran on a node whose price was not set
    #: (:attr:`~nodus_cli.records.model.StageRecord.cost_known`): ``cost`` leaves it out.
    cost_known: bool = True


def stop_requested(db: sqlite3.Connection, run_id: str) -> bool:
    row = db.execute("SELECT stop_requested FROM runs WHERE id=?", (run_id,)).fetchone()
    return bool(row and row[0])


#: Where a page of the newest runs ends: the last run's start and rowid (the order's key).
Key = tuple[str, int]


def recent(
    db: sqlite3.Connection,
    limit: int,
    after: Key | None = None,
    offset: int = 0,
    status: str | None = None,
    target: str | None = None,
    workload: str | None = None,
) -> tuple[list[RunRecord], Key | None]:
    """A page: the ``limit`` runs started last (before ``after``, the key a previous page
    ended at; ``offset`` of them skipped first), newest first, only those of the
    ``status``, ``target`` and ``workload`` given (exact names); and the key this page
    ends at (None when it is empty).

    The order and each filter have an index (schema version 3), the stages and task
    counts of the whole page are read in one query each: a page costs the same wherever
    it lies in a long history."""
    where: list[str] = []
    values: list[object] = []
    if after is not None:
        where.append("(started_at, rowid) < (?, ?)")
        values.extend(after)
    for column, value in (("status", status), ("target", target), ("workload", workload)):
        if value is not None:
            where.append(f"{column} = ?")
            values.append(value)
    clause = f"WHERE {' AND '.join(where)} " if where else ""
    rows = db.execute(
        f"SELECT rowid, started_at, {RUNS.select} FROM runs {clause}"
        "ORDER BY started_at DESC, rowid DESC LIMIT ? OFFSET ?",
        (*values, limit, offset),
    ).fetchall()
    if not rows:
        return [], None
    found = [RUNS.record(row[2:]) for row in rows]
    by_id = {r.id: r for r in found}
    marks = ", ".join("?" * len(found))
    stages: dict[tuple[str, int], StageRecord] = {}
    for run_id, idx, *columns in db.execute(
        f"SELECT run_id, idx, {STAGES.select} FROM stages WHERE run_id IN ({marks}) "
        "ORDER BY run_id, idx",
        list(by_id),
    ):
        stage = stages[run_id, idx] = STAGES.record(columns)
        by_id[run_id].stages.append(stage)
    for run_id, idx, status, count in db.execute(
        f"SELECT run_id, stage_idx, status, COUNT(*) FROM tasks WHERE run_id IN ({marks}) "
        "GROUP BY run_id, stage_idx, status",
        list(by_id),
    ):
        if (run_id, idx) in stages:
            stages[run_id, idx].task_counts[str(status)] = int(count)
    return found, (str(rows[-1][1]), int(rows[-1][0]))


def daily_spend(db: sqlite3.Connection, since: str) -> list[tuple[str, float]]:
    """(UTC day ``YYYY-MM-DD``, recorded cost) of each day since ``since`` that has runs,
    oldest first (a run counts on the day it started)."""
    rows = db.execute(
        "SELECT substr(started_at, 1, 10) AS day, COALESCE(SUM(cost), 0) FROM runs "
        "WHERE started_at >= ? GROUP BY day ORDER BY day",
        (since,),
    ).fetchall()
    return [(str(d), float(c or 0.0)) for d, c in rows]


def active(db: sqlite3.Connection) -> list[RunRecord]:
    """Runs not ended (pending, queued or running), and ended runs whose clean-up is
    pending."""
    statuses = sorted(str(s) for s in ACTIVE_RUN)
    marks = ", ".join("?" * len(statuses))
    rows = db.execute(
        f"SELECT {RUNS.select} FROM runs WHERE status IN ({marks}) OR cleanup_pending=1",
        statuses,
    ).fetchall()
    return [_run(db, row) for row in rows]


def get(db: sqlite3.Connection, run_id: str, with_tasks: bool = False) -> RunRecord:
    """The run whose id is ``run_id`` or starts with it (UsageError otherwise)."""
    rows = db.execute(
        f"SELECT {RUNS.select} FROM runs WHERE substr(id, 1, ?) = ? ORDER BY started_at DESC",
        (len(run_id), run_id),
    ).fetchall()
    exact = [r for r in rows if r[0] == run_id]
    if exact:
        rows = exact
    if not rows:
        raise UsageError(f"no run {run_id!r}", hint="`nodus runs` lists the recorded runs")
    if len(rows) > 1:
        ids = ", ".join(r[0] for r in rows[:5])
        raise UsageError(f"{run_id!r} matches several runs ({ids}); give more of the id")
    return _run(db, rows[0], with_tasks)


def _run(db: sqlite3.Connection, row: tuple[Any, ...], with_tasks: bool = False) -> RunRecord:
    """A run's record with its stages: each fan-out stage's task counts, and with
    ``with_tasks`` its tasks."""
    record = RUNS.record(row)
    for idx, *columns in db.execute(
        f"SELECT idx, {STAGES.select} FROM stages WHERE run_id = ? ORDER BY idx",
        (record.id,),
    ).fetchall():
        stage = STAGES.record(columns)
        counts = db.execute(
            "SELECT status, COUNT(*) FROM tasks WHERE run_id=? AND stage_idx=? GROUP BY status",
            (record.id, idx),
        ).fetchall()
        stage.task_counts = {str(k): int(n) for k, n in counts}
        if with_tasks and counts:
            stage.tasks = tasks(db, record.id, idx)
        record.stages.append(stage)
    return record


def tasks(db: sqlite3.Connection, run_id: str, stage_idx: int) -> list[TaskRecord]:
    """Every task of a fan-out stage, in item order."""
    return [
        TASKS.record(row)
        for row in db.execute(
            f"SELECT {TASKS.select} FROM tasks WHERE run_id=? AND stage_idx=? ORDER BY idx",
            (run_id, stage_idx),
        )
    ]


def runtime_samples(db: sqlite3.Connection, fingerprint: str) -> list[tuple[str, str, float]]:
    """(stage, configuration key, seconds) of every succeeded stage of a workload."""
    rows = db.execute(
        "SELECT s.name, s.config_key, s.runtime_seconds FROM stages s "
        "JOIN runs r ON r.id = s.run_id WHERE r.fingerprint = ? "
        "AND s.status = 'succeeded' AND s.runtime_seconds IS NOT NULL "
        "AND s.config_key IS NOT NULL",
        (fingerprint,),
    ).fetchall()
    return [(str(n), str(k), float(sec)) for n, k, sec in rows]


def spending(db: sqlite3.Connection, since: str) -> list[SpendRow]:
    """Every run started at or after ``since`` (ISO 8601), with its cost so far."""
    rows = db.execute(
        "SELECT id, workload, target, status, started_at, cost, budget, price_per_hour, "
        "rowid, NOT EXISTS (SELECT 1 FROM stages s WHERE s.run_id = runs.id AND "
        "json_extract(CASE WHEN json_valid(s.config_json) THEN s.config_json END, ?) = 0) "
        "FROM runs WHERE started_at >= ? ORDER BY started_at, id",
        (f"$.{PRICE_KNOWN}", since),
    ).fetchall()
    return [
        SpendRow(
            r[0],
            r[1],
            r[2],
            RunStatus(r[3]),
            r[4],
            float(r[5] or 0.0),
            r[6],
            float(r[7] or 0),
            int(r[8]),
            bool(r[9]),
        )
        for r in rows
    ]


def spent(db: sqlite3.Connection, since: str, until: str, exclude: str | None = None) -> float:
    """The recorded cost (running runs: so far) of every run started in ``[since,
    until)`` (ISO 8601), the run ``exclude`` left out: one cheap query, for a spending
    limit checked while a run runs."""
    row = db.execute(
        "SELECT COALESCE(SUM(cost), 0) FROM runs WHERE started_at >= ? "
        "AND started_at < ? AND id != ?",
        (since, until, exclude or ""),
    ).fetchone()
    return float(row[0] or 0.0)
