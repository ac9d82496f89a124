"""How a task's container ended, in the words the records keep: what the engine says
when it will not start it, and what a non-zero exit was.

One place for both kinds of container the local target runs, a task's own and a warm
worker (:mod:`.workers`): an exit is the workload's own unless the engine saw the kernel's
out-of-memory kill (the limit named) or a kill from outside nodus (never retried: an
operator's decision).
"""

from __future__ import annotations

import time

from nodus_cli.errors import NotRunnable
from nodus_cli.targets.base import Task, TaskContext, TaskEnd, TaskState
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.containers import ContainerSpec, memory_limit
from nodus_cli.targets.local.claims import label

__all__ = ["classify_exit", "start_failed"]

_NOT_FOUND_MARKERS = ("executable file not found", "no such file or directory")


def start_failed(exc: engine.EngineError, task: Task, ctx: TaskContext) -> TaskEnd:
    """How a task ended whose container the engine would not start: the machine cannot
    hand out GPUs or publish its ports (refused), the engine failed (a retry), or the
    workload's command cannot be started (its failure, exit codes as ``docker run``)."""
    text = exc.message
    lowered = text.lower()
    if "could not select device driver" in lowered:
        raise NotRunnable(
            f"the engine cannot hand GPUs to containers: {text}",
            hint="install the NVIDIA Container Toolkit (nvidia-container-toolkit) and "
            "restart dockerd",
        )
    if "port is already allocated" in lowered or "address already in use" in lowered:
        raise NotRunnable(
            f"stage {task.stage.name!r} cannot publish its ports: {text}",
            hint="free that port, or choose another host port in `ports`",
        )
    missing = any(m in lowered for m in _NOT_FOUND_MARKERS)
    denied = "permission denied" in lowered
    if exc.status >= 500 and not (missing or denied):
        return TaskEnd(
            TaskState.INFRASTRUCTURE, 1, f"the engine failed to start the container: {text}"
        )
    # The workload's command cannot be started: its failure, exit codes as `docker run`.
    ctx.say(f"{label(task)}: cannot start its command: {text}")
    return TaskEnd(
        TaskState.CANNOT_START,
        127 if missing else 126,
        f"its command could not be started: {text}",
    )


def classify_exit(
    eng: engine.Engine, cid: str, code: int, since: float, spec: ContainerSpec
) -> TaskEnd:
    """A non-zero exit: the workload's own, out of memory, or killed from outside."""
    try:
        events = eng.events(
            since - 1.0, time.time(), {"container": [cid], "event": ["kill", "oom"]}
        )
    except engine.EngineFailure:
        events = []
    actions = [str(e.get("Action") or e.get("status") or "") for e in events]
    if "oom" in actions:
        return TaskEnd(
            TaskState.OUT_OF_MEMORY,
            code,
            f"out of memory: it reached {memory_limit(spec.memory_bytes)}; raise memory_gb "
            "in [requirements]",
        )
    kills = [e for e in events if (e.get("Action") or e.get("status")) == "kill"]
    if kills:
        attrs = (kills[0].get("Actor") or {}).get("Attributes") or {}
        sig = attrs.get("signal", "?")
        return TaskEnd(
            TaskState.KILLED,
            code,
            f"killed from outside nodus (signal {sig}); not retried: an outside kill is "
            "a decision, not a failure of the machine",
        )
    return TaskEnd(TaskState.EXITED, code)
