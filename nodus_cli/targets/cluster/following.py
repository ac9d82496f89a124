"""Following a task a cluster's scheduler runs: pending, then running, then its end.

Contract: :func:`follow` polls the scheduler's state of one submitted task (a
:class:`Job`'s :meth:`~Job.look`) until it ends, and reports through the driver's
context: while the scheduler keeps it pending, why (a :class:`~nodus_cli.targets.base.
Pending`, said again only when it changes; the run is ``queued``); once it starts, where
and at what price (``started``), and its output, followed until the end; at its end, how
it ended (a :class:`~nodus_cli.targets.base.TaskEnd`). A task nodus stops ends as the job
says (:meth:`Job.stopped`), at the next look. How often it looks is
:func:`poll_interval`'s: often at first (a short job may end before a slower poll would
first look, and a look is one cheap call; benchmarks/README.md), then less.

What a target may add at a look, each optional:

- :meth:`Job.look` returns None when the scheduler did not answer this time: nothing is
  said, and the loop looks again at the next poll (the job decides how long that may go
  on; raising ends the following);
- :meth:`Job.pending` returns a ``TaskEnd`` to end a task that must not wait on (the job
  has already removed it from the scheduler: ``--no-wait``, an image the cluster cannot
  pull), returned as it is;
- a look that says not started after one that said started is a requeue (the scheduler
  put the task back in its queue after it ran): its output so far is completed and
  :meth:`Job.ended` says how that ends (it is never followed twice);
- :meth:`Output.poll` is called at each look while the task runs, for an output read at
  each look (a file); one followed in a thread of its own does nothing there.

The scheduler's own failures pass through to the caller, which knows what losing its
scheduler means for it. Why one loop: every cluster target follows its tasks the same
way; what differs (the calls, the states, the words) is its :class:`Job`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from nodus_cli.structs import struct
from nodus_cli.targets.base import Pending, Started, TaskContext, TaskEnd

__all__ = [
    "POLL_FAST",
    "POLL_FIRST",
    "POLL_MAX",
    "Job",
    "Look",
    "Output",
    "follow",
    "poll_interval",
]

#: Status polls: every POLL_FIRST seconds for the first POLL_FAST seconds (a short job may
#: end within the first of a slower poll's waits; one poll is a cheap call), then slowing to
#: POLL_MAX.
POLL_FIRST, POLL_FAST, POLL_MAX = 0.02, 2.0, 0.5


@struct(frozen=True)
class Look:
    """The scheduler's state of a task at one look: whether it has started (it may have
    ended already), whether it has ended, and the scheduler's own document of it."""

    started: bool
    ended: bool
    doc: Any = None


class Output(Protocol):
    """A task's output as it is followed: live from :meth:`start`, read on at each
    :meth:`poll`, complete at :meth:`finish` (``complete``: the task ended, so all of it
    can be read now)."""

    def start(self) -> None: ...

    def poll(self) -> None: ...

    def finish(self, complete: bool) -> None: ...


class Job(Protocol):
    """A submitted task as its target sees it: what :func:`follow` asks of it."""

    @property
    def stopping(self) -> bool:
        """Whether nodus stops it (then :func:`follow` returns :meth:`stopped`)."""

    def look(self) -> Look | None:
        """The scheduler's state of the task now (None: it did not answer this time)."""

    def pending(self, look: Look, waited: float) -> Pending | TaskEnd | None:
        """Why it waits, ``waited`` seconds after its submission (None: nothing to say
        yet); said to the driver when it differs from what was said last. A ``TaskEnd``
        ends the task now (what it had on the scheduler already removed)."""

    def started(self, look: Look) -> Started:
        """Where it runs, on which devices, at what price (once, when it starts)."""

    def output(self, look: Look) -> Output | None:
        """Its output to follow once it started (None: none to follow)."""

    def ended(self, look: Look) -> TaskEnd:
        """How it ended, from its last look (one not started after it had: requeued)."""

    def stopped(self) -> TaskEnd:
        """How it ended when nodus stopped it."""


def follow(
    job: Job,
    ctx: TaskContext,
    *,
    on_start: Callable[[Look], None] | None = None,
    interval: Callable[[float], float] | None = None,
) -> TaskEnd:
    """Poll ``job`` until it ends: say why it is pending, when it started (then
    ``on_start``, with that look) and its output; return how it ended. ``interval``
    gives the seconds to the next look, from the seconds since submission (default
    :func:`poll_interval`)."""
    wait = interval or poll_interval
    output: Output | None = None
    said: Pending | None = None
    running = False
    submitted = time.monotonic()
    try:
        while True:
            if job.stopping:
                return job.stopped()
            look = job.look()
            if look is None:  # no answer this time: look again
                time.sleep(wait(time.monotonic() - submitted))
                continue
            if look.started and not running:
                running = True
                ctx.started(job.started(look))
                if on_start is not None:
                    on_start(look)
                output = job.output(look)
                if output is not None and not look.ended:
                    output.start()
            if look.ended or (running and not look.started):  # ended, or requeued
                if output is not None:
                    output.finish(complete=True)
                    output = None
                return job.ended(look)
            if output is not None:
                output.poll()
            if not look.started:
                pending = job.pending(look, time.monotonic() - submitted)
                if isinstance(pending, TaskEnd):
                    return pending
                if pending is not None and pending != said:
                    said = pending
                    ctx.waiting(pending)
            time.sleep(wait(time.monotonic() - submitted))
    finally:
        if output is not None:  # stopped or failed while following
            output.finish(complete=False)


def poll_interval(elapsed: float) -> float:
    """Seconds to the next status poll, ``elapsed`` seconds after the task was submitted."""
    if elapsed < POLL_FAST:
        return POLL_FIRST
    return min(POLL_MAX, POLL_FIRST + (elapsed - POLL_FAST) * 0.05)
