"""This machine's GPUs as one target's tasks claim them: at once when the machine-wide
queue allows, else after waiting their turn in it.

Contract: a task asks for a :class:`~.queue.Request` (``count`` whole GPUs, or a share of
one, among the GPUs of its planned model); :meth:`Claims.claim` returns the GPUs and the
container that holds them, made by the caller's ``create(gpus)``: the container is the
reservation, checked against the engine right after it is made (a raced creation is
withdrawn and the choice made again after a random pause; the claims of one process take
turns, so only another process's can race one). While the task waits it has a
queue entry (a container created, never started, that says where it stands to every user
of the engine) and says so through its context: its place in line, who holds what. The
rules of the line are :mod:`.queue`'s; this module is the waiting, the entries and the
words. ``--no-wait`` makes a task that would wait a refusal (:meth:`Claims.refusal`).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nodus_cli.errors import NodusError, NotRunnable
from nodus_cli.targets.base import Pending, PendingKind, Task, TaskContext, TaskEnd, TaskState
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.containers import (
    LABEL_HOME,
    LABEL_ITEM,
    LABEL_NEED,
    LABEL_OWNER,
    LABEL_PRIORITY,
    LABEL_QUEUE,
    LABEL_QUEUED_AT,
    LABEL_RUN,
    LABEL_STAGE,
    LABEL_WANTS,
    LABEL_WORKLOAD,
    container_name,
)
from nodus_cli.targets.local.owner import me
from nodus_cli.text import ordinal, plural
from nodus_cli.workload.model import DEFAULT_PRIORITY

# The queue's rules (.queue) are loaded by the first task that wants a GPU: a CPU run's
# start-up does not pay for them.
if TYPE_CHECKING:
    from nodus_cli.hardware.smi import LocalGpu
    from nodus_cli.targets.local.queue import Ledger, Picture, Request, Waiter
    from nodus_cli.workload import Requirements

__all__ = ["QUEUE_POLL_SECONDS", "Claims", "Ended", "label", "lost"]

#: How often a queued task looks again when no engine event woke it (seconds).
QUEUE_POLL_SECONDS = 2.0


class Ended(Exception):
    """A task ended before its container ran (carried out of nested helpers)."""

    def __init__(self, state: TaskState, code: int, message: str) -> None:
        super().__init__(message)
        self.end = TaskEnd(state, code, message)


#: Held while a task of this process looks, chooses, creates its container and looks again.
_CLAIMING = threading.Lock()


class Claims:
    """The GPUs of this machine for the tasks of one target; ``docker`` gives the engine,
    ``gpus`` this machine's GPUs, ``home`` the NODUS_HOME its runs are recorded in."""

    def __init__(
        self,
        docker: Callable[[], engine.Engine],
        gpus: Callable[[], list[LocalGpu]],
        home: str,
    ) -> None:
        self._docker = docker
        self._gpus = gpus
        self.home = home
        #: The run's place in the queue and whether it may wait (from its workload).
        self.priority = DEFAULT_PRIORITY
        self.queue = True
        self._ledger: Ledger | None = None
        self._nudge = _Nudge()

    # -- what a task asks -------------------------------------------------------------

    @staticmethod
    def request(
        matching: Sequence[LocalGpu], req: Requirements, prefer: tuple[str, ...] = ()
    ) -> Request:
        """What a task of requirements ``req`` asks of the ``matching`` GPUs."""
        from nodus_cli.targets.local.queue import Request

        candidates = tuple(g.uuid for g in sorted(matching, key=lambda g: g.index))
        if req.share_gpu and req.peak_memory_gb:
            return Request(candidates, 1, req.peak_memory_gb, prefer)
        return Request(candidates, req.gpu_count, None, prefer)

    @staticmethod
    def wants(model: str | None, request: Request) -> str:
        """``2x L4`` (written with a multiplication sign), or ``10 GB of one L4 (shared)``."""
        if request.share_gb is not None:
            return f"{request.share_gb:g} GB of one {model} (shared)"
        return f"{request.count}× {model}"

    # -- the engine's picture -----------------------------------------------------------

    def ledger(self) -> Ledger:
        if self._ledger is None:
            from nodus_cli.targets.local.queue import Ledger

            self._ledger = Ledger(self._docker(), self._gpus())
        return self._ledger

    def picture(self) -> Picture | None:
        """Who holds what and who waits now; None when the engine cannot say."""
        try:
            return self.ledger().read()
        except (engine.EngineFailure, NodusError):  # no engine, or none at that address
            return None

    def fits(self, picture: Picture, request: Request, priority: int) -> bool:
        """Whether a newcomer of ``priority`` could take ``request`` now, on ``picture``."""
        return picture.choose(request, self.ledger().memory_gb, None, priority) is not None

    # -- words ------------------------------------------------------------------------

    def holding(self, request: Request, picture: Picture) -> str:
        """``held by run A since 12:01:02 UTC``: who holds the GPUs a request can use."""
        from nodus_cli.targets.local.queue import holder_words

        return holder_words(picture.holders_of(request.candidates), self.home)

    def refusal(
        self, stage: str, model: str | None, request: Request, picture: Picture
    ) -> NotRunnable:
        """``--no-wait``: the GPUs a stage needs are held (or others wait for them first)."""
        ahead = picture.ahead_for(request, self.priority)
        waits = f"; {plural(len(ahead), 'task')} of other runs wait for them first" if ahead else ""
        holders = picture.holders_of(request.candidates)
        others = [h for h in holders if h.run and h.home and h.home != self.home]
        stop = "`nodus stop RUN_ID`"
        if others:
            stop = f"`NODUS_HOME={others[0].home} nodus stop {others[0].run}`"
        hint = "run without --no-wait to wait for them (queued)"
        if any(h.run is None and h.home for h in holders):
            hint += ": a warm worker gives its GPUs back as soon as a run waits for them"
        return NotRunnable(
            f"stage {stage!r} needs {self.wants(model, request)}; "
            f"{self.holding(request, picture)}{waits}",
            hint=f"{hint}; or stop the run that holds them with {stop}",
        )

    def held_note(
        self, model: str | None, request: Request, picture: Picture, priority: int
    ) -> str:
        """A plan's note on a stage whose GPUs are held now."""
        ahead = picture.ahead_for(request, priority)
        line = f", behind {plural(len(ahead), 'waiting task')}" if ahead else ""
        return (
            f"the {self.wants(model, request)} it needs are {self.holding(request, picture)}: "
            f"`nodus run` waits for them (queued{line}); --no-wait refuses at once instead"
        )

    def entry_words(self, container_id: str, picture: Picture | None) -> str:
        """``queued, 2nd in line (held by run A since ...)`` for a queue entry."""
        waiters = picture.waiters if picture is not None else ()
        entry = next((w for w in waiters if w.id == container_id), None)
        if picture is None or entry is None:
            return "queued"
        from nodus_cli.targets.local.queue import holder_words

        holders = holder_words(picture.holders_of(entry.wants), self.home)
        return f"queued, {ordinal(picture.place(entry))} in line ({holders})"

    # -- the claim ----------------------------------------------------------------------

    def claim(
        self,
        task: Task,
        ctx: TaskContext,
        request: Request,
        model: str | None,
        create: Callable[[tuple[str, ...]], str],
        stopped: Callable[[], bool],
    ) -> tuple[tuple[str, ...], str]:
        """The GPUs for ``task`` and the container that holds them (``create`` makes it
        with those GPUs): at once when the queue allows, else once its turn has come."""
        ledger = self.ledger()
        entry: Waiter | None = None
        shown: str | None = None
        clashes = 0
        try:
            while True:
                if stopped():
                    raise Ended(TaskState.STOPPED, 143, "stopped by nodus while queued")
                # This process's claims one at a time: its own tasks never clash with each
                # other (a clash costs a withdrawn container and a pause); those of other
                # processes are what the second look is for.
                with _CLAIMING:
                    picture = self._read(ledger)
                    if entry is not None:
                        entry = next((w for w in picture.waiters if w.id == entry.id), entry)
                    key = entry.key if entry is not None else None
                    chosen = picture.choose(request, ledger.memory_gb, key, self.priority)
                    if chosen is not None:
                        cid = create(chosen)
                        clash = self._read(ledger).conflicts(
                            cid, chosen, request.share_gb, ledger.memory_gb
                        )
                        if not clash:
                            return chosen, cid
                        self.withdraw(cid)
                if chosen is not None:
                    clashes += 1
                    time.sleep(random.uniform(0.01, 0.05) * min(clashes, 20))
                    continue
                if not self.queue:
                    raise self.refusal(task.stage.name, model, request, picture)
                if entry is None:
                    entry = self._enqueue(task, request)
                    continue
                place = picture.place(entry)
                words = (
                    f"{label(task)}: queued, {ordinal(place)} in line for "
                    f"{self.wants(model, request)} ({self.holding(request, picture)})"
                )
                if words != shown:
                    holders = picture.holders_of(request.candidates)
                    ctx.waiting(
                        Pending(
                            PendingKind.RESOURCES,
                            words,
                            holders=tuple(h.words(self.home) for h in holders),
                            position=place,
                        )
                    )
                    shown = words
                self._nudge.wait(self._docker(), QUEUE_POLL_SECONDS)
        finally:
            if entry is not None:
                self.withdraw(entry.id)

    def _read(self, ledger: Ledger) -> Picture:
        try:
            picture = ledger.read()
        except engine.EngineFailure as exc:
            raise Ended(TaskState.INFRASTRUCTURE, 1, lost(exc)) from None
        if picture.orphans:
            ledger.reclaim(picture)  # what dead owners left (from any NODUS_HOME)
        return picture

    def withdraw(self, cid: str) -> None:
        with contextlib.suppress(engine.EngineFailure):
            self._docker().remove(cid)

    def _enqueue(self, task: Task, request: Request) -> Waiter:
        """The task's queue entry: a container that is created, never started, holds
        nothing, and says to every user of the engine where the task stands in line."""
        from nodus_cli.targets.local.queue import Waiter

        name = f"{container_name(task)}-queued"[:63]
        labels = {
            LABEL_RUN: task.run_id,
            LABEL_STAGE: task.stage.name,
            LABEL_WORKLOAD: task.workload[:200],
            LABEL_QUEUE: task.key,
            LABEL_PRIORITY: str(self.priority),
            LABEL_QUEUED_AT: str(time.time_ns()),
            LABEL_WANTS: ",".join(request.candidates),
            LABEL_NEED: request.need,
            LABEL_OWNER: me().label,
            LABEL_HOME: self.home,
        }
        if task.item is not None:
            labels[LABEL_ITEM] = str(task.item.index)
        body = {
            "Image": task.stage.image,
            "Cmd": ["true"],
            "Entrypoint": [""],
            "Labels": labels,
            "HostConfig": {"NetworkMode": "none"},
        }
        eng = self._docker()
        for attempt in (1, 2):
            try:
                cid = eng.create(name, body)
                break
            except engine.EngineError as exc:
                if exc.status == 409 and attempt == 1:  # an entry an earlier attempt left
                    self.withdraw(name)
                    continue
                raise Ended(
                    TaskState.INFRASTRUCTURE, 1, f"the engine refused the queue entry: {exc}"
                ) from None
            except engine.EngineFailure as exc:
                raise Ended(TaskState.INFRASTRUCTURE, 1, lost(exc)) from None
        return Waiter(
            cid,
            name,
            task.run_id,
            task.key,
            self.priority,
            int(labels[LABEL_QUEUED_AT]),
            frozenset(request.candidates),
            request.need,
            self.home,
            me(),
        )

    def poke(self) -> None:
        """Wake the tasks waiting in line (one of them was stopped)."""
        self._nudge.poke()

    def close(self) -> None:
        self._nudge.close()
        self._ledger = None


