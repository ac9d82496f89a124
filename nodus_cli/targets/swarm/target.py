"""Docker Swarm as a target: its nodes are the inventory, each task a one-off service.

nodus does not schedule across machines itself: it plans against what the nodes hold,
then submits each task as a service (pinned to the chosen node for a stage; spread by
Swarm itself for the tasks of a fan-out stage) and follows it to its end: it streams
its output, takes its exit code and removes the service. While a task stays pending,
nodus says which requirement no node meets instead of waiting silently.

Stages placed on one node share ``$NODUS_WORK_DIR``: a folder in that node's /tmp,
prepared before the first of them and removed after the run by a one-off task pinned to
the node (the first stage's image, with ``/bin/sh``), so nothing of the run survives on
any node. Stages on different nodes, and the tasks of a fan-out stage, each get an
empty work folder of their own; the plan says so.

What Swarm cannot do here, the plan says and the run refuses or warns: sharing a GPU by
memory (Swarm reserves whole GPUs), copying the work folder back (``output_dir``: it
lives on the node that ran the stage, and is removed there after the run), bind mounts
whose path a node lacks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from nodus_cli.errors import InvalidInput, NodusError, NotRunnable
from nodus_cli.planning.capabilities import Capabilities
from nodus_cli.targets.base import (
    Cleanup,
    NodeInfo,
    Preparation,
    Started,
    Target,
    TargetFailure,
    Task,
    TaskContext,
    TaskEnd,
    TaskState,
)
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.containers import LABEL_RUN, memory_bytes, memory_limit, spec_for
from nodus_cli.targets.follower import LogFollower
from nodus_cli.targets.swarm.api import (
    GPU_KIND,
    INFRA_STATES,
    STARTED,
    TERMINAL,
    SwarmApi,
    manager_client,
)
from nodus_cli.targets.swarm.nodes import Node, list_nodes
from nodus_cli.targets.swarm.services import (
    HOST_TMP,
    WorkMount,
    constraints_for,
    housekeeping_args,
    job_mode,
    service_args,
    shared_folder,
)
from nodus_cli.text import plural

if TYPE_CHECKING:
    from nodus_cli.catalog import Offer
    from nodus_cli.planning.planner import Plan, RuntimeLookup, StagePlan
    from nodus_cli.records import RunRecord
    from nodus_cli.workload import Stage, Workload

#: Status polls: every POLL_FIRST seconds for the first POLL_FAST seconds (Swarm runs a
#: short job in about half a second; one poll is a cheap call), then slowing to POLL_MAX.
POLL_FIRST, POLL_FAST, POLL_MAX = 0.02, 2.0, 0.5
#: How long a housekeeping task (prepare or remove a shared folder) may take.
HOUSEKEEPING_SECONDS = 60.0


@dataclass(slots=True)
class _Live:
    """A task's service while it exists."""

    service_id: str | None = None
    stopping: bool = False


