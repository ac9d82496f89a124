"""Warm workers for single calls: a Python function call right after another of its kind
starts without a new container (issue 32).

A single call (``f(x)``, ``f.options(...)(x)``, ``client.run(fn=f, ...)``) is its own run,
with its own record, log, result, budget and stop, as any. On the local engine its task
goes to an idle warm worker of the same kind when one waits: kept by this process across
runs, for the same ``NODUS_HOME``, image, requirements, environment and mounts
(:func:`_kind`). Only where the call runs changes; the run's log says which worker ran
it (``stage main: on warm worker warm-PID-N``).

- **The worker** is a container of the warm-worker protocol (:mod:`.workers`, the table
  in :mod:`nodus_cli.functions.bootstrap`), its own folder ``NODUS_HOME/calls/warm-PID-N``
  mounted where a call's folder is. While a call runs, the call's folder is moved into the
  worker's (a rename, on the same filesystem) and back once it ended: the worker sees the
  call it runs and no other; the run's own work folder goes with it (``NODUS_WORK_DIR``
  names it), so what a call leaves there is the run's, as on a container of its own. The
  worker's working directory, ``/nodus/work``, is a scratch folder of its own.
- **Which calls**: those that ``keep_warm`` (seconds, > 0), publish no port and copy no
  work folder (``output_dir``), with GPUs or without. The others get a container of their
  own, as before.
- **GPUs**: a worker of a kind that wants GPUs gets them as a task does, through the
  machine-wide queue (:meth:`workers.Host.claim`: it may wait its turn there), and its
  container holds exactly those GPUs for its life, as a map's worker's does; every call it
  runs is recorded on them (``gpus``, the price, their use sampled while the call runs).
- **A warm worker never keeps a GPU anyone waits for.** The rule: a worker gives its GPUs
  back when a queue entry (:mod:`.queue`: a task of any run, process, ``NODUS_HOME`` or
  user of the engine waiting for GPUs) can use one of the GPUs it holds (the entry's
  ``nodus.wants``), even when the waiter could take another GPU first, or share the GPU
  beside it. An idle worker ends at once (its container removed: the waiter's own watch
  of the engine sees it go); a busy one finishes its call, then ends instead of taking
  the next. Entries are containers, so the engine's events say when one comes or goes:
  one thread of this process (:class:`_Watcher`), running while it has workers with GPUs,
  follows those events (filtered by the entries' label), reads the queue once per event,
  and looks again every :data:`~.claims.QUEUE_POLL_SECONDS` when the events fail.
  A run that may not wait (``--no-wait``, ``queue=False``) makes no entry: an idle warm
  worker that holds its GPUs refuses it, as any holder does.
- **How many**: at most as many workers of a kind as the machine has slots for it (its
  CPUs over ``cpu``, as a map's workers; for a kind with GPUs, the allocations its GPUs of
  the planned model hold, :meth:`workers.Host.gpu_slots`); a burst of calls beyond that
  waits in this process for the next worker that is free, as a map's items do, and makes
  no queue entry that would send its own workers away.
- **How long**: a worker waits ``keep_warm`` seconds idle for the next call, then ends;
  those of a ``NODUS_HOME`` end when its ``Client`` closes (:func:`close`), all of them
  when the process exits. A caller killed hard closes the FIFOs: its idle workers read the
  end of their requests and exit, and the engine removes them (auto-remove); one busy with
  a call of a killed caller is removed by the reconcile of that call's run (:func:`sweep`).
  One that holds GPUs is anyone's to remove once its caller is gone, as a task's
  container is (:mod:`.queue`: its owner label).
- **A worker that dies** fails only its current call (out of memory with the limit named,
  killed, exited N), and the next call of its kind starts a new one.

State survives between the calls a worker runs (module globals, the working directory,
threads), as in a map's workers: a function that must start clean passes
``keep_warm=0``.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_cli.errors import NodusError
from nodus_cli.functions import bootstrap, runtime
from nodus_cli.functions.layout import CALL_IN_CONTAINER, CALLS, RUNTIME_IN_CONTAINER, CallFolder
from nodus_cli.records import process_alive
from nodus_cli.structs import replace, struct
from nodus_cli.targets import calls
from nodus_cli.targets.base import Task, TaskContext, TaskEnd, TaskState
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.containers import (
    LABEL_HOME,
    LABEL_ITEM,
    LABEL_OWNER,
    LABEL_QUEUE,
    LABEL_RUN,
    LABEL_STAGE,
    LABEL_WORKLOAD,
    WORK_DIR_IN_CONTAINER,
    ContainerSpec,
)
from nodus_cli.targets.local import calls as local_calls
from nodus_cli.targets.local import machine, queue, workers
from nodus_cli.targets.local.claims import QUEUE_POLL_SECONDS
from nodus_cli.targets.local.owner import Owner
from nodus_cli.workload import Mount

if TYPE_CHECKING:
    from nodus_cli.workload import Stage

__all__ = ["LABEL_WARM", "PREFIX", "close", "eligible", "run", "sweep"]

#: On a warm worker's container: its folder's name under ``NODUS_HOME/calls``.
LABEL_WARM = "nodus.warm"
#: A warm worker's folder is ``PREFIX + PID-N`` under ``NODUS_HOME/calls``.
PREFIX = "warm-"
#: The run's work folder's name inside the call's folder while a warm worker runs it.
_RUN_WORK = "run-work"
#: How often idle workers are looked at (their time up, or dead).
_REAP_EVERY = 0.2
#: The engine's events that change who waits for GPUs: a queue entry made, one gone.
_QUEUE_EVENTS = {"type": ["container"], "event": ["create", "destroy"], "label": [LABEL_QUEUE]}
#: The worker's name within its folder (its FIFOs are ``workers/w``).
_NAME = "w"

Kind = tuple[str, str, str, tuple[tuple[str, str], ...], str]


@struct
class _Warm:
    """A warm worker of this process."""

    worker: workers.Worker
    folder: CallFolder
    kind: Kind
    host: workers.Host
    #: When it ends if no call comes (monotonic seconds), while idle.
    until: float = 0.0

    @property
    def gpus(self) -> frozenset[str]:
        """The GPUs its container holds (none for a kind that wants none)."""
        return frozenset(self.worker.started.devices)


class _Registry:
    """This process's warm workers, by kind."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.idle: dict[Kind, list[_Warm]] = {}
        #: Workers of each kind: idle, busy, or starting.
        self.count: dict[Kind, int] = {}
        self.numbers = itertools.count()
        self.reaper: threading.Thread | None = None
        #: The workers that hold GPUs (idle, busy), by id(): while there are any, the
        #: watcher follows the queue.
        self.holding: dict[int, _Warm] = {}
        #: The GPUs some queue entry can use, as the watcher last read the queue.
        self.wanted: frozenset[str] = frozenset()
        self.watcher: _Watcher | None = None

    def take(self, kind: Kind, limit: int, host: workers.Host, task: Task) -> _Warm | None:
        """An idle worker of ``kind``; None: start one (counted already). Waits while
        ``limit`` workers of the kind are busy; TaskStopped when the task is stopped."""
        with self.lock:
            while True:
                waiting = self.idle.get(kind) or []
                while waiting:
                    found = waiting.pop()
                    alive = found.worker.alive and found.worker.exit_code is None
                    if alive and not found.gpus & self.wanted:
                        return found
                    self._forget(found)
                    _retire(found)
                if self.count.get(kind, 0) < limit:
                    self.count[kind] = self.count.get(kind, 0) + 1
                    return None
                if host.stopped(task):
                    raise _Stopped
                self.lock.wait(_REAP_EVERY)

    def put_back(self, warm: _Warm, keep: float) -> None:
        """Idle again for ``keep`` seconds, or retired (dead, nothing to keep, or a queue
        entry waits for a GPU it holds)."""
        with self.lock:
            alive = warm.worker.alive and warm.worker.exit_code is None
            if alive and keep > 0 and not warm.gpus & self.wanted:
                warm.until = time.monotonic() + keep
                self.idle.setdefault(warm.kind, []).append(warm)
                self.lock.notify_all()
                self._reaping()
                return
            self._forget(warm)
        _retire(warm)

    def hold(self, warm: _Warm) -> None:
        """A new worker holds GPUs: the watcher follows the queue while it lives."""
        if not warm.gpus:
            return
        with self.lock:
            self.holding[id(warm)] = warm
            if self.watcher is None or not self.watcher.running:
                self.watcher = _Watcher(self, warm.host.docker())
                self.watcher.start()

    def waited_for(self, wanted: frozenset[str]) -> None:
        """The queue now waits for ``wanted``: idle workers holding any of them end now,
        busy ones after their call (:meth:`put_back`)."""
        with self.lock:
            self.wanted = wanted
        if wanted:
            self.end(lambda w: bool(w.gpus & wanted))

    def gave_up(self, kind: Kind) -> None:
        """A worker counted by :meth:`take` did not start."""
        with self.lock:
            self.count[kind] = max(0, self.count.get(kind, 0) - 1)
            self.lock.notify_all()

    def _forget(self, warm: _Warm) -> None:
        self.count[warm.kind] = max(0, self.count.get(warm.kind, 0) - 1)
        if self.holding.pop(id(warm), None) is not None and not self.holding:
            if self.watcher is not None:
                self.watcher.stop()
            self.watcher, self.wanted = None, frozenset()
        self.lock.notify_all()

    def _reaping(self) -> None:
        if self.reaper is None or not self.reaper.is_alive():
            self.reaper = threading.Thread(target=self._reap, name="nodus-warm", daemon=True)
            self.reaper.start()

    def _reap(self) -> None:
        """End the workers whose time is up, or that died idle."""
        while True:
            time.sleep(_REAP_EVERY)
            self.end(lambda w: w.until <= time.monotonic() or w.worker.exit_code is not None)

    def end(self, which: Callable[[_Warm], bool]) -> None:
        """End the idle workers ``which(warm)`` is true of."""
        with self.lock:
            ending = []
            for kind, waiting in self.idle.items():
                ending += [w for w in waiting if which(w)]
                self.idle[kind] = [w for w in waiting if not which(w)]
            for warm in ending:
                self._forget(warm)
        for warm in ending:
            _retire(warm, at_once=True)


