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

This class composes the pieces, each a module of its own: the manager's calls
(:mod:`.api`), the nodes as an inventory (:mod:`.nodes`), where a task goes
(:mod:`.placement`), the service it becomes (:mod:`.services`), following it to its end
(:mod:`.following`), why it is pending (:mod:`.pending`), and what the plan and prepare
say about Swarm (:mod:`.notes`). It holds the state of one run: the plan, the nodes as
first listed, the shared folders prepared, the services that exist now.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar

from nodus_cli.errors import InvalidInput, NodusError
from nodus_cli.planning.capabilities import Capabilities
from nodus_cli.planning.ranking import Candidate, RuntimeLookup
from nodus_cli.targets.base import (
    Cleanup,
    NodeInfo,
    Pending,
    Preparation,
    Target,
    TargetFailure,
    Task,
    TaskContext,
    TaskEnd,
    TaskState,
)
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.containers import LABEL_RUN, spec_for
from nodus_cli.targets.swarm import calls, following, notes, pending, placement
from nodus_cli.targets.swarm.api import SwarmApi, manager_client
from nodus_cli.targets.swarm.following import Live
from nodus_cli.targets.swarm.nodes import Node, list_nodes
from nodus_cli.targets.swarm.services import (
    WorkMount,
    housekeeping_args,
    job_mode,
    service_args,
    shared_folder,
    shared_folder_inside,
)
from nodus_cli.text import plural

if TYPE_CHECKING:
    from nodus_cli.catalog import Offer
    from nodus_cli.planning.plan import Plan, StagePlan
    from nodus_cli.records import RunRecord, RunStore
    from nodus_cli.workload import Stage, Workload

__all__ = ["SwarmTarget"]

#: How long a housekeeping task (prepare or remove a shared folder) may take.
HOUSEKEEPING_SECONDS = 60.0
#: How long a run's end waits for Swarm to remove its containers on the manager.
REMOVAL_SECONDS = 15.0


