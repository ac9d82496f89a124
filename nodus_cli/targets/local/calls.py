"""A Python function call on the local engine: one container per call.

The container is the stage's (limits, GPUs by UUID, labels, mounts), with two more
mounts, the runtime read-only at ``/nodus/runtime`` and the call's folder at
``/nodus/call``, and the runtime as its command, run by the image's ``python3``: an
image needs nothing but Python of the caller's version. An image without ``python3``
is tried again with ``python`` (remembered per image for the rest of the run); without
either, the call fails saying so.

The items of a map of a function do not come here: they run in warm workers
(:mod:`.workers`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nodus_cli.functions import runtime
from nodus_cli.functions.layout import CALL_IN_CONTAINER, RUNTIME_IN_CONTAINER
from nodus_cli.structs import replace
from nodus_cli.targets import calls
from nodus_cli.targets.base import Task, TaskContext, TaskEnd, TaskState
from nodus_cli.targets.docker.containers import ContainerSpec
from nodus_cli.workload import Mount

__all__ = ["INTERPRETER", "container", "mounts", "run"]

#: What an image's Python is tried as first.
INTERPRETER = runtime.INTERPRETERS[0]


def mounts(home: Path, task: Task) -> tuple[Mount, ...]:
    """The runtime (read-only) and the call's folder, as a function task mounts them."""
    rt = runtime.ensure(home)
    folder = calls.folder_of(task, home)
    return (
        Mount(str(rt), RUNTIME_IN_CONTAINER, read_only=True),
        Mount(str(folder.path), CALL_IN_CONTAINER, read_only=False),
    )


def container(spec: ContainerSpec, task: Task, home: Path, interpreter: str) -> ContainerSpec:
    """``spec`` made to call the task's function with ``interpreter``."""
    argv = runtime.command(
        interpreter, RUNTIME_IN_CONTAINER, CALL_IN_CONTAINER, calls.item_of(task)
    )
    # A second try with another interpreter must not meet the first container's name.
    name = spec.name if interpreter == INTERPRETER else f"{spec.name[:55]}-{interpreter}"
    return replace(
        spec,
        name=name,
        entrypoint=argv,
        command=[],
        mounts=(*spec.mounts, *mounts(home, task)),
    )


def run(
    task: Task,
    ctx: TaskContext,
    home: Path,
    interpreters: dict[str, str],
    run_container: Callable[[Task, TaskContext], TaskEnd],
) -> TaskEnd:
    """Run the call (``run_container`` makes and runs the container with the image's
    interpreter in ``interpreters``) and say how it ended."""
    image = task.stage.image
    end = run_container(task, ctx)
    if _missing(end) and interpreters.get(image, INTERPRETER) != "python":
        interpreters[image] = "python"
        end = run_container(task, ctx)
    item = calls.folder_of(task, home).item(calls.item_of(task))
    return calls.ended(task, end, item)


def _missing(end: TaskEnd) -> bool:
    return end.state == TaskState.CANNOT_START and end.exit_code == 127
