"""Warm workers: the items of a map of a Python function, in long-lived containers.

A map of 1,000 small calls would spend most of its time starting 1,000 containers. On the
local engine the items of a function map go to a pool of worker containers instead, one
per allocation (a GPU, a shared-GPU slot sized by memory, or a CPU slot: each got through
the machine-wide queue, :meth:`Host.claim`, as any task's), each taking the next
item when it finishes one. The driver still runs one task per item (records, retries,
budget, the item's own log lines are as for any fan-out stage); only where a task runs
changes. A map of 1,000 small calls makes as many containers as run at once.

- **One item at a time per worker**, in the warm-worker protocol, whose table and version
  are the runtime's (:mod:`nodus_cli.functions.bootstrap`): the worker says ``hello``
  with its version first (another version than this nodus's is refused, saying so, and
  every item of the stage fails with those words); the caller writes a ``call`` into the
  worker's ``requests`` FIFO; the runtime answers ``done`` on ``replies``. Each FIFO has
  one writer: that the container ended comes from the engine, through a pipe of the
  caller's own (:meth:`Pool._watch` writes there, never into ``replies``). The values
  pass through the item's folder, as for one container per call; the item's stdout and
  stderr go to files there, followed while it runs and shown as that item's output
  (``nodus logs --item N``). They are regular files, which a read never waits on: they
  are looked at every :data:`_FOLLOW_EVERY` seconds while no reply comes (a FIFO would
  stall a function that prints while its caller is slow, and kill it with the caller).
- **A worker keeps its allocation's exact devices for its life** (its container holds
  them, as a task's does), and the requirements' memory limit.
- **A worker that dies fails only its current item**, with the reason (out of memory with
  the limit named, killed, exited N), and is replaced when the next item comes.
- **Workers go when the stage has no more items for them** (each retires as it finishes
  once every item has been handed out), and with the run (:meth:`Pool.close`, and
  ``cleanup`` removes every container labelled with the run). A caller that dies closes
  the FIFOs: its workers read the end of their requests and exit.
- An image that cannot run the runtime (no Python) fails every item at once, saying so,
  without a container per item.

State survives between the calls a worker runs (module globals, the working directory,
threads): a function that must start clean belongs in ``client.run(..., keep_warm=0)``.

The warm workers of single calls (:mod:`.warm`) are started, called and watched by the
same functions (:func:`start`, :func:`call`, :func:`watch`).

The pool drives its target through :class:`Host`, the small public surface
:class:`~.target.LocalTarget` offers its workers (claim, create, withdraw, attach...):
this module never imports the target, which creates the pools.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nodus_cli.functions import bootstrap, runtime
from nodus_cli.functions.layout import CALL_IN_CONTAINER, RUNTIME_IN_CONTAINER, CallFolder
from nodus_cli.structs import field, replace, struct
from nodus_cli.targets import calls
from nodus_cli.targets.base import OutputLines, Started, Task, TaskContext, TaskEnd, TaskState
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.containers import LABEL_ITEM, ContainerSpec, container_name
from nodus_cli.targets.local import calls as local_calls
from nodus_cli.targets.local import endings
from nodus_cli.targets.local.claims import Ended, lost

if TYPE_CHECKING:
    from nodus_cli.records import RunStore
    from nodus_cli.workload import Stage

__all__ = [
    "LABEL_WORKER",
    "Host",
    "Output",
    "Pool",
    "Worker",
    "call",
    "missing",
    "next_reply",
    "refusal",
    "start",
    "watch",
]

#: On a worker container: its name within the map (``w0``, ``w1`` ...).
LABEL_WORKER = "nodus.worker"
#: The variables that differ per item, set by the runtime for each call.
_ITEM_ENV = ("NODUS_ITEM", "NODUS_ITEM_INDEX", "NODUS_ITEM_COUNT")
#: How often the output of an item that runs is looked at (seconds).
_FOLLOW_EVERY = 0.1


class Host(Protocol):
    """What a pool needs of its target (:class:`~.target.LocalTarget`)."""

    store: RunStore
    #: The interpreter found per image (``python3``, else ``python``).
    interpreters: dict[str, str]

    def docker(self) -> engine.Engine: ...

    def container_spec(self, task: Task, uuids: tuple[str, ...]) -> ContainerSpec: ...

    def claim(
        self, task: Task, ctx: TaskContext, create: Callable[[tuple[str, ...]], str]
    ) -> tuple[tuple[str, ...], str]: ...

    def create_container(self, spec: ContainerSpec, task: Task) -> str: ...

    def withdraw(self, cid: str) -> None: ...

    def started_on(self, stage: Stage, uuids: tuple[str, ...]) -> Started: ...

    def attach(self, task: Task, cid: str) -> None: ...

    def detach(self, task: Task) -> None: ...

    def stopped(self, task: Task) -> bool: ...

    def remove_later(self, cid: str) -> None: ...

    def gpu_slots(self, stage: Stage) -> int: ...

    def measured(
        self, task: Task, ctx: TaskContext, uuids: tuple[str, ...], body: Callable[[], TaskEnd]
    ) -> TaskEnd: ...


@struct
class Worker:
    name: str
    cid: str
    spec: ContainerSpec
    started: Started
    requests: int  # our end of the FIFOs (read-write: never blocks, never EOF)
    replies: int
    #: The watcher's own channel (a pipe): it writes there once the container has ended.
    ended: int
    watcher_end: int
    #: As the caller's reading found it: False once the end was read (every reply first).
    alive: bool = True
    greeted: bool = False
    #: Set by the watcher when the container has ended.
    exit_code: int | None = None
    pending: bytes = b""
    #: Each end is closed once (a number closed twice may be someone else's by then).
    ends: threading.Lock = field(default_factory=threading.Lock)

    def close_requests(self) -> None:
        """Our end of the requests: the worker reads their end, and exits."""
        with self.ends:
            fd, self.requests = self.requests, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close_replies(self) -> None:
        """What we read: the replies, and the watcher's pipe (its end is the watcher's)."""
        with self.ends:
            fds, self.replies, self.ended = (self.replies, self.ended), -1, -1
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    @property
    def retired(self) -> bool:
        return self.requests < 0


class Pool:
    """The workers of one function-map stage of a run."""

    def __init__(self, target: Host, task: Task) -> None:
        self.target = target
        self.stage = task.stage
        self.folder: CallFolder = calls.folder_of(task, target.store.root)
        self.count = task.item.count if task.item is not None else 1
        self.lock = threading.Lock()
        self.idle: list[Worker] = []
        self.everyone: dict[str, Worker] = {}
        self.handed: set[int] = set()
        self.numbers = itertools.count()
        #: Why no worker can serve here (an image without Python, a runtime of another
        #: protocol): every item ends so.
        self.broken: TaskEnd | None = None
        self.closed = False

    # -- one item ----------------------------------------------------------------------

    def run(self, task: Task, ctx: TaskContext) -> TaskEnd:
        assert task.item is not None
        with self.lock:
            self.handed.add(task.item.index)
            broken = self.broken
            worker = None
            while self.idle and worker is None:
                worker = self.idle.pop()
                if not worker.alive or worker.exit_code is not None:  # died idle: replaced
                    self.everyone.pop(worker.name, None)
                    self._retire(worker)
                    worker = None
        if broken is not None:
            return broken
        if worker is None:
            found = self._start(task, ctx)
            if isinstance(found, TaskEnd):
                return found
            worker = found
        else:
            ctx.submitted()
            ctx.started(worker.started)
        self.target.attach(task, worker.cid)
        try:
            end = self._call(worker, task, ctx)
        finally:
            self.target.detach(task)
            self._put_back(worker)
        item = self.folder.item(task.item.index)
        return calls.ended(task, end, item)

    def _call(self, worker: Worker, task: Task, ctx: TaskContext) -> TaskEnd:
        assert task.item is not None
        if not worker.greeted and (refused := self._greet(worker)) is not None:
            return refused
        env = {k: v for k, v in task.environment(None).items() if k in _ITEM_ENV}
        item = self.folder.item(task.item.index)
        return call(self.target, worker, task, ctx, item, env, {})

    def _greet(self, worker: Worker) -> TaskEnd | None:
        """Wait for a new worker's hello: None when it speaks this nodus's protocol (or
        died first: the item then says how); else the end of every item of the stage."""
        line = None
        while line is None and worker.alive:
            line = next_reply(worker, _FOLLOW_EVERY)
        if line is None:
            return None
        words = refusal(line, runtime.ensure(self.target.store.root))
        if words is None:
            worker.greeted = True
            return None
        end = TaskEnd(TaskState.CANNOT_START, bootstrap.EXIT_RUNTIME, words)
        with self.lock:
            self.broken = end
        return end

    def _put_back(self, worker: Worker) -> None:
        """Idle again, or retired: dead, refused, or every item handed out already."""
        with self.lock:
            done = len(self.handed) >= self.count or self.closed or self.broken is not None
            if worker.alive and not done:
                self.idle.append(worker)
                return
            self.everyone.pop(worker.name, None)
        self._retire(worker)

    # -- workers -----------------------------------------------------------------------

    def _start(self, task: Task, ctx: TaskContext) -> Worker | TaskEnd:
        """A new worker for ``task`` (its allocation through the queue), started."""
        interpreters, image = self.target.interpreters, self.stage.image
        python = interpreters.get(image, local_calls.INTERPRETER)
        found = self._start_with(task, ctx, python)
        if missing(found) and python != "python":
            interpreters[image] = "python"
            found = self._start_with(task, ctx, "python")
        if isinstance(found, TaskEnd) and missing(found):
            with self.lock:
                self.broken = replace(found, message=calls.no_python(task))
            return self.broken
        return found

    def _start_with(self, task: Task, ctx: TaskContext, python: str) -> Worker | TaskEnd:
        name = f"w{next(self.numbers)}"
        fifos = self.folder.create_worker(name)
        found = start(
            self.target, task, ctx, fifos, name, lambda u: self._spec(task, u, name, python)
        )
        if isinstance(found, Worker):
            with self.lock:
                self.everyone[name] = found
        return found

    def _spec(self, task: Task, uuids: tuple[str, ...], name: str, python: str) -> ContainerSpec:
        spec = self.target.container_spec(task, uuids)
        labels = {k: v for k, v in spec.labels.items() if k != LABEL_ITEM}
        labels[LABEL_WORKER] = name
        base = container_name(replace(task, item=None))
        argv = runtime.worker_command(python, RUNTIME_IN_CONTAINER, CALL_IN_CONTAINER, name)
        return replace(
            spec,
            name=f"{base[:54]}-{name}" + ("" if python == local_calls.INTERPRETER else "-py"),
            env={k: v for k, v in spec.env.items() if k not in _ITEM_ENV},
            labels=labels,
            entrypoint=argv,
            command=[],
            mounts=(*spec.mounts, *local_calls.mounts(self.target.store.root, task)),
        )

    def _retire(self, worker: Worker) -> None:
        """End a worker: it reads the end of its requests and exits; then its container goes."""
        worker.close_requests()
        worker.close_replies()
        self.target.remove_later(worker.cid)

    def close(self) -> None:
        """The stage (or run) is over: every worker goes."""
        with self.lock:
            self.closed = True
            everyone, self.everyone, self.idle = list(self.everyone.values()), {}, []
        for worker in everyone:
            worker.close_requests()
            with contextlib.suppress(engine.EngineFailure):
                self.target.docker().remove(worker.cid)
            worker.close_replies()


def start(
    target: Host,
    task: Task,
    ctx: TaskContext,
    fifos: Path,
    name: str,
    spec_of: Callable[[tuple[str, ...]], ContainerSpec],
) -> Worker | TaskEnd:
    """A new worker for ``task`` (its allocation through the queue), its container made
    by ``spec_of(gpus)`` and started, talking through the FIFOs in ``fifos``; or how
    that ended."""
    requests = os.open(fifos / "requests", os.O_RDWR)
    replies = os.open(fifos / "replies", os.O_RDWR | os.O_NONBLOCK)
    made: list[ContainerSpec] = []

    def create(uuids: tuple[str, ...]) -> str:
        spec = spec_of(uuids)
        made.append(spec)
        return target.create_container(spec, task)

    def close() -> None:
        os.close(requests)
        os.close(replies)

    try:
        if task.stage.requirements.wants_gpu:
            uuids, cid = target.claim(task, ctx, create)
        else:
            uuids, cid = (), create(())
    except Ended as ended:
        close()
        return ended.end
    except BaseException:
        close()
        raise
    spec = made[-1]
    target.attach(task, cid)
    ctx.submitted()
    try:
        target.docker().start(cid)
    except engine.EngineError as exc:
        close()
        target.withdraw(cid)  # before a second try claims the same GPUs
        return endings.start_failed(exc, task, ctx)
    except (engine.EngineUnreachable, engine.EngineTimeout) as exc:
        close()
        target.withdraw(cid)
        return TaskEnd(TaskState.INFRASTRUCTURE, 1, lost(exc))
    started = target.started_on(task.stage, uuids)
    ctx.started(started)
    watched, watcher_end = os.pipe()
    worker = Worker(name, cid, spec, started, requests, replies, watched, watcher_end)
    threading.Thread(
        target=watch, args=(target, worker), name=f"nodus-worker-{name}", daemon=True
    ).start()
    return worker


def call(
    target: Host,
    worker: Worker,
    task: Task,
    ctx: TaskContext,
    item: Path,
    env: dict[str, str],
    fields: dict[str, Any],
) -> TaskEnd:
    """Hand ``task``'s call (its folder ``item``, with ``env`` set; ``fields`` more of the
    request) to a greeted ``worker`` and wait for its end, showing its output as it grows."""
    index = item.name
    since = time.time()
    output = Output(item, OutputLines(ctx.emit))
    if worker.alive:
        request = bootstrap.encode(bootstrap.CALL, item=index, env=env, **fields)
        try:
            os.write(worker.requests, request)
        except (OSError, ValueError):
            worker.alive = False
    while worker.alive:
        line = next_reply(worker, _FOLLOW_EVERY)
        if line is None:
            output.follow()
            continue
        with contextlib.suppress(ValueError, KeyError, TypeError):  # not a done: ignored
            message = bootstrap.decode(line)
            if message[bootstrap.KIND] == bootstrap.DONE and message.get("item") == index:
                output.finish()
                return TaskEnd(TaskState.EXITED, int(message["code"]))
    output.finish()
    code = worker.exit_code if worker.exit_code is not None else 137
    if target.stopped(task):
        return TaskEnd(TaskState.STOPPED, code, "stopped by nodus")
    return endings.classify_exit(target.docker(), worker.cid, code, since, worker.spec)


def watch(target: Host, worker: Worker) -> None:
    """Wait for the worker's container to end; then say so on the watcher's own pipe
    (the only writer there, as the runtime is on the replies)."""
    eng = target.docker()
    while True:
        try:
            code = eng.wait(worker.cid, None)
            break
        except engine.EngineTimeout:
            continue
        except engine.EngineError:
            code = 137  # removed
            break
        except engine.EngineUnreachable:
            if eng.alive():
                continue
            code = 1
            break
    worker.exit_code = code
    with contextlib.suppress(OSError):  # a reader gone already: nobody to tell
        os.write(worker.watcher_end, b"\n")
    os.close(worker.watcher_end)


def refusal(hello: bytes, runtime_folder: Path) -> str | None:
    """Why a worker whose first reply is ``hello`` cannot serve this nodus (None when it
    speaks this nodus's protocol); ``runtime_folder`` is the runtime it was given."""
    try:
        message = bootstrap.decode(hello)
    except ValueError:
        message = {}
    theirs: Any = message.get("protocol")
    if message.get(bootstrap.KIND) == bootstrap.HELLO and theirs == bootstrap.PROTOCOL:
        return None
    said = (
        f"speaks warm-worker protocol {theirs}"
        if message.get(bootstrap.KIND) == bootstrap.HELLO
        else f"began with {hello[:80].decode('utf-8', 'replace').strip()!r}, not a hello"
    )
    return (
        f"the worker's runtime {said}, and this nodus speaks protocol {bootstrap.PROTOCOL}: "
        f"the runtime in {runtime_folder} is not this nodus's own; remove that folder, and "
        "the next run builds it again"
    )


def missing(found: Worker | TaskEnd) -> bool:
    """The image has no such interpreter (the container's command was not found)."""
    return (
        isinstance(found, TaskEnd)
        and found.state == TaskState.CANNOT_START
        and found.exit_code == 127
    )


def next_reply(worker: Worker, timeout: float | None) -> bytes | None:
    """The worker's next line on its replies; None after ``timeout`` seconds without one,
    or once its container has ended (``alive`` turns False) and every line it wrote
    before is read."""
    while b"\n" not in worker.pending:
        try:
            ready, _, _ = select.select([worker.replies, worker.ended], [], [], timeout)
        except (OSError, ValueError):
            worker.alive = False
            return None
        if not ready:
            return None
        if worker.replies not in ready:  # ended, and nothing more on the replies
            worker.alive = False
            return None
        try:
            chunk = os.read(worker.replies, 4096)
        except BlockingIOError:
            continue
        except OSError:
            worker.alive = False
            return None
        worker.pending += chunk
    line, _, worker.pending = worker.pending.partition(b"\n")
    return line


class Output:
    """An item's stdout and stderr files, shown as they grow."""

    def __init__(self, item: Path, lines: OutputLines) -> None:
        self.paths = {1: item / "stdout", 2: item / "stderr"}
        self.offsets = {1: 0, 2: 0}
        self.lines = lines

    def follow(self) -> None:
        for kind, path in self.paths.items():
            try:
                with open(path, "rb") as handle:
                    handle.seek(self.offsets[kind])
                    data = handle.read()
            except OSError:
                continue
            if data:
                self.offsets[kind] += len(data)
                self.lines.feed(kind, data)

    def finish(self) -> None:
        self.follow()
        self.lines.flush()