class _Watcher:
    """Follows the machine-wide queue for :class:`_Registry` while its workers hold GPUs:
    the engine's events about queue entries (created, gone), and the queue read once per
    event (and every :data:`QUEUE_POLL_SECONDS` while the events fail)."""

    def __init__(self, registry: _Registry, eng: engine.Engine) -> None:
        self.registry = registry
        self.engine = eng
        self.ledger = queue.Ledger(eng, ())
        self.running = True
        self.stream: Any = None
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="nodus-warm-gpus", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """End the thread (from any thread): its stream is cut."""
        with self.lock:
            self.running = False
            stream, self.stream = self.stream, None
        if stream is not None:
            with contextlib.suppress(OSError, engine.EngineFailure):
                stream.close()

    def _run(self) -> None:
        while self.running:
            self._follow()
            if self.running:  # the events failed (or the engine is away): look again soon
                time.sleep(QUEUE_POLL_SECONDS)

    def _follow(self) -> None:
        """Look at the queue now and at each event, until the stream ends or is cut."""
        try:
            stream = self.engine.watch(_QUEUE_EVENTS)
        except (engine.EngineFailure, OSError):
            stream = None
        with self.lock:
            stopped = not self.running
            if not stopped:
                self.stream = stream
        if stopped:
            if stream is not None:
                with contextlib.suppress(OSError, engine.EngineFailure):
                    stream.close()
            return
        # Read after the stream is open: an entry made meanwhile is seen either way.
        self._look()
        try:
            if stream is not None:
                for _ in stream.documents():
                    if not self.running:
                        return
                    self._look()
        except (engine.EngineFailure, OSError, ValueError):
            pass
        finally:
            if stream is not None:
                with contextlib.suppress(OSError, engine.EngineFailure):
                    stream.close()

    def _look(self) -> None:
        try:
            picture = self.ledger.read()
        except (engine.EngineFailure, NodusError):
            return  # the next event, or the next look, tells
        wanted: frozenset[str] = frozenset().union(*(w.wants for w in picture.waiters))
        if self.running:
            self.registry.waited_for(wanted)


