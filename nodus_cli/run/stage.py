"""One stage under way: its record and, for a fan-out stage, every task's record, kept as
the stage's tasks are submitted, start and end.

Contract: a :class:`StageRun` changes records only as the driver tells it (the driver
decides every status, retry and message); each change goes to the
:class:`~nodus_cli.run.recorder.Recorder` at once (the stage's record) or with the next
batch (a task's). The counts a progress bar shows are kept as tasks end, never
recounted: a stage may hold 100,000 items.

Why apart from the loop: the loop's policy (what to launch, when to stop, what a task's
end means) reads better without the field-by-field bookkeeping of two kinds of record.
"""

from __future__ import annotations

import time
from typing import Any

from nodus_cli.records import StageRecord, StageStatus, TaskRecord, now_iso
from nodus_cli.run.recorder import Recorder
from nodus_cli.run.sink import Progress
from nodus_cli.structs import struct
from nodus_cli.targets.base import Started, Task, TaskEnd, TaskState
from nodus_cli.workload import Stage

__all__ = ["StageEnd", "StageRun", "listed"]


@struct(frozen=True)
class StageEnd:
    """How a stage ended, for the run: its status, its exit code, and why (when not
    succeeded)."""

    status: StageStatus
    exit_code: int
    message: str | None = None


class StageRun:
    """Stage number ``index`` of the run, whose ``tasks`` are about to run."""

    def __init__(self, index: int, stage: Stage, tasks: list[Task], records: Recorder) -> None:
        self.index = index
        self.stage = stage
        self.records = records
        self.record = StageRecord(stage.name, StageStatus.PENDING, None)
        #: A fan-out stage's task records by item index (empty for a stage of one task).
        self.tasks: dict[int, TaskRecord] = {
            t.item.index: TaskRecord(t.item.index, t.item.value) for t in tasks if t.item
        }
        #: How each task ended, by item index (0 for a stage of one task).
        self.ends: dict[int, TaskEnd] = {}
        self.t0 = time.monotonic()
        self.failed: list[int] = []
        self.succeeded = 0
        self.cost = 0.0

    def save(self) -> None:
        self.records.stage(self.index, self.record)

    def submitted(
        self,
        task: Task,
        at: str,
        planned: dict[str, Any] | None,
        note: str | None,
        job_id: str | None = None,
    ) -> None:
        """The task holds its place (as the scheduler's job ``job_id``, when it has one);
        until it runs, the stage's configuration is the ``planned`` one."""
        rec = self.record
        if task.item is None:
            rec.started_at = rec.started_at or at
            rec.attempts = task.attempt
            rec.config = rec.config or planned
            rec.job_id = job_id or rec.job_id
            if note:
                rec.message = note
            self.save()
            return
        if rec.started_at is None:
            rec.started_at = at
            self.save()
        if job_id is not None:
            self.tasks[task.item.index].job_id = job_id
            self._changed(task.item.index)

    def waiting(self, task: Task, message: str) -> None:
        """The task waits for capacity, and ``message`` says why: it is ``queued``
        until it runs."""
        if task.item is None:
            self.record.message = message
            if self.record.status == StageStatus.PENDING:
                self.record.status = StageStatus.QUEUED
            self.save()
        else:
            t = self.tasks[task.item.index]
            t.message = message
            if t.status == StageStatus.PENDING:
                t.status = StageStatus.QUEUED
            self._changed(task.item.index)

    def began(self, task: Task, info: Started, note: str | None) -> None:
        """The task runs, where ``info`` says; ``note`` becomes the stage's message."""
        rec = self.record
        if task.item is None:
            rec.status = StageStatus.RUNNING
            rec.started_at = rec.started_at or now_iso()
            rec.gpu_uuids = list(info.devices)
            rec.node = info.node
            rec.config = info.config or rec.config
            rec.attempts = task.attempt
            if note:
                rec.message = note
            self.save()
            return
        if rec.status in (StageStatus.PENDING, StageStatus.QUEUED):
            rec.status = StageStatus.RUNNING
            rec.config = info.config
            self.save()
        t = self.tasks[task.item.index]
        t.status = StageStatus.RUNNING
        t.started_at = now_iso()
        t.devices = list(info.devices)
        t.node = info.node
        t.attempts = task.attempt
        self._changed(task.item.index)

    def retried(self, task: Task, cost: float) -> None:
        """The task ends, to run again: what it cost stays the stage's."""
        self.cost += cost
        if task.item is None:
            self.record.cost += cost

    def ended(
        self,
        task: Task,
        end: TaskEnd,
        status: StageStatus,
        runtime: float | None,
        cost: float,
        message: str | None,
    ) -> None:
        """The task ended with ``status`` (``runtime`` None: it never ran); ``message``
        is kept unless it succeeded."""
        self.cost += cost
        if end.gpu_use is not None and end.gpu_use.samples:
            self.records.gpu_samples(end.gpu_use.samples)
            end.gpu_use.samples = []  # the records have them; a fan-out's ends stay small
        if task.item is None:
            rec = self.record
            rec.status = status
            rec.exit_code = end.exit_code
            rec.ended_at = now_iso()
            rec.runtime_seconds = runtime
            rec.cost += cost
            rec.attempts = task.attempt
            rec.gpu_report = end.gpu_use.as_json() if end.gpu_use is not None else None
            rec.message = message if status != StageStatus.SUCCEEDED else rec.message
            self.save()
            self.ends[0] = end
            return
        index = task.item.index
        t = self.tasks[index]
        t.status = status
        t.exit_code = end.exit_code
        t.ended_at = now_iso()
        t.runtime_seconds = runtime
        t.cost = cost
        t.attempts = task.attempt
        t.message = message if status != StageStatus.SUCCEEDED else None
        self.ends[index] = end
        if status == StageStatus.SUCCEEDED:
            self.succeeded += 1
        if status == StageStatus.FAILED:
            self.failed.append(index)
        self._changed(index)

    def progress(self, running: int, cost: float) -> Progress:
        """A fan-out stage's tasks so far; ``running`` tasks run now, the run cost ``cost``."""
        return Progress(
            self.stage.name,
            len(self.tasks),
            self.succeeded,
            running,
            len(self.failed),
            time.monotonic() - self.t0,
            cost,
        )

    def gpu_use_words(self) -> str | None:
        """A fan-out stage's GPU use in one line (None: nothing was sampled): a request is
        not proof of use."""
        sampled = [e.gpu_use for e in self.ends.values() if e.gpu_use and e.gpu_use.available]
        if not sampled:
            return None
        stopped = TaskState.STOPPED  # stopped by nodus: no time to use them
        idle = [
            i
            for i, e in sorted(self.ends.items())
            if e.gpu_use and e.gpu_use.idle and e.state != stopped
        ]
        if not idle:
            return f"stage {self.stage.name}: every item used its GPU"
        return (
            f"warning: stage {self.stage.name}: {len(idle)} of {len(sampled)} items left "
            f"their GPU idle (items {listed(idle)}): a request is not proof of use; check that "
            "the program sees it (CUDA_VISIBLE_DEVICES, the framework's device)"
        )

    def _changed(self, index: int) -> None:
        self.records.task(self.index, self.tasks[index])


def listed(indexes: list[int], most: int = 10) -> str:
    """Item numbers for a message: the first ``most``, then "..." when there are more."""
    return ", ".join(str(i) for i in indexes[:most]) + (", ..." if len(indexes) > most else "")
