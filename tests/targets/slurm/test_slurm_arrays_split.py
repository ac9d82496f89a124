# ruff: noqa: F811 - the fixtures imported are test parameters here
"""A fan-out stage of more items than the cluster's ``MaxArraySize`` as several job arrays,
against the harness's real Slurm (tests/harness/slurm.sh sets ``MaxArraySize=10``: an
array's indices are 0 to 9, and Slurm refuses ``--array=0-24``).

The items here ask for no GPU: each takes one of the 4 CPUs of the two nodes, so the
cluster could run 4 at once and ``parallel = 3`` is what holds them to 3.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from slurm_support import SlurmCluster, slurm_cluster  # noqa: F401 - fixture
from test_slurm import IMAGE, UNTIL_LET_GO, Nodus, nodus  # noqa: F401 - fixture

pytestmark = [pytest.mark.slurm, pytest.mark.docker]

#: The harness's MaxArraySize.
MAX_ARRAY_SIZE = 10


def _fan(
    nodus: Nodus, name: str, command: str, count: int, parallel: int | None, gpu: str = ""
) -> Path:
    path = nodus.tmp / f"{name}.toml"
    items = ", ".join(json.dumps(f"i{n}") for n in range(count))
    limit = f"parallel = {parallel}\n" if parallel is not None else ""
    wants = f'gpu = "{gpu}"\n' if gpu else ""
    path.write_text(
        f'name = "{name}"\nimage = "{IMAGE}"\ncommand = "{command}"\n{wants}'
        f"[map]\nitems = [{items}]\n{limit}"
    )
    return path


def _tasks(nodus: Nodus, run_id: str) -> list[dict[str, Any]]:
    shown = nodus.run("runs", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return list(json.loads(shown.stdout)["stages"][0]["tasks"])


def _arrays(tasks: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Each array's job id and the item indices it ran, from the items' job ids."""
    arrays: dict[str, list[int]] = {}
    for t in tasks:
        array, _, task = t["job_id"].partition("_")
        arrays.setdefault(array, []).append(int(task))
    return arrays


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of ``spans`` (start, end) that overlap at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = now = 0
    for _, step in edges:  # an end sorts before a start at the same moment
        now += step
        most = max(most, now)
    return most


