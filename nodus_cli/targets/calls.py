"""A task that calls a Python function, on any target: its call folder, and what its end
means.

A function task is a stage with a :class:`~nodus_cli.workload.FunctionCall`: instead of a
command, the image's Python runs nodus's runtime on the call's folder
(:mod:`nodus_cli.functions`). How it ended is then read from the outcome the runtime
wrote, not from the exit code alone (a function may call ``os._exit(0)``): :func:`ended`
turns the container's end into the task's, with the words the records keep ("raised
ValueError: ...", "the image ... runs Python 3.10.13, and the function needs Python
3.11 ..."). What the target itself knows better (out of memory with the limit named,
killed from outside, stopped by nodus, the engine lost) it keeps.

A target whose nodes cannot mount the caller's folder (Swarm, Kubernetes) gets the outcome
back through the task's output: the runtime prints its files as frames of base64 lines
(``bootstrap.py --unpack``), and :class:`Framed` cuts them out of the output into the
call's item folder, so that :func:`ended` reads them as on the local target.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nodus_cli.functions import outcome
from nodus_cli.functions.layout import CallFolder
from nodus_cli.structs import replace, struct
from nodus_cli.targets.base import (
    OutputStream,
    Pending,
    Started,
    Task,
    TaskContext,
    TaskEnd,
    TaskState,
)
from nodus_cli.workload import FunctionCall, Workload

__all__ = [
    "FRAME",
    "CallItem",
    "Framed",
    "call_items",
    "ended",
    "folder_of",
    "item_of",
    "no_python",
]

#: What an output line that carries a piece of the outcome starts with (the runtime's).
FRAME = "\x1enodus-frame"


@struct(frozen=True)
class CallItem:
    """One call a workload's function stage makes: the function, its call folder, the
    item's index (0 for a single call) and whether the stage is a map of calls."""

    function: FunctionCall
    folder: CallFolder
    index: int
    mapped: bool


def call_items(workload: Workload, home: Path) -> Iterator[CallItem]:
    """Every call the function stages of ``workload`` make whose folder is under ``home``
    (a target that carries calls its own way checks each before anything starts)."""
    for stage in workload.stages:
        fc = stage.function
        if fc is None:
            continue
        folder = CallFolder(home, fc.call)
        if not folder.exists():
            continue
        count = len(stage.map.items) if stage.map is not None else 1
        for index in range(count):
            yield CallItem(fc, folder, index, stage.map is not None)


def folder_of(task: Task, home: Path) -> CallFolder:
    fc = _function(task)
    return CallFolder(home, fc.call)


def item_of(task: Task) -> int:
    """The item folder a task's call is in (a single call is item 0)."""
    return task.item.index if task.item is not None else 0


def no_python(task: Task) -> str:
    fc = _function(task)
    return (
        f"the image {task.stage.image} has no python3 (nor python) to run the function: it "
        f"needs an image with Python {fc.python}, the caller's version "
        f"(e.g. python:{fc.python}-slim)"
    )


def ended(task: Task, end: TaskEnd, item: Path) -> TaskEnd:
    """The task's end, from the container's end and the outcome in ``item``."""
    if end.state not in (TaskState.EXITED, TaskState.CANNOT_START):
        return end  # out of memory, killed, stopped, the engine lost: the target knows why
    fc = _function(task)
    if end.state == TaskState.CANNOT_START:
        return replace(end, message=no_python(task) if end.exit_code == 127 else end.message)
    found = outcome.read(item)
    if found is not None and found.status == outcome.Status.OK:
        return replace(end, exit_code=0, message=None)
    words = outcome.describe(found, end.exit_code, task.stage.image, fc.python)
    if found is not None and found.status == outcome.Status.EXITED:  # sys.exit(code)
        return replace(end, exit_code=found.exit_code or 1, message=words)
    # No outcome with exit 0 (os._exit(0)) is a failure all the same.
    code = end.exit_code or (found.exit_code if found is not None else 0) or 1
    return replace(end, exit_code=code, message=words)


def _function(task: Task) -> FunctionCall:
    fc = task.stage.function
    assert fc is not None, f"task {task.key} calls no function"
    return fc


class Framed:
    """A task's context whose output carries the outcome's frames: those are written into
    the item's folder here; every other line passes on."""

    def __init__(self, ctx: TaskContext, item: Path) -> None:
        self.ctx = ctx
        self.item = item
        self._file: Any = None
        self._name = ""

    def say(self, message: str) -> None:
        self.ctx.say(message)

    def submitted(self, note: str | None = None, job_id: str | None = None) -> None:
        self.ctx.submitted(note, job_id)

    def waiting(self, pending: Pending) -> None:
        self.ctx.waiting(pending)

    def started(self, info: Started) -> None:
        self.ctx.started(info)

    def emit(self, stream: OutputStream, text: str) -> None:
        if stream != "stdout" or not text.startswith(FRAME):
            self.ctx.emit(stream, text)
            return
        body = text[len(FRAME) :].lstrip(" ")
        if body.startswith("begin "):
            self._close()
            self._name = os.path.basename(body.split(" ")[1])
            self.item.mkdir(parents=True, exist_ok=True)
            self._file = open(self.item / f".{self._name}.part", "wb")  # noqa: SIM115
        elif body.startswith("end "):
            if self._file is not None:
                self._file.close()
                self._file = None
                os.replace(self.item / f".{self._name}.part", self.item / self._name)
        elif self._file is not None:
            self._file.write(base64.b64decode(body))

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
