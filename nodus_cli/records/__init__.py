"""Run records: every run, its stages and tasks, costs and logs, under ``NODUS_HOME``.

:mod:`~nodus_cli.records.store` is the persistence (the only module that knows the
database and the state folder's files), :mod:`~nodus_cli.records.model` what a record
holds, :mod:`~nodus_cli.records.logs` a run's output as JSON lines, and
:mod:`~nodus_cli.records.history` the runtime measurements plans rank by, and
:mod:`~nodus_cli.records.keys` what those measurements are keyed by.
"""

from nodus_cli.records.history import runtime_lookup
from nodus_cli.records.keys import config_key, fingerprint
from nodus_cli.records.logs import LogLine, LogWriter, Stream
from nodus_cli.records.model import RunRecord, RunStatus, StageRecord, StageStatus, TaskRecord
from nodus_cli.records.store import (
    RunStore,
    SpendRow,
    StoreError,
    hostname,
    new_run_id,
    now_iso,
    open_store,
    process_alive,
)

__all__ = [
    "LogLine",
    "LogWriter",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "SpendRow",
    "StageRecord",
    "StageStatus",
    "StoreError",
    "Stream",
    "TaskRecord",
    "config_key",
    "fingerprint",
    "hostname",
    "new_run_id",
    "now_iso",
    "open_store",
    "process_alive",
    "runtime_lookup",
]
