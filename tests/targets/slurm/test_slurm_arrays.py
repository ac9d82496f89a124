# ruff: noqa: F811 - the fixtures imported are test parameters here
"""Fan-out stages as job arrays, ``priority`` as ``--nice``, and requeued jobs, against the
harness's real Slurm (tests/harness/slurm.sh; node ``gpu-b`` has 2 ``a100``).

Each test runs ``nodus`` as a subprocess (:class:`test_slurm.Nodus`) and looks at what
Slurm itself says (``scontrol``, ``sacct``, ``squeue``) about the jobs nodus submitted.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from slurm_support import SlurmCluster, slurm_cluster  # noqa: F401 - fixture
from test_slurm import IMAGE, UNTIL_LET_GO, Nodus, nodus  # noqa: F401 - fixture

pytestmark = [pytest.mark.slurm, pytest.mark.docker]


def _fan(nodus: Nodus, name: str, command: str, items: list[str], extra: str = "") -> Path:
    path = nodus.tmp / f"{name}.toml"
    shown = ", ".join(json.dumps(i) for i in items)
    path.write_text(
        f'name = "{name}"\nimage = "{IMAGE}"\ncommand = "{command}"\n'
        f'gpu = "A100"\n{extra}[map]\nitems = [{shown}]\nparallel = 2\n'
    )
    return path


#: A command whose first run lasts until it is preempted or requeued (two minutes: however
#: slow the machine, the test's action lands while it runs) and whose retry ends at once:
#: the first leaves a mark in the run's shared work folder.
_UNTIL_RETRIED = "test -e $NODUS_WORK_DIR/{name} || {{ touch $NODUS_WORK_DIR/{name}; sleep 120; }}"


def _tasks(nodus: Nodus, run_id: str) -> list[dict[str, Any]]:
    shown = nodus.run("runs", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return list(json.loads(shown.stdout)["stages"][0]["tasks"])


def _accounted(cluster: SlurmCluster, array: str, count: int) -> list[str]:
    """``JobID|State|ExitCode`` of each task of ``array`` once all have ended."""
    out = cluster.poll(
        f"the {count} tasks of array {array} accounted as ended",
        ["sacct", "-n", "-P", "-X", "-j", array, "-o", "JobID,State,ExitCode"],
        lambda out: len(out.split()) == count and not any(s in out for s in ("PENDING", "RUNNING")),
    )
    return sorted(out.split())


def test_a_fan_out_stage_is_one_job_array_with_each_items_variables_and_end(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    command = (
        'echo item $NODUS_ITEM $NODUS_ITEM_INDEX of $NODUS_ITEM_COUNT; test \\"$NODUS_ITEM\\" != b'
    )
    done = nodus.run("run", _fan(nodus, "fan", command, ["a", "b", "c d"]), "--target", "slurm")
    assert done.returncode == 1, done.stdout + done.stderr
    for line in ("item a 0 of 3", "item b 1 of 3", "item c d 2 of 3"):
        assert line in done.stdout
    assert "3 items as one submission, up to 2 at once" in done.stderr
    run = nodus.runs()[0]
    assert "1 of 3 items failed (items 1; item 1 exited with 1)" in run["message"]
    tasks = _tasks(nodus, run["id"])
    array = tasks[0]["job_id"].split("_")[0]
    assert [(t["job_id"], t["status"], t["node"], len(t["devices"])) for t in tasks] == [
        (f"{array}_0", "succeeded", "gpu-b", 1),
        (f"{array}_1", "failed", "gpu-b", 1),
        (f"{array}_2", "succeeded", "gpu-b", 1),
    ]
    # One submission: Slurm knows the three as tasks of one array, at most 2 at once.
    shown = slurm_cluster.run("scontrol", "show", "job", array)
    assert "ArrayTaskThrottle=2" in shown
    assert _accounted(slurm_cluster, array, 3) == [
        f"{array}_0|COMPLETED|0:0",
        f"{array}_1|FAILED|1:0",
        f"{array}_2|COMPLETED|0:0",
    ]


def test_a_killed_nodus_leaves_the_array_running_and_the_next_command_records_each_item(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    path = _fan(nodus, "outlives", f"{UNTIL_LET_GO}; test $NODUS_ITEM = a", ["a", "b"])
    proc = nodus.popen("run", path, "--target", "slurm")
    run = nodus.wait_for("the run running", lambda r: r["status"] == "running")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    tasks = _tasks(nodus, run["id"])
    array = tasks[0]["job_id"].split("_")[0]
    # What the cluster says of it meanwhile: the array's tasks as squeue has them.
    assert nodus.runs()[0]["cluster"].startswith(f"main: Slurm job array {array}: ")
    nodus.let_go(run["id"])
    # The array is the cluster's: it goes on, and nodus does not cancel it meanwhile.
    assert _accounted(slurm_cluster, array, 2) == [
        f"{array}_0|COMPLETED|0:0",
        f"{array}_1|FAILED|1:0",
    ]
    ended = nodus.wait_for("its end recorded", lambda r: r["status"] != "running")
    assert (ended["status"], ended["exit_code"]) == ("failed", 1)
    assert (
        f"Slurm job array {array} went on: stage 'main': 1 of 2 items failed" in (ended["message"])
    )
    assert [(t["status"], t["exit_code"]) for t in _tasks(nodus, run["id"])] == [
        ("succeeded", 0),
        ("failed", 1),
    ]


def test_priority_below_the_default_reaches_the_job_as_nice(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    done = nodus.run(
        "run", nodus.workload("gentle", "true"), "--target", "slurm", "--priority", "10"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    job = nodus.runs()[0]["stages"][0]["job_id"]
    assert "Nice=4000" in slurm_cluster.run("scontrol", "show", "job", job)

    done = nodus.run("run", nodus.workload("plain", "true"), "--target", "slurm")
    assert done.returncode == 0, done.stdout + done.stderr
    job = nodus.runs()[0]["stages"][0]["job_id"]
    assert "Nice=0" in slurm_cluster.run("scontrol", "show", "job", job)


def test_a_job_slurm_requeues_is_said_and_retried_with_the_same_model_and_count(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    workload = nodus.workload("bumped", _UNTIL_RETRIED.format(name="ran"), gpu="A100")
    proc = nodus.popen("run", workload, "--target", "slurm", "--retries", "1")
    run = nodus.wait_for("the run running", lambda r: r["status"] == "running")
    first = run["stages"][0]["job_id"]
    slurm_cluster.run("scontrol", "requeue", first)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert f"Slurm requeued job {first} after it started" in out
    assert "retrying with the same 1× A100 (attempt 2 of 2)" in out
    stage = nodus.runs()[0]["stages"][0]
    assert stage["status"] == "succeeded" and stage["node"] == "gpu-b"
    assert stage["job_id"] != first
    assert nodus.run("runs", "--json").returncode == 0


def test_a_requeued_job_without_retries_fails_the_run_in_words(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    proc = nodus.popen("run", nodus.workload("bumped", "sleep 30"), "--target", "slurm")
    run = nodus.wait_for("the run running", lambda r: r["status"] == "running")
    first = run["stages"][0]["job_id"]
    slurm_cluster.run("scontrol", "requeue", first)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    ended = nodus.runs()[0]
    assert ended["status"] == "failed"
    assert f"Slurm requeued job {first} after it started" in ended["message"]
    # Nothing reruns behind nodus's back: the requeued job was cancelled.
    assert not slurm_cluster.run("squeue", "-h", "-j", first, check=False).strip()


def test_a_single_job_preempted_by_a_job_of_higher_priority_names_it_and_is_retried(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    # The harness's QOS `urgent` preempts QOS normal (every job's), with PreemptMode=REQUEUE.
    workload = nodus.workload("bumped", _UNTIL_RETRIED.format(name="ran"), gpu="A100", count=2)
    proc = nodus.popen("run", workload, "--target", "slurm", "--retries", "1")
    run = nodus.wait_for("the run running", lambda r: r["stages"][0].get("node"))
    first = run["stages"][0]["job_id"]
    urgent = slurm_cluster.run(
        "sbatch", "--parsable", "--qos=urgent", "-J", "urgent", "--gres=gpu:a100:2",
        "-o", "/dev/null", "--wrap", "sleep 5",
    ).strip()  # fmt: skip
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert (
        f"Slurm job {first} was preempted by job {urgent} (urgent) of root and requeued; "
        "nodus cancelled the requeued job"
    ) in out
    assert "retrying with the same 2× A100 (attempt 2 of 2)" in out
    stage = nodus.runs()[0]["stages"][0]
    assert stage["status"] == "succeeded" and stage["job_id"] != first
    runs = slurm_cluster.run("sacct", "-D", "-n", "-P", "-X", "-j", first, "-o", "State")
    assert runs.split()[0] == "PREEMPTED", runs


def test_items_preempted_by_a_job_of_higher_priority_are_said_and_retried(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    # The harness's QOS `urgent` preempts QOS normal (every job's), with PreemptMode=REQUEUE.
    proc = nodus.popen(
        "run",
        _fan(nodus, "bumped", _UNTIL_RETRIED.format(name="ran.$NODUS_ITEM_INDEX"), ["a", "b"]),
        "--target",
        "slurm",
        "--retries",
        "1",
    )
    run = nodus.wait_for("the run running", lambda r: r["status"] == "running")
    deadline = time.monotonic() + 60
    while not all(t["node"] for t in _tasks(nodus, run["id"])):  # both A100 of gpu-b held
        assert time.monotonic() < deadline, _tasks(nodus, run["id"])
        time.sleep(0.5)
    array = _tasks(nodus, run["id"])[0]["job_id"].split("_")[0]
    urgent = slurm_cluster.run(
        "sbatch", "--parsable", "--qos=urgent", "-J", "urgent", "--gres=gpu:a100:2",
        "-o", "/dev/null", "--wrap", "sleep 5",
    ).strip()  # fmt: skip
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    # Said in words, with who took its place, and retried with the same model and count.
    for index in (0, 1):
        assert (
            f"Slurm job {array}_{index} was preempted by job {urgent} (urgent) of root and "
            "requeued; nodus cancelled the requeued job"
        ) in out
    assert out.count("retrying with the same 1× A100 (attempt 2 of 2)") == 2
    tasks = _tasks(nodus, run["id"])
    assert [(t["status"], t["node"]) for t in tasks] == [("succeeded", "gpu-b")] * 2
    assert all("_" not in t["job_id"] for t in tasks)  # each retry a job of its own
    # What Slurm itself recorded of the first run: preempted, then cancelled by nodus.
    runs = slurm_cluster.run("sacct", "-D", "-n", "-P", "-X", "-j", f"{array}_0", "-o", "State")
    assert runs.split()[0] == "PREEMPTED", runs
    assert not slurm_cluster.run("squeue", "-h", "-j", array, check=False).strip()
