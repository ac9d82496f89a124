"""What a function task's end means (any target): the outcome the runtime wrote is the
truth, not the exit code alone; what the target knows better (out of memory, a kill) stays."""

from __future__ import annotations

import json
from pathlib import Path

from nodus_cli.targets import calls
from nodus_cli.targets.base import Task, TaskEnd, TaskState
from nodus_cli.workload import FunctionCall, Requirements, Stage

STAGE = Stage("main", "py:1", None, {}, Requirements(), function=FunctionCall("m.f", "c", "3.11"))
TASK = Task("run", "m.f", STAGE, 0, {})


def _outcome(item: Path, **doc: object) -> Path:
    item.mkdir(parents=True, exist_ok=True)
    (item / "outcome.json").write_text(json.dumps(doc))
    return item


def test_an_ok_outcome_is_success_whatever_the_exit_code(tmp_path: Path) -> None:
    item = _outcome(tmp_path, status="ok", exit_code=0)
    end = calls.ended(TASK, TaskEnd(TaskState.EXITED, 3), item)
    assert end == TaskEnd(TaskState.EXITED, 0)


def test_no_outcome_is_a_failure_even_with_exit_zero(tmp_path: Path) -> None:
    end = calls.ended(TASK, TaskEnd(TaskState.EXITED, 0), tmp_path)
    assert end.state == TaskState.EXITED and end.exit_code == 1
    assert end.message is not None and "exited with code 0 without reporting" in end.message


def test_a_raised_exception_keeps_its_exit_code_and_says_what_it_was(tmp_path: Path) -> None:
    item = _outcome(
        tmp_path,
        status="raised",
        exit_code=101,
        message="bad",
        type={"module": "builtins", "qualname": "ValueError"},
    )
    end = calls.ended(TASK, TaskEnd(TaskState.EXITED, 101), item)
    assert end == TaskEnd(TaskState.EXITED, 101, "raised ValueError: bad")


def test_what_the_target_knows_better_stays(tmp_path: Path) -> None:
    oom = TaskEnd(TaskState.OUT_OF_MEMORY, 137, "out of memory: it reached its 1 GiB limit")
    assert calls.ended(TASK, oom, tmp_path) == oom


def test_a_missing_interpreter_says_what_the_image_needs(tmp_path: Path) -> None:
    end = calls.ended(TASK, TaskEnd(TaskState.CANNOT_START, 127, "not found"), tmp_path)
    assert end.message == (
        "the image py:1 has no python3 (nor python) to run the function: it needs an image "
        "with Python 3.11, the caller's version (e.g. python:3.11-slim)"
    )
