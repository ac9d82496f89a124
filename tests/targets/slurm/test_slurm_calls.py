"""A function call's files on Slurm, without a cluster (``targets/slurm/calls.py``): placed in
the run's folder in ``work_root`` for the job, the outcome moved back to the caller's call
folder, nothing of the call left there; the job is a stand-in that does what the runtime
would (the real cluster runs it in ``test_slurm_functions.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from nodus_cli.functions import runtime
from nodus_cli.functions.layout import CALL_IN_CONTAINER, RUNTIME_IN_CONTAINER, CallFolder
from nodus_cli.targets.base import Task, TaskContext, TaskEnd, TaskState
from nodus_cli.targets.slurm import calls
from nodus_cli.workload import FunctionCall, Requirements, Stage

STAGE = Stage("main", "py:1", None, {}, Requirements(), function=FunctionCall("m.f", "c", "3.11"))
TASK = Task("run", "m.f", STAGE, 0, {})


def _call(home: Path) -> CallFolder:
    folder = CallFolder(home, "c")
    folder.create()
    folder.function.write_bytes(b"the function")
    folder.create_item(0)
    folder.args(0).write_bytes(b"its arguments")
    return folder


def _mounted(task: Task) -> dict[str, Path]:
    return {m.target: Path(m.source) for m in task.stage.mounts}


def test_the_call_goes_through_work_root_and_its_outcome_comes_back(tmp_path: Path) -> None:
    folder = _call(tmp_path / "home")
    run_dir = tmp_path / "work_root" / "run"
    run_dir.mkdir(parents=True)
    jobs: list[Task] = []

    def job(task: Task, ctx: TaskContext) -> TaskEnd:
        jobs.append(task)
        call = _mounted(task)[CALL_IN_CONTAINER]
        assert (call / "function.pickle").read_bytes() == b"the function"
        assert (call / "items" / "0" / "args.pickle").read_bytes() == b"its arguments"
        rt = _mounted(task)[RUNTIME_IN_CONTAINER]
        assert (rt / runtime.BOOTSTRAP).is_file()
        (call / "items" / "0" / "result.pickle").write_bytes(b"the value")
        (call / "items" / "0" / "outcome.json").write_text(json.dumps({"status": "ok"}))
        return TaskEnd(TaskState.EXITED, 0)

    end = calls.Caller(tmp_path / "home").run(TASK, None, run_dir, job)  # type: ignore[arg-type]
    assert end == TaskEnd(TaskState.EXITED, 0)
    (ran,) = jobs
    assert ran.stage.entrypoint == runtime.command(
        "python3", RUNTIME_IN_CONTAINER, CALL_IN_CONTAINER, 0
    )
    assert (folder.item(0) / "result.pickle").read_bytes() == b"the value"
    assert json.loads((folder.item(0) / "outcome.json").read_text()) == {"status": "ok"}
    # The item's files left work_root with the job; the rest goes with the run.
    assert not (run_dir / "function" / "call" / "items" / "0").exists()
    assert calls.remove(run_dir) == [f"the call's files in {run_dir / 'function'}"]
    assert not (run_dir / "function").exists() and run_dir.is_dir()


def test_an_image_without_python3_is_tried_with_python_then_said_in_words(
    tmp_path: Path,
) -> None:
    _call(tmp_path / "home")
    tried: list[str] = []

    def job(task: Task, ctx: TaskContext) -> TaskEnd:
        assert task.stage.entrypoint is not None
        tried.append(task.stage.entrypoint[0])
        return TaskEnd(TaskState.CANNOT_START, 127, "the command could not start (127)")

    caller = calls.Caller(tmp_path / "home")
    end = caller.run(TASK, None, tmp_path / "run", job)  # type: ignore[arg-type]
    assert tried == ["python3", "python"]
    assert end.state == TaskState.CANNOT_START
    assert "the image py:1 has no python3 (nor python)" in str(end.message)
    assert caller.interpreters == {"py:1": "python"}  # remembered for the run's next calls


def test_a_work_root_that_cannot_take_the_files_fails_the_task_in_words(tmp_path: Path) -> None:
    _call(tmp_path / "home")
    blocker = tmp_path / "a-file"
    blocker.write_text("")

    def job(task: Task, ctx: TaskContext) -> TaskEnd:
        raise AssertionError("no job without the call's files")

    end = calls.Caller(tmp_path / "home").run(TASK, None, blocker / "run", job)  # type: ignore[arg-type]
    assert end.state == TaskState.INFRASTRUCTURE
    assert str(end.message).startswith(
        f"the call's files in the Slurm work_root ({blocker / 'run' / 'function'}): "
    )
