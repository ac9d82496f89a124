"""The records a run writes while it runs: each stage as it changes, a fan-out stage's
tasks in batches, whether it runs, its running cost.

Contract: no write here stops a run. A write the store refuses (a full disk, a folder
turned read-only) is kept as a problem, once per message, for the driver to report when
the run ends; the run itself goes on and its outcome is still returned. The tasks of a
fan-out stage are written at most every :data:`FLUSH_EVERY` seconds (or 500 at once), in
one transaction, with the GPU-use samples their tasks took (one rewrite of the run's
bounded samples file per batch, not per task), and :meth:`Recorder.flush` with ``force``
writes what is left.

Why apart from the loop: a stage of 100,000 items must not cost 100,000 transactions,
and a full disk must not end a run that is otherwise fine; both are mechanism, the same
for every write, while the loop decides what the records say.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from nodus_cli.records import GpuSample, RunStore, StageRecord, StoreError, TaskRecord

__all__ = ["FLUSH_EVERY", "Recorder"]

#: Task records of a fan-out stage are written in batches at most this often (seconds).
FLUSH_EVERY = 0.5
#: ... or as soon as this many are waiting.
_BATCH = 500


class Recorder:
    """The writes of one run (``run_id``) to ``store``, and the problems they met."""

    def __init__(self, store: RunStore, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        #: What could not be written, each message once, in the order met.
        self.problems: list[str] = []
        self._stage = 0  # the stage whose tasks wait in _dirty
        self._dirty: dict[int, TaskRecord] = {}
        self._samples: list[GpuSample] = []
        self._flushed = 0.0

    def stage(self, index: int, record: StageRecord) -> None:
        self._write(self.store.save_stage, self.run_id, index, record)

    def task(self, stage: int, record: TaskRecord) -> None:
        """A task's record changed: written with the next batch."""
        if stage != self._stage:  # a new stage: its first task is written at once
            self.flush(force=True)
            self._stage, self._flushed = stage, 0.0
        self._dirty[record.index] = record
        self.flush()

    def flush(self, force: bool = False) -> None:
        """Write the tasks and GPU samples waiting when a batch is due (``force``: now)."""
        if not self._dirty and not self._samples:
            return
        now = time.monotonic()
        if not force and now - self._flushed < FLUSH_EVERY and len(self._dirty) < _BATCH:
            return
        self._flushed = now
        if self._dirty:
            batch = list(self._dirty.values())
            self._dirty.clear()
            self._write(self.store.save_tasks, self.run_id, self._stage, batch)
        if self._samples:
            samples, self._samples = self._samples, []
            self._write(self.store.add_gpu_samples, self.run_id, samples)

    def running(self) -> None:
        self._write(self.store.set_running, self.run_id)

    def queued(self) -> None:
        self._write(self.store.set_queued, self.run_id)

    def cost(self, cost: float) -> None:
        self._write(self.store.update_cost, self.run_id, cost)

    def gpu_samples(self, samples: Sequence[GpuSample]) -> None:
        """A task's GPU-use samples: written with the next batch, with the run's."""
        self._samples.extend(samples)
        self.flush()

    def _write(self, write: Callable[..., None], *args: Any) -> None:
        """A record write; a full disk is reported once and the run goes on."""
        try:
            write(*args)
        except StoreError as exc:
            if exc.message not in self.problems:
                self.problems.append(exc.message)