_REGISTRY = _Registry()


class _Stopped(Exception):
    """The task was stopped while it waited for a worker."""


def eligible(task: Task, copies_work: bool) -> bool:
    """Whether ``task`` runs on a warm worker (see the module's docstring)."""
    stage = task.stage
    fc = stage.function
    return (
        fc is not None
        and fc.keep_warm > 0
        and task.item is None
        and not stage.ports
        and not copies_work
    )


def run(host: workers.Host, task: Task, ctx: TaskContext) -> TaskEnd:
    """Run the single call ``task`` on a warm worker of its kind: one waiting idle, else a
    new one; and say how it ended."""
    stage = task.stage
    assert stage.function is not None
    home = host.store.root
    kind = _kind(home, task)
    try:
        warm = _REGISTRY.take(kind, _slots(host, stage), host, task)
    except _Stopped:
        return TaskEnd(TaskState.STOPPED, 143, "stopped by nodus before it started")
    if warm is None:
        found = _start(host, task, ctx, kind)
        if isinstance(found, TaskEnd):
            _REGISTRY.gave_up(kind)
            return found
        warm = found
        _REGISTRY.hold(warm)
    else:
        devices = warm.worker.started.devices
        on = f" on {', '.join(devices)}" if devices else ""
        ctx.say(f"stage {stage.name}: on warm worker {warm.folder.call} ({stage.image}{on})")
        ctx.submitted()
        ctx.started(host.started_on(stage, devices))
    end = _call(host, warm, task, ctx)
    own = calls.folder_of(task, home)
    return calls.ended(task, end, own.item(calls.item_of(task)))


