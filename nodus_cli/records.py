"""Run records: every run, its stages and costs, in SQLite under ``NODUS_HOME``.

These records are also the runtime measurements the planner ranks by: a stage that
succeeded on a configuration tells how long this workload takes there.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_cli import config
from nodus_cli.problems import NodusError

if TYPE_CHECKING:
    from nodus_cli.catalog import Offer
    from nodus_cli.planner import RuntimeLookup
    from nodus_cli.workload import Workload

STATUSES = ("running", "succeeded", "failed", "cancelled", "budget_exhausted")

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


#: Requirements that change how long a stage takes; money and place limits do not.
_RUNTIME_REQUIREMENTS = ("gpu", "gpu_count", "peak_memory_gb", "cpu", "memory_gb")


def fingerprint(workload: Workload) -> str:
    """What identifies "this workload" for runtime measurements: what each stage runs.

    The name, the budget, price limits, location and disk are left out: changing them does
    not change how long a stage takes, so it must not throw the measurements away.
    """
    doc = [
        {
            "name": s.name,
            "image": s.image,
            "command": s.command,
            "env": s.env,
            "requirements": {k: getattr(s.requirements, k) for k in _RUNTIME_REQUIREMENTS},
        }
        for s in workload.stages
    ]
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_key(offer: Offer) -> str:
    """Runtimes compare across regions of one machine type, not across machine types."""
    return f"{offer.supplier}|{offer.machine_id}|{offer.gpu or '-'}|{offer.gpu_count}"


def _config_key_of(config: dict[str, Any]) -> str:
    """:func:`config_key` of a configuration saved as JSON (``Offer.as_json``)."""
    return (
        f"{config.get('supplier')}|{config.get('machine_id')}|{config.get('gpu') or '-'}|"
        f"{config.get('gpu_count') or 0}"
    )


def _machine_key(offer: Offer) -> str:
    """The key a CPU-only stage is recorded under on this machine, whatever GPUs it has.

    A local run of a CPU-only workload does not ask the driver for GPUs, so it records
    the machine without them; ``nodus plan --target local`` on a machine with GPUs lists
    the machine with its GPUs. Within one workload fingerprint a stage is either a GPU
    stage or not, so a GPU-less record of the same machine is that stage's runtime there.
    """
    return f"{offer.supplier}|{offer.machine_id}|-|0"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def now_iso() -> str:
    """Now, UTC, ISO 8601 to the second (``2025-01-31T12:00:00+00:00``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()


@dataclass(slots=True)
class StageRecord:
    name: str
    status: str
    exit_code: int | None
    started_at: str | None = None
    ended_at: str | None = None
    runtime_seconds: float | None = None
    cost: float = 0.0
    config: dict[str, Any] | None = None
    gpu_uuids: list[str] = field(default_factory=list)
    attempts: int = 0
    gpu_report: dict[str, Any] | None = None
    message: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "runtime_seconds": self.runtime_seconds,
            "cost": round(self.cost, 6),
            "configuration": self.config,
            "gpus": self.gpu_uuids,
            "attempts": self.attempts,
            "gpu_usage": self.gpu_report,
            "message": self.message,
        }


@dataclass(slots=True)
class RunRecord:
    id: str
    workload: str
    fingerprint: str
    target: str
    status: str
    exit_code: int | None
    started_at: str
    ended_at: str | None
    cost: float
    price_per_hour: float
    budget: float | None
    file: str | None
    workload_json: dict[str, Any]
    pid: int | None
    message: str | None
    stages: list[StageRecord] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workload": self.workload,
            "target": self.target,
            "status": self.status,
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "cost": round(self.cost, 6),
            "fingerprint": self.fingerprint,
            "price_per_hour": self.price_per_hour,
            "budget": self.budget,
            "message": self.message,
            "stages": [s.as_json() for s in self.stages],
        }