class SwarmTarget(Target):
    name: ClassVar[str] = "swarm"
    description: ClassVar[str] = "the Swarm cluster"
    #: Each node has its own folders: stages on two nodes do not share NODUS_WORK_DIR.
    capabilities: ClassVar[Capabilities] = Capabilities(shared_work_dir=False)
    price_hint: ClassVar[str] = (
        "label the nodes nodus.price_per_hour=USD, or nodus.machine_id=ID for its catalog price"
    )

    def __init__(self, store: RunStore, catalog: str | None = None) -> None:
        super().__init__(store, catalog)
        self.explain_after = _seconds("NODUS_PENDING_EXPLAIN_SECONDS", 3.0)
        self._api: SwarmApi | None = None
        self._nodes: list[Node] | None = None
        self._plan: Plan | None = None
        self._job = True
        self._shared: dict[str, str] = {}  # stage name -> host folder on its node
        self._prepared: dict[str, Node] = {}  # node id -> node whose folder exists
        self._live: dict[str, Live] = {}
        self._lock = threading.Lock()
        self.warnings: list[str] = []
        self._carrier: calls.Carrier | None = None  # Python function calls (.calls)

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
        plan = super().plan(workload, history)
        nodes = self._all_nodes()
        for sp, stage in zip(plan.stages, workload.stages, strict=True):
            if not sp.feasible and not sp.nearest:
                # What the cluster holds, where the catalog would show its nearest offers.
                held = sorted(nodes, key=lambda n: (-n.gpus, -n.cpus, n.key))
                sp.nearest = [Candidate(n.as_offer()) for n in held[:3]]
                sp.notes.append(notes.cluster_holds(held))
            sp.notes.extend(notes.stage_notes(stage, nodes))
        plan.notes.extend(notes.run_notes(workload, plan))
        plan.notes.extend(f"warning: {warning}" for warning in self.warnings)
        return plan

    def prepare(self, workload: Workload, plan: Plan) -> Preparation:
        self._plan = plan
        nodes = self._all_nodes()
        for sp in plan.stages:
            if not sp.feasible:
                raise notes.unplaceable(sp, nodes, self.warnings)
        notes.refuse_shared_gpus(workload)
        calls.check(workload, self.store.root)  # a function's call must fit a service
        self._job = job_mode(self._usable())
        first = plan.stages[0].selected
        return Preparation(
            price_per_hour=first.offer.price_per_hour if first else 0.0,
            notes=(*plan.notes, *notes.port_notes(workload, plan, self._usable())),
            warnings=(*self.warnings, *notes.warnings(workload)),
        )

    def capacity(self, stage: Stage, plan: StagePlan) -> int:
        """Tasks submitted at once: what the eligible nodes can hold; Swarm places them."""
        return placement.capacity(self._all_nodes(), stage, plan)

    # -- running -----------------------------------------------------------------------

    def begin(self, record: RunRecord, workload: Workload, plan: Plan) -> None:
        """Stages placed on one node share a folder there (prepared now)."""
        self._plan = plan
        folder = shared_folder(record.id)
        inside = shared_folder_inside(record.id)
        for key, stages in placement.sharing(plan, workload).items():
            node = placement.by_key(self._all_nodes(), key)
            ok = self._housekeeping(
                record.id, node, stages[0].image, f"mkdir -p {inside} && chmod 0777 {inside}"
            )
            if ok:
                self._prepared[node.id] = node
                for stage in stages:
                    self._shared[stage.name] = folder

    def _housekeeping(self, run_id: str, node: Node, image: str, script: str) -> bool:
        """Run ``script`` once on ``node`` (with its /tmp mounted); whether it succeeded."""
        try:
            service = self.api.create_service(
                housekeeping_args(run_id, node, image, script, self._job)
            )
        except engine.EngineFailure:
            return False
        try:
            state = following.wait_for_end(self.api, service, HOUSEKEEPING_SECONDS)
        except engine.EngineFailure:
            return False
        finally:
            self._discard(service)
        return state == "complete"

    def _discard(self, service: dict[str, Any] | str) -> None:
        """Stop and remove a service; one the manager cannot reach now is left to cleanup."""
        with contextlib.suppress(engine.EngineFailure):
            self.api.discard_service(service)

    def run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        live = Live()
        with self._lock:
            self._live[task.key] = live
        try:
            if task.stage.function is not None:  # a Python function call (.calls)
                if self._carrier is None:
                    self._carrier = calls.Carrier(lambda: self.api, self.store.root)
                return self._carrier.run(task, ctx, live, self._run)
            return self._run(task, ctx, live)
        except engine.EngineFailure as exc:
            return TaskEnd(TaskState.INFRASTRUCTURE, 1, f"lost the Swarm manager ({exc})")
        finally:
            with self._lock:
                self._live.pop(task.key, None)
            if live.service_id is not None:
                self._discard(live.service_id)

    def _run(
        self, task: Task, ctx: TaskContext, live: Live, carry: calls.Carry | None = None
    ) -> TaskEnd:
        stage = task.stage
        assert self._plan is not None
        if task.item is None:
            node: Node | None = placement.stage_node(self._plan, self._all_nodes(), stage)
            excluded: list[Node] = []
            work = WorkMount(self._shared.get(stage.name))
        else:
            node = None
            sp = placement.stage_plan(self._plan, stage)
            excluded = placement.excluded(self._all_nodes(), sp)
            work = WorkMount(None)
        spec = spec_for(task)
        if carry is not None:  # a function's call and runtime travel with the service
            spec = carry.spec(spec)
        if node is not None:
            gpus = (
                f"{stage.requirements.gpu_count}× {node.gpu}"
                if stage.requirements.wants_gpu
                else "no GPU"
            )
            ctx.say(f"stage {stage.name}: submitting to node {node.key} ({gpus})")
        constraints = placement.constraints_for(spec, node, excluded)
        body = service_args(spec, constraints, work, self._job)
        if carry is not None:
            carry.attach(body)
        try:
            service_id = self.api.create_service(body)
        except engine.EngineError as exc:
            raise InvalidInput(f"Swarm refused stage {stage.name!r}: {exc.message}") from None
        live.service_id = service_id
        where = f"submitted to node {node.key}" if node is not None else "submitted"
        ctx.submitted(where)
        return following.follow(
            self.api,
            task,
            ctx,
            live,
            service_id,
            node,
            locate=lambda node_id: placement.by_id(self._all_nodes(), node_id),
            explain=self.explain_pending,
            explain_after=self.explain_after,
            on_start=self._say_ports,
        )

    def _say_ports(self, task: Task, ctx: TaskContext, node: Node | None) -> None:
        """Where a running task's published ports answer (on the terminal and in the log)."""
        label = f"stage {task.stage.name}" + (f" item {task.item.index}" if task.item else "")
        for port in task.stage.ports:
            ctx.say(f"{label}: {notes.reachable(port, self._usable(), node)}")

    def explain_pending(self, stage: Stage, node: Node | None, err: str | None) -> Pending:
        """Say which requirement no node meets now, and the largest matching capacity."""
        try:
            current = list_nodes(self.api)
        except engine.EngineFailure:
            current = []
        return pending.explain(stage, node, err, current)

    def stop_task(self, task: Task) -> None:
        with self._lock:
            live = self._live.get(task.key)
        if live is None:
            return
        live.stopping = True
        if live.service_id is not None:
            self._discard(live.service_id)

    # -- after the run ---------------------------------------------------------------

    def _run_services(self, run_id: str) -> list[dict[str, Any]]:
        return self.api.services({"label": [f"{LABEL_RUN}={run_id}"]})

    def cleanup(self, run_id: str) -> Cleanup:
        """Remove the run's services, and the shared folders it left on nodes."""
        try:
            return self._cleanup(run_id)
        except engine.EngineFailure as exc:
            raise TargetFailure(f"the Swarm manager: {exc}") from None

    def _cleanup(self, run_id: str) -> Cleanup:
        removed: list[str] = []
        remaining: list[str] = []
        for svc in self._run_services(run_id):
            spec = svc.get("Spec") or {}
            name = spec.get("Name") or svc["ID"][:12]
            if (spec.get("Labels") or {}).get("nodus.stage") == "_housekeeping":
                continue  # its own creator removes it
            try:
                self.api.discard_service(svc)
                removed.append(f"service {name}")
            except engine.EngineFailure as exc:
                remaining.append(f"service {name} ({exc})")
        prepared, self._prepared = self._prepared, {}
        if prepared:
            folder = shared_folder(run_id)
            inside = shared_folder_inside(run_id)
            image = self._first_image()
            for node in prepared.values():
                if image and self._housekeeping(run_id, node, image, f"rm -rf {inside}"):
                    removed.append(f"folder {folder} on node {node.key}")
                else:
                    remaining.append(
                        f"folder {folder} on node {node.key} (remove it there: `rm -rf {folder}`)"
                    )
        removed += calls.remove_all(self.api, run_id)  # a function run's secrets, configs
        remaining += self._containers_gone(run_id)
        for volume in self.api.volumes({"label": [f"{LABEL_RUN}={run_id}"]}):
            with contextlib.suppress(engine.EngineFailure):
                self.api.remove_volume(volume)
                removed.append(f"volume {volume}")
        return Cleanup(removed, remaining)

    def _containers_gone(self, run_id: str) -> list[str]:
        """Wait, up to :data:`REMOVAL_SECONDS`, until the manager's engine holds no
        container of the run: what is still there then, in words (none: all gone).

        Removing a service returns before Swarm's agent has removed its containers (one
        stopped a moment ago stays ``Exited (137)`` for a while), so a run stopped or ended
        would otherwise be said done while its container is still on the node. The manager
        sees its own node's containers only: a worker's agent removes the worker's."""
        deadline = time.monotonic() + REMOVAL_SECONDS
        delay = 0.05
        while True:
            left = self.api.containers({"label": [f"{LABEL_RUN}={run_id}"]})
            if not left:
                return []
            if time.monotonic() >= deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        names = ", ".join(
            str((c.get("Names") or [c.get("Id", "")[:12]])[0]).lstrip("/") for c in left[:3]
        )
        return [
            f"{plural(len(left), 'container')} of the run on the manager ({names}): Swarm is "
            f"still removing {'it' if len(left) == 1 else 'them'}"
        ]

    def _first_image(self) -> str | None:
        if self._plan is None:
            return None
        return self._plan.stages[0].image if self._plan.stages else None

    # -- looking -----------------------------------------------------------------------

    def describe(self, record: RunRecord) -> str | None:
        """What the cluster says about a running run: each task, now."""
        try:
            services = self._run_services(record.id)
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
                task = following.latest_task(self.api, svc["ID"])
            except engine.EngineFailure:
                task = None
            if task is None:
                parts.append(f"{stage}: submitted")
                continue
            st = following.status_of(task)
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

    def close(self) -> None:
        self._api = None


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


def _seconds(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default
