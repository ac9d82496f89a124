# ruff: noqa: F811 - the fixtures imported are test parameters here
"""Faults against the harness's real Slurm (tests/harness/slurm.sh): names the cluster
does not have, a node drained under a running job, a job cancelled or timed out by Slurm,
a ``work_root`` the nodes do not see, and a job waiting behind others of higher priority.

Each says what happened in one line with the fix, leaves nothing of nodus queued or
running, and keeps the run's record (:class:`test_slurm.Nodus` runs ``nodus`` as a
subprocess; Slurm's own ``squeue``/``sacct`` say what it really did).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import Any

import pytest
from slurm_support import SlurmCluster, slurm_cluster  # noqa: F401 - fixture
from test_slurm import IMAGE, UNTIL_LET_GO, Nodus, nodus  # noqa: F401 - fixture

pytestmark = [pytest.mark.slurm, pytest.mark.docker]


def _ours(cluster: SlurmCluster) -> list[str]:
    """nodus's jobs Slurm still has queued or running."""
    text = cluster.run("squeue", "-h", "-o", "%i %j")
    return [line for line in text.splitlines() if " nodus-" in line]


def _jobs_of(cluster: SlurmCluster, run_id: str) -> list[str]:
    """Every job Slurm accounted for the run (each attempt one), once their ends reach
    its accounting: ``ID|STATE`` (the state without ``by UID``)."""

    def jobs(text: str) -> list[str]:
        return [
            f"{job}|{state.split()[0] if state else ''}"
            for job, name, state in (line.split("|") for line in text.splitlines() if line)
            if name.startswith(f"nodus-{run_id}-")
        ]

    text = cluster.poll(
        f"the jobs of run {run_id} accounted as ended",
        ["sacct", "-n", "-P", "-X", "-o", "JobIDRaw,JobName,State"],
        lambda out: (
            bool(jobs(out)) and not any(j.endswith(("|PENDING", "|RUNNING")) for j in jobs(out))
        ),
    )
    return jobs(text)


