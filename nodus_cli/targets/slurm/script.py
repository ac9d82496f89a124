"""The batch script of one task: the image run by the node's container runtime with the
GPUs Slurm allocated to the job, and only those.

Contract: :func:`batch_script` returns the text ``sbatch`` submits for a task. Inside
the job, the indices Slurm allocated (``SLURM_JOB_GPUS``, else ``CUDA_VISIBLE_DEVICES``)
become the container's device request and are written to ``DEVICES`` beside the output,
so the record says which GPUs were used: with ``docker``, ``--gpus '"device=0,1"'`` (the
NVIDIA container toolkit); with ``podman``, one CDI device per index
(``--device nvidia.com/gpu=0``: the node's CDI spec, ``nvidia-ctk cdi generate``, names
the GPUs by index). The stage's environment reaches the job through ``sbatch``'s own
environment (``--export=ALL``) and the container by name only (``-e NAME``): no value
is written into the script. A ``scancel`` (SIGTERM to the script) kills the container
by name (and, with podman, removes it: its monitor is the job's process, ended with the
job), so nothing outlives the job. With ``end_file``, the container's own exit code and
whether the kernel killed it at its memory limit (Docker's ``oom`` event; podman's is
not looked for) are written there when it ends: Slurm keeps an exit status above 128 as
that minus 128 (137 reads ``9:0`` in ``sacct``), and says nothing of a container's
memory limit.

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


def batch_script(
    task: Task,
    work_dir: str,
    devices_file: str,
    end_file: str | None = None,
    runtime: str = "docker",
    items: str | None = None,
    offset: int = 0,
) -> str:
    """The batch script of ``task`` run by ``runtime`` (``[slurm] container``: docker or
    podman); ``end_file``: where the container's end is written (``CODE`` or ``CODE oom``).
    ``items``: the folder of a job array's items (one file per index): each array task
    reads its own into ``NODUS_ITEM`` and ``NODUS_ITEM_INDEX`` by ``SLURM_ARRAY_TASK_ID``
    plus ``offset``, the item index of the array's task 0 (a fan-out larger than the
    cluster's ``MaxArraySize`` is several arrays, each numbered from 0: :mod:`.arrays`),
    and writes its GPUs to ``devices_file.INDEX`` (and its end to ``end_file.INDEX``)."""
    stage = task.stage
    env = task.environment(work_dir)
    memory = memory_bytes(stage.requirements.cpu, stage.requirements.memory_gb)
    docker = [
        runtime,
        "run",
        "--rm",
        *(["--init"] if runtime == "docker" else []),  # podman's needs catatonit
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
    gpus = ""
    if wants_gpu:
        gpus = '--gpus "\\"device=$gpus\\""' if runtime == "docker" else "$cdi"
    devices = shlex.quote(devices_file)
    ends = shlex.quote(end_file) if end_file is not None else None
    item = ""
    if items is not None:
        devices += '."$NODUS_ITEM_INDEX"'
        if ends is not None:
            ends += '."$NODUS_ITEM_INDEX"'
        item = (
            f'export NODUS_ITEM_INDEX="$((SLURM_ARRAY_TASK_ID + {offset:d}))"\n'
            f'NODUS_ITEM="$(cat {shlex.quote(items)}/"$NODUS_ITEM_INDEX")" || exit 1\n'
            "export NODUS_ITEM\n"
        )
    end = ""
    kill = f'{runtime} kill "$name" >/dev/null 2>&1'
    if runtime == "podman":
        kill += '; podman rm -f "$name" >/dev/null 2>&1'
        end = 'podman rm -f "$name" >/dev/null 2>&1\n'
    if ends is not None and runtime == "docker":
        # Docker's events of the container (kept after --rm), only when it failed.
        end = (
            'if [ "$code" -ne 0 ]; then\n'
            '    oom=$(docker events --since "$((start - 1))" --until "$(($(date +%s) + 1))" '
            '--filter "container=$name" --filter event=oom --format " oom" 2>/dev/null '
            "| head -n 1)\nfi\n"
        )
    if ends is not None:
        end += f'printf \'%s%s\\n\' "$code" "$oom" > {ends}\n'
    return f"""#!/bin/bash
# nodus: run {task.run_id}, {task.key} (attempt {task.attempt})
{item}gpus="${{SLURM_JOB_GPUS:-${{CUDA_VISIBLE_DEVICES:-}}}}"
printf '%s\\n' "$gpus" > {devices}
cdi=""
for i in ${{gpus//,/ }}; do cdi="$cdi --device nvidia.com/gpu=$i"; done
name={shlex.quote(container_name(task.run_id))}-"$SLURM_JOB_ID"
trap '{kill}' TERM INT
start=$(date +%s)
oom=""
{command.replace(f"{runtime} run", f'{runtime} run --name "$name" {gpus}', 1)} &
child=$!
wait "$child"
code=$?
if [ "$code" -gt 128 ] && kill -0 "$child" 2>/dev/null; then
    wait "$child"
    code=$?
fi
{end}exit "$code"
"""
