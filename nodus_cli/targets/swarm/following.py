"""Following a task submitted to Swarm to its end: its state, its output, how it ended.

A task is a one-off service (:mod:`.services`); Swarm reports it as the states of the
service's newest task (``new`` ... ``pending`` ... ``running`` ... ``complete``), read
by polling the manager in the cluster targets' follow loop
(:func:`nodus_cli.targets.cluster.following.follow`). :func:`follow` is Swarm's side of
it: when the task started (where, on which GPUs, at which share of the node's price),
its output through :class:`~nodus_cli.targets.follower.LogFollower` (complete once the
task ended), the explanation of a task that stays pending (at once when Swarm gives a
reason, else after ``explain_after`` seconds; once), and the terminal state and exit
code as a :class:`~nodus_cli.targets.base.TaskEnd`: the workload's own end, the
infrastructure's (rejected, orphaned, shut down: worth a retry), or nodus's stop.

The engine's failures (:class:`~nodus_cli.targets.docker.engine.EngineFailure`) pass
through to the caller, which knows what losing the manager means for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from nodus_cli.structs import struct
from nodus_cli.targets.base import (
    OutputStream,
    Pending,
    Started,
    Task,
    TaskContext,
    TaskEnd,
    TaskState,
)
from nodus_cli.targets.cluster import following
from nodus_cli.targets.cluster.following import Look
from nodus_cli.targets.cluster.resources import price_share
from nodus_cli.targets.docker.containers import memory_bytes, memory_limit
from nodus_cli.targets.follower import LogFollower
from nodus_cli.targets.swarm.api import GPU_KIND, INFRA_STATES, STARTED, TERMINAL, SwarmApi

if TYPE_CHECKING:
    from nodus_cli.targets.swarm.nodes import Node
    from nodus_cli.workload import Stage

__all__ = [
    "Live",
    "ended",
    "exit_code",
    "follow",
    "latest_task",
    "started",
    "state_of",
    "status_of",
    "wait_for_end",
]

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


class _Service:
    """One task's service as the follow loop asks about it
    (:class:`~nodus_cli.targets.cluster.following.Job`)."""

    def __init__(
        self,
        api: SwarmApi,
        task: Task,
        live: Live,
        service_id: str,
        node: Node | None,
        locate: Callable[[str | None], Node | None],
        explain: Callable[[Stage, Node | None, str | None], Pending],
        explain_after: float,
        emit: Callable[[OutputStream, str], None],
    ) -> None:
        self.api = api
        self.task = task
        self.live = live
        self.service_id = service_id
        self.node = node
        self.locate = locate
        self.explain = explain
        self.explain_after = explain_after
        self.emit = emit
        self.explained = False
        self.ran_on: Node | None = None

    @property
    def stopping(self) -> bool:
        return self.live.stopping

    def look(self) -> Look:
        doc = latest_task(self.api, self.service_id) or {}
        state = status_of(doc).get("State", "new")
        return Look(started=state in STARTED, ended=state in TERMINAL, doc=doc)

    def pending(self, look: Look, waited: float) -> Pending | None:
        status = status_of(look.doc)
        err = status.get("Err") or None
        if (
            status.get("State", "new") != "pending"
            or self.explained
            or (err is None and waited < self.explain_after)
        ):
            return None
        self.explained = True
        return self.explain(self.task.stage, self.node, err)

    def started(self, look: Look) -> Started:
        self.ran_on = self.locate(look.doc.get("NodeID")) or self.node
        return started(self.task, look.doc, self.ran_on)

    def output(self, look: Look) -> LogFollower:
        return LogFollower(partial(self.api.service_logs, self.service_id), self.emit)

    def ended(self, look: Look) -> TaskEnd:
        status = status_of(look.doc)
        state = status.get("State", "new")
        return ended(self.task, self.live, state, status, status.get("Err") or None, self.node)

    def stopped(self) -> TaskEnd:
        return TaskEnd(TaskState.STOPPED, 137, _STOPPED)


def follow(
    api: SwarmApi,
    task: Task,
    ctx: TaskContext,
    live: Live,
    service_id: str,
    node: Node | None,
    *,
    locate: Callable[[str | None], Node | None],
    explain: Callable[[Stage, Node | None, str | None], Pending],
    explain_after: float,
    on_start: Callable[[Task, TaskContext, Node | None], None] | None = None,
) -> TaskEnd:
    """Poll the task until it ends; stream its output; explain a pending task.

    ``node`` is the node the task is pinned to (None: a fan-out task, Swarm's to place);
    ``locate`` finds the node a task runs on by its Swarm id; ``explain`` says why a
    task is pending (:func:`~nodus_cli.targets.swarm.pending.explain`, on the nodes now);
    ``on_start`` is called once when it starts, with the node it runs on.
    """
    job = _Service(api, task, live, service_id, node, locate, explain, explain_after, ctx.emit)

    def begun(look: Look) -> None:
        if on_start is not None:
            on_start(task, ctx, job.ran_on)

    return following.follow(job, ctx, on_start=begun)


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
    holds at once pays (:func:`~nodus_cli.targets.cluster.resources.price_share`)."""
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
    price = node.price_per_hour
    if task.item is not None:
        price = price_share(price, task.stage.requirements, gpus=node.gpus, cpus=node.cpus)
    return Started(
        devices=assigned,
        node=node.key,
        price_per_hour=price,
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
