# ruff: noqa: F811 - the fixtures imported from slurm_support are test parameters here
"""``--target slurm`` against the harness's real cluster (tests/harness/slurm.sh).

Node ``gpu-a`` has 2 ``h100`` and ``gpu-b`` 2 ``a100`` stand-in GPUs; each task is a
real ``sbatch`` job whose script runs the image on this machine's Docker engine (the
nodes share it) with the GPUs Slurm allocated. Each test runs ``nodus`` as a subprocess
with its own state folder and a ``work_root`` under it (the nodes are on this machine,
so it is shared), and cancels the jobs it submitted itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from command_support import NodusCommand
from slurm_support import SlurmCluster, slurm_cluster  # noqa: F401 - fixture

pytestmark = [pytest.mark.slurm, pytest.mark.docker]

IMAGE = "nodus-test/busybox:1"
#: A command that waits until the test lets it go on (:meth:`Nodus.let_go`): what the test
#: does to the job meanwhile lands while it runs, however slow the machine (a job that
#: sleeps a few seconds may end first on a loaded one).
UNTIL_LET_GO = "until test -e $NODUS_WORK_DIR/go; do sleep 0.2; done"


class Nodus(NodusCommand):
    """``nodus`` with its own NODUS_HOME and a [slurm] configuration."""

    image = IMAGE
    timeout = 120

    def __init__(self, cluster: SlurmCluster, tmp: Path) -> None:
        super().__init__(tmp, f'[slurm]\nwork_root = "{tmp / "work_root"}"\nprice_per_hour = 3.6\n')
        self.cluster = cluster

    def target_environ(self) -> dict[str, str]:
        return self.cluster.environ()

    def let_go(self, run_id: str) -> None:
        """Let the commands of run ``run_id`` that wait in :data:`UNTIL_LET_GO` go on."""
        (self.tmp / "work_root" / run_id / "work" / "go").touch()


@pytest.fixture
def nodus(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Nodus]:
    yield Nodus(slurm_cluster, tmp_path)
    text = slurm_cluster.run("squeue", "-h", "-o", "%i %j")
    ours = [line.split()[0] for line in text.splitlines() if " nodus-" in line]
    if ours:
        slurm_cluster.cancel(*ours)


def _sacct(cluster: SlurmCluster, job: str) -> str:
    return cluster.poll(
        f"job {job} accounted as ended",
        ["sacct", "-n", "-P", "-X", "-j", job, "-o", "State,ExitCode"],
        lambda out: bool(out.strip()) and not out.startswith(("PENDING", "RUNNING")),
    ).strip()


def test_nodes_show_each_model_from_its_gres_type(nodus: Nodus) -> None:
    done = nodus.run("nodes", "--target", "slurm", "--json")
    assert done.returncode == 0, done.stderr
    nodes = {n["hostname"]: n for n in json.loads(done.stdout)["nodes"]}
    assert {k: (n["gpu"], n["gpus"], n["gres_type"]) for k, n in nodes.items()} == {
        "gpu-a": ("H100", 2, "h100"),
        "gpu-b": ("A100", 2, "a100"),
    }
    assert nodes["gpu-a"]["cpus"] == 2 and nodes["gpu-a"]["partitions"] == ["gpu"]
    assert nodes["gpu-a"]["price_per_hour"] == 3.6


def test_a_node_without_a_price_says_so_and_a_declared_0_is_a_price(nodus: Nodus) -> None:
    nodus.config.write_text(
        f'[slurm]\nwork_root = "{nodus.tmp / "work_root"}"\nprices = {{ gpu-b = 0 }}\n'
    )
    hint = "set [slurm] price_per_hour or [slurm] prices in config.toml"
    done = nodus.run("nodes", "--target", "slurm", "--json")
    assert done.returncode == 0, done.stderr
    nodes = {n["hostname"]: n for n in json.loads(done.stdout)["nodes"]}
    assert {k: (n["price_per_hour"], n["price_source"]) for k, n in nodes.items()} == {
        "gpu-a": (0.0, "not set"),
        "gpu-b": (0.0, "[slurm] prices: 'gpu-b' (the node)"),
    }
    assert nodes["gpu-a"]["price_hint"] == hint and "price_hint" not in nodes["gpu-b"]
    done = nodus.run("nodes", "--target", "slurm")
    assert f"note: price not set for node gpu-a: {hint}" in done.stdout
    done = nodus.run("plan", nodus.workload("h100", "true"), "--target", "slurm")
    assert done.returncode == 0, done.stderr
    assert (
        "note: price not set for node gpu-a: $/h shows $0.00, and what a run there costs is "
        f"unknown (recorded as $0.00): {hint}"
    ) in done.stdout
    done = nodus.run("run", nodus.workload("h100", "true"), "--target", "slurm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "succeeded (exit 0, cost unknown)" in done.stdout + done.stderr
    (run,) = nodus.runs()
    config = run["stages"][0]["configuration"]
    assert (run["cost"], config["price_known"], config["price_source"]) == (0.0, False, "not set")


def test_a_drained_node_is_explained_and_an_impossible_request_refused_before_sbatch(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    slurm_cluster.run("scontrol", "update", "nodename=gpu-b", "state=drain", "reason=fan broken")
    try:
        done = nodus.run("plan", nodus.workload("a100", "true", gpu="A100"), "--target", "slurm")
        assert done.returncode == 3, done.stdout + done.stderr
        assert "node gpu-b is idle+drain (fan broken" in done.stdout + done.stderr
    finally:
        slurm_cluster.run("scontrol", "update", "nodename=gpu-b", "state=resume")
    done = nodus.run("run", nodus.workload("eight", "true", count=8), "--target", "slurm")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "no node of the Slurm cluster can run stage 'main'" in done.stderr
    assert "nearest fit: node gpu-a (2× H100, 2 CPUs" in done.stderr
    done = nodus.run("run", nodus.workload("l4", "true", gpu="L4"), "--target", "slurm")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "no node in this inventory has L4 GPUs" in done.stderr
    assert " nodus-" not in slurm_cluster.run("squeue", "-h", "-o", "%i %j")


def test_a_controller_that_does_not_answer_is_one_line_with_the_fix(
    nodus: Nodus, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    wrong = tmp_path / "slurm.conf"
    wrong.write_text(
        slurm_cluster.conf.read_text().replace("SlurmctldPort=16817", "SlurmctldPort=16999")
    )
    done = subprocess.run(
        [sys.executable, "-m", "nodus_cli", "nodes", "--target", "slurm"],
        capture_output=True,
        text=True,
        env={**nodus.environ(), "SLURM_CONF": str(wrong)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 3
    assert done.stderr.startswith("error: the Slurm controller does not answer: ")
    assert "hint: check that slurmctld runs (`scontrol ping`)" in done.stderr
    assert "Traceback" not in done.stderr


def test_no_slurm_configuration_here_is_one_line_with_the_fix(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    # Slurm's commands installed, but nothing tells them which cluster: no SLURM_CONF,
    # no /etc/slurm/slurm.conf (the harness keeps its own), no DNS SRV record.
    env = {k: v for k, v in nodus.environ().items() if k != "SLURM_CONF"}
    done = subprocess.run(
        [sys.executable, "-m", "nodus_cli", "nodes", "--target", "slurm"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3
    assert done.stderr.startswith(
        "error: Slurm's commands here find no configuration of a cluster (`scontrol`: "
    )
    assert "hint: set SLURM_CONF to the cluster's slurm.conf" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_work_root_nodus_cannot_write_is_refused_before_sbatch(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    blocker = nodus.tmp / "a-file"
    blocker.write_text("")
    nodus.config.write_text(f'[slurm]\nwork_root = "{blocker / "sub"}"\n')
    done = nodus.run("run", nodus.workload("nowhere", "true"), "--target", "slurm")
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"error: the Slurm work_root {blocker / 'sub'} is not writable" in done.stderr
    assert "every node sees at the same path" in done.stderr
    assert " nodus-" not in slurm_cluster.run("squeue", "-h", "-o", "%i %j")


def test_a_run_of_true_and_of_exit_3_are_recorded_with_their_jobs(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    done = nodus.run(
        "run", nodus.workload("ok", "echo hello from $NODUS_STAGE"), "--target", "slurm"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hello from main" in done.stdout
    (ok,) = nodus.runs()
    stage = ok["stages"][0]
    assert (ok["status"], stage["node"], len(stage["gpus"])) == ("succeeded", "gpu-a", 1)
    assert _sacct(slurm_cluster, stage["job_id"]) == "COMPLETED|0:0"

    done = nodus.run("run", nodus.workload("three", "exit 3", gpu="A100"), "--target", "slurm")
    assert done.returncode == 3, done.stdout + done.stderr
    failed = nodus.runs()[0]
    assert (failed["status"], failed["exit_code"]) == ("failed", 3)
    assert failed["stages"][0]["node"] == "gpu-b"
    assert _sacct(slurm_cluster, failed["stages"][0]["job_id"]) == "FAILED|3:0"


def test_a_pending_job_is_queued_with_slurms_reason(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    hold = slurm_cluster.run(
        "sbatch", "--parsable", "--gres=gpu:h100:2", "-o", "/dev/null", "--wrap", "sleep 120"
    ).strip()
    try:
        proc = nodus.popen("run", nodus.workload("waits", "true"), "--target", "slurm")
        # Slurm may say Priority for a moment before Resources.
        queued = nodus.wait_for(
            "the run queued for Resources",
            lambda r: r["status"] == "queued" and "(Resources)" in r["stages"][0]["message"],
        )
        message = queued["stages"][0]["message"]
        assert "waiting for GPUs" in message
        assert f"held by job {hold} (wrap) on gpu-a" in message
    finally:
        slurm_cluster.cancel(hold)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert nodus.runs()[0]["status"] == "succeeded"


def test_no_wait_cancels_a_job_slurm_cannot_start_at_once(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    hold = slurm_cluster.run(
        "sbatch", "--parsable", "--gres=gpu:h100:2", "-o", "/dev/null", "--wrap", "sleep 120"
    ).strip()
    try:
        done = nodus.run("run", nodus.workload("nowait", "true"), "--target", "slurm", "--no-wait")
    finally:
        slurm_cluster.cancel(hold)
    assert done.returncode == 3, done.stdout + done.stderr
    (run,) = nodus.runs()
    assert "--no-wait: Slurm could not start job" in run["stages"][0]["message"]
    assert _sacct(slurm_cluster, run["stages"][0]["job_id"]).startswith("CANCELLED")


def test_wait_timeout_cancels_a_job_that_waited_too_long_and_records_it_failed(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    hold = slurm_cluster.run(
        "sbatch", "--parsable", "--gres=gpu:h100:2", "-o", "/dev/null", "--wrap", "sleep 120"
    ).strip()
    try:
        done = nodus.run(
            "run", nodus.workload("patience", "true"), "--target", "slurm", "--wait-timeout", "3s"
        )
    finally:
        slurm_cluster.cancel(hold)
    assert done.returncode == 3, done.stdout + done.stderr
    (run,) = nodus.runs()
    assert run["status"] == "failed"
    assert "gave up after waiting 3 s (wait_timeout)" in run["message"]
    assert _sacct(slurm_cluster, run["stages"][0]["job_id"]).startswith("CANCELLED")


def test_a_fan_out_stage_runs_each_item_as_a_job_with_its_variables(nodus: Nodus) -> None:
    path = nodus.tmp / "fan.toml"
    path.write_text(
        f'name = "fan"\nimage = "{IMAGE}"\n'
        'command = "echo item $NODUS_ITEM $NODUS_ITEM_INDEX of $NODUS_ITEM_COUNT"\n'
        'gpu = "A100"\n[map]\nitems = ["a", "b"]\n'
    )
    done = nodus.run("run", path, "--target", "slurm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "item a 0 of 2" in done.stdout and "item b 1 of 2" in done.stdout
    shown = nodus.run("runs", nodus.runs()[0]["id"], "--json")
    tasks = json.loads(shown.stdout)["stages"][0]["tasks"]
    assert [(t["status"], t["node"], bool(t["job_id"])) for t in tasks] == [
        ("succeeded", "gpu-b", True),
        ("succeeded", "gpu-b", True),
    ]


def test_stop_cancels_the_job(nodus: Nodus, slurm_cluster: SlurmCluster) -> None:
    proc = nodus.popen("run", nodus.workload("long", "sleep 120"), "--target", "slurm")
    run = nodus.wait_for("the run running", lambda r: r["status"] == "running")
    job = run["stages"][0]["job_id"]
    done = nodus.run("stop", run["id"])
    assert done.returncode == 0, done.stdout + done.stderr
    proc.communicate(timeout=60)
    assert nodus.runs()[0]["status"] == "cancelled"
    assert _sacct(slurm_cluster, job).startswith("CANCELLED")


def test_a_killed_nodus_leaves_the_job_running_and_the_next_command_reads_its_end(
    nodus: Nodus, slurm_cluster: SlurmCluster
) -> None:
    workload = nodus.workload("outlives", f"{UNTIL_LET_GO}; exit 4")
    proc = nodus.popen("run", workload, "--target", "slurm")
    run = nodus.wait_for("the run running", lambda r: r["status"] == "running")
    job = run["stages"][0]["job_id"]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    # The job is the cluster's: it goes on, and nodus does not cancel it meanwhile.
    assert nodus.runs()[0]["status"] == "running"
    nodus.let_go(run["id"])
    assert _sacct(slurm_cluster, job) == "FAILED|4:0"
    ended = nodus.wait_for("its end recorded", lambda r: r["status"] != "running")
    assert (ended["status"], ended["exit_code"]) == ("failed", 4)
    assert f"Slurm job {job} went on: exited with 4" in ended["message"]
