"""The batch script of one task: the image run by the node's container runtime with the
GPUs Slurm allocated to the job, and only those.

Contract: :func:`batch_script` returns the text ``sbatch`` submits for a task. Inside
the job, the indices Slurm allocated (``SLURM_JOB_GPUS``, else ``CUDA_VISIBLE_DEVICES``)
become the container's device request (``--gpus '"device=0,1"'``) and are written to
``DEVICES`` beside the output, so the record says which GPUs were used. The stage's
environment reaches the job through ``sbatch``'s own environment (``--export=ALL``) and
the container by name only (``-e NAME``): no value is written into the script. A
``scancel`` (SIGTERM to the script) kills the container by name, so nothing outlives
the job.

Why apart: the script is text with shell quoting rules; one place writes it.
"""

from __future__ import annotations

import shlex

from nodus_cli.targets.base import Task
from nodus_cli.targets.docker.containers import invocation, memory_bytes

__all__ = ["batch_script", "container_name"]


def container_name(run_id: str) -> str:
    """The container's name prefix; the job id completes it inside the job."""
    return f"nodus-{run_id}"


def batch_script(task: Task, work_dir: str, devices_file: str, items: str | None = None) -> str:
    """The batch script of ``task`` (``container = "docker"``). ``items``: the folder of
    a job array's items (one file per index): each array task reads its own into
    ``NODUS_ITEM`` and ``NODUS_ITEM_INDEX`` by ``SLURM_ARRAY_TASK_ID``, and writes its
    GPUs to ``devices_file.INDEX``."""
    stage = task.stage
    env = task.environment(work_dir)
    memory = memory_bytes(stage.requirements.cpu, stage.requirements.memory_gb)
    docker = [
        "docker",
        "run",
        "--rm",
        "--init",
        "--label",
        f"nodus.run={task.run_id}",
        "--label",
        f"nodus.stage={stage.name}",
        "-v",
        f"{work_dir}:{work_dir}",
        "--cpus",
        f"{stage.requirements.cpu:g}",
        "--memory",
        f"{memory // 2**20}m",
        "--shm-size",
        f"{max(64, memory // 2**21)}m",
    ]
    for mount in stage.mounts:
        docker += ["-v", f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")]
    for name in sorted(env):
        docker += ["-e", name]
    entrypoint, args = invocation(task)
    if entrypoint is not None:
        docker += ["--entrypoint", entrypoint[0] if entrypoint else ""]
        args = [*entrypoint[1:], *(args or [])]
    docker.append(stage.image)
    docker += args or []
    command = " ".join(shlex.quote(part) for part in docker)
    wants_gpu = stage.requirements.wants_gpu
    gpus = '--gpus "\\"device=$gpus\\""' if wants_gpu else ""
    devices = shlex.quote(devices_file)
    item = ""
    if items is not None:
        devices += '."$SLURM_ARRAY_TASK_ID"'
        item = (
            'export NODUS_ITEM_INDEX="$SLURM_ARRAY_TASK_ID"\n'
            f'NODUS_ITEM="$(cat {shlex.quote(items)}/"$SLURM_ARRAY_TASK_ID")" || exit 1\n'
            "export NODUS_ITEM\n"
        )
    return f"""#!/bin/bash
# nodus: run {task.run_id}, {task.key} (attempt {task.attempt})
{item}gpus="${{SLURM_JOB_GPUS:-${{CUDA_VISIBLE_DEVICES:-}}}}"
printf '%s\\n' "$gpus" > {devices}
name={shlex.quote(container_name(task.run_id))}-"$SLURM_JOB_ID"
trap 'docker kill "$name" >/dev/null 2>&1' TERM INT
{command.replace("docker run", f'docker run --name "$name" {gpus}', 1)} &
child=$!
wait "$child"
code=$?
if [ "$code" -gt 128 ] && kill -0 "$child" 2>/dev/null; then
    wait "$child"
    code=$?
fi
exit "$code"
"""
