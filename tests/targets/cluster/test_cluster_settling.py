"""A dead supervisor's jobs settled alike on every cluster: a job's end on its record, a
fan-out stage's items summed into the stage's end."""

from __future__ import annotations

from nodus_cli.records import StageStatus, TaskRecord
from nodus_cli.targets.base import TaskEnd, TaskState
from nodus_cli.targets.cluster.settling import items_failure, record_end


def test_a_jobs_end_is_written_on_its_record_with_its_cost() -> None:
    item = TaskRecord(0, "x", status=StageStatus.RUNNING)
    assert record_end(item, TaskEnd(TaskState.EXITED, 0), 1800, 4.0)
    assert (item.status, item.exit_code, item.runtime_seconds, item.cost, item.message) == (
        StageStatus.SUCCEEDED,
        0,
        1800.0,
        2.0,
        None,
    )
    failed = TaskRecord(1, "x", status=StageStatus.RUNNING)
    assert not record_end(failed, TaskEnd(TaskState.OUT_OF_MEMORY, 137, "out of memory"), 36, 4.0)
    assert (failed.status, failed.exit_code, failed.message) == (
        StageStatus.FAILED,
        137,
        "out of memory",
    )


def test_a_fan_outs_first_failed_item_is_named_before_one_never_submitted() -> None:
    done = TaskRecord(0, "x", status=StageStatus.SUCCEEDED, exit_code=0)
    lost = TaskRecord(1, "x", status=StageStatus.PENDING)
    failed = TaskRecord(2, "x", status=StageStatus.FAILED, exit_code=3)
    assert items_failure("main", [done], "lost") is None
    assert items_failure("main", [done, lost, failed], "nodus ended first") == (
        3,
        "stage 'main': 2 of 3 items failed (item 2: exited with 3)",
    )
    assert items_failure("main", [done, lost], "nodus ended first") == (
        1,
        "stage 'main': 1 of 2 items failed (item 1: nodus ended first)",
    )
