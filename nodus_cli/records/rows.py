"""How a record maps onto its table's row: one declaration per table, which the store's
writes and its reads both follow.

Contract: :data:`RUNS`, :data:`STAGES` and :data:`TASKS` name each column a record is
kept in, the attribute it holds and how the value is written and read back (a status as
its text, lists and objects as JSON, a missing count as 0). What :meth:`Table.values`
writes, :meth:`Table.record` reads back as it was.

Why: a column written one way and read another (or added to the writer and forgotten in
the reader) is a record that silently changes; with one declaration per table it cannot.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from nodus_cli.records.keys import config_key_of
from nodus_cli.records.model import RunRecord, RunStatus, StageRecord, StageStatus, TaskRecord
from nodus_cli.structs import struct

__all__ = ["RUNS", "STAGES", "TASKS", "Column", "Table"]

R = TypeVar("R")


def _kept(value: Any) -> Any:
    return value


def _json(value: Any) -> str | None:
    return json.dumps(value) if value is not None else None


def _from_json(value: str | None) -> Any:
    return json.loads(value) if value else None


def _from_json_list(value: str | None) -> Any:
    return json.loads(value) if value else []


def _money(value: float | None) -> float:
    return value or 0.0


def _count(value: int | None) -> int:
    return value or 0


def _config_key(config: dict[str, Any] | None) -> str | None:
    return config_key_of(config) if config is not None else None


@struct(frozen=True)
class Column:
    """One column: the record attribute it holds, how it is written and read back."""

    name: str
    attribute: str
    #: Attribute value to column value; None: written once when the row is made (the
    #: stage's name, the task's item), never saved again.
    write: Callable[[Any], Any] | None = _kept
    #: Column value to attribute value; None: kept for queries only, never read back
    #: (derived from another attribute).
    read: Callable[[Any], Any] | None = _kept


class Table(Generic[R]):
    """A record's table: its columns, and the key columns that pick a record's row beside
    them (the run and the stage a task belongs to); it writes the SQL that reads and
    writes them."""

    __slots__ = ("columns", "key", "make", "name")

    def __init__(
        self, name: str, columns: tuple[Column, ...], key: tuple[str, ...], make: Callable[..., R]
    ) -> None:
        self.name = name
        self.columns = columns
        self.key = key
        self.make = make

    def __repr__(self) -> str:
        return f"Table({self.name!r})"

    @property
    def select(self) -> str:
        """The columns :meth:`record` reads, in its order, for a SELECT."""
        return ", ".join(c.name for c in self.columns if c.read is not None)

    def record(self, row: Sequence[Any]) -> R:
        """The record of a row selected with :attr:`select`."""
        values = iter(row)
        return self.make(
            **{c.attribute: c.read(next(values)) for c in self.columns if c.read is not None}
        )

    @property
    def insert(self) -> str:
        """An INSERT of every written column, then the key, for :meth:`values`."""
        names = [c.name for c in self._written] + list(self.key)
        return f"INSERT INTO {self.name} ({', '.join(names)}) VALUES ({','.join('?' * len(names))})"

    @property
    def update(self) -> str:
        """An UPDATE of every written column of the row the key picks, for :meth:`values`."""
        sets = ", ".join(f"{c.name}=?" for c in self._written)
        where = " AND ".join(f"{k}=?" for k in self.key)
        return f"UPDATE {self.name} SET {sets} WHERE {where}"

    def values(self, record: R, *key: Any) -> tuple[Any, ...]:
        """The written columns' values of ``record``, then the ``key`` values."""
        written = (
            c.write(getattr(record, c.attribute)) for c in self.columns if c.write is not None
        )
        return (*written, *key)

    @property
    def _written(self) -> list[Column]:
        return [c for c in self.columns if c.write is not None]


#: A run. Its row is written whole when the run is recorded; later writes change one
#: column at a time (the store's ``set_*`` and ``finish_run``).
RUNS: Table[RunRecord] = Table(
    "runs",
    (
        Column("id", "id"),
        Column("workload", "workload"),
        Column("fingerprint", "fingerprint"),
        Column("target", "target"),
        Column("status", "status", str, RunStatus),
        Column("exit_code", "exit_code"),
        Column("started_at", "started_at"),
        Column("ended_at", "ended_at"),
        Column("cost", "cost", read=_money),
        Column("price_per_hour", "price_per_hour", read=_money),
        Column("budget", "budget"),
        Column("file", "file"),
        Column("workload_json", "workload_json", json.dumps, json.loads),
        Column("pid", "pid"),
        Column("message", "message"),
        Column("host", "host"),
        Column("pid_start", "pid_start"),
        Column("output_json", "output", _json, _from_json),
        Column("cleanup_pending", "cleanup_pending", int, bool),
        Column("stop_requested", "stop_requested", int, bool),
    ),
    key=(),
    make=RunRecord,
)

#: How a stage or a task ran: the columns the two tables share.
_RAN = (
    Column("status", "status", str, StageStatus),
    Column("exit_code", "exit_code"),
    Column("started_at", "started_at"),
    Column("ended_at", "ended_at"),
    Column("runtime_seconds", "runtime_seconds"),
    Column("cost", "cost", read=_money),
)

#: A stage of a run (its ``idx`` in the workload with the run's id is the key).
STAGES: Table[StageRecord] = Table(
    "stages",
    (
        Column("name", "name", write=None),
        *_RAN,
        #: What runtime measurements are looked up by (records.history).
        Column("config_key", "config", _config_key, read=None),
        Column("config_json", "config", _json, _from_json),
        Column("gpu_uuids", "gpu_uuids", json.dumps, _from_json_list),
        Column("attempts", "attempts", read=_count),
        Column("gpu_report", "gpu_report", _json, _from_json),
        Column("message", "message"),
        Column("node", "node"),
        Column("job_id", "job_id"),
    ),
    key=("run_id", "idx"),
    make=StageRecord,
)

#: A task of a fan-out stage (the run's id, the stage's idx and its own idx are the key).
TASKS: Table[TaskRecord] = Table(
    "tasks",
    (
        Column("idx", "index", write=None),
        Column("item", "item", write=None),
        *_RAN,
        Column("devices", "devices", json.dumps, _from_json_list),
        Column("node", "node"),
        Column("attempts", "attempts", read=_count),
        Column("message", "message"),
        Column("job_id", "job_id"),
    ),
    key=("run_id", "stage_idx", "idx"),
    make=TaskRecord,
)
