"""A dead supervisor's jobs settled alike on every cluster: a job's end on its record, a
fan-out stage's items summed into the stage's end."""

from __future__ import annotations

from nodus_cli.records import RunRecord, RunStatus, StageRecord, StageStatus, TaskRecord
from nodus_cli.targets.base import TaskEnd, TaskState
from nodus_cli.targets.cluster.settling import end_words, items_failure, record_end, settled_run


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


def test_a_settled_run_says_how_its_last_job_ended_and_what_never_ran() -> None:
    first = StageRecord("prep", StageStatus.SUCCEEDED, 0, job_id="41")
    later = StageRecord("train", StageStatus.PENDING, None)
    record = RunRecord(
        "r1",
        "w",
        "f",
        "slurm",
        RunStatus.RUNNING,
        None,
        "now",
        None,
        0.0,
        1.0,
        None,
        None,
        {},
        4242,
        None,
        stages=[first, later],
    )
    last = (True, 0, "Slurm job 41 went on: completed")
    done = settled_run(record, {0: first}, {}, last, "submitted a Slurm job", "submit")
    assert (done.status, done.exit_code) == (RunStatus.FAILED, 1)
    assert done.message == (
        "its nodus process (4242) ended; Slurm job 41 went on: completed; not run: train "
        "(nodus was not there to submit them)"
    )
    never = settled_run(record, {}, {}, None, "created a Kubernetes Job", "create")
    assert never.message == "its nodus process (4242) ended before it created a Kubernetes Job"
    assert end_words(TaskEnd(TaskState.EXITED, 3)) == "exited with 3"
    assert end_words(TaskEnd(TaskState.EXITED, 0)) == "completed"
