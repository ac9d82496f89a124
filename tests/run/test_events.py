"""nodus_cli.run.events: the events a task puts on the loop's queue."""

from __future__ import annotations

import json

import pytest

from nodus_cli.run.events import TaskBegan, TaskEnded, TaskRaised, TaskSubmitted, TaskWaiting
from nodus_cli.targets.base import Pending, PendingKind, Started, Task, TaskEnd, TaskState
from nodus_cli.workload import load_text


def _task() -> Task:
    workload = load_text('name = "w"\nimage = "img:1"\ncommand = "true"\n').workload
    assert workload is not None
    return Task("run-1", "w", workload.stages[0], 0, {})


def test_events_of_different_kinds_with_the_same_payload_are_not_equal() -> None:
    task = _task()
    assert TaskSubmitted(task, "x") != TaskWaiting(task, Pending(PendingKind.OTHER, "x"))
    assert TaskSubmitted(task, "x") == TaskSubmitted(task, "x")
    assert TaskSubmitted(task, "x") != (task, "x")


def test_the_loop_matches_an_event_by_its_kind_and_fields() -> None:
    task = _task()
    end = TaskEnd(TaskState.EXITED, 0)
    seen = []
    events = [
        TaskSubmitted(task, None),
        TaskWaiting(task, Pending(PendingKind.RESOURCES, "no GPUs")),
        TaskBegan(task, Started(), 1.0),
        TaskEnded(task, end),
        TaskRaised(task, OSError("x")),
    ]
    for event in events:
        match event:
            case TaskWaiting(_, pending):
                seen.append(pending.words)
            case TaskBegan(_, info, at):
                seen.append((info.devices, at))
            case TaskEnded(end=found):
                seen.append(found)
            case TaskSubmitted() | TaskRaised():
                seen.append(type(event).__name__)
    assert seen == ["TaskSubmitted", "no GPUs", ((), 1.0), end, "TaskRaised"]


def test_an_event_is_not_a_tuple() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        json.dumps(TaskWaiting(_task(), Pending(PendingKind.OTHER, "x")))