def test_more_items_than_max_array_size_are_several_arrays_with_parallel_across_them(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    # Each item says its variables and writes when its container ran, to NODUS_WORK_DIR
    # (the kernel's uptime: one clock for every container of this machine).
    up = "$(awk '{print $1}' /proc/uptime)"
    command = (
        "echo item $NODUS_ITEM $NODUS_ITEM_INDEX of $NODUS_ITEM_COUNT; "
        f"s={up}; sleep 1; echo $s {up} > $NODUS_WORK_DIR/$NODUS_ITEM_INDEX"
    )
    done = nodus.run("run", _fan(nodus, "wide", command, 25, 3), "--target", "slurm", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "25 items as one submission, up to 3 at once" in done.stderr
    # Every item with its own global index and the stage's count, across the arrays.
    for n in range(25):
        assert f"item i{n} {n} of 25" in done.stdout
    run = nodus.runs()[0]
    tasks = _tasks(nodus, run["id"])
    assert [(t["index"], t["status"]) for t in tasks] == [(n, "succeeded") for n in range(25)]
    # Three arrays of 10, 10 and 5 tasks, each numbered from 0 (Slurm refuses index 10):
    # item 13 is task 3 of the second array.
    arrays = _arrays(tasks)
    assert sorted(arrays.values()) == [list(range(5)), list(range(10)), list(range(10))]
    first, second, third = sorted(arrays, key=int)
    assert tasks[13]["job_id"] == f"{second}_3" and tasks[24]["job_id"] == f"{third}_4"
    for array in arrays:
        shown = slurm_cluster.run("scontrol", "show", "job", array)
        throttles = {int(w.split("=")[1]) for w in shown.split() if "ArrayTaskThrottle=" in w}
        assert throttles and max(throttles) <= 3, shown
    # parallel = 3 held across the arrays: never more than 3 items ran at once.
    work = nodus.tmp / "work_root" / run["id"] / "work"
    spans = [tuple(map(float, (work / str(n)).read_text().split())) for n in range(25)]
    assert _most_at_once([(a, b) for a, b in spans]) <= 3
    sacct = slurm_cluster.run(
        "sacct", "-n", "-P", "-X", "-j", f"{first},{second},{third}", "-o", "JobID,State"
    )
    assert sorted(sacct.split()) == sorted(f"{t['job_id']}|COMPLETED" for t in tasks)


def test_a_killed_nodus_leaves_every_array_running_and_the_next_command_records_each_item(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    # Without parallel both arrays (10 items and 2) are submitted at once.
    path = _fan(nodus, "outlives", f"{UNTIL_LET_GO}; test $NODUS_ITEM != i11", 12, None)
    proc = nodus.popen("run", path, "--target", "slurm")
    run = nodus.wait_for("the run running", lambda r: r["status"] == "running")
    nodus.wait_for(
        "both arrays submitted",
        lambda r: all(t["job_id"] for t in _tasks(nodus, r["id"])),
    )
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    arrays = _arrays(_tasks(nodus, run["id"]))
    assert sorted(arrays.values()) == [list(range(2)), list(range(10))]
    first, second = sorted(arrays, key=int)
    # What the cluster says of it meanwhile: both arrays, as squeue has them.
    said = nodus.runs()[0]["cluster"]
    assert said.startswith(f"main: Slurm job array {first}, {second}"), said
    nodus.let_go(run["id"])
    ended = nodus.wait_for("its end recorded", lambda r: r["status"] != "running", timeout=120)
    assert (ended["status"], ended["exit_code"]) == ("failed", 1)
    assert (
        f"Slurm job array {first}, {second} went on: stage 'main': 1 of 12 items failed "
        "(item 11: exited with 1)"
    ) in ended["message"]
    tasks = _tasks(nodus, run["id"])
    assert [(t["index"], t["status"], t["job_id"]) for t in tasks[9:]] == [
        (9, "succeeded", f"{first}_9"),
        (10, "succeeded", f"{second}_0"),
        (11, "failed", f"{second}_1"),
    ]


def test_stop_cancels_every_array_and_submits_no_more(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    # parallel = 2 of 25: the first array only, until two of its items end.
    proc = nodus.popen("run", _fan(nodus, "long", "sleep 60", 25, 2), "--target", "slurm")
    run = nodus.wait_for("the run running", lambda r: r["status"] == "running")
    done = nodus.run("stop", run["id"])
    assert done.returncode == 0, done.stdout + done.stderr
    proc.communicate(timeout=60)
    assert nodus.runs()[0]["status"] == "cancelled"
    tasks = _tasks(nodus, run["id"])
    arrays = _arrays([t for t in tasks if t["job_id"]])
    assert list(arrays.values()) == [list(range(10))]  # the next array never submitted
    assert {t["status"] for t in tasks} == {"cancelled"}
    left = slurm_cluster.run("squeue", "-h", "-r", "-j", next(iter(arrays)), "-o", "%i")
    assert not left.strip()


def test_a_killed_nodus_whose_next_array_was_never_submitted_fails_those_items_in_words(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    # parallel = 10 of 12: the second array waits until an item of the first one ends,
    # and nodus is killed before (no item ends until the test lets them go on).
    proc = nodus.popen("run", _fan(nodus, "cut", UNTIL_LET_GO, 12, 10), "--target", "slurm")
    run = nodus.wait_for("the run running", lambda r: r["status"] == "running")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    nodus.let_go(run["id"])
    ended = nodus.wait_for("its end recorded", lambda r: r["status"] != "running", timeout=120)
    tasks = _tasks(nodus, run["id"])
    (array,) = _arrays(tasks[:10])
    assert [(t["status"], t["job_id"]) for t in tasks] == [
        *(("succeeded", f"{array}_{n}") for n in range(10)),
        ("skipped", None),  # never started: the records' word for it
        ("skipped", None),
    ]
    assert ended["status"] == "failed"
    assert (
        f"Slurm job array {array} went on: stage 'main': 2 of 12 items failed (item 10: nodus "
        "ended before it submitted it to Slurm (or recorded its job))"
    ) in ended["message"]


def test_no_wait_cancels_the_first_array_and_submits_no_other(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    hold = slurm_cluster.run(
        "sbatch", "--parsable", "--gres=gpu:h100:2", "-o", "/dev/null", "--wrap", "sleep 120"
    ).strip()
    try:
        path = _fan(nodus, "nowait", "true", 12, 10, gpu="H100")
        done = nodus.run("run", path, "--target", "slurm", "--no-wait")
    finally:
        slurm_cluster.cancel(hold)
    assert done.returncode == 3, done.stdout + done.stderr
    tasks = _tasks(nodus, nodus.runs()[0]["id"])
    assert {(t["status"], t["exit_code"]) for t in tasks} == {("failed", 3)}
    (array,) = _arrays(tasks[:10])
    assert "--no-wait: Slurm could not start job" in tasks[0]["message"]
    # The second array is never submitted: its items end with the first one's words.
    assert [t["job_id"] for t in tasks[10:]] == [None, None]
    assert tasks[11]["message"].startswith("--no-wait: Slurm could not start stage 'main' at once")
    assert tasks[11]["message"].endswith("; item 11 not submitted")
    assert _accounted_states(slurm_cluster, array) == {"CANCELLED"}


def _accounted_states(cluster: SlurmCluster, array: str) -> set[str]:
    out = cluster.poll(
        f"array {array} accounted as ended",
        ["sacct", "-n", "-P", "-X", "-j", array, "-o", "State"],
        lambda out: bool(out.strip()) and not any(s in out for s in ("PENDING", "RUNNING")),
    )
    return {line.split()[0] for line in out.split("\n") if line.strip()}
