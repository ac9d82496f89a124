"""Lanes: threads that run jobs one after another, each job on an idle lane or a new one.

Why: a fan-out of a thousand items ran a thousand task threads, and as many removal
threads, each with a fresh connection to the engine (a kept-alive connection belongs to
its thread, see :mod:`nodus_cli.targets.docker.http`). A lane serves one job after another,
so a thread, and its connection, serve a whole fan-out's share of tasks. A job never waits
for a lane: when every lane is busy, a new one starts (how many jobs run at once is the
caller's policy, not the pool's). A lane idle for :data:`IDLE_SECONDS` ends (a library
process keeps no threads of a run that is over). Lanes are daemon threads, as the threads
they replace: a job blocked on the engine never holds up the interpreter's exit.

Not :class:`concurrent.futures.ThreadPoolExecutor`: it caps its threads, joins them at
exit, and costs an import at every start.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

__all__ = ["IDLE_SECONDS", "Lanes"]

#: A job; what it returns, when callable, runs once the lane counts itself idle: a job's
#: last word (the event that makes its caller give the next job) goes there, so that the
#: next job finds this lane idle instead of starting another. It must not raise.
Job = Callable[[], object]
#: How long a lane waits for its next job before it ends.
IDLE_SECONDS = 5.0


class Lanes:
    """Jobs on lanes named ``{name}-N``; :meth:`wait` for those given so far. A job handles
    its own errors: one that raises ends its lane (reported as a thread's uncaught
    exception is), never another job."""

    def __init__(self, name: str, idle_seconds: float = IDLE_SECONDS) -> None:
        self.name = name
        self.idle_seconds = idle_seconds
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._lanes = 0  # alive
        self._idle = 0  # alive and waiting for a job
        self._busy = 0  # jobs given and not done
        self._started = 0  # lanes ever started (their names' numbers)

    def run(self, job: Job) -> None:
        """Run ``job`` on an idle lane, or on a new one when none is."""
        with self._lock:
            self._busy += 1
            fresh = self._idle == 0
            if fresh:
                self._lanes += 1
                self._started += 1
                number = self._started
            else:
                self._idle -= 1
        if fresh:
            lane = threading.Thread(target=self._serve, name=f"{self.name}-{number}", daemon=True)
            lane.start()
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:
                    # run() takes a lane off the idle count before it gives the job: while
                    # the count is above 0, one idle lane is promised nothing and may end.
                    if self._idle > 0:
                        self._idle -= 1
                        self._lanes -= 1
                        return
                continue
            try:
                then = job()
            except BaseException:
                with self._lock:
                    self._lanes -= 1
                    self._busy -= 1
                    self._changed.notify_all()
                raise
            with self._lock:
                self._busy -= 1
                self._idle += 1
                self._changed.notify_all()
            if callable(then):
                then()

    def wait(self, timeout: float) -> bool:
        """Wait until every job given so far is done (False: some still runs after
        ``timeout`` seconds)."""
        with self._lock:
            return self._changed.wait_for(lambda: self._busy == 0, timeout)

    @property
    def threads(self) -> int:
        """The lanes alive now."""
        with self._lock:
            return self._lanes