def label(task: Task) -> str:
    if task.item is None:
        return f"stage {task.stage.name}"
    return f"stage {task.stage.name} item {task.item.index}"


def lost(exc: BaseException) -> str:
    reason = exc.reason if isinstance(exc, engine.EngineUnreachable) else str(exc)
    return f"lost the Docker engine ({reason})"


class _Nudge:
    """Wakes tasks waiting in the queue when the engine says a container ended or went
    away (or one of this process's tasks is stopped); else they look again every few
    seconds. One event stream per target, opened by the first task that waits."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._stream: Any = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def wait(self, eng: engine.Engine, timeout: float) -> None:
        with self._changed:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._watch, args=(eng,), name="nodus-queue-events", daemon=True
                )
                self._thread.start()
            self._changed.wait(timeout)

    def poke(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _watch(self, eng: engine.Engine) -> None:
        try:
            self._stream = eng.watch({"type": ["container"], "event": ["die", "destroy"]})
            for _ in self._stream.documents():
                self.poke()
        except (engine.EngineFailure, OSError, ValueError):
            pass  # the waiting tasks still look every QUEUE_POLL_SECONDS
        finally:
            with self._changed:
                self._thread = None

    def close(self) -> None:
        self._closed = True
        stream, self._stream = self._stream, None
        if stream is not None:
            with contextlib.suppress(OSError, engine.EngineFailure):
                stream.close()
        self.poke()
