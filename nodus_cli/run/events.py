"""What running tasks tell the loop: the context a target is handed, and the events it
puts on the loop's queue.

Contract: a target reports through :class:`Context` (the driver's implementation of
:class:`~nodus_cli.targets.base.TaskContext`), from any thread. Status lines and output
go straight to the run's output (both are thread-safe); the steps of a task's life
(submitted, waiting, started) and its end become an :data:`Event` on one queue that only
the loop's thread reads, so every record and every decision is made in one thread, in
the order things happened.

Why the events are types, not strings: :data:`Event` is a closed union, each kind with
its own payload; the loop matches on it, and mypy says where a new kind is not handled.
They are frozen structs (:mod:`nodus_cli.structs`): immutable, cheap to define at start-up
(every ``nodus run`` loads them), and, unlike tuples, two events of different kinds never
compare equal.
"""

from __future__ import annotations

import queue
import time
from typing import Protocol

from nodus_cli.records.logs import Stream
from nodus_cli.structs import struct
from nodus_cli.targets.base import OutputStream, Pending, Started, Task, TaskEnd

__all__ = [
    "Context",
    "Event",
    "Reporter",
    "TaskBegan",
    "TaskEnded",
    "TaskRaised",
    "TaskSubmitted",
    "TaskWaiting",
]


@struct(frozen=True)
class TaskSubmitted:
    """The task holds its place on the target (a container created, a service submitted)."""

    task: Task
    note: str | None
    #: The scheduler's job id (a target whose jobs outlive nodus).
    job_id: str | None = None


@struct(frozen=True)
class TaskWaiting:
    """Still not running, and why."""

    task: Task
    pending: Pending


@struct(frozen=True)
class TaskBegan:
    """The task runs: its cost counts from ``at`` (the driver's monotonic clock)."""

    task: Task
    info: Started
    at: float


@struct(frozen=True)
class TaskEnded:
    """The target's ``run_task`` returned: how the task ended."""

    task: Task
    end: TaskEnd


@struct(frozen=True)
class TaskRaised:
    """The target's ``run_task`` raised: carried to the loop, which decides."""

    task: Task
    error: BaseException


Event = TaskSubmitted | TaskWaiting | TaskBegan | TaskEnded | TaskRaised


class Reporter(Protocol):
    """Where a task's status lines and output go (the run's log and sink)."""

    def say(self, message: str, stage: str | None = None, item: int | None = None) -> None: ...

    def emit(self, stage: str, item: int | None, stream: Stream, text: str) -> None: ...


class Context:
    """What a task is handed (:class:`~nodus_cli.targets.base.TaskContext`)."""

    def __init__(self, task: Task, reporter: Reporter, events: queue.SimpleQueue[Event]) -> None:
        self.task = task
        self.reporter = reporter
        self.events = events

    def say(self, message: str) -> None:
        self.reporter.say(message, self.task.stage.name, self._item)

    def emit(self, stream: OutputStream, text: str) -> None:
        self.reporter.emit(self.task.stage.name, self._item, stream, text)

    def submitted(self, note: str | None = None, job_id: str | None = None) -> None:
        self.events.put(TaskSubmitted(self.task, note, job_id))

    def waiting(self, pending: Pending) -> None:
        self.events.put(TaskWaiting(self.task, pending))

    def started(self, info: Started) -> None:
        self.events.put(TaskBegan(self.task, info, time.monotonic()))

    @property
    def _item(self) -> int | None:
        return self.task.item.index if self.task.item is not None else None
