"""How a Slurm job ended, for the driver: ``sacct``'s record, read together with what the
job's script wrote of its container's end (:mod:`.script`: the exit code, truer than
``sacct``'s above 128, since Slurm keeps ``exit 137`` as 9; and whether the kernel killed
it at its memory limit). One reading for a single job and for each task of an array.
"""

from __future__ import annotations

from pathlib import Path

from nodus_cli.targets.base import Task, TaskEnd, TaskState
from nodus_cli.targets.docker.containers import memory_bytes, memory_limit
from nodus_cli.targets.slurm import parse

__all__ = ["END_STATES", "container_end", "job_end", "task_end", "work_root_unseen"]

#: sacct's end states in words, and what kind of end each is for the driver.
END_STATES: dict[str, tuple[TaskState, str]] = {
    "COMPLETED": (TaskState.EXITED, "completed"),
    "FAILED": (TaskState.EXITED, "failed"),
    "TIMEOUT": (TaskState.KILLED, "Slurm ended it at its time limit (TIMEOUT)"),
    "OUT_OF_MEMORY": (TaskState.OUT_OF_MEMORY, "it ran out of memory (OUT_OF_MEMORY)"),
    "CANCELLED": (TaskState.KILLED, "cancelled outside nodus (scancel) (CANCELLED)"),
    "NODE_FAIL": (TaskState.INFRASTRUCTURE, "its node failed (NODE_FAIL)"),
    "PREEMPTED": (TaskState.INFRASTRUCTURE, "Slurm preempted it for another job (PREEMPTED)"),
    "BOOT_FAIL": (TaskState.INFRASTRUCTURE, "its node failed to boot (BOOT_FAIL)"),
    "DEADLINE": (TaskState.KILLED, "Slurm ended it at its deadline (DEADLINE)"),
}


def container_end(path: Path) -> tuple[int | None, bool]:
    """What the job's script wrote of its container's end (:mod:`.script`): its exit
    code (None: the script did not get that far) and whether the kernel killed it at
    its memory limit."""
    try:
        words = path.read_text().split()
        return int(words[0]), "oom" in words[1:]
    except (OSError, ValueError, IndexError):
        return None, False


def task_end(ended: parse.Ended, code: int | None = None) -> TaskEnd:
    """How a job's accounting record reads for the driver; ``code``: the container's exit
    code as its script recorded it, truer than ``sacct``'s above 128 (Slurm keeps 137
    as 9)."""
    kind, words = END_STATES.get(ended.state, (TaskState.INFRASTRUCTURE, ended.state))
    if ended.state in ("COMPLETED", "FAILED"):
        code = ended.exit_code if code is None else code
        if code in (126, 127):
            return TaskEnd(TaskState.CANNOT_START, code, f"the command could not start ({code})")
        if code == 125:
            return TaskEnd(TaskState.INFRASTRUCTURE, code, "docker could not run the image (125)")
        if code == 137 and ended.state == "FAILED":
            return TaskEnd(TaskState.EXITED, code, "killed (exit 137)")
        return TaskEnd(TaskState.EXITED, code)
    code = ended.exit_code or (128 + ended.signal if ended.signal else 1)
    return TaskEnd(kind, code, f"Slurm job {ended.job_id}: {words}")


def job_end(task: Task, ended: parse.Ended, end_file: Path) -> TaskEnd:
    """How ``task``'s job ended: ``sacct``'s ``ended`` with what its script wrote to
    ``end_file`` (a container killed at its memory limit is out of memory, in words)."""
    code, oom = container_end(end_file)
    if oom and code is not None and ended.state in ("COMPLETED", "FAILED"):
        req = task.stage.requirements
        return TaskEnd(
            TaskState.OUT_OF_MEMORY,
            code,
            f"out of memory: it reached {memory_limit(memory_bytes(req.cpu, req.memory_gb))}"
            "; raise memory_gb in [requirements]",
        )
    return task_end(ended, code)


def work_root_unseen(
    ended: parse.Ended, run_dir: Path, work_root: Path, *written: Path
) -> TaskEnd | None:
    """A job that ran on a node but left none of ``written`` (its output, its GPU file) in
    ``run_dir``: that node does not see ``work_root`` (not shared, or not at the same
    path). None when the job never ran or something it wrote is here."""
    if ended.node in ("", "None assigned") or any(path.exists() for path in written):
        return None
    return TaskEnd(
        TaskState.CANNOT_START,
        1,
        f"Slurm job {ended.job_id} ran on {ended.node} ({ended.state}) but nothing it wrote "
        f"reached {run_dir}: that node does not see [slurm] work_root {work_root}; set "
        "work_root to a folder every node mounts at the same path",
    )
