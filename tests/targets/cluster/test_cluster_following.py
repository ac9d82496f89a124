"""nodus_cli.targets.cluster.following: the follow loop every cluster target uses."""

from __future__ import annotations

from typing import Any

import pytest

from nodus_cli.targets.base import (
    OutputStream,
    Pending,
    PendingKind,
    Started,
    TaskEnd,
    TaskState,
)
from nodus_cli.targets.cluster.following import (
    POLL_FAST,
    POLL_FIRST,
    POLL_MAX,
    Look,
    follow,
    poll_interval,
)

STOPPED = TaskEnd(TaskState.STOPPED, 143, "stopped by nodus")


class Recorder:
    """A task's context that keeps what it was told, in order."""

    def __init__(self) -> None:
        self.said: list[Any] = []

    def say(self, message: str) -> None:
        self.said.append(("say", message))

    def emit(self, stream: OutputStream, text: str) -> None:
        self.said.append((stream, text))

    def submitted(self, note: str | None = None, job_id: str | None = None) -> None:
        self.said.append(("submitted", note))

    def waiting(self, pending: Pending) -> None:
        self.said.append(("waiting", pending.kind, pending.words))

    def started(self, info: Started) -> None:
        self.said.append(("started", info.node))


class Output:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def start(self) -> None:
        self.log.append("output live")

    def poll(self) -> None:
        self.log.append("output polled")

    def finish(self, complete: bool) -> None:
        self.log.append(("output finished", complete))


class Script:
    """A job whose looks are written in advance: ``(started, ended, reason)`` each."""

    def __init__(self, looks: list[tuple[bool, bool, str | None]], ctx: Recorder) -> None:
        self.looks = looks
        self.ctx = ctx
        self.stopping = False
        self.stop_after: int | None = None
        self.seen = 0

    def look(self) -> Look:
        started, ended, reason = self.looks[min(self.seen, len(self.looks) - 1)]
        self.seen += 1
        if self.stop_after is not None and self.seen >= self.stop_after:
            self.stopping = True
        return Look(started, ended, reason)

    def pending(self, look: Look, waited: float) -> Pending | None:
        if look.doc is None:
            return None
        return Pending(PendingKind.RESOURCES, f"waiting: {look.doc}", holders=("job 1",))

    def started(self, look: Look) -> Started:
        return Started(node="gpu-a")

    def output(self, look: Look) -> Output:
        return Output(self.ctx.said)

    def ended(self, look: Look) -> TaskEnd:
        return TaskEnd(TaskState.EXITED, 0)

    def stopped(self) -> TaskEnd:
        return STOPPED


def no_wait(elapsed: float) -> float:
    return 0.0


def test_pending_then_running_then_ended_is_reported_in_order() -> None:
    ctx = Recorder()
    job = Script(
        [
            (False, False, None),
            (False, False, "Resources"),
            (False, False, "Resources"),
            (False, False, "Priority"),
            (True, False, None),
            (True, False, None),
            (True, True, None),
        ],
        ctx,
    )
    starts: list[Look] = []
    end = follow(job, ctx, on_start=starts.append, interval=no_wait)
    assert end == TaskEnd(TaskState.EXITED, 0)
    assert ctx.said == [
        ("waiting", PendingKind.RESOURCES, "waiting: Resources"),  # said once, not twice
        ("waiting", PendingKind.RESOURCES, "waiting: Priority"),
        ("started", "gpu-a"),
        "output live",
        "output polled",  # at each look while it runs
        "output polled",
        ("output finished", True),
    ]
    assert [look.started for look in starts] == [True]


def test_a_task_that_ended_before_the_first_look_started_and_its_output_is_read_whole() -> None:
    ctx = Recorder()
    end = follow(Script([(True, True, None)], ctx), ctx, interval=no_wait)
    assert end == TaskEnd(TaskState.EXITED, 0)
    # Never followed live: the output is read once, complete.
    assert ctx.said == [("started", "gpu-a"), ("output finished", True)]


def test_a_stopped_task_ends_as_stopped_and_its_output_is_closed() -> None:
    ctx = Recorder()
    job = Script([(True, False, None)], ctx)
    job.stop_after = 2
    assert follow(job, ctx, interval=no_wait) == STOPPED
    assert ctx.said == [
        ("started", "gpu-a"),
        "output live",
        "output polled",
        "output polled",
        ("output finished", False),
    ]


def test_a_failing_look_closes_the_output_and_passes_through() -> None:
    ctx = Recorder()
    job = Script([(True, False, None)], ctx)
    calls = 0

    def look() -> Look:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise ConnectionError("the scheduler is gone")
        return Look(True, False)

    job.look = look  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        follow(job, ctx, interval=no_wait)
    assert ctx.said[-1] == ("output finished", False)


def test_polls_are_fast_at_first_then_slow_down_to_the_maximum() -> None:
    assert poll_interval(0.0) == POLL_FIRST
    assert poll_interval(POLL_FAST - 0.01) == POLL_FIRST
    assert POLL_FIRST < poll_interval(POLL_FAST + 1) < POLL_MAX
    assert poll_interval(3600) == POLL_MAX


def test_a_look_without_an_answer_says_nothing_and_the_loop_looks_again() -> None:
    ctx = Recorder()
    job = Script([(False, False, "Resources"), (True, True, None)], ctx)
    answers: list[Look | None] = [None, None, Look(False, False, "Resources"), None]
    scripted = job.look

    def look() -> Look | None:
        return answers.pop(0) if answers else scripted()

    job.look = look  # type: ignore[method-assign]
    assert follow(job, ctx, interval=no_wait) == TaskEnd(TaskState.EXITED, 0)
    assert ctx.said == [
        ("waiting", PendingKind.RESOURCES, "waiting: Resources"),
        ("started", "gpu-a"),
        ("output finished", True),
    ]


def test_an_end_said_while_pending_ends_the_task_at_once() -> None:
    ctx = Recorder()
    job = Script([(False, False, "Resources"), (True, True, None)], ctx)
    refused = TaskEnd(TaskState.KILLED, 3, "--no-wait: cancelled")
    job.pending = lambda look, waited: refused  # type: ignore[method-assign]
    assert follow(job, ctx, interval=no_wait) == refused
    assert job.seen == 1
    assert ctx.said == []


class Requeued(Script):
    def ended(self, look: Look) -> TaskEnd:
        if not look.started:
            return TaskEnd(TaskState.INFRASTRUCTURE, 1, "requeued after it started")
        return TaskEnd(TaskState.EXITED, 0)


def test_a_task_put_back_in_the_queue_after_it_started_ends_as_its_job_says() -> None:
    ctx = Recorder()
    job = Requeued([(True, False, None), (False, False, "Resources"), (True, True, None)], ctx)
    end = follow(job, ctx, interval=no_wait)
    assert end == TaskEnd(TaskState.INFRASTRUCTURE, 1, "requeued after it started")
    # its output so far completed, never followed twice; no "waiting" said for the requeue
    assert ctx.said == [
        ("started", "gpu-a"),
        "output live",
        "output polled",
        ("output finished", True),
    ]
