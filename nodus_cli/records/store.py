"""Run records in SQLite under ``NODUS_HOME``: :class:`RunStore` is the one way in to the
database and the files of the state folder.

The store opens the folder and the database, holds the connection, writes the records
and the files, and answers reads through :mod:`~nodus_cli.records.queries`; the tables
and their versions are :mod:`~nodus_cli.records.schema`, how a record maps onto a row
:mod:`~nodus_cli.records.rows`. No other module opens the database.

Everything it writes is private to the user: the folder and its sub-folders are 0700,
every file 0600 whatever the umask (environment values a workload wrote literally are in
the records; values taken from the host never are). The store's own failures become one
:class:`StoreError` that says what happened and where: the disk is full, the database is
damaged (and how to set it aside), or the folder is read-only. A read-only folder, or one
on a full disk, can still be read: :meth:`RunStore.open` falls back to a read-only
connection (reading must not need to write), and logs stay readable when the database is
damaged.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Concatenate, ParamSpec, TypeVar

from nodus_cli import config
from nodus_cli.errors import NodusError, UsageError
from nodus_cli.records import gpu_samples, logs, queries, schema
from nodus_cli.records.keys import fingerprint
from nodus_cli.records.model import RunRecord, RunStatus, StageRecord, StageStatus, TaskRecord
from nodus_cli.records.process import hostname, process_start
from nodus_cli.records.queries import SpendRow
from nodus_cli.records.rows import RUNS, STAGES, TASKS
from nodus_cli.text import plural

if TYPE_CHECKING:
    from nodus_cli.workload import Workload

__all__ = [
    "RunStore",
    "SpendRow",
    "StoreError",
    "new_run_id",
    "now_iso",
    "open_store",
]

T = TypeVar("T")
P = ParamSpec("P")

#: How many runs a listing reads at once (:meth:`RunStore.iter_runs`): a long listing
#: holds this many records, and no more, however long the history.
PAGE = 200


class StoreError(NodusError):
    """The state folder cannot be used; the message says why and where."""


def now_iso() -> str:
    """Now, UTC, ISO 8601 to the second (``2025-01-31T12:00:00+00:00``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()


def _private_dir(path: Path) -> None:
    """:func:`config.private_folder`, its one failure said in the store's words."""
    try:
        config.private_folder(path)
    except FileExistsError:
        raise StoreError(
            f"{path} exists and is not a folder",
            hint="set NODUS_HOME to a folder for nodus's records",
        ) from None


def _sqlite(database: str | Path, uri: bool = True) -> sqlite3.Connection:
    """A connection in autocommit mode that waits up to 30 s for another writer's lock,
    usable from any thread (the store serializes its use)."""
    return sqlite3.connect(
        database, uri=uri, timeout=30, isolation_level=None, check_same_thread=False
    )


def _free_bytes(folder: Path) -> int | None:
    """Bytes free to this user on the disk holding ``folder`` (None: cannot tell)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _disk_full(exc: BaseException, path: Path) -> bool:
    """Whether ``exc`` is the disk holding ``path`` being full. SQLite says "disk I/O
    error" when it cannot grow the shared-memory file a WAL database needs to be read
    (SQLITE_IOERR_SHMSIZE): on a disk with (nearly) no space left, that is the reason."""
    text = str(exc).lower()
    if getattr(exc, "errno", None) == errno.ENOSPC or "disk is full" in text or "no space" in text:
        return True
    if "disk i/o error" not in text:
        return False
    free = _free_bytes(path.parent)
    return free is not None and free < logs.RESERVE_BYTES


def _full(path: Path) -> StoreError:
    return StoreError(
        f"no space left on the disk holding the nodus records ({path})",
        hint="free some space there, or set NODUS_HOME to a folder on another disk",
    )


def _damaged(path: Path, why: str) -> StoreError:
    return StoreError(
        f"the run records database {path} is damaged ({why})",
        hint=f"move it aside to start new records (`mv {path} {path}.damaged`); the logs "
        f"in {path.parent / 'logs'} stay readable with `nodus logs`",
    )


def _explain(exc: BaseException, path: Path, writing: bool = True) -> StoreError:
    """What went wrong with the state folder, in words, with what to do."""
    text = str(exc).lower()
    number = getattr(exc, "errno", None)
    if _disk_full(exc, path):
        return _full(path)
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return _damaged(path, str(exc))
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


class RunStore:
    """The runs, their stages and tasks, in one SQLite database (WAL) under ``root``."""

    def __init__(self, root: Path, read_only: bool = False, why: StoreError | None = None) -> None:
        self.root = root
        self.db_path = root / "runs.sqlite3"
        self.read_only = read_only
        #: Why a store that exists is read-only here (None: the folder is read-only), said
        #: by every write: a full disk is named as such.
        self.why = why
        self._logs = root / "logs"
        self._work = root / "work"
        self._db: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._close: weakref.finalize[[], RunStore] | None = None

    # -- opening -------------------------------------------------------------------

    @classmethod
    def open(cls, root: Path | None = None, create: bool = True) -> RunStore:
        """The store under ``root`` (default NODUS_HOME), ready to read and write.

        When the folder cannot be written, or its disk is full, a store that exists is
        opened read-only (its writers raise :class:`StoreError`, naming the reason);
        without ``create``, a missing store is an empty read-only one.
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
            if store.db_path.exists() and _disk_full(exc, store.db_path):
                return cls(root, read_only=True, why=_full(store.db_path))
            if store.db_path.exists() and _cannot_write(exc, root):
                return cls(root, read_only=True)
            raise _explain(exc, store.db_path) from None
        return store

    def _prepare(self) -> None:
        if not self.db_path.exists():
            fd = os.open(self.db_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            os.close(fd)
        else:
            self._check_not_emptied()
            if self.db_path.stat().st_mode & 0o077 and self.db_path.stat().st_uid == os.getuid():
                self.db_path.chmod(0o600)
        with self._connect() as db:
            schema.prepare(db)

    def _check_not_emptied(self) -> None:
        """A database of zero bytes, with no write-ahead log holding its pages, beside the
        logs of recorded runs, lost every record (truncated by a crash, a full disk or a
        careless copy): damaged, not new. Made afresh it would say "no runs recorded yet"
        and hide the history those logs belong to. (A new database is empty only for the
        moment between its creation and its first commit, in a folder with no logs.)

        The logs are counted first: another process that opens the same new folder at
        this moment may prepare the database, record a run and write its log between two
        looks, and a size read before its logs were counted would call that database
        emptied."""
        runs = len(self.log_ids())
        if not runs or self.db_path.stat().st_size > 0:
            return
        wal = self.db_path.with_name(self.db_path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            return
        raise _damaged(
            self.db_path,
            f"it is empty (0 bytes), but {self._logs} holds the logs of "
            f"{plural(runs, 'recorded run')}",
        )

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """The store's one connection (opened on first use), for one thread at a time.

        Autocommit: each statement outside :meth:`_transaction` is its own transaction, so
        holding the connection open locks nothing between calls.
        """
        with self._lock:
            if self._db is None:
                if self.read_only:
                    try:
                        db = _sqlite(f"file:{self.db_path}?mode=ro")
                        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
                    except sqlite3.OperationalError:
                        # A read-only folder cannot hold the WAL's shared-memory file.
                        db = _sqlite(f"file:{self.db_path}?mode=ro&immutable=1")
                else:
                    db = _sqlite(self.db_path, uri=False)
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
            if self.why is not None:
                raise StoreError(self.why.message, hint=self.why.hint)
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
            db.execute(RUNS.insert, RUNS.values(record))
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
                "UPDATE runs SET status=? WHERE id=? AND status IN (?, ?)",
                (str(RunStatus.RUNNING), run_id, str(RunStatus.PENDING), str(RunStatus.QUEUED)),
            )

    def set_queued(self, run_id: str) -> None:
        """The run waits for GPUs (it never ran yet): pending becomes queued."""
        with self._using(writing=True) as db:
            db.execute(
                "UPDATE runs SET status=? WHERE id=? AND status=?",
                (str(RunStatus.QUEUED), run_id, str(RunStatus.PENDING)),
            )

    def update_cost(self, run_id: str, cost: float) -> None:
        with self._using(writing=True) as db:
            db.execute("UPDATE runs SET cost=? WHERE id=?", (cost, run_id))

    def save_stage(self, run_id: str, idx: int, stage: StageRecord) -> None:
        with self._using(writing=True) as db:
            db.execute(STAGES.update, STAGES.values(stage, run_id, idx))

    def save_tasks(self, run_id: str, stage_idx: int, tasks: Sequence[TaskRecord]) -> None:
        """Record the state of some tasks of a fan-out stage (one transaction)."""
        if not tasks:
            return
        with self._transaction() as db:
            db.executemany(
                TASKS.update, [TASKS.values(t, run_id, stage_idx, t.index) for t in tasks]
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
        those still running take the run's end (``cancelled``, else ``failed``), and those
        still waiting in the queue become ``cancelled`` (nothing of theirs started), their
        waiting words (place in line, holders) replaced: they are no longer true."""
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
                db.execute(
                    f"UPDATE {table} SET status=?, ended_at=COALESCE(ended_at, ?), message=? "
                    "WHERE run_id=? AND status=?",
                    (
                        str(StageStatus.CANCELLED),
                        ended,
                        f"not started: it waited for GPUs when the run ended {status}",
                        run_id,
                        str(StageStatus.QUEUED),
                    ),
                )

    def set_output(self, run_id: str, output: dict[str, Any]) -> None:
        with self._using(writing=True) as db:
            db.execute("UPDATE runs SET output_json=? WHERE id=?", (json.dumps(output), run_id))

    def set_cleanup_pending(self, run_id: str, pending: bool) -> None:
        with self._using(writing=True) as db:
            db.execute("UPDATE runs SET cleanup_pending=? WHERE id=?", (int(pending), run_id))

    def forget(self, run_id: str) -> None:
        """Remove a run that never started anything (refused before its first task ran):
        its rows, its log, its supervisor's stderr and its work folder when empty, as if it
        had never been recorded."""
        with self._transaction() as db:
            db.execute("DELETE FROM tasks WHERE run_id=?", (run_id,))
            db.execute("DELETE FROM stages WHERE run_id=?", (run_id,))
            db.execute("DELETE FROM runs WHERE id=?", (run_id,))
        for path in (
            self._logs / f"{run_id}.jsonl",
            self.stderr_path(run_id),
            self._gpu_path(run_id),
        ):
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):  # not there, or it holds something: kept
            (self._work / run_id).rmdir()

    def request_stop(self, run_id: str) -> None:
        with self._using(writing=True) as db:
            db.execute("UPDATE runs SET stop_requested=1 WHERE id=?", (run_id,))

    # -- reading (the queries are records.queries) --------------------------------------

    def _read(
        self,
        empty: T,
        query: Callable[Concatenate[sqlite3.Connection, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``query`` on the database; ``empty`` when there is none yet (nothing recorded)."""
        if not self.exists:
            return empty
        with self._using() as db:
            return query(db, *args, **kwargs)

    def stop_requested(self, run_id: str) -> bool:
        with self._using() as db:
            return queries.stop_requested(db, run_id)

    def list_runs(
        self,
        limit: int = 20,
        offset: int = 0,
        *,
        status: str | None = None,
        target: str | None = None,
        workload: str | None = None,
    ) -> list[RunRecord]:
        """The ``limit`` runs started last, newest first, from ``offset`` on; only those
        of the ``status``, ``target`` and ``workload`` given (:func:`queries.recent`)."""
        return list(self.iter_runs(limit, offset, status=status, target=target, workload=workload))

    def iter_runs(
        self,
        limit: int | None = None,
        offset: int = 0,
        *,
        status: str | None = None,
        target: str | None = None,
        workload: str | None = None,
    ) -> Iterator[RunRecord]:
        """The runs started last, newest first (``limit`` of them, None: every one, from
        ``offset`` on, filtered as :meth:`list_runs`), read :data:`PAGE` at a time:
        however long the history, only a page is in memory, and the store's connection is
        free between pages (each page one short read)."""
        after: queries.Key | None = None
        left = limit
        while left is None or left > 0:
            size = PAGE if left is None else min(PAGE, left)
            page, after = self._read(
                ([], None), queries.recent, size, after, offset, status, target, workload
            )
            offset = 0  # the next page starts after this one's key
            yield from page
            if len(page) < size or after is None:
                return
            if left is not None:
                left -= len(page)
            del page  # not held while the next one is read

    def active(self) -> list[RunRecord]:
        """Runs still pending or running, and ended runs whose clean-up is pending."""
        return self._read([], queries.active)

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
            return queries.get(db, run_id, tasks)

    def tasks(self, run_id: str, stage_idx: int) -> list[TaskRecord]:
        """Every task of a fan-out stage, in item order."""
        with self._using() as db:
            return queries.tasks(db, run_id, stage_idx)

    def runtime_samples(self, workload_fingerprint: str) -> list[tuple[str, str, float]]:
        """(stage, configuration key, seconds) of every succeeded stage of a workload."""
        return self._read([], queries.runtime_samples, workload_fingerprint)

    def spending(self, since: str) -> list[SpendRow]:
        """Every run started at or after ``since`` (ISO 8601), with its cost so far."""
        return self._read([], queries.spending, since)

    def daily_spend(self, since: str) -> list[tuple[str, float]]:
        """(UTC day, cost) of each day since ``since`` with runs, oldest first."""
        return self._read([], queries.daily_spend, since)

    def spent(self, since: str, until: str, exclude: str | None = None) -> float:
        """The recorded cost (running runs: so far) of every run started in ``[since,
        until)`` (ISO 8601), the run ``exclude`` left out (:func:`queries.spent`)."""
        return self._read(0.0, queries.spent, since, until, exclude)

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
                return logs.read(legacy, offset, plain=True)
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

    def _gpu_path(self, run_id: str) -> Path:
        return self._logs / f"{run_id}.gpu"

    def add_gpu_samples(self, run_id: str, samples: Sequence[gpu_samples.GpuSample]) -> None:
        """Keep a task's GPU-use samples with the run's (bounded: see :mod:`.gpu_samples`)."""
        gpu_samples.write(self._gpu_path(run_id), samples)

    def gpu_samples(self, run_id: str) -> list[gpu_samples.GpuSample]:
        """A run's GPU-use samples in time order (none when nothing was sampled)."""
        return gpu_samples.read(self._gpu_path(run_id))

    def stderr_path(self, run_id: str) -> Path:
        """Where a background supervisor's own stderr goes (a crash's traceback)."""
        return self._logs / f"{run_id}.stderr"

    def stderr_file(self, run_id: str) -> BinaryIO:
        """:meth:`stderr_path` opened to append, private (0600) as every file here."""
        path = self.stderr_path(run_id)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise _explain(exc, path) from None
        return os.fdopen(fd, "ab")

    def work_dir(self, run_id: str) -> Path:
        """The run's shared work folder on this machine (its parent is private)."""
        _private_dir(self._work)
        return self._work / run_id


def open_store(create: bool = True) -> RunStore:
    return RunStore.open(create=create)
