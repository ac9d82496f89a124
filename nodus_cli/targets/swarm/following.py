"""Following a task submitted to Swarm to its end: its state, its output, how it ended.

A task is a one-off service (:mod:`.services`); Swarm reports it as the states of the
service's newest task (``new`` ... ``pending`` ... ``running`` ... ``complete``), read
by polling the manager: often at first (Swarm may finish a short job before a slower
poll would first look, and one poll is a cheap call; benchmarks/README.md), then less.
:func:`follow` tells the driver when the task started (where, on which GPUs, at which
share of the node's price), streams its output through
:class:`~nodus_cli.targets.follower.LogFollower` (complete once the task ended), asks for
the explanation of a task that stays pending (at once when Swarm gives a reason, else
after ``explain_after`` seconds; once), and turns the terminal state and exit code into
a :class:`~nodus_cli.targets.base.TaskEnd`: the workload's own end, the infrastructure's
(rejected, orphaned, shut down: worth a retry), or nodus's stop.

The engine's failures (:class:`~nodus_cli.targets.docker.engine.EngineFailure`) pass
through to the caller, which knows what losing the manager means for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from nodus_cli.structs import struct
from nodus_cli.targets.base import Started, Task, TaskContext, TaskEnd, TaskState
from nodus_cli.targets.docker.containers import memory_bytes, memory_limit
from nodus_cli.targets.follower import LogFollower
from nodus_cli.targets.swarm.api import GPU_KIND, INFRA_STATES, STARTED, TERMINAL, SwarmApi
from nodus_cli.targets.swarm.placement import slots

if TYPE_CHECKING:
    from nodus_cli.targets.swarm.nodes import Node
    from nodus_cli.workload import Stage

__all__ = [
    "POLL_FAST",
    "POLL_FIRST",
    "POLL_MAX",
    "Live",
    "ended",
    "exit_code",
    "follow",
    "latest_task",
    "poll_interval",
    "started",
    "state_of",
    "status_of",
    "wait_for_end",
]

#: Status polls: every POLL_FIRST seconds for the first POLL_FAST seconds (a short job may
#: end within the first of a slower poll's waits; one poll is a cheap call), then slowing to
#: POLL_MAX.
POLL_FIRST, POLL_FAST, POLL_MAX = 0.02, 2.0, 0.5
#: How often a housekeeping task's state is read while :func:`wait_for_end` waits.
_HOUSEKEEPING_POLL = 0.05
_STOPPED = "stopped by nodus"


@struct
class Live:
    """A task's service while it exists; ``stopping`` once nodus stops it."""

    service_id: str | None = None
    stopping: bool = False


def latest_task(api: SwarmApi, service_id: str) -> dict[str, Any] | None:
    """The newest task of a service (a one-off service has one; None before Swarm made it)."""
    tasks = api.tasks({"service": [service_id]})
    return max(tasks, key=lambda t: t.get("CreatedAt", ""), default=None)


def status_of(task: dict[str, Any] | None) -> dict[str, Any]:
    """A task document's ``Status`` (empty when there is no task yet)."""
    return (task or {}).get("Status") or {}


def state_of(task: dict[str, Any] | None) -> str:
    """A task's state; ``new`` when Swarm has not made the task yet."""
    return str(status_of(task).get("State", "new"))


def follow(
    api: SwarmApi,
    task: Task,
    ctx: TaskContext,
    live: Live,
    service_id: str,
    node: Node | None,
    *,
    locate: Callable[[str | None], Node | None],
    explain: Callable[[Stage, Node | None, str | None], str],
    explain_after: float,
    on_start: Callable[[Task, TaskContext, Node | None], None] | None = None,
) -> TaskEnd:
    """Poll the task until it ends; stream its output; explain a pending task.

    ``node`` is the node the task is pinned to (None: a fan-out task, Swarm's to place);
    ``locate`` finds the node a task runs on by its Swarm id; ``explain`` says why a
    task is pending (:func:`~nodus_cli.targets.swarm.pending.explain`, on the nodes now);
    ``on_start`` is called once when it starts, with the node it runs on.
    """
    follower: LogFollower | None = None
    explained = False
    running = False
    submitted = time.monotonic()
    try:
        while True:
            if live.stopping:
                return TaskEnd(TaskState.STOPPED, 137, _STOPPED)
            doc = latest_task(api, service_id) or {}
            status = status_of(doc)
            state = status.get("State", "new")
            err = status.get("Err") or None
            if state in STARTED and not running:
                running = True
                ran_on = locate(doc.get("NodeID")) or node
                ctx.started(started(task, doc, ran_on))
                if on_start is not None:
                    on_start(task, ctx, ran_on)
                follower = LogFollower(partial(api.service_logs, service_id), ctx.emit)
                if state not in ("complete", "failed"):
                    follower.start()
            if state in TERMINAL:
                if follower is not None:
                    follower.finish(complete=True)
                    follower = None
                return ended(task, live, state, status, err, node)
            if (
                state == "pending"
                and not explained
                and (err is not None or time.monotonic() - submitted >= explain_after)
            ):
                explained = True
                ctx.waiting(explain(task.stage, node, err))
            time.sleep(poll_interval(time.monotonic() - submitted))
    finally:
        if follower is not None:  # stopped or failed while following
            follower.finish(complete=False)


