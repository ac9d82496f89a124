"""Kubernetes as a target: each task one ``batch/v1`` Job of one pod on one node.

nodus plans against what the API server says each node holds (:mod:`.nodes`: allocatable
``nvidia.com/gpu``, the GPU model from the GPU operator's or the cloud's labels, what the
bound pods request), refuses a request no node can ever meet before it creates anything,
and creates each task's Job (:mod:`.manifest`) in the configured namespace, then follows
it (:mod:`.follow`): pending is ``queued`` with the scheduler's reason, running follows
the pod's log, the end comes from the pod, the Job, or the Job's absence.

The Jobs are the cluster's (:attr:`owns_jobs`): each task's Job name is recorded as its
job id, a nodus process that dies leaves the Job running, and the next nodus command reads
how it ended (:meth:`KubernetesTarget.settle`). Only ``nodus stop`` (or Ctrl-C on the
supervising process) deletes it, with its pods.

A fan-out stage is one Indexed Job (:mod:`.indexed`: :meth:`KubernetesTarget.runs_items`),
its items a ConfigMap (a map of a function: its calls a Secret); each item is followed,
stopped, retried (as a Job of its own) and settled on its own. A stage that cannot be (an
exec-form command that keeps the image's ENTRYPOINT, items over 1 MiB) is one Job per item.

A Python function's task carries its call in a Secret and its outcome back through the
pod's log (:mod:`.calls`).

Not built yet (docs/targets.md says so): mounts and ports.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from nodus_cli import config
from nodus_cli.catalog import Offer
from nodus_cli.errors import NotRunnable
from nodus_cli.functions import runtime
from nodus_cli.planning.capabilities import Capabilities
from nodus_cli.planning.ranking import Candidate, RuntimeLookup
from nodus_cli.records import StageRecord, StageStatus, TaskRecord
from nodus_cli.targets import calls
from nodus_cli.targets.base import (
    Cleanup,
    ItemContext,
    NodeInfo,
    Preparation,
    Settled,
    Started,
    Target,
    TargetFailure,
    Task,
    TaskContext,
    TaskEnd,
    TaskState,
)
from nodus_cli.targets.cluster.pricing import (
    NodePrice,
    node_price,
    price_details,
    price_notes,
    priced_config,
    unpriced_notes,
)
from nodus_cli.targets.cluster.refusal import refuse_unplaceable
from nodus_cli.targets.cluster.resources import price_share, tasks_per_node
from nodus_cli.targets.cluster.settling import (
    end_words,
    items_failure,
    record_end,
    settled_run,
)
from nodus_cli.targets.docker.containers import LABEL_RUN, memory_bytes, memory_limit
from nodus_cli.targets.kubernetes import calls as kube_calls
from nodus_cli.targets.kubernetes import follow as following
from nodus_cli.targets.kubernetes.api import Cluster, KubernetesFailure, connect
from nodus_cli.targets.kubernetes.indexed import (
    IndexedRun,
    indexed,
    items_words,
    newest_by_index,
    split_job_id,
)
from nodus_cli.targets.kubernetes.manifest import (
    indexed_manifest,
    job_manifest,
    job_name,
    label_value,
)
from nodus_cli.targets.kubernetes.nodes import NodeRecord, node_records

if TYPE_CHECKING:
    from nodus_cli.planning.plan import Plan, StagePlan
    from nodus_cli.records import RunRecord, RunStore
    from nodus_cli.workload import Stage, Workload

__all__ = ["KubernetesTarget"]


class KubernetesTarget(Target):
    name: ClassVar[str] = "kubernetes"
    description: ClassVar[str] = "the Kubernetes cluster"
    #: Each pod has its own NODUS_WORK_DIR (an emptyDir): stages do not share one.
    capabilities: ClassVar[Capabilities] = Capabilities(shared_work_dir=False)
    owns_jobs: ClassVar[bool] = True
    price_hint: ClassVar[str] = (
        "set [kubernetes] price_per_hour or [kubernetes] prices in config.toml"
    )

    def __init__(self, store: RunStore, catalog: str | None = None) -> None:
        super().__init__(store, catalog)
        self.settings = config.kubernetes()
        self._cluster: Cluster | None = None
        self._nodes: list[NodeRecord] | None = None
        #: Each node's price, by what prices it (many nodes share an instance type).
        self._prices: dict[tuple[object, ...], NodePrice] = {}
        self._plan: Plan | None = None
        #: False: ``--no-wait``, a pod the scheduler cannot place ends the task.
        self._queue = True
        #: The PriorityClass of this run's pods (its ``priority``, the configuration).
        self._priority_class = self.settings.priority_class
        self._jobs: dict[str, following.Following] = {}
        #: The Indexed Job of each fan-out stage being followed, by the stage's name.
        self._indexed: dict[str, IndexedRun] = {}
        #: Items told to stop before their stage's Indexed Job was made, by stage.
        self._early: dict[str, set[int]] = {}
        self._lock = threading.Lock()

    # -- the cluster -------------------------------------------------------------------

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = connect(self.settings)
        return self._cluster

    def _all_nodes(self) -> list[NodeRecord]:
        if self._nodes is None:
            self._nodes = node_records(self.cluster.nodes(), self.cluster.pods_everywhere())
        return self._nodes

    def _node_price(self, node: NodeRecord) -> NodePrice:
        """What the configuration declares, else the catalog's price of the node's instance
        type (its region's when listed), else not set."""
        declared, by = self.settings.price_of(node.name, node.labels)
        key = (declared, by, node.instance_type, node.region)
        if key not in self._prices:
            self._prices[key] = node_price(
                declared, by, node.instance_type, self.catalog, node.region
            )
        return self._prices[key]

    def _price(self, node: NodeRecord) -> float:
        return self._node_price(node).per_hour

    def _offer(self, node: NodeRecord) -> Offer:
        has = node.gpu is not None and node.gpus > 0
        return Offer(
            supplier="kubernetes",
            machine_id=node.name,
            region=node.zone or "kubernetes",
            gpu=node.gpu if has else None,
            gpu_count=node.gpus if has else 0,
            gpu_memory_gb=(node.gpu_memory_gb or 0.0) if has else 0.0,
            vcpus=node.cpus,
            memory_gb=node.memory_gb,
            disk_gb=None,
            arch=node.arch,
            price_per_hour=self._price(node),
        )

    def offers(self, workload: Workload) -> tuple[Offer, ...]:
        return tuple(self._offer(n) for n in self._all_nodes() if n.usable)

    def _exclusions(self) -> list[str]:
        said = []
        for n in self._all_nodes():
            if not n.usable:
                said.append(f"node {n.name} is {n.words}: the scheduler places no pod there now")
            said.extend(f"node {n.name}: {problem}" for problem in _problems(n))
        return said

    def plan(self, workload: Workload, history: RuntimeLookup) -> Plan:
        plan = super().plan(workload, history)
        nodes = self._all_nodes()
        for sp in plan.stages:
            if not sp.feasible and not sp.nearest:
                held = sorted(nodes, key=lambda n: (-n.gpus, n.name))
                sp.nearest = [Candidate(self._offer(n)) for n in held[:3]]
        plan.notes.extend(self._exclusions())
        usable = [n for n in nodes if n.usable]
        plan.notes.extend(
            price_notes([(n.name, self._node_price(n)) for n in usable], self.price_hint)
        )
        return plan

    def prepare(self, workload: Workload, plan: Plan) -> Preparation:
        self._plan = plan
        self._queue = workload.queue
        self._priority_class = self.settings.class_for(workload.priority)
        refuse_unplaceable(plan, "the Kubernetes cluster", "kubernetes", self._exclusions)
        kube_calls.check(workload, self.store.root)  # a call must fit in a Secret
        for stage in workload.stages:
            refused = _unsupported(stage)
            if refused is not None:
                raise NotRunnable(
                    f"stage {stage.name!r} {refused}: the Kubernetes target does not "
                    "carry that yet",
                    hint="run it with --target local",
                )
        # A namespace nodus may not use (RBAC, a namespace that does not exist) is said
        # now, before anything is created.
        self.cluster.jobs(LABEL_RUN)
        first = plan.stages[0].selected
        prices = {n.name: self._node_price(n) for n in self._all_nodes()}
        return Preparation(
            price_per_hour=first.offer.price_per_hour if first else 0.0,
            notes=unpriced_notes(plan, prices, self.price_hint),
        )

    def capacity(self, stage: Stage, plan: StagePlan) -> int:
        """Jobs of a fan-out stage created at once: the tasks the usable nodes the plan
        names hold (:func:`~nodus_cli.targets.cluster.resources.tasks_per_node`); the
        scheduler queues the rest."""
        names = {c.offer.machine_id for c in plan.candidates}
        total = sum(
            tasks_per_node(stage.requirements, gpus=n.gpus, cpus=n.cpus)
            for n in self._all_nodes()
            if n.usable and n.name in names
        )
        return max(1, total)

    # -- running -----------------------------------------------------------------------

    def _model_labels(self, stage: Stage) -> list[tuple[str, str]]:
        """The (label, value) of every node that carries the planned model for ``stage``."""
        model = None
        if self._plan is not None:
            for sp in self._plan.stages:
                if sp.name == stage.name and sp.selected is not None:
                    model = sp.selected.offer.gpu
        need = stage.requirements.peak_memory_gb or 0.0
        found = [
            n.gpu_label
            for n in self._all_nodes()
            if n.gpu_label is not None
            and n.gpu is not None
            and n.gpu == model
            and (n.gpu_memory_gb or 0.0) >= need
        ]
        if not found:
            raise NotRunnable(
                f"stage {stage.name!r}: no node carries the GPU model {model or '?'}",
                hint="`nodus nodes --target kubernetes` shows each node's GPU model",
            )
        return found

    def run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        name = job_name(task)
        job = following.Following(name)
        with self._lock:
            self._jobs[task.key] = job
        try:
            if task.stage.function is not None:
                return self._call(task, ctx, job)
            return self._run(task, ctx, job)
        except NotRunnable as exc:
            said = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
            if job.created:  # a retry makes a Job of its own: this one must not go on
                with contextlib.suppress(KubernetesFailure):
                    self._delete(name)
            status = exc.status if isinstance(exc, KubernetesFailure) else 0
            if status is None or status >= 500:
                return TaskEnd(TaskState.INFRASTRUCTURE, 1, said)
            return TaskEnd(TaskState.CANNOT_START, 1, said)
        finally:
            with self._lock:
                self._jobs.pop(task.key, None)

    def _call(self, task: Task, ctx: TaskContext, job: following.Following) -> TaskEnd:
        """A Python function's task (:mod:`.calls`): the image's ``python3`` runs the call;
        its outcome comes back through the pod's log into the call's folder here."""
        item = calls.folder_of(task, self.store.root).item(calls.item_of(task))
        end = self._run(task, calls.Framed(ctx, item), job, runtime.INTERPRETERS[0])
        return calls.ended(task, end, item)

    def _run(
        self, task: Task, ctx: TaskContext, job: following.Following, python: str | None = None
    ) -> TaskEnd:
        """Create the task's Job (with its call's Secret for a ``python`` call), follow it."""
        stage = task.stage
        labels = self._model_labels(stage) if stage.requirements.wants_gpu else []
        manifest = job_manifest(
            task,
            self.cluster.namespace,
            labels,
            priority_class=self._priority_class,
            queue=self.settings.queue,
        )
        if python is not None:
            kube_calls.attach(manifest, task, python)
        made = self.cluster.create_job(manifest)
        job.created = True
        if python is not None:  # owned by the Job: the pod waits for it to mount it
            secret = kube_calls.call_secret(
                task, self.store.root, job.name, self.cluster.namespace, made
            )
            self.cluster.create_secret(secret)
        ctx.submitted(
            f"created Job {job.name} in namespace {self.cluster.namespace}", job_id=job.name
        )
        if job.stopping:
            self._delete(job.name)
        memory = memory_bytes(stage.requirements.cpu, stage.requirements.memory_gb)
        return following.follow(
            self.cluster,
            job,
            ctx,
            image=stage.image,
            memory_said=memory_limit(memory),
            started=lambda node: self._started(task, node),
            holders=lambda: self._holders(labels),
            queue_ok=self._queue,
            queue_name=self.settings.queue,
            wants=self._wants(stage),
        )

    def _wants(self, stage: Stage) -> str:
        """What the stage's pod waits for, as its words say it (`` for 2x H100``, with the
        sign nodus prints; empty without GPUs)."""
        req = stage.requirements
        if not req.wants_gpu or self._plan is None:
            return ""
        for sp in self._plan.stages:
            if sp.name == stage.name and sp.selected is not None and sp.selected.offer.gpu:
                return f" for {req.gpu_count}× {sp.selected.offer.gpu}"
        return ""

    def _started(self, task: Task, where: str) -> Started:
        node = next((n for n in self._all_nodes() if n.name == where), None)
        price = 0.0
        if node is not None:  # the share of the node one task of the stage pays
            price = price_share(
                self._price(node), task.stage.requirements, gpus=node.gpus, cpus=node.cpus
            )
        config_doc = (
            priced_config(self._offer(node), self._node_price(node)) if node is not None else None
        )
        return Started(node=where, price_per_hour=price, config=config_doc)

    def _holders(self, labels: list[tuple[str, str]]) -> str:
        """Who holds the GPUs of the nodes of that model now (empty when none can say)."""
        wanted = set(labels)
        names = {
            n.name for n in self._all_nodes() if n.gpu_label is not None and n.gpu_label in wanted
        }
        if not names:
            return ""
        try:
            pods = self.cluster.pods_everywhere()
        except KubernetesFailure:
            return ""
        held = []
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node not in names:
                continue
            gpus = sum(
                int(
                    float(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
                )
                for c in (pod.get("spec") or {}).get("containers") or ()
            )
            if gpus:
                meta = pod.get("metadata") or {}
                held.append(f"{meta.get('namespace')}/{meta.get('name')} ({gpus} on {node})")
        if not held:
            return ""
        shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
        return f"the GPUs of nodes {', '.join(sorted(names))} are held by {shown}"

    def _delete(self, name: str) -> bool:
        return self.cluster.delete_job(name)

    # -- a fan-out stage as one Indexed Job (:mod:`.indexed`) ------------------------------

    def runs_items(self, stage: Stage) -> bool:
        """A fan-out stage is one Indexed Job where :func:`.indexed.indexed` says so."""
        return indexed(stage, self.store.root)

    def run_items(
        self, tasks: Sequence[Task], contexts: Sequence[ItemContext], parallel: int
    ) -> None:
        stage = tasks[0].stage
        try:
            labels = self._model_labels(stage) if stage.requirements.wants_gpu else []
        except NotRunnable as exc:
            for ctx in contexts:
                ctx.ended(TaskEnd(TaskState.CANNOT_START, 1, exc.message))
            return
        manifest = indexed_manifest(
            tasks,
            self.cluster.namespace,
            labels,
            parallel,
            priority_class=self._priority_class,
            queue=self.settings.queue,
        )
        memory = memory_bytes(stage.requirements.cpu, stage.requirements.memory_gb)
        run = IndexedRun(
            self.cluster,
            tasks,
            contexts,
            manifest,
            home=self.store.root,
            memory_said=memory_limit(memory),
            started=self._started,
            holders=lambda: self._holders(labels),
            queue_ok=self._queue,
            queue_name=self.settings.queue,
            wants=self._wants(stage),
        )
        with self._lock:
            self._indexed[stage.name] = run
            early = self._early.pop(stage.name, set())
        for index in early:  # told to stop before the Job was there
            run.stop(index)
        try:
            run.run()
        finally:
            with self._lock:
                self._indexed.pop(stage.name, None)

    def stop_task(self, task: Task) -> None:
        with self._lock:
            job = self._jobs.get(task.key)
            indexed = self._indexed.get(task.stage.name)
        if job is None and task.item is not None and self.runs_items(task.stage):
            if indexed is None:  # its Indexed Job is not made yet: stopped once it is
                with self._lock:
                    self._early.setdefault(task.stage.name, set()).add(task.item.index)
            else:
                indexed.stop(task.item.index)
            return
        if job is None:
            return
        job.stopping = True
        with contextlib.suppress(KubernetesFailure):
            self._delete(job.name)

    def cleanup(self, run_id: str) -> Cleanup:
        """Delete every Job of the run still there, with its pods, and the ConfigMaps and
        Secrets of its items and calls (``nodus stop``; the driver at each run's end)."""
        selector = f"{LABEL_RUN}={label_value(run_id)}"
        cluster = self.cluster
        try:
            found = [
                ("Job", self._delete, cluster.jobs(selector)),
                ("ConfigMap", cluster.delete_config_map, cluster.config_maps(selector)),
                ("Secret", cluster.delete_secret, cluster.secrets(selector)),
            ]
        except KubernetesFailure as exc:
            raise TargetFailure(exc.message) from None
        removed = []
        for kind, delete, docs in found:
            for doc in docs:
                meta = doc.get("metadata") or {}
                if (meta.get("labels") or {}).get(LABEL_RUN) != label_value(run_id):
                    continue  # a server that ignores the selector
                with contextlib.suppress(KubernetesFailure):
                    if delete(str(meta.get("name"))):
                        removed.append(f"{kind} {meta.get('name')}")
        return Cleanup(removed)

    # -- a run whose supervisor died ------------------------------------------------------

    def _job_end(self, name: str) -> tuple[TaskEnd, float] | None:
        """How Job ``name`` ended and how long it ran (None: it still runs or waits)."""
        job = self.cluster.job(name)
        if job is None:
            return TaskEnd(TaskState.KILLED, 137, f"the Job {name} is gone (deleted)"), 0.0
        pods = following.job_pods(self.cluster.pods(f"job-name={name}"), name)
        pod = pods[-1] if pods else None
        end = following.pod_end(pod, "its memory limit") if pod is not None else None
        if end is None:
            for condition in (job.get("status") or {}).get("conditions") or ():
                if condition.get("status") != "True":
                    continue
                if condition.get("type") == "Complete":
                    end = TaskEnd(TaskState.EXITED, 0)
                elif condition.get("type") == "Failed":
                    end = TaskEnd(
                        TaskState.KILLED, 1, f"the Job failed: {condition.get('message')}"
                    )
        if end is None:
            return None
        status = job.get("status") or {}
        return end, _seconds(status.get("startTime"), status.get("completionTime"))

    def _item_end(self, job_id: str) -> tuple[TaskEnd, float, str | None] | None:
        """How an item ended (its own Job, or its index of an Indexed Job), how long it ran
        and on which node (None: it still runs or waits)."""
        name, index = split_job_id(job_id)
        if index is None:
            found = self._job_end(name)
            return None if found is None else (*found, None)
        job = self.cluster.job(name)
        if job is None:
            return TaskEnd(TaskState.KILLED, 137, f"the Job {name} is gone (deleted)"), 0.0, None
        pods = following.job_pods(self.cluster.pods(f"job-name={name}"), name)
        pod = newest_by_index(pods).get(index)
        if pod is None:
            for condition in (job.get("status") or {}).get("conditions") or ():
                if condition.get("type") == "Failed" and condition.get("status") == "True":
                    said = condition.get("message") or condition.get("reason")
                    words = f"the Job {name} failed before index {index} ran: {said}"
                    return TaskEnd(TaskState.KILLED, 1, words), 0.0, None
            return None
        end = following.pod_end(pod, "its memory limit")
        if end is None:
            return None
        statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
        ended = (statuses[0].get("state") or {}).get("terminated") or {}
        seconds = _seconds(ended.get("startedAt"), ended.get("finishedAt"))
        return end, seconds, (pod.get("spec") or {}).get("nodeName")

    def _settle_items(
        self, record: RunRecord, index: int, stage: StageRecord
    ) -> tuple[list[TaskRecord], TaskEnd, str] | bool | None:
        """A fan-out stage's items as the cluster ended them (changed in place): the items,
        the stage's end and the words of its first failure; None while one still runs or
        waits; False: no item was created."""
        items = self.store.tasks(record.id, index)
        if not any(t.job_id for t in items):
            return False
        for t in items:
            if not t.status.active or t.job_id is None:
                continue
            found = self._item_end(t.job_id)
            if found is None:
                return None
            end, seconds, node = found
            record_end(t, end, seconds, record.price_per_hour)
            t.node = t.node or node
        stage.cost = sum(t.cost for t in items)
        failure = items_failure(stage.name, items, "nodus ended before it created it")
        if failure is None:
            stage.status, stage.exit_code, stage.message = StageStatus.SUCCEEDED, 0, None
            return items, TaskEnd(TaskState.EXITED, 0), f"{len(items)} of {len(items)} items"
        code, message = failure
        stage.status, stage.exit_code, stage.message = StageStatus.FAILED, code, message
        return items, TaskEnd(TaskState.EXITED, code, message), message

    def settle(self, record: RunRecord) -> Settled | None:
        stages: dict[int, StageRecord] = {}
        tasks: dict[int, list[TaskRecord]] = {}
        last: TaskEnd | None = None
        last_job = ""
        for index, stage in enumerate(record.stages):
            if not stage.status.active:
                continue
            if stage.job_id is None:  # a fan-out stage: its items' jobs
                settled = self._settle_items(record, index, stage)
                if settled is None:
                    return None
                if settled is False:
                    continue
                assert settled is not True
                tasks[index], last, words = settled
                stages[index] = stage
                last_job = f"the items of stage {stage.name!r} went on: {words}"
                continue
            found = self._job_end(stage.job_id)
            if found is None:
                return None
            end, seconds = found
            last, last_job = end, f"Job {stage.job_id} went on"
            record_end(stage, end, seconds, record.price_per_hour)
            stages[index] = stage
        ended = None
        if last is not None:
            ok = last.state == TaskState.EXITED and last.exit_code == 0
            ended = (ok, last.exit_code, f"{last_job}: {end_words(last)}")
        return settled_run(record, stages, tasks, ended, "created a Kubernetes Job", "create")

    # -- looking -----------------------------------------------------------------------

    def describe(self, record: RunRecord) -> str | None:
        parts = []
        for index, stage in enumerate(record.stages):
            if stage.job_id is None and stage.status.active:  # a fan-out stage's items
                try:
                    said = items_words(self.cluster, self.store.tasks(record.id, index))
                except KubernetesFailure as exc:
                    return f"the cluster does not answer: {exc.message}"
                parts += [f"{stage.name}: {said}"] if said else []
            if stage.job_id is None or not stage.status.active:
                continue
            try:
                job = self.cluster.job(stage.job_id)
                pods = following.job_pods(
                    self.cluster.pods(f"job-name={stage.job_id}"), stage.job_id
                )
            except KubernetesFailure as exc:
                return f"the cluster does not answer: {exc.message}"
            if job is None:
                parts.append(f"{stage.name}: Job {stage.job_id} is gone")
                continue
            pod = pods[-1] if pods else None
            phase = ((pod or {}).get("status") or {}).get("phase", "no pod yet")
            node = ((pod or {}).get("spec") or {}).get("nodeName")
            where = f" on {node}" if node else ""
            reason = following.pending_reason(pod, []) if pod is not None and not node else None
            why = f": the scheduler says: {reason}" if reason else ""
            parts.append(f"{stage.name}: Job {stage.job_id} {str(phase).lower()}{where}{why}")
        return "; ".join(parts) or None

    def nodes(self) -> list[NodeInfo]:
        return [
            NodeInfo(
                id=n.name,
                hostname=n.name,
                state=n.words,
                cpus=n.cpus,
                memory_gb=round(n.memory_gb, 3),
                gpu=n.gpu,
                gpu_memory_gb=n.gpu_memory_gb,
                gpus=n.gpus,
                free_gpus=n.free_gpus,
                price_per_hour=self._price(n),
                details={
                    **price_details(self._node_price(n), self.price_hint),
                    "gpu_label": f"{n.gpu_label[0]}={n.gpu_label[1]}" if n.gpu_label else None,
                    "gpus_used": n.gpus_used,
                    "cpus_used": n.cpus_used,
                    "memory_used_gb": round(n.memory_used_gb, 3),
                    "zone": n.zone,
                    "problems": _problems(n),
                },
            )
            for n in self._all_nodes()
        ]

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def _problems(n: NodeRecord) -> list[str]:
    """What keeps nodus from using a node's GPUs."""
    if n.gpu_label is not None and n.gpu is None:
        key, value = n.gpu_label
        return [
            f"{key}={value} names no GPU model nodus knows (or a part of one: a MIG "
            "slice, a time-sliced share), so it matches no `gpu`"
        ]
    if n.gpus > 0 and n.gpu_label is None:
        return [
            f"its {n.gpus} nvidia.com/gpu have no label naming their model, so they match "
            "no `gpu`; install the GPU operator's GPU feature discovery (it writes "
            "nvidia.com/gpu.product)"
        ]
    return []


def _unsupported(stage: Stage) -> str | None:
    """What a stage asks that this target cannot carry yet (None: nothing)."""
    if stage.mounts:
        return "mounts host paths (a pod gets no host path from nodus)"
    if stage.ports:
        return "publishes ports"
    return None


def _seconds(start: Any, end: Any) -> float:
    """Seconds between two RFC 3339 times of the API (0 when either is missing)."""
    try:
        began = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        ended = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (ended - began).total_seconds())