def _call(host: workers.Host, warm: _Warm, task: Task, ctx: TaskContext) -> TaskEnd:
    """The call on ``warm``: its folder moved into the worker's while it runs."""
    worker = warm.worker
    assert task.stage.function is not None
    host.attach(task, worker.cid)
    own = calls.folder_of(task, host.store.root)
    inside = warm.folder.path / own.call
    try:
        if not worker.greeted and (refused := _greet(host, worker)) is not None:
            return refused
        if host.stopped(task):
            return TaskEnd(TaskState.STOPPED, 143, "stopped by nodus before it started")
        os.rename(own.path, inside)
        try:
            with _lent_work(host.store.work_dir(task.run_id), inside / _RUN_WORK) as lent:
                where = f"{CALL_IN_CONTAINER}/{own.call}/{_RUN_WORK}" if lent else None
                env = task.environment(where or WORK_DIR_IN_CONTAINER)
                item = inside / "items" / str(calls.item_of(task))
                return host.measured(
                    task,
                    ctx,
                    worker.started.devices,
                    lambda: workers.call(host, worker, task, ctx, item, env, {"call": own.call}),
                )
        finally:
            os.rename(inside, own.path)
    finally:
        host.detach(task)
        _REGISTRY.put_back(warm, task.stage.function.keep_warm)


@contextlib.contextmanager
def _lent_work(work: Path, inside: Path) -> Iterator[bool]:
    """The run's own work folder, moved where the worker sees it (inside the call's folder,
    which its container mounts) for the call, and back after it: ``NODUS_WORK_DIR`` is
    the run's, as on a container of its own, so what the call leaves there is kept or
    removed with the run, never seen by the next call. False when the run has none."""
    if not work.is_dir():
        yield False
        return
    os.rename(work, inside)
    try:
        yield True
    finally:
        os.rename(inside, work)


def _greet(host: workers.Host, worker: workers.Worker) -> TaskEnd | None:
    """Wait for a new worker's hello: None when it speaks this nodus's protocol (or died
    first: the call then says how); else how the call ends."""
    line = None
    while line is None and worker.alive:
        line = workers.next_reply(worker, _REAP_EVERY)
    if line is None:
        return None
    words = workers.refusal(line, runtime.ensure(host.store.root))
    if words is None:
        worker.greeted = True
        return None
    worker.alive = False  # retired when put back
    return TaskEnd(TaskState.CANNOT_START, bootstrap.EXIT_RUNTIME, words)


def _start(host: workers.Host, task: Task, ctx: TaskContext, kind: Kind) -> _Warm | TaskEnd:
    """A new warm worker for ``task``, started (with ``python``, else ``python3``)."""
    stage = task.stage
    home = host.store.root
    _sweep_folders(home)  # a killed caller's idle workers left their folders
    folder = CallFolder(home, f"{PREFIX}{os.getpid()}-{next(_REGISTRY.numbers)}")
    folder.create()
    scratch = folder.path / "work"
    scratch.mkdir(exist_ok=True)
    os.chmod(scratch, 0o777)
    ctx.say(f"stage {stage.name}: starting {stage.image} as warm worker {folder.call}")
    python = host.interpreters.get(stage.image, local_calls.INTERPRETER)
    found = _started(host, task, ctx, folder, python)
    if workers.missing(found) and python != "python":
        host.interpreters[stage.image] = "python"
        found = _started(host, task, ctx, folder, "python")
    if isinstance(found, TaskEnd):
        folder.remove()
        if workers.missing(found):
            return replace(found, message=calls.no_python(task))
        return found
    return _Warm(found, folder, kind, host)