def wait_for_end(api: SwarmApi, service_id: str, seconds: float) -> str:
    """Wait up to ``seconds`` for a service's task to end; its state then (terminal or not)."""
    deadline = time.monotonic() + seconds
    state = "new"
    while time.monotonic() < deadline:
        state = state_of(latest_task(api, service_id))
        if state in TERMINAL:
            break
        time.sleep(_HOUSEKEEPING_POLL)
    return state


def started(task: Task, doc: dict[str, Any], node: Node | None) -> Started:
    """What the driver records when the task starts: its GPUs, node, and price share.

    A fan-out task pays the share of its node's price that one of the tasks the node
    holds at once pays (:func:`~nodus_cli.targets.swarm.placement.slots`)."""
    # "GenericResources" at the task's top level in API 1.41, "AssignedGenericResources"
    # in later versions.
    given = doc.get("AssignedGenericResources") or doc.get("GenericResources") or []
    assigned = tuple(
        g["NamedResourceSpec"]["Value"]
        for g in given
        if (g.get("NamedResourceSpec") or {}).get("Kind") == GPU_KIND
    )
    if node is None:
        return Started(devices=assigned)
    share = 1 if task.item is None else max(1, slots(node, task.stage.requirements))
    return Started(
        devices=assigned,
        node=node.key,
        price_per_hour=node.price_per_hour / share,
        config=node.as_offer().as_json(),
    )


def ended(
    task: Task,
    live: Live,
    state: str,
    status: dict[str, Any],
    err: str | None,
    node: Node | None,
) -> TaskEnd:
    """How the task ended, from its terminal ``state`` and ``status`` (Swarm's ``Err``)."""
    code = exit_code(state, status)
    if live.stopping:
        return TaskEnd(TaskState.STOPPED, code, _STOPPED)
    where = f" on node {node.key}" if node is not None else ""
    if state in INFRA_STATES:
        return TaskEnd(TaskState.INFRASTRUCTURE, code, f"task {state}{where}: {err}")
    if state == "complete" and code == 0:
        return TaskEnd(TaskState.EXITED, 0)
    if code == 137:
        # SIGKILL, not from nodus. The node's engine knows whether its kernel killed
        # it at the memory limit, but Swarm does not pass that on to the manager, so
        # name the usual cause without claiming it.
        limit = memory_bytes(task.stage.requirements.cpu, task.stage.requirements.memory_gb)
        return TaskEnd(
            TaskState.EXITED,
            code,
            f"{state}{where}: killed (exit 137, SIGKILL); Swarm does not report why: "
            f"the usual cause is {memory_limit(limit)}, so raise memory_gb in "
            "[requirements] if it needs more, else it was killed from outside nodus",
        )
    return TaskEnd(TaskState.EXITED, code, f"{state}{where}: {err}" if err else None)


def exit_code(state: str, status: dict[str, Any]) -> int:
    """The container's exit code; for a task without one, 0 when complete, else 1."""
    container = status.get("ContainerStatus") or {}
    code = container.get("ExitCode")
    if isinstance(code, int) and (code != 0 or state == "complete"):
        return code
    return 0 if state == "complete" else 1


def poll_interval(elapsed: float) -> float:
    """Seconds to the next status poll, ``elapsed`` seconds after the task was submitted."""
    if elapsed < POLL_FAST:
        return POLL_FIRST
    return min(POLL_MAX, POLL_FIRST + (elapsed - POLL_FAST) * 0.05)
