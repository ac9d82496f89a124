"""Warm workers: the items of a map of a Python function, in long-lived containers.

A map of 1,000 small calls would spend most of its time starting 1,000 containers. On the
local engine the items of a function map go to a pool of worker containers instead, one
per allocation (a GPU, a shared-GPU slot sized by memory, or a CPU slot: each got through
the machine-wide queue, :meth:`LocalTarget._claim`, as any task's), each taking the next
item when it finishes one. The driver still runs one task per item (records, retries,
budget, the item's own log lines are as for any fan-out stage); only where a task runs
changes. A map of 1,000 small calls makes as many containers as run at once.

- **One item at a time per worker.** The caller writes a request (one JSON line) into the
  worker's ``requests`` FIFO; the runtime answers ``done ITEM CODE`` on ``replies``. The
  values pass through the item's folder, as for one container per call; the item's
  stdout and stderr go to files there, followed while it runs and shown as that item's
  output (``nodus logs --item N``).
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
threads): a function that must start clean belongs in ``client.run`` (one container each).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nodus_cli.functions import runtime
from nodus_cli.functions.layout import CALL_IN_CONTAINER, RUNTIME_IN_CONTAINER, CallFolder
from nodus_cli.structs import field, replace, struct
from nodus_cli.targets import calls
from nodus_cli.targets.base import OutputLines, Started, Task, TaskContext, TaskEnd, TaskState
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.containers import (
    LABEL_HOME,
    LABEL_ITEM,
    LABEL_OWNER,
    ContainerSpec,
    container_name,
    spec_for,
)
from nodus_cli.targets.local import calls as local_calls
from nodus_cli.targets.local.claims import Ended, lost
from nodus_cli.targets.local.owner import me

if TYPE_CHECKING:
    from nodus_cli.targets.local.target import LocalTarget

__all__ = ["LABEL_WORKER", "Pool"]

#: On a worker container: its name within the map (``w0``, ``w1`` ...).
LABEL_WORKER = "nodus.worker"
#: The variables that differ per item, set by the runtime for each call.
_ITEM_ENV = ("NODUS_ITEM", "NODUS_ITEM_INDEX", "NODUS_ITEM_COUNT")
#: How often the output of an item that runs is looked at (seconds).
_FOLLOW_EVERY = 0.1


@struct
class _Worker:
    name: str
    cid: str
    spec: ContainerSpec
    started: Started
    requests: int  # our end of the FIFOs (read-write: never blocks, never EOF)
    replies: int
    alive: bool = True
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
        with self.ends:
            fd, self.replies = self.replies, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def retired(self) -> bool:
        return self.requests < 0


class Pool:
    """The workers of one function-map stage of a run."""

    def __init__(self, target: LocalTarget, task: Task) -> None:
        self.target = target
        self.stage = task.stage
        self.folder: CallFolder = calls.folder_of(task, target.store.root)
        self.count = task.item.count if task.item is not None else 1
        self.lock = threading.Lock()
        self.idle: list[_Worker] = []
        self.everyone: dict[str, _Worker] = {}
        self.handed: set[int] = set()
        self.numbers = itertools.count()
        #: Why no worker can start here (an image without Python): every item ends so.
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
                if not worker.alive:  # it died idle (killed from outside): replaced
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
        target = self.target
        with target._lock:
            target._containers[task.key] = worker.cid
        try:
            end = self._call(worker, task, ctx)
        finally:
            with target._lock:
                target._containers.pop(task.key, None)
                target._stopping.discard(task.key)
            self._put_back(worker)
        item = self.folder.item(task.item.index)
        return calls.ended(task, end, item)

    def _call(self, worker: _Worker, task: Task, ctx: TaskContext) -> TaskEnd:
        assert task.item is not None
        index = task.item.index
        env = {k: v for k, v in task.environment(None).items() if k in _ITEM_ENV}
        request = json.dumps({"item": str(index), "env": env}) + "\n"
        since = time.time()
        output = _Output(self.folder.item(index), OutputLines(ctx.emit))
        try:
            os.write(worker.requests, request.encode("utf-8"))
        except (OSError, ValueError):
            worker.alive = False
        while worker.alive:
            reply = _reply(worker, _FOLLOW_EVERY)
            if reply is None:
                output.follow()
                continue
            word, _, rest = reply.partition(" ")
            if word == "done" and rest.split(" ")[0] == str(index):
                output.finish()
                return TaskEnd(TaskState.EXITED, int(rest.split(" ")[1]))
            if word == "exited":
                worker.alive = False
        output.finish()
        code = worker.exit_code if worker.exit_code is not None else 137
        if self.target._stopped(task):
            return TaskEnd(TaskState.STOPPED, code, "stopped by nodus")
        end = self.target._classify_exit(worker.cid, code, since, worker.spec)
        return end

    def _put_back(self, worker: _Worker) -> None:
        """Idle again, or retired: dead, or every item handed out already."""
        with self.lock:
            done = len(self.handed) >= self.count or self.closed
            if worker.alive and not done:
                self.idle.append(worker)
                return
            self.everyone.pop(worker.name, None)
        self._retire(worker)

    # -- workers -----------------------------------------------------------------------

    def _start(self, task: Task, ctx: TaskContext) -> _Worker | TaskEnd:
        """A new worker for ``task`` (its allocation through the queue), started."""
        interpreters, image = self.target._interpreters, self.stage.image
        python = interpreters.get(image, local_calls.INTERPRETER)
        found = self._start_with(task, ctx, python)
        if _missing(found) and python != "python":
            interpreters[image] = "python"
            found = self._start_with(task, ctx, "python")
        if isinstance(found, TaskEnd) and _missing(found):
            with self.lock:
                self.broken = replace(found, message=calls.no_python(task))
            return self.broken
        return found

    def _start_with(self, task: Task, ctx: TaskContext, python: str) -> _Worker | TaskEnd:
        target = self.target
        name = f"w{next(self.numbers)}"
        folder = self.folder.create_worker(name)
        requests = os.open(folder / "requests", os.O_RDWR)
        replies = os.open(folder / "replies", os.O_RDWR | os.O_NONBLOCK)
        made: list[ContainerSpec] = []

        def create(uuids: tuple[str, ...]) -> str:
            spec = self._spec(task, uuids, name, python)
            made.append(spec)
            return target._create_container(spec, task)

        try:
            if self.stage.requirements.wants_gpu:
                uuids, cid = target._claim(task, ctx, create)
            else:
                uuids, cid = (), create(())
        except Ended as ended:
            os.close(requests)
            os.close(replies)
            return ended.end
        except BaseException:
            os.close(requests)
            os.close(replies)
            raise
        spec = made[-1]
        with target._lock:
            target._containers[task.key] = cid
        ctx.submitted()
        try:
            target.docker().start(cid)
        except engine.EngineError as exc:
            os.close(requests)
            os.close(replies)
            target._withdraw(cid)  # before a second try claims the same GPUs
            return target._start_failed(exc, task, ctx)
        except (engine.EngineUnreachable, engine.EngineTimeout) as exc:
            os.close(requests)
            os.close(replies)
            target._withdraw(cid)
            return TaskEnd(TaskState.INFRASTRUCTURE, 1, lost(exc))
        offer = target._offer_for(self.stage)
        started = Started(
            devices=uuids,
            node=offer.machine_id,
            price_per_hour=offer.price_per_hour / max(1, target._slots(self.stage)),
            config=offer.as_json(),
        )
        ctx.started(started)
        worker = _Worker(name, cid, spec, started, requests, replies)
        with self.lock:
            self.everyone[name] = worker
        threading.Thread(
            target=self._watch, args=(worker,), name=f"nodus-worker-{name}", daemon=True
        ).start()
        return worker

    def _spec(self, task: Task, uuids: tuple[str, ...], name: str, python: str) -> ContainerSpec:
        work = self.target._work.get(task.run_id)
        spec = spec_for(task, uuids, str(work) if work is not None else None)
        labels = {k: v for k, v in spec.labels.items() if k != LABEL_ITEM}
        labels.update(
            {LABEL_WORKER: name, LABEL_OWNER: me().label, LABEL_HOME: str(self.target.store.root)}
        )
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

    def _watch(self, worker: _Worker) -> None:
        """Wait for the worker's container to end; then say so on its replies."""
        eng = self.target.docker()
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
        worker.alive = False
        if worker.retired:  # nobody reads its replies any more
            worker.close_replies()
            return
        with worker.ends, contextlib.suppress(OSError):
            if worker.replies >= 0:
                os.write(worker.replies, f"exited {code}\n".encode())

    def _retire(self, worker: _Worker) -> None:
        """End a worker: it reads the end of its requests and exits; then its container goes."""
        worker.close_requests()
        if not worker.alive:  # its watcher has said so already (or will find it closed)
            worker.close_replies()
        self.target._remove_later(worker.cid)

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


def _missing(found: _Worker | TaskEnd) -> bool:
    """The image has no such interpreter (the container's command was not found)."""
    return (
        isinstance(found, TaskEnd)
        and found.state == TaskState.CANNOT_START
        and found.exit_code == 127
    )


def _reply(worker: _Worker, timeout: float) -> str | None:
    """The next line on the worker's replies, or None after ``timeout`` seconds."""
    while b"\n" not in worker.pending:
        try:
            ready, _, _ = select.select([worker.replies], [], [], timeout)
        except (OSError, ValueError):
            worker.alive = False
            return "exited"
        if not ready:
            return None
        try:
            chunk = os.read(worker.replies, 4096)
        except BlockingIOError:
            continue
        except OSError:
            worker.alive = False
            return "exited"
        worker.pending += chunk
    line, _, worker.pending = worker.pending.partition(b"\n")
    return line.decode("utf-8", "replace").strip()


class _Output:
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