def _running(nodus: Nodus, proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The run of ``proc`` once it runs (else the failure shows what nodus said)."""
    try:
        return nodus.wait_for("the run running", lambda r: r["status"] == "running")
    except AssertionError as exc:
        proc.kill()
        out, _ = proc.communicate(timeout=30)
        raise AssertionError(f"{exc}; nodus said: {out}") from None


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("partition", "the Slurm cluster has no partition 'nope' with nodes (its partitions: gpu)"),
        ("account", "the Slurm cluster has no account 'nope'"),
    ],
)
def test_a_partition_or_account_that_does_not_exist_is_one_line_and_nothing_is_queued(
    nodus: Nodus, slurm_cluster: SlurmCluster, key: str, said: str
) -> None:
    nodus.config.write_text(f'[slurm]\nwork_root = "{nodus.tmp / "work_root"}"\n{key} = "nope"\n')
    done = nodus.run("run", nodus.workload("named", "true"), "--target", "slurm")
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: [slurm] {key} = 'nope': {said}\n"), done.stderr
    assert f"hint: set [slurm] {key} in config.toml to " in done.stderr
    assert "Traceback" not in done.stderr
    assert _ours(slurm_cluster) == []


def test_a_node_drained_under_a_running_job_is_said_and_the_job_ends_as_slurm_ends_it(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    workload = nodus.workload("drained", f"{UNTIL_LET_GO}; echo done")
    proc = nodus.popen("run", workload, "--target", "slurm")
    run = _running(nodus, proc)
    job, node = run["stages"][0]["job_id"], run["stages"][0]["node"]
    slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=disk swap")
    nodus.let_go(run["id"])  # drained while the job runs
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=resume")
        # Resumed, slurmctld may take a while to hear from it again (`idle*`).
        slurm_cluster.poll(
            f"node {node} idle and responding",
            ["sinfo", "-h", "-n", node, "-o", "%t"],
            lambda s: s.strip() == "idle",
            timeout=90,
        )
    # A drain lets the jobs on the node finish: the run ends as Slurm ended the job.
    assert proc.returncode == 0, out
    assert f"nodus: node {node} is " in out
    assert "drain (disk swap" in out  # Slurm adds who drained it, and when
    assert f"drained under Slurm job {job}, which Slurm lets run to its end; no new job" in out
    assert f"(scontrol update nodename={node} state=resume)" in out
    assert "done" in out
    assert nodus.runs()[0]["status"] == "succeeded"
    assert _jobs_of(slurm_cluster, run["id"]) == [f"{job}|COMPLETED"]


def test_a_job_cancelled_outside_nodus_is_recorded_so_and_not_retried(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    proc = nodus.popen("run", nodus.workload("outside", "sleep 120"), "--target", "slurm")
    run = _running(nodus, proc)
    job = run["stages"][0]["job_id"]
    slurm_cluster.run("scancel", job)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    ended = nodus.runs()[0]
    assert ended["status"] == "failed", ended
    assert f"Slurm job {job}: cancelled outside nodus (scancel) (CANCELLED)" in ended["message"]
    assert "retrying" not in out
    assert _jobs_of(slurm_cluster, run["id"]) == [f"{job}|CANCELLED"]
    assert _ours(slurm_cluster) == []


def test_a_job_that_reaches_its_time_limit_is_recorded_timeout_and_not_retried(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    path = nodus.tmp / "slow.toml"
    path.write_text(
        f'name = "slow"\nimage = "{IMAGE}"\ncommand = "sleep 300"\ngpu = "H100"\nbudget = 0.06\n'
    )
    proc = nodus.popen("run", path, "--target", "slurm")
    run = _running(nodus, proc)
    job = run["stages"][0]["job_id"]
    # The budget at the node's price buys one minute: Slurm's time limit.
    shown = slurm_cluster.run("scontrol", "show", "job", job, "--oneliner")
    assert " TimeLimit=00:01:00 " in shown
    slurm_cluster.run("scontrol", "update", f"jobid={job}", "timelimit=0:02")  # sooner
    out, _ = proc.communicate(timeout=150)
    assert proc.returncode != 0, out
    ended = nodus.runs()[0]
    assert ended["status"] == "failed", ended
    assert f"Slurm job {job}: Slurm ended it at its time limit (TIMEOUT)" in ended["message"]
    assert "retrying" not in out
    assert _jobs_of(slurm_cluster, run["id"]) == [f"{job}|TIMEOUT"]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_work_root_the_nodes_do_not_see_is_said_with_the_fix_not_a_hang(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    # nodus sees work_root on a file system of its own (a tmpfs in its own mount
    # namespace); the nodes see the empty folder beneath it, as a login node's local disk.
    root = nodus.tmp / "work_root"
    root.mkdir()
    done = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount -t tmpfs nodus-local "$0" && exec "$@"',
            str(root),
            sys.executable,
            "-m",
            "nodus_cli",
            "run",
            str(nodus.workload("unshared", "true")),
            "--target",
            "slurm",
        ],
        capture_output=True,
        text=True,
        env=nodus.environ(),
        timeout=120,
        check=False,
    )
    assert done.returncode not in (0, None), done.stdout + done.stderr
    (run,) = nodus.runs()
    stage = run["stages"][0]
    assert run["status"] == "failed"
    assert f"Slurm job {stage['job_id']} ran on {stage['node']}" in run["message"]
    assert f"that node does not see [slurm] work_root {root}" in run["message"]
    assert "every node mounts at the same path" in run["message"]
    assert "retrying" not in done.stdout + done.stderr
    assert list(root.iterdir()) == []  # nothing reached the folder the nodes see
    assert _ours(slurm_cluster) == []


def test_a_job_behind_others_of_higher_priority_names_them(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    hold = slurm_cluster.run(
        "sbatch", "--parsable", "--gres=gpu:h100:2", "-o", "/dev/null", "--wrap", "sleep 120"
    ).strip()
    slurm_cluster.poll(
        f"job {hold} running", ["squeue", "-h", "-j", hold, "-o", "%T"], lambda s: "RUNNING" in s
    )
    ahead = slurm_cluster.run(
        "sbatch",
        "--parsable",
        "--gres=gpu:h100:1",
        "--job-name=first-in-line",
        "-o",
        "/dev/null",
        "--wrap",
        "true",
    ).strip()
    try:
        proc = nodus.popen(
            "run", nodus.workload("behind", "true"), "--target", "slurm", "--priority", "10"
        )
        queued = nodus.wait_for(
            "the run queued behind job {ahead}",
            lambda r: r["status"] == "queued" and "(Priority)" in r["stages"][0]["message"],
        )
        message = queued["stages"][0]["message"]
        assert "waiting behind 1 job of higher priority in Slurm's queue (Priority): " in message
        assert f"job {ahead} (first-in-line) by root" in message
    finally:
        slurm_cluster.cancel(hold, ahead)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert nodus.runs()[0]["status"] == "succeeded"
