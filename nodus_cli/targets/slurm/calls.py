"""A Python function call on Slurm: through the shared folder ``work_root``.

The nodes see ``work_root`` at the same path as the login node, and nothing else of the
caller's: so a call's files go there, beside the run's batch scripts and outputs::

    WORK_ROOT/RUN_ID/function/runtime/          nodus's runtime (bootstrap, cloudpickle),
                                                copied once per run, mounted read-only
    WORK_ROOT/RUN_ID/function/call/function.pickle
    WORK_ROOT/RUN_ID/function/call/items/I/     item I's args.pickle, copied when its task
                                                starts; the runtime writes the outcome here

The batch job runs the image's Python on the runtime (``python3``, then ``python`` when
the image has no ``python3``, remembered per image) with the call folder mounted at
:data:`~nodus_cli.functions.layout.CALL_IN_CONTAINER`; the function's output is the job's,
followed into the run's log like a command's. When the job has ended, the outcome (and
the result or the exception) is moved into the call's folder under ``NODUS_HOME``, where
the caller reads it as on the other targets (:func:`nodus_cli.targets.calls.ended`), and
the item's folder in ``work_root`` is removed. :func:`remove` removes the rest (the
runtime, the pickled function) when the run ends, or when the next nodus command records
the end of a run whose caller died; the run's folder itself (scripts, output files,
``work/``) is kept as for any Slurm run.

Values pass whole through files, as on the local target: no limit but ``work_root``'s
free space. No warm workers: each call, and each item of a map, is a job of its own
(``keep_warm`` is accepted and has no effect).

Why apart: the target's job loop stays the same for a command and a call; this module
only places the call's files and makes the job's container run the runtime on them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from nodus_cli.functions import runtime
from nodus_cli.functions.layout import CALL_IN_CONTAINER, RUNTIME_IN_CONTAINER
from nodus_cli.structs import replace
from nodus_cli.targets import calls
from nodus_cli.targets.base import Task, TaskContext, TaskEnd, TaskState
from nodus_cli.workload import Mount

__all__ = ["FOLDER", "Caller", "remove"]

#: The folder of a run's function files, under the run's folder in ``work_root``.
FOLDER = "function"
_OPEN = 0o777

#: Runs one task as a batch job (the target's own job loop) and says how the job ended.
RunJob = Callable[[Task, TaskContext], TaskEnd]


def remove(run_dir: Path) -> list[str]:
    """Remove the run's function files from ``work_root`` (idempotent): what was removed."""
    folder = run_dir / FOLDER
    if not folder.exists():
        return []
    shutil.rmtree(folder, ignore_errors=True)
    return [f"the call's files in {folder}"]


class Caller:
    """The function calls of one Slurm target: the runtime placed once per run, each
    item's files placed before its job and its outcome read back after it."""

    def __init__(self, home: Path) -> None:
        self.home = home
        #: The interpreter found per image (``python`` once ``python3`` was missing).
        self.interpreters: dict[str, str] = {}
        self._lock = threading.Lock()

    def run(self, task: Task, ctx: TaskContext, run_dir: Path, run_job: RunJob) -> TaskEnd:
        """Run the call of ``task`` as a job (``run_job``) and say how the call ended."""
        shared = run_dir / FOLDER
        index = calls.item_of(task)
        home_item = calls.folder_of(task, self.home).item(index)
        item = shared / "call" / "items" / str(index)
        try:
            self._place(task, shared, index)
            image = task.stage.image
            python = self.interpreters.get(image, runtime.INTERPRETERS[0])
            end = run_job(_calling(task, shared, python), ctx)
            if _missing(end) and python != "python":
                self.interpreters[image] = "python"
                end = run_job(_calling(task, shared, "python"), ctx)
            if _missing(end):
                return TaskEnd(TaskState.CANNOT_START, 127, calls.no_python(task))
            _bring_back(item, home_item)
            return calls.ended(task, end, home_item)
        except OSError as exc:  # work_root full, gone, or no longer writable
            return TaskEnd(
                TaskState.INFRASTRUCTURE,
                1,
                f"the call's files in the Slurm work_root ({shared}): "
                f"{exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}",
            )
        finally:
            shutil.rmtree(item, ignore_errors=True)

    def _place(self, task: Task, shared: Path, index: int) -> None:
        """The runtime and the function (once per run), and the item's arguments, in
        ``work_root``."""
        folder = calls.folder_of(task, self.home)
        call = shared / "call"
        with self._lock:
            if not (shared / "runtime" / runtime.BOOTSTRAP).is_file():
                built = runtime.ensure(self.home)
                shutil.rmtree(shared / "runtime", ignore_errors=True)
                shutil.copytree(built, shared / "runtime")
            if not (call / "function.pickle").is_file():
                (call / "items").mkdir(parents=True, exist_ok=True)
                for made in (call, call / "items"):
                    os.chmod(made, _OPEN)
                shutil.copyfile(folder.function, call / ".function.pickle.part")
                os.replace(call / ".function.pickle.part", call / "function.pickle")
        item = call / "items" / str(index)
        shutil.rmtree(item, ignore_errors=True)  # an earlier attempt's outcome
        item.mkdir()
        os.chmod(item, _OPEN)  # an image whose user is not root writes its outcome
        shutil.copyfile(folder.args(index), item / "args.pickle")


def _calling(task: Task, shared: Path, python: str) -> Task:
    """``task`` made to run the runtime on its call with the image's ``python``."""
    argv = runtime.command(python, RUNTIME_IN_CONTAINER, CALL_IN_CONTAINER, calls.item_of(task))
    stage = task.stage
    mounts = (
        *stage.mounts,
        Mount(str(shared / "runtime"), RUNTIME_IN_CONTAINER, read_only=True),
        Mount(str(shared / "call"), CALL_IN_CONTAINER, read_only=False),
    )
    return replace(
        task, stage=replace(stage, entrypoint=argv, command=None, shell=False, mounts=mounts)
    )


def _bring_back(item: Path, home_item: Path) -> None:
    """Move what the runtime wrote in ``item`` into the caller's ``home_item``, the
    outcome last (it says the rest is there)."""
    home_item.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        (home_item / "outcome.json").unlink()  # an earlier attempt's
    try:
        found = [p.name for p in item.iterdir()]
    except OSError:  # the job never ran: no outcome
        return
    names = sorted(
        (n for n in found if n != "args.pickle" and not n.startswith(".")),
        key=lambda name: name == "outcome.json",
    )
    for name in names:
        shutil.move(str(item / name), str(home_item / name))


def _missing(end: TaskEnd) -> bool:
    """The image has no such interpreter: the container's command could not start."""
    return end.state == TaskState.CANNOT_START and end.exit_code == 127
