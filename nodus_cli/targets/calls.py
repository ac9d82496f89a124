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
"""

from __future__ import annotations

from pathlib import Path

from nodus_cli.functions import outcome
from nodus_cli.functions.layout import CallFolder
from nodus_cli.structs import replace
from nodus_cli.targets.base import Task, TaskEnd, TaskState
from nodus_cli.workload import FunctionCall

__all__ = ["ended", "folder_of", "item_of", "no_python"]


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