class SwarmTarget(Target):
    name: ClassVar[str] = "swarm"
    description: ClassVar[str] = "the Swarm cluster"
    #: Each node has its own folders: stages on two nodes do not share NODUS_WORK_DIR.
    capabilities: ClassVar[Capabilities] = Capabilities(shared_work_dir=False)
    price_hint: ClassVar[str] = (
        "label the nodes nodus.price_per_hour=USD, or nodus.machine_id=ID for its catalog price"
    )

    def __init__(self, store: Any, catalog: str | None = None) -> None:
        super().__init__(store, catalog)
        self.explain_after = _seconds("NODUS_PENDING_EXPLAIN_SECONDS", 3.0)
        self._api: SwarmApi | None = None
        self._nodes: list[Node] | None = None
        self._plan: Plan | None = None
        self._job = True
        self._shared: dict[str, str] = {}  # stage name -> host folder on its node
        self._prepared: dict[str, Node] = {}  # node id -> node whose folder exists
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()
        self.warnings: list[str] = []

    # -- the cluster -------------------------------------------------------------------

    @property
    def api(self) -> SwarmApi:
        if self._api is None:
            self._api = manager_client()
        return self._api

    def _all_nodes(self) -> list[Node]:
        if self._nodes is None:
            self._nodes = list_nodes(self.api, self.catalog)
            self.warnings = [f"node {n.key}: {p}" for n in self._nodes for p in n.problems]
        return self._nodes

    def _usable(self) -> list[Node]:
        return [n for n in self._all_nodes() if n.usable]

    def offers(self, workload: Workload) -> tuple[Offer, ...]:
        return tuple(n.as_offer() for n in self._usable())

    def plan(self, workload: Workload, history: RuntimeLookup) -> Plan:
        from nodus_cli.planning.planner import Candidate

        plan = super().plan(workload, history)
        nodes = self._all_nodes()
        for sp, stage in zip(plan.stages, workload.stages, strict=True):
            if not sp.feasible and not sp.nearest:
                # What the cluster holds, where the catalog would show its nearest offers.
                held = sorted(nodes, key=lambda n: (-n.gpus, -n.cpus, n.key))
                sp.nearest = [Candidate(n.as_offer()) for n in held[:3]]
                holds = "; ".join(_holds(n) for n in held) or "no node"
                sp.notes.append(f"the cluster holds: {holds}")
            if stage.requirements.share_gpu:
                sp.notes.append(
                    "share_gpu: Swarm reserves whole GPUs (generic resources), so tasks cannot "
                    "share one there; run this stage on the local target, or without share_gpu"
                )
            binds = [m for m in stage.mounts if m.type == "bind"]
            if binds:
                paths = ", ".join(dict.fromkeys(m.source for m in binds))
                sp.notes.append(
                    f"mounts: the host path(s) {paths} must exist on the node that runs the "
                    "stage (Swarm does not create them)"
                )
            if stage.ports:
                shown = ", ".join(f"{p.host}->{p.container}/{p.protocol}" for p in stage.ports)
                sp.notes.append(
                    f"ports {shown}: published through the routing mesh, on every node's address"
                )
            if stage.map is not None:
                sp.notes.append(
                    "fan-out: Swarm spreads the tasks over every node that can run them; each "
                    "task gets an empty work folder of its own"
                )
        if workload.output_dir:
            plan.notes.append(
                "output_dir: on Swarm the work folder lives on the node that ran the stage and "
                "is removed there after the run; nodus cannot copy it back (write results to "
                "storage the nodes share, e.g. a mount)"
            )
        for warning in self.warnings:
            plan.notes.append(f"warning: {warning}")
        return plan

    def prepare(self, workload: Workload, plan: Plan) -> Preparation:
        self._plan = plan
        nodes = self._all_nodes()
        for sp in plan.stages:
            if not sp.feasible:
                unusable = [
                    f"node {n.key} is {n.state}/{n.availability}" for n in nodes if not n.usable
                ]
                detail = "".join(f"\n  {line}" for line in self.warnings + unusable)
                raise NotRunnable(
                    f"no node of the cluster can run stage {sp.name!r}: "
                    f"{(sp.explanation or 'no eligible node').replace('configuration', 'node')}"
                    + detail,
                    hint="`nodus nodes` shows what each node holds",
                )
        for stage in workload.stages:
            if stage.requirements.share_gpu:
                raise NotRunnable(
                    f"stage {stage.name!r} shares GPUs by memory (share_gpu), which Swarm "
                    "cannot do: it reserves whole GPUs (generic resources) per task",
                    hint="run it with --target local, or remove share_gpu (one GPU per task)",
                )
        self._job = job_mode(self._usable())
        warnings = list(self.warnings)
        if workload.output_dir:
            warnings.append(
                "output_dir is not copied back on Swarm: the work folder lives on the node "
                "that ran the stage and is removed there after the run; write results to "
                "storage the nodes share"
            )
        first = plan.stages[0].selected
        return Preparation(
            price_per_hour=first.offer.price_per_hour if first else 0.0,
            notes=tuple(plan.notes),
            warnings=tuple(warnings),
        )

    def capacity(self, stage: Stage, plan: StagePlan) -> int:
        """Tasks submitted at once: what the eligible nodes can hold; Swarm places them."""
        eligible = {c.offer.machine_id for c in plan.candidates}
        req = stage.requirements
        total = 0
        for n in self._usable():
            if n.key not in eligible:
                continue
            if req.wants_gpu:
                total += n.gpus // max(1, req.gpu_count)
            else:
                total += max(1, int(n.cpus // req.cpu)) if req.cpu else 1
        return max(1, total)

    # -- running -----------------------------------------------------------------------

    def begin(self, record: RunRecord, workload: Workload, plan: Plan) -> None:
        """Stages placed on one node share a folder there (prepared now)."""
        self._plan = plan
        by_node: dict[str, list[Stage]] = {}
        for sp, stage in zip(plan.stages, workload.stages, strict=True):
            if sp.selected is not None and stage.map is None:
                by_node.setdefault(sp.selected.offer.machine_id, []).append(stage)
        for key, stages in by_node.items():
            if len(stages) < 2:
                continue
            node = self._node(key)
            folder = shared_folder(record.id)
            inside = f"{HOST_TMP}/{folder.rpartition('/')[2]}"
            ok = self._housekeeping(
                record.id, node, stages[0].image, f"mkdir -p {inside} && chmod 0777 {inside}"
            )
            if ok:
                self._prepared[node.id] = node
                for stage in stages:
                    self._shared[stage.name] = folder

    def _node(self, key: str) -> Node:
        for n in self._all_nodes():
            if n.key == key:
                return n
        raise NotRunnable(f"node {key} is no longer in the cluster")

    def _housekeeping(self, run_id: str, node: Node, image: str, script: str) -> bool:
        """Run ``script`` once on ``node`` (with its /tmp mounted); whether it succeeded."""
        try:
            service = self.api.create_service(
                housekeeping_args(run_id, node, image, script, self._job)
            )
        except engine.EngineFailure:
            return False
        deadline = time.monotonic() + HOUSEKEEPING_SECONDS
        state = "new"
        try:
            while time.monotonic() < deadline:
                task = self._latest_task(service) or {}
                state = (task.get("Status") or {}).get("State", "new")
                if state in TERMINAL:
                    break
                time.sleep(0.05)
        except engine.EngineFailure:
            return False
        finally:
            with contextlib.suppress(engine.EngineFailure):
                self.api.discard_service(service)
        return state == "complete"

    def _latest_task(self, service_id: str) -> dict[str, Any] | None:
        tasks = self.api.tasks({"service": [service_id]})
        return max(tasks, key=lambda t: t.get("CreatedAt", ""), default=None)

    def _stage_node(self, stage: Stage) -> Node:
        assert self._plan is not None
        for sp in self._plan.stages:
            if sp.name == stage.name and sp.selected is not None:
                return self._node(sp.selected.offer.machine_id)
        raise NotRunnable(f"stage {stage.name!r} has no node")

    def run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        live = _Live()
        with self._lock:
            self._live[task.key] = live
        try:
            return self._run(task, ctx, live)
        except engine.EngineFailure as exc:
            return TaskEnd(TaskState.INFRASTRUCTURE, 1, f"lost the Swarm manager ({exc})")
        finally:
            with self._lock:
                self._live.pop(task.key, None)
            if live.service_id is not None:
                with contextlib.suppress(engine.EngineFailure):
                    self.api.discard_service(live.service_id)

    def _run(self, task: Task, ctx: TaskContext, live: _Live) -> TaskEnd:
        stage = task.stage
        if task.item is None:
            node: Node | None = self._stage_node(stage)
            excluded: list[Node] = []
            work = WorkMount(self._shared.get(stage.name))
        else:
            node = None
            assert self._plan is not None
            sp = next(p for p in self._plan.stages if p.name == stage.name)
            eligible = {c.offer.machine_id for c in sp.candidates}
            excluded = [n for n in self._all_nodes() if n.key not in eligible]
            work = WorkMount(None)
        spec = spec_for(task)
        if node is not None:
            gpus = (
                f"{stage.requirements.gpu_count}× {node.gpu}"
                if stage.requirements.wants_gpu
                else "no GPU"
            )
            ctx.say(f"stage {stage.name}: submitting to node {node.key} ({gpus})")
        try:
            service_id = self.api.create_service(
                service_args(spec, constraints_for(spec, node, excluded), work, self._job)
            )
        except engine.EngineError as exc:
            raise InvalidInput(f"Swarm refused stage {stage.name!r}: {exc.message}") from None
        live.service_id = service_id
        where = f"submitted to node {node.key}" if node is not None else "submitted"
        ctx.submitted(where)
        return self._follow(task, ctx, live, service_id, node)

    def _follow(
        self, task: Task, ctx: TaskContext, live: _Live, service_id: str, node: Node | None
    ) -> TaskEnd:
        """Poll the task until it ends; stream its output; explain a pending task."""
        follower: LogFollower | None = None
        explained = False
        running = False
        submitted = time.monotonic()
        try:
            while True:
                if live.stopping:
                    return TaskEnd(TaskState.STOPPED, 137, "stopped by nodus")
                doc = self._latest_task(service_id) or {}
                status = doc.get("Status") or {}
                state = status.get("State", "new")
                err = status.get("Err") or None
                if state in STARTED and not running:
                    running = True
                    ran_on = self._node_of(doc) or node
                    ctx.started(self._started(task, doc, ran_on))
                    follower = LogFollower(partial(self.api.service_logs, service_id), ctx.emit)
                    if state not in ("complete", "failed"):
                        follower.start()
                if state in TERMINAL:
                    if follower is not None:
                        follower.finish(complete=True)
                        follower = None
                    return self._ended(task, live, state, status, err, node)
                if (
                    state == "pending"
                    and not explained
                    and (err is not None or time.monotonic() - submitted >= self.explain_after)
                ):
                    explained = True
                    ctx.waiting(self.explain_pending(task.stage, node, err))
                time.sleep(_poll_interval(time.monotonic() - submitted))
        finally:
            if follower is not None:  # stopped or failed while following
                follower.finish(complete=False)

    def _node_of(self, doc: dict[str, Any]) -> Node | None:
        node_id = doc.get("NodeID")
        for n in self._all_nodes():
            if n.id == node_id:
                return n
        return None

    def _started(self, task: Task, doc: dict[str, Any], node: Node | None) -> Started:
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
        slots = 1
        if task.item is not None:
            req = task.stage.requirements
            slots = (
                max(1, node.gpus // max(1, req.gpu_count))
                if req.wants_gpu
                else max(1, int(node.cpus // req.cpu))
                if req.cpu
                else 1
            )
        return Started(
            devices=assigned,
            node=node.key,
            price_per_hour=node.price_per_hour / slots,
            config=node.as_offer().as_json(),
        )

    def _ended(
        self,
        task: Task,
        live: _Live,
        state: str,
        status: dict[str, Any],
        err: str | None,
        node: Node | None,
    ) -> TaskEnd:
        code = _exit_code(state, status)
        if live.stopping:
            return TaskEnd(TaskState.STOPPED, code, "stopped by nodus")
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

    def stop_task(self, task: Task) -> None:
        with self._lock:
            live = self._live.get(task.key)
        if live is None:
            return
        live.stopping = True
        if live.service_id is not None:
            with contextlib.suppress(engine.EngineFailure):
                self.api.discard_service(live.service_id)

    # -- after the run ---------------------------------------------------------------

    def cleanup(self, run_id: str) -> Cleanup:
        """Remove the run's services, and the shared folders it left on nodes."""
        try:
            return self._cleanup(run_id)
        except engine.EngineFailure as exc:
            raise TargetFailure(f"the Swarm manager: {exc}") from None

    def _cleanup(self, run_id: str) -> Cleanup:
        removed: list[str] = []
        remaining: list[str] = []
        for svc in self.api.services({"label": [f"{LABEL_RUN}={run_id}"]}):
            name = (svc.get("Spec") or {}).get("Name") or svc["ID"][:12]
            if ((svc.get("Spec") or {}).get("Labels") or {}).get("nodus.stage") == "_housekeeping":
                continue  # its own creator removes it
            try:
                self.api.discard_service(svc)
                removed.append(f"service {name}")
            except engine.EngineFailure as exc:
                remaining.append(f"service {name} ({exc})")
        prepared, self._prepared = self._prepared, {}
        if prepared:
            inside = f"{HOST_TMP}/{shared_folder(run_id).rpartition('/')[2]}"
            image = self._first_image()
            for node in prepared.values():
                if image and self._housekeeping(run_id, node, image, f"rm -rf {inside}"):
                    removed.append(f"folder {shared_folder(run_id)} on node {node.key}")
                else:
                    remaining.append(
                        f"folder {shared_folder(run_id)} on node {node.key} (remove it there: "
                        f"`rm -rf {shared_folder(run_id)}`)"
                    )
        for volume in self.api.volumes({"label": [f"{LABEL_RUN}={run_id}"]}):
            with contextlib.suppress(engine.EngineFailure):
                self.api.remove_volume(volume)
                removed.append(f"volume {volume}")
        return Cleanup(removed, remaining)

    def _first_image(self) -> str | None:
        if self._plan is None:
            return None
        return self._plan.stages[0].image if self._plan.stages else None

    # -- looking -----------------------------------------------------------------------

    def describe(self, record: RunRecord) -> str | None:
        """What the cluster says about a running run: each task, now."""
        try:
            services = self.api.services({"label": [f"{LABEL_RUN}={record.id}"]})
        except (engine.EngineFailure, NodusError) as exc:
            return f"cluster not reachable: {getattr(exc, 'message', exc)}"
        if not services:
            return "no service on the cluster now (between stages)"
        names = {n.id: n.key for n in self._all_nodes()}
        parts = []
        for svc in services:
            labels = (svc.get("Spec") or {}).get("Labels") or {}
            stage = labels.get("nodus.stage", svc["ID"][:12])
            if "nodus.item" in labels:
                stage += f"[{labels['nodus.item']}]"
            try:
                task = self._latest_task(svc["ID"])
            except engine.EngineFailure:
                task = None
            if task is None:
                parts.append(f"{stage}: submitted")
                continue
            st = task.get("Status") or {}
            node = task.get("NodeID")
            where = f" on {names.get(node, str(node)[:12])}" if node else ""
            err = f" ({st['Err']})" if st.get("Err") else ""
            parts.append(f"{stage}: {st.get('State', 'new')}{where}{err}")
        return "; ".join(parts)

    def nodes(self) -> list[NodeInfo]:
        found = []
        for n in self._all_nodes():
            doc = n.as_json()
            base = {k: doc.pop(k) for k in list(doc) if k in _BASE_KEYS}
            found.append(NodeInfo(**base, details=doc))
        return found

    def node_list(self) -> list[Node]:
        """The nodes as the Swarm inventory sees them (``nodus nodes``)."""
        return self._all_nodes()

    def close(self) -> None:
        self._api = None

    # -- pending tasks -----------------------------------------------------------------

    def explain_pending(self, stage: Stage, node: Node | None, err: str | None) -> str:
        """Say which requirement no node meets now, and the largest matching capacity."""
        req = stage.requirements
        try:
            current = {n.id: n for n in list_nodes(self.api)}
        except engine.EngineFailure:
            current = {}
        head = f"stage {stage.name}: submitted, none running"
        said = f" (Swarm: {err})" if err else ""
        tail = " It starts when they are released; Ctrl-C to give up."
        if node is None:
            usable = [n for n in current.values() if n.usable]
            if req.wants_gpu:
                free = sum(n.free_gpus for n in usable if n.gpu == (req.gpu or n.gpu))
                return (
                    f"{head}{said}: every node that can run it is busy "
                    f"({plural(free, 'matching GPU')} "
                    "free now); tasks start as others finish." + tail
                )
            return f"{head}{said}: waiting for Swarm to place it." + tail
        here = current.get(node.id, node)
        if node.id not in current and current:
            return f"{head}{said}: node {node.key} has left the cluster"
        if not here.usable:
            return (
                f"{head}{said}: node {here.key} is {here.state}"
                + (f" ({here.availability})" if here.availability != "active" else "")
                + "; it runs when the node is ready and active again. Ctrl-C to give up."
            )
        if req.wants_gpu:
            matching = [
                n
                for n in list(current.values()) or [here]
                if n.usable
                and n.gpu == here.gpu
                and (req.peak_memory_gb is None or (n.gpu_memory_gb or 0) >= req.peak_memory_gb)
            ]
            if here.gpus < req.gpu_count:
                declared = (
                    f"declares {here.gpus} {GPU_KIND} generic resources"
                    if here.gpus
                    else f"declares no {GPU_KIND} generic resources"
                )
                return (
                    f"{head}{said}: it reserves {req.gpu_count} {GPU_KIND} and node {here.key} "
                    f"{declared} (dockerd's node-generic-resources); it cannot start there "
                    "until the node declares its GPUs (`nodus swarm init-node`). Ctrl-C to give up."
                )
            if here.free_gpus < req.gpu_count:
                best = max(matching, key=lambda n: (n.free_gpus, n.gpus), default=here)
                return (
                    f"{head}{said}: it needs {req.gpu_count} free {here.gpu} "
                    f"{'GPU' if req.gpu_count == 1 else 'GPUs'} and no "
                    f"node has them now; the largest matching capacity is {best.free_gpus} free "
                    f"of {best.gpus} on {best.key} (the rest are reserved by other tasks)." + tail
                )
        if here.free_cpus < req.cpu:
            best = max(list(current.values()) or [here], key=lambda n: n.free_cpus)
            return (
                f"{head}{said}: it reserves {req.cpu:g} CPUs and {here.key} has "
                f"{here.free_cpus:g} free now; the largest free is {best.free_cpus:g} on "
                f"{best.key}." + tail
            )
        memory = req.memory_gb or 2 * req.cpu
        if here.free_memory_gb < memory:
            best = max(list(current.values()) or [here], key=lambda n: n.free_memory_gb)
            return (
                f"{head}{said}: it reserves {memory:g} GB of memory and {here.key} has "
                f"{here.free_memory_gb:g} GB free now; the largest free is "
                f"{best.free_memory_gb:g} GB on {best.key}." + tail
            )
        return f"{head}{said}: waiting for Swarm to place it on {here.key}. Ctrl-C to give up."


_BASE_KEYS = (
    "id",
    "hostname",
    "state",
    "cpus",
    "memory_gb",
    "gpu",
    "gpu_memory_gb",
    "gpus",
    "free_gpus",
    "price_per_hour",
)


def _holds(n: Node) -> str:
    gpu = f"{n.gpus}× {n.gpu} {n.gpu_memory_gb or 0:g} GB, " if n.gpu and n.gpus else ""
    state = "" if n.usable else f", {n.state}/{n.availability}"
    return f"{n.key} ({gpu}{n.cpus:g} CPUs, {n.memory_gb:g} GB{state})"


def _seconds(name: str, default: float) -> float:
    import os

    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def _poll_interval(elapsed: float) -> float:
    if elapsed < POLL_FAST:
        return POLL_FIRST
    return min(POLL_MAX, POLL_FIRST + (elapsed - POLL_FAST) * 0.05)


def _exit_code(state: str, status: dict[str, Any]) -> int:
    container = status.get("ContainerStatus") or {}
    code = container.get("ExitCode")
    if isinstance(code, int) and (code != 0 or state == "complete"):
        return code
    return 0 if state == "complete" else 1
