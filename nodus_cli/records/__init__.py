"""Run records: every run, its stages and tasks, costs and logs, under ``NODUS_HOME``.

- :mod:`~nodus_cli.records.store`: the persistence, the one way in to the database and
  the state folder's files; its tables are :mod:`~nodus_cli.records.schema`, how a record
  maps onto a row :mod:`~nodus_cli.records.rows`, its reads :mod:`~nodus_cli.records.queries`;
- :mod:`~nodus_cli.records.model`: what a record holds;
- :mod:`~nodus_cli.records.logs`: a run's output as JSON lines;
- :mod:`~nodus_cli.records.gpu_samples`: a run's GPU use over time, bounded;
- :mod:`~nodus_cli.records.process`: who supervises a run, and whether it still lives;
- :mod:`~nodus_cli.records.history`: the runtime measurements plans rank by, and
  :mod:`~nodus_cli.records.keys` what they are keyed by.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodus_cli.lazy import exports

# The package's names are loaded when first used: `from nodus_cli.records.model import
# RunStatus` (the API's handles, a plan) must not open SQLite, start-up is felt in CI.
if TYPE_CHECKING:
    from nodus_cli.records.gpu_samples import GpuSample
    from nodus_cli.records.history import runtime_lookup
    from nodus_cli.records.keys import config_key, fingerprint
    from nodus_cli.records.logs import LogLine, LogWriter, Stream
    from nodus_cli.records.model import RunRecord, RunStatus, StageRecord, StageStatus, TaskRecord
    from nodus_cli.records.process import hostname, process_alive, process_start
    from nodus_cli.records.queries import SpendRow
    from nodus_cli.records.store import RunStore, StoreError, new_run_id, now_iso, open_store

_WHERE = {
    "GpuSample": "nodus_cli.records.gpu_samples",
    "runtime_lookup": "nodus_cli.records.history",
    "config_key": "nodus_cli.records.keys",
    "fingerprint": "nodus_cli.records.keys",
    "LogLine": "nodus_cli.records.logs",
    "LogWriter": "nodus_cli.records.logs",
    "Stream": "nodus_cli.records.logs",
    "RunRecord": "nodus_cli.records.model",
    "RunStatus": "nodus_cli.records.model",
    "StageRecord": "nodus_cli.records.model",
    "StageStatus": "nodus_cli.records.model",
    "TaskRecord": "nodus_cli.records.model",
    "hostname": "nodus_cli.records.process",
    "process_alive": "nodus_cli.records.process",
    "process_start": "nodus_cli.records.process",
    "SpendRow": "nodus_cli.records.queries",
    "RunStore": "nodus_cli.records.store",
    "StoreError": "nodus_cli.records.store",
    "new_run_id": "nodus_cli.records.store",
    "now_iso": "nodus_cli.records.store",
    "open_store": "nodus_cli.records.store",
}

__all__ = [
    "GpuSample",
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
    "process_start",
    "runtime_lookup",
]


__getattr__, __dir__ = exports(__name__, _WHERE)
