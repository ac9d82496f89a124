"""What needs no cluster in the Slurm target's arrays and priorities: ``priority`` as
``--nice`` (an ordinary user may only lower a job's priority), an array task's lines from
``squeue -r`` and ``sacct -o JobID,...`` by their ``JOBID_INDEX`` ids, a requeue in words,
why Slurm requeued a job as far as it can say (stand-in ``sacct``/``squeue`` on PATH that
answer as a slurmdbd behind the controller does), and the batch script of an array (each
task reads its own item)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodus_cli.targets.base import Item, Task, TaskState
from nodus_cli.targets.slurm import parse
from nodus_cli.targets.slurm.arrays import Preemption, index_ranges, preemption, requeued, shares
from nodus_cli.targets.slurm.endings import job_end, work_root_unseen
from nodus_cli.targets.slurm.script import batch_script
from nodus_cli.targets.slurm.target import nice_of
from nodus_cli.workload import load_text


def test_priority_below_the_default_is_a_larger_nice_and_never_a_negative_one() -> None:
    assert [nice_of(p) for p in (0, 10, 49, 50, 80, 100)] == [5000, 4000, 100, 0, 0, 0]


def test_array_tasks_are_read_by_their_jobid_index_ids() -> None:
    queued = parse.queued_jobs("41_0|RUNNING|None|gpu-b|nodus-r-main\n41_1|PENDING|Resources||x\n")
    assert [(q.job_id, q.state, q.reason) for q in queued] == [
        ("41_0", "RUNNING", "None"),
        ("41_1", "PENDING", "Resources"),
    ]
    ended = parse.ended_jobs("41_0|nodus-r-main|COMPLETED|0:0|3|gpu-b\n41_1|x|FAILED|1:0|2|gpu-b\n")
    assert [(e.job_id, e.state, e.exit_code) for e in ended] == [
        ("41_0", "COMPLETED", 0),
        ("41_1", "FAILED", 1),
    ]


def test_a_requeue_is_a_failure_of_the_cluster_said_in_words() -> None:
    end = requeued("41_3")
    assert end.state == TaskState.INFRASTRUCTURE
    assert "Slurm requeued job 41_3 after it started" in (end.message or "")
    assert "--retries resubmits it with the same GPU model and count" in (end.message or "")
    # Preempted, with who took its place.
    end = requeued("41_3", "job 57 (urgent) of alice")
    assert end.state == TaskState.INFRASTRUCTURE
    assert (end.message or "").startswith(
        "Slurm job 41_3 was preempted by job 57 (urgent) of alice and requeued; nodus "
        "cancelled the requeued job so that --retries resubmits it"
    )


def test_who_preempted_a_job_is_read_from_its_runs_and_its_nodes_jobs() -> None:
    # As the harness's cluster printed them: `sacct -D -o RUNS_FIELDS` of a job preempted
    # (its first run) and pending again, and `squeue -w gpu-b -o NODE_JOBS_FORMAT`.
    runs = (
        "41_3|PREEMPTED|2026-12-05T04:13:44|gpu-b\n"
        "41_3|PENDING|Unknown|None assigned\n"
        "41_4|PREEMPTED|2026-12-05T04:10:00|gpu-a\n"
    )
    assert parse.requeued_run(runs, "41_3") == parse.RequeuedRun(
        True, "2026-12-05T04:13:44", "gpu-b"
    )
    # `scontrol requeue`: a run requeued, not preempted.
    assert parse.requeued_run("41_3|REQUEUED|2026-12-05T04:13:44|gpu-b\n", "41_3") == (
        parse.RequeuedRun(False, "2026-12-05T04:13:44", "gpu-b")
    )
    # slurmdbd has not recorded the requeued run yet: nothing to say so far.
    assert parse.requeued_run("41_3|PENDING|Unknown|None assigned\n", "41_3") is None
    jobs = parse.node_jobs("57|urgent|alice|2026-12-05T04:13:45\n12|x|bob|2026-12-05T03:00:00\n")
    assert jobs == [
        parse.NodeJob("57", "urgent", "alice", "2026-12-05T04:13:45"),
        parse.NodeJob("12", "x", "bob", "2026-12-05T03:00:00"),
    ]


def _answers(bin_dir: Path, sacct: str, squeue: str) -> None:
    """Stand-in ``sacct`` and ``squeue`` on PATH that print ``sacct`` and ``squeue``."""
    for name, text in (("sacct", sacct), ("squeue", squeue)):
        (bin_dir / f"{name}.out").write_text(text)
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\ncat "{bin_dir / name}.out"\n')
        script.chmod(0o755)


def test_why_a_job_was_requeued_is_known_only_once_slurm_can_say_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    pending = "41_3|PENDING|Unknown|None assigned\n"
    run = "41_3|PREEMPTED|2026-12-05T04:13:44|gpu-b\n"
    # slurmdbd has not recorded the preempted run yet: ask again.
    _answers(tmp_path, pending, "")
    assert preemption("41_3") == Preemption(known=False, by=None)
    # Recorded, but its node still runs only what ran before: the preemptor has not started.
    _answers(tmp_path, run + pending, "12|x|bob|2026-12-05T03:00:00\n")
    assert preemption("41_3") == Preemption(known=False, by="a job of higher priority")
    # The job that took its place runs: the whole answer.
    _answers(
        tmp_path,
        run + pending,
        "57|urgent|alice|2026-12-05T04:13:45\n12|x|bob|2026-12-05T03:00:00\n",
    )
    assert preemption("41_3") == Preemption(known=True, by="job 57 (urgent) of alice")
    # `scontrol requeue`: known at once, and nobody to name.
    _answers(tmp_path, "41_3|REQUEUED|2026-12-05T04:13:44|gpu-b\n" + pending, "")
    assert preemption("41_3") == Preemption(known=True, by=None)


def test_each_array_task_reads_its_own_item_and_writes_its_own_gpus() -> None:
    loaded = load_text('name = "w"\nimage = "img:1"\ncommand = "true"\ngpu = "H100"\n')
    assert loaded.workload is not None
    stage = loaded.workload.stages[0]
    task = Task("r1", "w", stage, 0, {}, item=Item(0, "a", 3))
    text = batch_script(task, "/w/work", "/w/main.array.devices", items="/w/items/main")
    assert 'export NODUS_ITEM_INDEX="$((SLURM_ARRAY_TASK_ID + 0))"' in text
    # Its index is its array task's plus the item index of its array's task 0 (a stage of
    # more items than MaxArraySize is several arrays, each numbered from 0).
    later = batch_script(task, "/w/work", "/w/d", items="/w/items/main", offset=20)
    assert 'export NODUS_ITEM_INDEX="$((SLURM_ARRAY_TASK_ID + 20))"' in later
    assert 'NODUS_ITEM="$(cat /w/items/main/"$NODUS_ITEM_INDEX")"' in text
    assert '> /w/main.array.devices."$NODUS_ITEM_INDEX"' in text
    assert "-e NODUS_ITEM " in text and "-e NODUS_ITEM_COUNT" in text


def test_each_array_task_writes_its_containers_end_and_runs_the_configured_runtime(
    tmp_path: Path,
) -> None:
    loaded = load_text('name = "w"\nimage = "img:1"\ncommand = "true"\ngpu = "H100"\n')
    assert loaded.workload is not None
    stage = loaded.workload.stages[0]
    task = Task("r1", "w", stage, 0, {}, item=Item(0, "a", 3))
    text = batch_script(
        task, "/w/work", "/w/main.array.devices", "/w/main.array.end", "podman", "/w/items/main"
    )
    assert '> /w/main.array.end."$NODUS_ITEM_INDEX"' in text
    assert "podman run" in text and "docker run" not in text
    # Each task's end is read with its own file: a container killed at its memory limit is
    # out of memory in words, whatever sacct kept of its 137.
    (tmp_path / "end.2").write_text("137 oom\n")
    ended = parse.Ended("41_2", "x", "FAILED", 9, 0, 6, "gpu-a")
    end = job_end(task, ended, tmp_path / "end.2")
    assert end.state == TaskState.OUT_OF_MEMORY and end.exit_code == 137
    assert "out of memory: it reached" in (end.message or "")
    assert job_end(task, ended, tmp_path / "missing").exit_code == 9


def test_a_job_whose_node_wrote_nothing_here_does_not_see_work_root(tmp_path: Path) -> None:
    # Single jobs and array tasks alike: the real-cluster test runs a single job under a
    # work_root its node cannot see (test_slurm_faults.py); an array task reads the same.
    ended = parse.Ended("41_2", "x", "FAILED", 1, 0, 6, "gpu-a")
    out, devices = tmp_path / "main.array.41_2.out", tmp_path / "main.array.devices.2"
    end = work_root_unseen(ended, tmp_path, Path("/shared/nodus"), out, devices)
    assert end is not None and end.state == TaskState.CANNOT_START
    assert end.message == (
        f"Slurm job 41_2 ran on gpu-a (FAILED) but nothing it wrote reached {tmp_path}: that "
        "node does not see [slurm] work_root /shared/nodus; set work_root to a folder every "
        "node mounts at the same path"
    )
    out.write_text("hello\n")
    assert work_root_unseen(ended, tmp_path, Path("/shared/nodus"), out, devices) is None
    never = parse.Ended("41_3", "x", "CANCELLED", 0, 0, 0, "None assigned")
    assert work_root_unseen(never, tmp_path, Path("/shared/nodus"), out, devices) is None


def test_max_array_size_is_read_from_scontrol_show_config_with_slurms_default() -> None:
    # As `scontrol show config` prints it (Slurm 22.05, the harness's cluster).
    shown = "KillWait                = 2 sec\nMaxArraySize            = 10\nMaxJobCount = 10000\n"
    assert parse.max_array_size(shown) == 10
    assert parse.max_array_size("MaxArraySize            = 0\n") == 0
    assert parse.max_array_size("KillWait = 2 sec\n") == parse.MAX_ARRAY_SIZE == 1001


def test_an_arrays_indices_are_listed_as_ranges() -> None:
    assert index_ranges([0, 1, 2, 3]) == "0-3"
    assert index_ranges([0, 1, 2, 3, 5, 7, 8, 9]) == "0-3,5,7-9"
    assert index_ranges([4]) == "4"


def test_parallel_holds_across_arrays_and_the_room_that_frees_goes_to_the_oldest() -> None:
    # Nothing submitted: all of parallel is room for the first array.
    assert shares(3, []) == ([], 3)
    # One array of 10 at %3, 10 items left: no room for the next one.
    assert shares(3, [(3, 10)]) == ([3], 0)
    # Its last 2 items run: room for 1 more task, in a new array.
    assert shares(3, [(3, 2)]) == ([3], 1)
    # The first array ended (0 left) while the second (%1) has 9 items waiting: its
    # throttle is raised to all of parallel, and nothing is left for a third.
    assert shares(3, [(3, 0), (1, 9)]) == ([3, 3], 0)
    # Two arrays with items waiting: the older one is raised first.
    assert shares(4, [(1, 1), (1, 5), (1, 5)]) == ([1, 2, 1], 0)
    # Without parallel (all items at once): every array at its size, room for the rest.
    assert shares(25, [(10, 10)]) == ([10], 15)
