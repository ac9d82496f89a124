"""The run records' tables, and bringing a database of any earlier version up to date.

Contract: after :func:`prepare`, a database holds every table and column of
:data:`SCHEMA_VERSION` (``PRAGMA user_version`` says which version a file is at) and is
in WAL mode, however many processes open the same new folder at that moment. Each
version so far only adds tables, columns and indexes, so the queries of an older nodus
still find theirs.

Why apart from the store: the shape of the database changes by versions and must be
read as a whole (what version 1 had, what version 2 added); the store only asks for a
prepared database.
"""

from __future__ import annotations

import sqlite3
import time

__all__ = ["SCHEMA_VERSION", "prepare"]

SCHEMA_VERSION = 4

#: Version 1, the tables as first made (each later version adds to them below).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    workload TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    target TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    cost REAL NOT NULL DEFAULT 0,
    price_per_hour REAL NOT NULL DEFAULT 0,
    budget REAL,
    file TEXT,
    workload_json TEXT NOT NULL,
    pid INTEGER,
    message TEXT
);
CREATE TABLE IF NOT EXISTS stages (
    run_id TEXT NOT NULL REFERENCES runs(id),
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    started_at TEXT,
    ended_at TEXT,
    runtime_seconds REAL,
    cost REAL NOT NULL DEFAULT 0,
    config_key TEXT,
    config_json TEXT,
    gpu_uuids TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    gpu_report TEXT,
    message TEXT,
    PRIMARY KEY (run_id, idx)
);
CREATE INDEX IF NOT EXISTS stages_by_config ON stages(config_key);
CREATE INDEX IF NOT EXISTS runs_by_fingerprint ON runs(fingerprint);
"""

#: Version 2: supervisors (host, process start), outputs, clean-up and stop requests,
#: the node of a Swarm stage, and the tasks of fan-out stages.
_MIGRATE_2 = """
ALTER TABLE runs ADD COLUMN host TEXT;
ALTER TABLE runs ADD COLUMN pid_start INTEGER;
ALTER TABLE runs ADD COLUMN output_json TEXT;
ALTER TABLE runs ADD COLUMN cleanup_pending INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN stop_requested INTEGER NOT NULL DEFAULT 0;
ALTER TABLE stages ADD COLUMN node TEXT;
CREATE TABLE IF NOT EXISTS tasks (
    run_id TEXT NOT NULL REFERENCES runs(id),
    stage_idx INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    item TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    started_at TEXT,
    ended_at TEXT,
    runtime_seconds REAL,
    cost REAL NOT NULL DEFAULT 0,
    devices TEXT,
    node TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    message TEXT,
    PRIMARY KEY (run_id, stage_idx, idx)
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status);
"""

#: Version 3: the runs in the order they are listed, whole or filtered by status, target
#: or workload (the dashboard pages through 100,000 runs with these, never a full scan),
#: and those whose clean-up is pending (with runs_by_status: the active runs every
#: command reconciles first, found without reading every run).
_MIGRATE_3 = """
CREATE INDEX IF NOT EXISTS runs_by_start ON runs(started_at);
CREATE INDEX IF NOT EXISTS runs_by_status_start ON runs(status, started_at);
CREATE INDEX IF NOT EXISTS runs_by_target_start ON runs(target, started_at);
CREATE INDEX IF NOT EXISTS runs_by_workload_start ON runs(workload, started_at);
CREATE INDEX IF NOT EXISTS runs_by_cleanup ON runs(cleanup_pending)
"""

#: Version 4: the job a scheduler that owns its jobs (Slurm) knows a stage or a task by,
#: so that a later nodus command can ask it how the job ended.
_MIGRATE_4 = """
ALTER TABLE stages ADD COLUMN job_id TEXT;
ALTER TABLE tasks ADD COLUMN job_id TEXT;
"""


def prepare(db: sqlite3.Connection) -> None:
    """Bring the database on ``db`` (autocommit) up to :data:`SCHEMA_VERSION`, in WAL mode."""
    if _version(db) >= SCHEMA_VERSION:
        return
    _use_wal(db)
    # A new folder opened by several nodus processes at once (parallel CI jobs): one
    # creates the tables while the others wait for its lock, then find them made.
    # Checked and changed in one write transaction, never read-then-alter.
    db.execute("BEGIN IMMEDIATE")
    try:
        if _version(db) < SCHEMA_VERSION:
            for statement in _statements(_SCHEMA):
                db.execute(statement)
            have = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
            if "host" not in have:
                for statement in _statements(_MIGRATE_2):
                    db.execute(statement)
            for statement in _statements(_MIGRATE_3):  # IF NOT EXISTS: safe to repeat
                db.execute(statement)
            have = {row[1] for row in db.execute("PRAGMA table_info(stages)")}
            if "job_id" not in have:
                for statement in _statements(_MIGRATE_4):
                    db.execute(statement)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def _statements(script: str) -> list[str]:
    """A schema script's statements, to run inside a transaction (``executescript``
    would commit it first). The scripts hold no ``;`` but between statements."""
    return [part.strip() for part in script.split(";") if part.strip()]


def _use_wal(db: sqlite3.Connection, wait: float = 30.0) -> None:
    """Switch the database to WAL (once: the mode stays with the file).

    The switch needs the database to itself, and SQLite answers "database is locked" at
    once, without its busy wait, while another process that opens the same new folder
    holds it for a moment: try again until ``wait`` seconds have passed."""
    deadline = time.monotonic() + wait
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL").fetchall()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