class RunStore:
    """The runs and their stages, in one SQLite database (WAL) under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.db_path = root / "runs.sqlite3"
        self.logs = root / "logs"
        self._db: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._close: weakref.finalize[[], RunStore] | None = None
        try:
            root.mkdir(parents=True, exist_ok=True)
            self.logs.mkdir(exist_ok=True)
            with self._connect() as db:
                if not db.execute(
                    "SELECT 1 FROM sqlite_master WHERE name='stages_by_config'"
                ).fetchone():
                    db.execute("PRAGMA journal_mode=WAL")
                    db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise NodusError(
                f"cannot use the state folder {root}: {exc}",
                hint="set NODUS_HOME to a writable folder",
            ) from None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """The store's one connection (opened on first use), for one thread at a time.

        Autocommit: each statement outside :meth:`_transaction` is its own transaction, so
        holding the connection open locks nothing between calls.
        """
        with self._lock:
            if self._db is None:
                db = sqlite3.connect(
                    self.db_path, timeout=30, isolation_level=None, check_same_thread=False
                )
                # WAL with synchronous=NORMAL: a record survives nodus crashing at any point
                # (only a power cut may lose the last write), at a fraction of the fsyncs.
                db.execute("PRAGMA synchronous=NORMAL")
                self._db = db
                # Closed with the store, or at exit: the last close checkpoints the WAL.
                self._close = weakref.finalize(self, db.close)
            yield self._db

    def close(self) -> None:
        with self._lock:
            if self._close is not None:
                self._close()
            self._db = self._close = None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # -- writing -------------------------------------------------------------------

    def start_run(
        self,
        workload: Workload,
        target: str,
        price_per_hour: float,
        file: str | None,
        run_id: str | None = None,
        pid: int | None = None,
    ) -> RunRecord:
        record = RunRecord(
            id=run_id or new_run_id(),
            workload=workload.name,
            fingerprint=fingerprint(workload),
            target=target,
            status="running",
            exit_code=None,
            started_at=now_iso(),
            ended_at=None,
            cost=0.0,
            price_per_hour=price_per_hour,
            budget=workload.budget,
            file=file,
            workload_json=workload.as_json(),
            pid=pid,
            message=None,
            stages=[StageRecord(s.name, "pending", None) for s in workload.stages],
        )
        with self._transaction() as db:
            db.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    record.id,
                    record.workload,
                    record.fingerprint,
                    target,
                    record.status,
                    None,
                    record.started_at,
                    None,
                    0.0,
                    price_per_hour,
                    workload.budget,
                    file,
                    json.dumps(record.workload_json),
                    pid,
                    None,
                ),
            )
            for idx, stage in enumerate(record.stages):
                db.execute(
                    "INSERT INTO stages (run_id, idx, name, status) VALUES (?,?,?,?)",
                    (record.id, idx, stage.name, stage.status),
                )
        return record

    def save_stage(self, run_id: str, idx: int, stage: StageRecord) -> None:
        key = _config_key_of(stage.config) if stage.config is not None else None
        with self._connect() as db:
            db.execute(
                "UPDATE stages SET status=?, exit_code=?, started_at=?, ended_at=?, "
                "runtime_seconds=?, cost=?, config_key=?, config_json=?, gpu_uuids=?, "
                "attempts=?, gpu_report=?, message=? WHERE run_id=? AND idx=?",
                (
                    stage.status,
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
                    run_id,
                    idx,
                ),
            )

    def finish_run(
        self,
        run_id: str,
        status: str,
        exit_code: int | None,
        cost: float,
        message: str | None = None,
    ) -> None:
        assert status in STATUSES
        ended = now_iso()
        with self._transaction() as db:
            db.execute(
                "UPDATE runs SET status=?, exit_code=?, ended_at=?, cost=?, message=? WHERE id=?",
                (status, exit_code, ended, cost, message, run_id),
            )
            # A finished run has no stage left pending or running.
            db.execute(
                "UPDATE stages SET status='skipped', message=COALESCE(message, ?) "
                "WHERE run_id=? AND status='pending'",
                (f"not started: the run ended {status}", run_id),
            )
            if status != "running":
                db.execute(
                    "UPDATE stages SET status=?, ended_at=COALESCE(ended_at, ?) "
                    "WHERE run_id=? AND status='running'",
                    ("cancelled" if status == "cancelled" else "failed", ended, run_id),
                )

    def set_pid(self, run_id: str, pid: int) -> None:
        with self._connect() as db:
            db.execute("UPDATE runs SET pid=? WHERE id=?", (pid, run_id))

    # -- reading -------------------------------------------------------------------

    def reap_stale(self) -> list[str]:
        """Local runs still marked running whose nodus process is gone: record them failed.

        A process killed hard (SIGKILL, power loss) cannot record its own end.
        """
        with self._connect() as db:
            rows = db.execute(
                "SELECT id, pid FROM runs WHERE status='running' AND target='local' "
                "AND pid IS NOT NULL"
            ).fetchall()
        stale = [run_id for run_id, pid in rows if not _pid_alive(int(pid))]
        for run_id in stale:
            self.finish_run(
                run_id,
                "failed",
                None,
                self._cost_of(run_id),
                "the nodus process running it ended without recording an outcome",
            )
        return stale

    def _cost_of(self, run_id: str) -> float:
        with self._connect() as db:
            row = db.execute(
                "SELECT COALESCE(SUM(cost), 0) FROM stages WHERE run_id=?", (run_id,)
            ).fetchone()
        return float(row[0]) if row else 0.0

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        self.reap_stale()
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM runs ORDER BY started_at DESC, rowid DESC LIMIT ?", (limit,)
            ).fetchall()
            return [self._hydrate(db, row) for row in rows]

    def get(self, run_id: str) -> RunRecord:
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE substr(id, 1, ?) = ? ORDER BY started_at DESC",
                (len(run_id), run_id),
            ).fetchall()
            exact = [r for r in rows if r[0] == run_id]
            if exact:
                rows = exact
            if not rows or not run_id:
                raise NodusError(f"no run {run_id!r}", hint="`nodus runs` lists the recorded runs")
            if len(rows) > 1:
                ids = ", ".join(r[0] for r in rows[:5])
                raise NodusError(f"{run_id!r} matches several runs ({ids}); give more of the id")
            return self._hydrate(db, rows[0])

    def _hydrate(self, db: sqlite3.Connection, row: tuple[Any, ...]) -> RunRecord:
        record = RunRecord(
            id=row[0],
            workload=row[1],
            fingerprint=row[2],
            target=row[3],
            status=row[4],
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
        )
        for s in db.execute(
            "SELECT name, status, exit_code, started_at, ended_at, runtime_seconds, cost, "
            "config_json, gpu_uuids, attempts, gpu_report, message FROM stages "
            "WHERE run_id = ? ORDER BY idx",
            (record.id,),
        ):
            record.stages.append(
                StageRecord(
                    name=s[0],
                    status=s[1],
                    exit_code=s[2],
                    started_at=s[3],
                    ended_at=s[4],
                    runtime_seconds=s[5],
                    cost=s[6] or 0.0,
                    config=json.loads(s[7]) if s[7] else None,
                    gpu_uuids=json.loads(s[8]) if s[8] else [],
                    attempts=s[9] or 0,
                    gpu_report=json.loads(s[10]) if s[10] else None,
                    message=s[11],
                )
            )
        return record

    def runtime_lookup(self, workload_fingerprint: str) -> RuntimeLookup:
        """Median measured runtime per (stage, configuration) of succeeded stages."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT s.name, s.config_key, s.runtime_seconds FROM stages s "
                "JOIN runs r ON r.id = s.run_id WHERE r.fingerprint = ? "
                "AND s.status = 'succeeded' AND s.runtime_seconds IS NOT NULL",
                (workload_fingerprint,),
            ).fetchall()
        samples: dict[tuple[str, str], list[float]] = {}
        for name, key, seconds in rows:
            samples.setdefault((name, key), []).append(seconds)
        medians = {k: _median(v) for k, v in samples.items()}

        def lookup(stage: str, offer: Offer) -> float | None:
            found = medians.get((stage, config_key(offer)))
            if found is None and offer.gpu_count:
                found = medians.get((stage, _machine_key(offer)))
            return found

        return lookup

    def log_path(self, run_id: str) -> Path:
        return self.logs / f"{run_id}.log"

    def busy_gpus(self, exclude_run: str | None = None) -> dict[str, str]:
        """GPU UUIDs held by running local stages of this store, mapped to their run id.

        The machine-wide truth is the engine (containers labelled ``nodus.gpus``, see
        runner.gpus_in_use); this is what this store's records say.
        """
        self.reap_stale()
        with self._connect() as db:
            rows = db.execute(
                "SELECT s.run_id, s.gpu_uuids FROM stages s JOIN runs r ON r.id = s.run_id "
                "WHERE r.status = 'running' AND s.status = 'running' AND r.target = 'local'"
            ).fetchall()
        held: dict[str, str] = {}
        for run_id, uuids in rows:
            if run_id == exclude_run:
                continue
            for u in json.loads(uuids or "[]"):
                held[u] = run_id
        return held


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def workload_from_json(doc: dict[str, Any]) -> Workload:
    """Rebuild a normalized workload saved with a run (for reruns and detached runs)."""
    from nodus_cli.workload import from_json

    return from_json(doc)


def open_store(create: bool = True) -> RunStore | None:
    root = config.home()
    if not create and not (root / "runs.sqlite3").exists():
        return None
    return RunStore(root)
