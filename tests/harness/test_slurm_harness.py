# ruff: noqa: F811 - the fixtures imported from slurm_support are test parameters here
"""The Slurm harness (tests/harness/slurm.sh) is a real cluster: what issue 33 will build on.

Node ``gpu-a`` has 2 ``h100`` and ``gpu-b`` 2 ``a100`` stand-in GPUs (character devices
made with mknod), each node a ``slurmd`` in its own network and UTS namespace; jobs are
scheduled by a real ``slurmctld`` and accounted by a real ``slurmdbd`` on MariaDB. These
tests check that, with Slurm's own commands, as a user of a cluster would see it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_support import (  # noqa: F401 - fixtures
    GPUS_PER_NODE,
    NODES,
    PARTITION,
    SlurmCluster,
    slurm_cluster,
)

pytestmark = pytest.mark.slurm


def test_sinfo_shows_both_nodes_idle_with_their_gpu_models(slurm_cluster: SlurmCluster) -> None:
    # The default partition is marked with a star.
    want = {
        f"{node} {PARTITION}* idle gpu:{model}:{GPUS_PER_NODE}" for node, model in NODES.items()
    }
    # Idle once the jobs of other tests have ended (each test cancels its own).
    slurm_cluster.poll(
        "both nodes idle with their GPUs",
        ["sinfo", "-h", "-N", "-o", "%N %P %t %G"],
        lambda out: set(out.splitlines()) == want,
    )


@pytest.mark.parametrize(("model", "node"), [("h100", "gpu-a"), ("a100", "gpu-b")])
def test_a_one_gpu_job_of_a_model_runs_on_its_node_and_sees_one_gpu(
    slurm_cluster: SlurmCluster, tmp_path: Path, model: str, node: str
) -> None:
    out = tmp_path / "job.out"
    submitted = slurm_cluster.run(
        "sbatch",
        "--parsable",
        "--wait",
        f"--gres=gpu:{model}:1",
        f"--chdir={tmp_path}",
        f"--output={out}",
        "--wrap",
        'echo "host=$(hostname)"; echo "cuda=$CUDA_VISIBLE_DEVICES"; echo "gpus=$SLURM_JOB_GPUS"',
    )
    assert submitted.strip().isdigit(), submitted
    lines = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert lines["host"] == node
    assert lines["cuda"] in {str(i) for i in range(GPUS_PER_NODE)}
    assert lines["gpus"] == lines["cuda"]


def test_a_third_job_for_two_busy_gpus_of_a_model_pends_for_resources(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    def submit() -> str:
        return slurm_cluster.run(
            "sbatch",
            "--parsable",
            "--gres=gpu:h100:1",
            f"--chdir={tmp_path}",
            "--output=/dev/null",
            "--wrap",
            "sleep 300",
        ).strip()

    jobs: list[str] = []
    try:
        jobs += [submit(), submit()]
        slurm_cluster.poll(
            "both h100 jobs running on gpu-a",
            ["squeue", "-h", "-j", ",".join(jobs), "-o", "%T %N"],
            lambda out: out.split("\n")[:2] == ["RUNNING gpu-a"] * 2,
        )
        jobs.append(submit())
        slurm_cluster.poll(
            "the third h100 job pending with reason Resources",
            ["squeue", "-h", "-j", jobs[2], "-o", "%T %r"],
            lambda out: out.strip() == "PENDING Resources",
        )
        # gpu-b's a100s are free, yet the job asked for an h100: it is not placed there.
        assert slurm_cluster.run("sinfo", "-h", "-n", "gpu-b", "-o", "%t").strip() == "idle"
    finally:
        slurm_cluster.cancel(*jobs)


def test_sacct_reports_the_state_of_finished_jobs(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    def finished(script: str) -> str:
        done = slurm_cluster.run(
            "sbatch",
            "--parsable",
            "--wait",
            "--gres=gpu:a100:1",
            f"--chdir={tmp_path}",
            "--output=/dev/null",
            "--wrap",
            script,
            check=False,
        )
        return done.strip()

    ok, failed = finished("true"), finished("exit 3")
    out = slurm_cluster.poll(
        "sacct to report both jobs",
        ["sacct", "-n", "-X", "-P", "-j", f"{ok},{failed}", "-o", "JobID,State,ExitCode,NodeList"],
        lambda out: len(out.split()) == 2 and "RUNNING" not in out,
    )
    assert sorted(out.split()) == sorted(
        [f"{ok}|COMPLETED|0:0|gpu-b", f"{failed}|FAILED|3:0|gpu-b"]
    )
