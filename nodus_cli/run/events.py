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
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from nodus_cli.records.logs import Stream
from nodus_cli.structs import struct
from nodus_cli.targets.base import (
    OutputStream,
    Pending,
    Started,
    Target,
    TargetFailure,
    Task,
    TaskEnd,
)

__all__ = [
    "Context",
    "Event",
    "Reporter",
    "TaskBegan",
    "TaskEnded",
    "TaskRaised",
    "TaskSubmitted",
    "TaskWaiting",
    "items_job",
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
    """What a task is handed (:class:`~nodus_cli.targets.base.TaskContext`, and
    :class:`~nodus_cli.targets.base.ItemContext` for an item of ``run_items``)."""

    def __init__(self, task: Task, reporter: Reporter, events: queue.SimpleQueue[Event]) -> None:
        self.task = task
        self.reporter = reporter
        self.events = events
        #: Whether :meth:`ended` was called (the driver ends, as a failure, any item a
        #: target's ``run_items`` left without an end).
        self.ended_once = False

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

    def ended(self, end: TaskEnd) -> None:
        """An item of :meth:`~nodus_cli.targets.base.Target.run_items` ended."""
        self.ended_once = True
        self.events.put(TaskEnded(self.task, end))

    @property
    def _item(self) -> int | None:
        return self.task.item.index if self.task.item is not None else None


def items_job(
    target: Target,
    tasks: Sequence[Task],
    reporter: Reporter,
    events: queue.SimpleQueue[Event],
    parallel: int,
) -> Callable[[], Callable[[], None]]:
    """The lane job that hands a fan-out stage's items to ``target.run_items``, each with
    its :class:`Context`. Whatever item it leaves without an end (it raised, or forgot
    one) is carried to the loop as that failure: the loop never waits for an item nobody
    will end."""
    contexts = [Context(task, reporter, events) for task in tasks]

    def job() -> Callable[[], None]:
        threading.current_thread().name = f"nodus-items-{tasks[0].stage.name}"
        error: BaseException | None = None
        try:
            target.run_items(tasks, contexts, parallel)
        except BaseException as exc:  # carried to the main thread, which decides
            error = exc
        unended = [c.task for c in contexts if not c.ended_once]
        failure = error or TargetFailure(
            f"the {target.name} target did not say how "
            f"{', '.join(t.key for t in unended[:3])} ended"
        )
        raised = [TaskRaised(t, failure) for t in unended]

        def put() -> None:  # once the lane is idle, as a task's last word
            for event in raised:
                events.put(event)

        return put

    return job
