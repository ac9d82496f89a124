"""Run records in SQLite under ``NODUS_HOME``: the only module that knows the database and
the files of the state folder.

Everything it writes is private to the user: the folder and its sub-folders are 0700,
the database and the logs 0600 (environment values a workload wrote literally are in
the records; values taken from the host never are). The store's own failures become one
:class:`StoreError` that says what happened and where: the disk is full, the database is
damaged (and how to set it aside), or the folder is read-only. A read-only folder can
still be read: :meth:`RunStore.open` falls back to a read-only connection, and logs stay
readable when the database is damaged.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_cli import config
from nodus_cli.errors import NodusError, UsageError
from nodus_cli.records import logs
from nodus_cli.records.keys import config_key_of, fingerprint
from nodus_cli.records.model import RunRecord, RunStatus, StageRecord, StageStatus, TaskRecord

if TYPE_CHECKING:
    from nodus_cli.workload import Workload

SCHEMA_VERSION = 2

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

_RUN_COLUMNS = (
    "id, workload, fingerprint, target, status, exit_code, started_at, ended_at, cost, "
    "price_per_hour, budget, file, workload_json, pid, message, host, pid_start, output_json, "
    "cleanup_pending, stop_requested"
)


class StoreError(NodusError):
    """The state folder cannot be used; the message says why and where."""


def now_iso() -> str:
    """Now, UTC, ISO 8601 to the second (``2025-01-31T12:00:00+00:00``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()


def hostname() -> str:
    return socket.gethostname()


def process_start(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return None
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def process_alive(pid: int, started: int | None) -> bool:
    """Whether ``pid`` is still the same live (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: look at /proc
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return not os.path.isdir("/proc/self")  # no /proc: trust kill(0)
    if not fields or fields[0] == "Z":
        return False
    if started is not None:
        try:
            return int(fields[19]) == started
        except (IndexError, ValueError):
            return True
    return True


def _private_dir(path: Path) -> None:
    """:func:`config.private_folder`, its one failure said in the store's words."""
    try:
        config.private_folder(path)
    except FileExistsError:
        raise StoreError(
            f"{path} exists and is not a folder",
            hint="set NODUS_HOME to a folder for nodus's records",
        ) from None


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


def _explain(exc: BaseException, path: Path, writing: bool = True) -> StoreError:
    """What went wrong with the state folder, in words, with what to do."""
    text = str(exc).lower()
    number = getattr(exc, "errno", None)
    if number == errno.ENOSPC or "disk is full" in text or "no space" in text:
        return StoreError(
            f"no space left on the disk holding the nodus records ({path})",
            hint="free some space there, or set NODUS_HOME to a folder on another disk",
        )
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return StoreError(
            f"the run records database {path} is damaged ({exc})",
            hint=f"move it aside to start new records (`mv {path} {path}.damaged`); the logs "
            f"in {path.parent / 'logs'} stay readable with `nodus logs`",
        )
    if (
        number in (errno.EROFS, errno.EACCES, errno.EPERM)
        or "readonly" in text
        or "read-only" in text
        or ("unable to open" in text and writing)
    ):
        return StoreError(
            f"the nodus records at {path} cannot be written ({exc})",
            hint="set NODUS_HOME to a folder you can write to (the records stay readable)",
        )
    return StoreError(
        f"the nodus records at {path} cannot be used: {exc}",
        hint="check the folder (NODUS_HOME) and its disk",
    )


def _cannot_write(exc: BaseException, root: Path) -> bool:
    text = str(exc).lower()
    return (
        getattr(exc, "errno", None) in (errno.EROFS, errno.EACCES, errno.EPERM)
        or "readonly" in text
        or "read-only" in text
        or not os.access(root, os.W_OK)
    )


@dataclass(frozen=True, slots=True)
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


class RunStore:
    """The runs, their stages and tasks, in one SQLite database (WAL) under ``root``."""

    def __init__(self, root: Path, read_only: bool = False) -> None:
        self.root = root
        self.db_path = root / "runs.sqlite3"
        self.read_only = read_only
        self._logs = root / "logs"
        self._work = root / "work"
        self._db: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._close: weakref.finalize[[], RunStore] | None = None

    # -- opening -------------------------------------------------------------------

    @classmethod
    def open(cls, root: Path | None = None, create: bool = True) -> RunStore:
        """The store under ``root`` (default NODUS_HOME), ready to read and write.

        When the folder cannot be written, a store that exists is opened read-only (its
        writers raise :class:`StoreError`); without ``create``, a missing store is an
        empty read-only one.
        """
        root = root or config.home()
        store = cls(root)
        if not create and not store.db_path.exists():
            return cls(root, read_only=True)
        try:
            _private_dir(root)
            _private_dir(store._logs)
            store._prepare()
        except StoreError:
            raise
        except (OSError, sqlite3.Error) as exc:
            store.close()
            if store.db_path.exists() and _cannot_write(exc, root):
                return cls(root, read_only=True)
            raise _explain(exc, store.db_path) from None
        return store

    def _prepare(self) -> None:
        if not self.db_path.exists():
            fd = os.open(self.db_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            os.close(fd)
        elif self.db_path.stat().st_mode & 0o077 and self.db_path.stat().st_uid == os.getuid():
            self.db_path.chmod(0o600)
        with self._connect() as db:
            if _version(db) >= SCHEMA_VERSION:
                return
            _use_wal(db)
            # A new folder opened by several nodus processes at once (parallel CI jobs):
            # one creates the tables while the others wait for its lock, then find them
            # made. Checked and changed in one write transaction, never read-then-alter.
            db.execute("BEGIN IMMEDIATE")
            try:
                if _version(db) < SCHEMA_VERSION:
                    for statement in _statements(_SCHEMA):
                        db.execute(statement)
                    have = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
                    if "host" not in have:
                        for statement in _statements(_MIGRATE_2):
                            db.execute(statement)
                    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """The store's one connection (opened on first use), for one thread at a time.

        Autocommit: each statement outside :meth:`_transaction` is its own transaction, so
        holding the connection open locks nothing between calls.
        """
        with self._lock:
            if self._db is None:
                if self.read_only:
                    uri = f"file:{self.db_path}?mode=ro"
                    try:
                        db = sqlite3.connect(
                            uri,
                            uri=True,
                            timeout=30,
                            isolation_level=None,
                            check_same_thread=False,
                        )
                        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
                    except sqlite3.OperationalError:
                        # A read-only folder cannot hold the WAL's shared-memory file.
                        db = sqlite3.connect(
                            f"file:{self.db_path}?mode=ro&immutable=1",
                            uri=True,
                            timeout=30,
                            isolation_level=None,
                            check_same_thread=False,
                        )
                else:
                    db = sqlite3.connect(
                        self.db_path, timeout=30, isolation_level=None, check_same_thread=False
                    )
                    # WAL with synchronous=NORMAL: a record survives nodus crashing at any
                    # point (only a power cut may lose the last write).
                    db.execute("PRAGMA synchronous=NORMAL")
                self._db = db
                # Closed with the store, or at exit: the last close checkpoints the WAL.
                self._close = weakref.finalize(self, db.close)
            yield self._db

    @contextmanager
    def _using(self, writing: bool = False) -> Iterator[sqlite3.Connection]:
        """A connection, with the database's failures explained as :class:`StoreError`."""
        if writing and self.read_only:
            raise StoreError(
                f"the nodus records at {self.db_path} are read-only here",
                hint="set NODUS_HOME to a folder you can write to",
            )
        try:
            with self._connect() as db:
                yield db
        except (sqlite3.Error, OSError) as exc:
            raise _explain(exc, self.db_path, writing) from None

    def close(self) -> None:
        with self._lock:
            if self._close is not None:
                self._close()
            self._db = self._close = None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._using(writing=True) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @property
    def exists(self) -> bool:
        return self.db_path.exists()

    # -- writing -------------------------------------------------------------------

    def create_run(
        self,
        workload: Workload,
        target: str,
        price_per_hour: float,
        file: str | None,
        run_id: str | None = None,
    ) -> RunRecord:
        """Record a new run, ``pending`` until its first task runs."""
        record = RunRecord(
            id=run_id or new_run_id(),
            workload=workload.name,
            fingerprint=fingerprint(workload),
            target=target,
            status=RunStatus.PENDING,
            exit_code=None,
            started_at=now_iso(),
            ended_at=None,
            cost=0.0,
            price_per_hour=price_per_hour,
            budget=workload.budget,
            file=file,
            workload_json=workload.as_json(),
            pid=None,
            message=None,
            stages=[StageRecord(s.name, StageStatus.PENDING, None) for s in workload.stages],
        )
        with self._transaction() as db:
            db.execute(
                "INSERT INTO runs (id, workload, fingerprint, target, status, started_at, cost, "
                "price_per_hour, budget, file, workload_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    record.id,
                    record.workload,
                    record.fingerprint,
                    target,
                    str(record.status),
                    record.started_at,
                    0.0,
                    price_per_hour,
                    workload.budget,
                    file,
                    json.dumps(record.workload_json),
                ),
            )
            db.executemany(
                "INSERT INTO stages (run_id, idx, name, status) VALUES (?,?,?,?)",
                [(record.id, i, s.name, str(s.status)) for i, s in enumerate(record.stages)],
            )
            for idx, stage in enumerate(workload.stages):
                if stage.map is not None:
                    db.executemany(
                        "INSERT INTO tasks (run_id, stage_idx, idx, item, status) "
                        "VALUES (?,?,?,?,?)",
                        (
                            (record.id, idx, i, item, str(StageStatus.PENDING))
                            for i, item in enumerate(stage.map.items)
                        ),
                    )
        return record

    def claim(self, run_id: str, pid: int) -> None:
        """``pid`` (on this host) supervises the run from now on."""
        with self._using(writing=True) as db:
            db.execute(
                "UPDATE runs SET pid=?, host=?, pid_start=? WHERE id=?",
                (pid, hostname(), process_start(pid), run_id),
            )

    def set_running(self, run_id: str) -> None:
        with self._using(writing=True) as db:
            db.execute(
                "UPDATE runs SET status=? WHERE id=? AND status=?",
                (str(RunStatus.RUNNING), run_id, str(RunStatus.PENDING)),
            )

    def update_cost(self, run_id: str, cost: float) -> None:
        with self._using(writing=True) as db:
            db.execute("UPDATE runs SET cost=? WHERE id=?", (cost, run_id))

    def save_stage(self, run_id: str, idx: int, stage: StageRecord) -> None:
        key = config_key_of(stage.config) if stage.config is not None else None
        with self._using(writing=True) as db:
            db.execute(
                "UPDATE stages SET status=?, exit_code=?, started_at=?, ended_at=?, "
                "runtime_seconds=?, cost=?, config_key=?, config_json=?, gpu_uuids=?, "
                "attempts=?, gpu_report=?, message=?, node=? WHERE run_id=? AND idx=?",
                (
                    str(stage.status),
                    stage.exit_code,
                    stage.started_at,
                    stage.ended_at,
                    stage.runtime_seconds,
                    stage.cost,
                    key,
                    json.dumps(stage.config) if stage.config is not None else None,
                    json.dumps(stage.gpu_uuids),
                    stage.attempts,
                    json.dumps(stage.gpu_report) if stage.gpu_report is not None else None,
                    stage.message,
                    stage.node,
                    run_id,
                    idx,
                ),
            )

    def save_tasks(self, run_id: str, stage_idx: int, tasks: Sequence[TaskRecord]) -> None:
        """Record the state of some tasks of a fan-out stage (one transaction)."""
        if not tasks:
            return
        with self._transaction() as db:
            db.executemany(
                "UPDATE tasks SET status=?, exit_code=?, started_at=?, ended_at=?, "
                "runtime_seconds=?, cost=?, devices=?, node=?, attempts=?, message=? "
                "WHERE run_id=? AND stage_idx=? AND idx=?",
                [
                    (
                        str(t.status),
                        t.exit_code,
                        t.started_at,
                        t.ended_at,
                        t.runtime_seconds,
                        t.cost,
                        json.dumps(t.devices),
                        t.node,
                        t.attempts,
                        t.message,
                        run_id,
                        stage_idx,
                        t.index,
                    )
                    for t in tasks
                ],
            )

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        exit_code: int | None,
        cost: float,
        message: str | None = None,
        output: dict[str, Any] | None = None,
    ) -> None:
        """Record how the run ended; stages and tasks left pending become ``skipped``,
        those still running take the run's end (``cancelled``, else ``failed``)."""
        ended = now_iso()
        left = StageStatus.CANCELLED if status == RunStatus.CANCELLED else StageStatus.FAILED
        with self._transaction() as db:
            db.execute(
                "UPDATE runs SET status=?, exit_code=?, ended_at=?, cost=?, message=?, "
                "output_json=COALESCE(?, output_json) WHERE id=?",
                (
                    str(status),
                    exit_code,
                    ended,
                    cost,
                    message,
                    json.dumps(output) if output is not None else None,
                    run_id,
                ),
            )
            for table in ("stages", "tasks"):
                db.execute(
                    f"UPDATE {table} SET status=?, message=COALESCE(message, ?) "
                    "WHERE run_id=? AND status=?",
                    (
                        str(StageStatus.SKIPPED),
                        f"not started: the run ended {status}",
                        run_id,
                        str(StageStatus.PENDING),
                    ),
                )
                db.execute(
                    f"UPDATE {table} SET status=?, ended_at=COALESCE(ended_at, ?) "
                    "WHERE run_id=? AND status=?",
                    (str(left), ended, run_id, str(StageStatus.RUNNING)),
                )

    def set_output(self, run_id: str, output: dict[str, Any]) -> None:
        with self._using(writing=True) as db:
            db.execute("UPDATE runs SET output_json=? WHERE id=?", (json.dumps(output), run_id))

    def set_cleanup_pending(self, run_id: str, pending: bool) -> None:
        with self._using(writing=True) as db:
            db.execute("UPDATE runs SET cleanup_pending=? WHERE id=?", (int(pending), run_id))

    def request_stop(self, run_id: str) -> None:
        with self._using(writing=True) as db:
            db.execute("UPDATE runs SET stop_requested=1 WHERE id=?", (run_id,))

    # -- reading -------------------------------------------------------------------

    def stop_requested(self, run_id: str) -> bool:
        with self._using() as db:
            row = db.execute("SELECT stop_requested FROM runs WHERE id=?", (run_id,)).fetchone()
        return bool(row and row[0])

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        if not self.exists:
            return []
        with self._using() as db:
            rows = db.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY started_at DESC, rowid DESC LIMIT ?",
                (limit,),
            ).fetchall()
            return [self._hydrate(db, row) for row in rows]

    def active(self) -> list[RunRecord]:
        """Runs still pending or running, and ended runs whose clean-up is pending."""
        if not self.exists:
            return []
        with self._using() as db:
            rows = db.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE status IN (?, ?) OR cleanup_pending=1",
                (str(RunStatus.PENDING), str(RunStatus.RUNNING)),
            ).fetchall()
            return [self._hydrate(db, row) for row in rows]

    def newest(self) -> RunRecord:
        found = self.list_runs(1)
        if not found:
            raise UsageError(
                f"no run recorded yet (records in {self.root})",
                hint="`nodus run FILE` starts one",
            )
        return found[0]

    def get(self, run_id: str, tasks: bool = False) -> RunRecord:
        """The run whose id is ``run_id`` or starts with it (UsageError otherwise)."""
        if not run_id or not self.exists:
            raise UsageError(f"no run {run_id!r}", hint="`nodus runs` lists the recorded runs")
        with self._using() as db:
            rows = db.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE substr(id, 1, ?) = ? "
                "ORDER BY started_at DESC",
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
            return self._hydrate(db, rows[0], tasks=tasks)

    def _hydrate(
        self, db: sqlite3.Connection, row: tuple[Any, ...], tasks: bool = False
    ) -> RunRecord:
        record = RunRecord(
            id=row[0],
            workload=row[1],
            fingerprint=row[2],
            target=row[3],
            status=RunStatus(row[4]),
            exit_code=row[5],
            started_at=row[6],
            ended_at=row[7],
            cost=row[8] or 0.0,
            price_per_hour=row[9] or 0.0,
            budget=row[10],
            file=row[11],
            workload_json=json.loads(row[12]),
            pid=row[13],
            message=row[14],
            host=row[15],
            pid_start=row[16],
            output=json.loads(row[17]) if row[17] else None,
            cleanup_pending=bool(row[18]),
            stop_requested=bool(row[19]),
        )
        for s in db.execute(
            "SELECT idx, name, status, exit_code, started_at, ended_at, runtime_seconds, cost, "
            "config_json, gpu_uuids, attempts, gpu_report, message, node FROM stages "
            "WHERE run_id = ? ORDER BY idx",
            (record.id,),
        ).fetchall():
            stage = StageRecord(
                name=s[1],
                status=StageStatus(s[2]),
                exit_code=s[3],
                started_at=s[4],
                ended_at=s[5],
                runtime_seconds=s[6],
                cost=s[7] or 0.0,
                config=json.loads(s[8]) if s[8] else None,
                gpu_uuids=json.loads(s[9]) if s[9] else [],
                attempts=s[10] or 0,
                gpu_report=json.loads(s[11]) if s[11] else None,
                message=s[12],
                node=s[13],
            )
            counts = db.execute(
                "SELECT status, COUNT(*) FROM tasks WHERE run_id=? AND stage_idx=? GROUP BY status",
                (record.id, s[0]),
            ).fetchall()
            stage.task_counts = {str(k): int(n) for k, n in counts}
            if tasks and counts:
                stage.tasks = self.tasks(record.id, s[0], db)
            record.stages.append(stage)
        return record

    def tasks(
        self, run_id: str, stage_idx: int, db: sqlite3.Connection | None = None
    ) -> list[TaskRecord]:
        """Every task of a fan-out stage, in item order."""

        def read(conn: sqlite3.Connection) -> list[TaskRecord]:
            return [
                TaskRecord(
                    index=t[0],
                    item=t[1],
                    status=StageStatus(t[2]),
                    exit_code=t[3],
                    started_at=t[4],
                    ended_at=t[5],
                    runtime_seconds=t[6],
                    cost=t[7] or 0.0,
                    devices=json.loads(t[8]) if t[8] else [],
                    node=t[9],
                    attempts=t[10] or 0,
                    message=t[11],
                )
                for t in conn.execute(
                    "SELECT idx, item, status, exit_code, started_at, ended_at, "
                    "runtime_seconds, cost, devices, node, attempts, message FROM tasks "
                    "WHERE run_id=? AND stage_idx=? ORDER BY idx",
                    (run_id, stage_idx),
                )
            ]

        if db is not None:
            return read(db)
        with self._using() as conn:
            return read(conn)

    def runtime_samples(self, workload_fingerprint: str) -> list[tuple[str, str, float]]:
        """(stage, configuration key, seconds) of every succeeded stage of a workload."""
        if not self.exists:
            return []
        with self._using() as db:
            rows = db.execute(
                "SELECT s.name, s.config_key, s.runtime_seconds FROM stages s "
                "JOIN runs r ON r.id = s.run_id WHERE r.fingerprint = ? "
                "AND s.status = 'succeeded' AND s.runtime_seconds IS NOT NULL "
                "AND s.config_key IS NOT NULL",
                (workload_fingerprint,),
            ).fetchall()
        return [(str(n), str(k), float(sec)) for n, k, sec in rows]

    def spending(self, since: str) -> list[SpendRow]:
        """Every run started at or after ``since`` (ISO 8601), with its cost so far."""
        if not self.exists:
            return []
        with self._using() as db:
            rows = db.execute(
                "SELECT id, workload, target, status, started_at, cost, budget, price_per_hour, "
                "rowid FROM runs WHERE started_at >= ? ORDER BY started_at, id",
                (since,),
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
            )
            for r in rows
        ]

    def spent(self, since: str, until: str, exclude: str | None = None) -> float:
        """The recorded cost (running runs: so far) of every run started in ``[since,
        until)`` (ISO 8601), the run ``exclude`` left out: one cheap query, for a spending
        limit checked while a run runs."""
        if not self.exists:
            return 0.0
        with self._using() as db:
            row = db.execute(
                "SELECT COALESCE(SUM(cost), 0) FROM runs WHERE started_at >= ? "
                "AND started_at < ? AND id != ?",
                (since, until, exclude or ""),
            ).fetchone()
        return float(row[0] or 0.0)

    # -- files -----------------------------------------------------------------------

    def log_writer(self, run_id: str) -> logs.LogWriter:
        return logs.LogWriter(self._logs / f"{run_id}.jsonl")

    def read_log(self, run_id: str, offset: int = 0) -> tuple[list[logs.LogLine], int]:
        """A run's log lines from ``offset`` on (see :func:`logs.read`); a log written by an
        older nodus (plain text) is read as lines of text."""
        path = self._logs / f"{run_id}.jsonl"
        if not path.exists():
            legacy = self._logs / f"{run_id}.log"
            if legacy.exists():
                return logs.read(legacy, offset)
        return logs.read(path, offset)

    def log_ids(self) -> list[str]:
        """Run ids that have a log, newest first (readable when the database is not)."""
        try:
            names = sorted(
                (p for p in self._logs.iterdir() if p.suffix in (".jsonl", ".log")),
                key=lambda p: p.stat().st_mtime,
                reverse=True,
            )
        except OSError:
            return []
        return [p.stem for p in names]

    def stderr_path(self, run_id: str) -> Path:
        """Where a background supervisor's own stderr goes (a crash's traceback)."""
        return self._logs / f"{run_id}.stderr"

    def work_dir(self, run_id: str) -> Path:
        """The run's shared work folder on this machine (its parent is private)."""
        _private_dir(self._work)
        return self._work / run_id


def open_store(create: bool = True) -> RunStore:
    return RunStore.open(create=create)