def _started(
    host: workers.Host, task: Task, ctx: TaskContext, folder: CallFolder, python: str
) -> workers.Worker | TaskEnd:
    fifos = folder.create_worker(_NAME)
    return workers.start(
        host, task, ctx, fifos, folder.call, lambda u: _spec(host, task, u, folder, python)
    )


def _spec(
    host: workers.Host, task: Task, uuids: tuple[str, ...], folder: CallFolder, python: str
) -> ContainerSpec:
    """The worker's container: the call's (limits, environment, mounts), with no run's
    labels (it outlives the run), its folder mounted where a call's is, and removed by
    the engine when it ends."""
    spec = host.container_spec(task, uuids)
    gone = (LABEL_RUN, LABEL_STAGE, LABEL_ITEM, LABEL_WORKLOAD)
    labels = {k: v for k, v in spec.labels.items() if k not in gone}
    labels[LABEL_WARM] = folder.call
    argv = runtime.worker_command(python, RUNTIME_IN_CONTAINER, CALL_IN_CONTAINER, _NAME)
    rt = runtime.ensure(host.store.root)
    return replace(
        spec,
        name=f"nodus-{folder.call}" + ("" if python == local_calls.INTERPRETER else "-py"),
        labels=labels,
        entrypoint=argv,
        command=[],
        work_dir_host=str(folder.path / "work"),
        mounts=(
            *spec.mounts,
            Mount(str(rt), RUNTIME_IN_CONTAINER, read_only=True),
            Mount(str(folder.path), CALL_IN_CONTAINER, read_only=False),
        ),
        auto_remove=True,
    )


def _kind(home: Path, task: Task) -> Kind:
    """What a worker must share with a call to run it."""
    stage = task.stage
    return (
        str(home),
        stage.image,
        repr(stage.requirements),
        tuple(sorted(task.env.items())),
        repr(stage.mounts),
    )


def _slots(host: workers.Host, stage: Stage) -> int:
    """How many workers of a kind at once: the CPU slots of this machine for it, and for a
    kind with GPUs no more than its GPUs hold."""
    cpu = stage.requirements.cpu
    slots = max(1, int(machine.cpu_count() // cpu)) if cpu else max(1, int(machine.cpu_count()))
    if stage.requirements.wants_gpu:
        slots = min(slots, host.gpu_slots(stage))
    return slots


def _retire(warm: _Warm, at_once: bool = False) -> None:
    """End a worker: it reads the end of its requests and exits; its container and its
    folder go (``at_once``: here, else by the target's removals)."""
    worker = warm.worker
    worker.close_requests()
    worker.close_replies()
    if at_once:
        with contextlib.suppress(engine.EngineFailure, NodusError):
            warm.host.docker().remove(worker.cid)
    else:
        warm.host.remove_later(worker.cid)
    warm.folder.remove()


def close(home: Path) -> None:
    """End the idle warm workers of ``home`` (the ``Client`` closes)."""
    _REGISTRY.end(lambda w: w.folder.home == home)


@atexit.register
def _at_exit() -> None:
    _REGISTRY.end(lambda w: True)


def sweep(eng: engine.Engine, home: Path) -> list[str]:
    """Remove the warm workers of ``home`` whose process is gone (killed hard while
    they ran a call) and their folders: what was removed."""
    removed: list[str] = []
    found = eng.containers({"label": [LABEL_WARM, f"{LABEL_HOME}={home}"]})
    for c in found:
        labels = c.get("Labels") or {}
        owner = Owner.parse(labels.get(LABEL_OWNER))
        if owner is None or not owner.gone:
            continue
        with contextlib.suppress(engine.EngineFailure):
            eng.remove(str(c["Id"]))
            removed.append(f"warm worker {labels.get(LABEL_WARM)}")
    _sweep_folders(home)
    return removed


def _sweep_folders(home: Path) -> None:
    """Remove the warm workers' folders of processes that are gone."""
    for folder in (home / CALLS).glob(f"{PREFIX}*"):
        pid = folder.name[len(PREFIX) :].partition("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid), None):
            shutil.rmtree(folder, ignore_errors=True)
