"""nodus_cli.run.events: the events a task puts on the loop's queue."""

from __future__ import annotations

import json

import pytest

from nodus_cli.run.events import Began, Ended, Raised, Submitted, Waiting
from nodus_cli.targets.base import Started, Task, TaskEnd, TaskState
from nodus_cli.workload import load_text


def _task() -> Task:
    workload = load_text('name = "w"\nimage = "img:1"\ncommand = "true"\n').workload
    assert workload is not None
    return Task("run-1", "w", workload.stages[0], 0, {})


def test_events_of_different_kinds_with_the_same_payload_are_not_equal() -> None:
    task = _task()
    assert Submitted(task, "x") != Waiting(task, "x")
    assert Submitted(task, "x") == Submitted(task, "x")
    assert Submitted(task, "x") != (task, "x")


def test_the_loop_matches_an_event_by_its_kind_and_fields() -> None:
    task = _task()
    end = TaskEnd(TaskState.EXITED, 0)
    seen = []
    events = [
        Submitted(task, None),
        Waiting(task, "no GPUs"),
        Began(task, Started(), 1.0),
        Ended(task, end),
        Raised(task, OSError("x")),
    ]
    for event in events:
        match event:
            case Waiting(_, message):
                seen.append(message)
            case Began(_, info, at):
                seen.append((info.devices, at))
            case Ended(end=found):
                seen.append(found)
            case Submitted() | Raised():
                seen.append(type(event).__name__)
    assert seen == ["Submitted", "no GPUs", ((), 1.0), end, "Raised"]


def test_an_event_is_not_a_tuple() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        json.dumps(Waiting(_task(), "x"))
