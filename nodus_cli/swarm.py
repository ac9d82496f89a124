"""Docker Swarm as a target: its nodes are the inventory, each stage a replicated job.

nodus does not schedule across machines itself: it plans against what the nodes hold
(CPUs, memory, GPUs declared as generic resources of kind ``NVIDIA-GPU``, and the labels
``nodus.gpu``, ``nodus.gpu_memory_gb``, ``nodus.price_per_hour``, ``nodus.machine_id``),
then submits each stage as a service in ``replicated-job`` mode pinned to the chosen node
and lets Swarm run it. When a task stays pending, nodus says which requirement no node
meets instead of waiting silently.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from nodus_cli import engine, gpus
from nodus_cli.catalog import Offer
from nodus_cli.containers import (
    LABEL_RUN,
    WORK_DIR_IN_CONTAINER,
    ContainerSpec,
    spec_for,
)
from nodus_cli.planner import Plan, plan_workload
from nodus_cli.problems import NodusError
from nodus_cli.records import RunRecord, RunStore, StageRecord, fingerprint, now_iso
from nodus_cli.runner import (
    EXIT_BUDGET,
    EXIT_NOT_RUNNABLE,
    Cancelled,
    Outcome,
    _install_signal_handlers,
    _restore_signal_handlers,
)
from nodus_cli.workload import Stage, Workload

GPU_KIND = "NVIDIA-GPU"
LABEL_GPU = "nodus.gpu"
LABEL_GPU_MEMORY = "nodus.gpu_memory_gb"
LABEL_PRICE = "nodus.price_per_hour"
LABEL_MACHINE = "nodus.machine_id"
LABEL_REGION = "nodus.region"
TERMINAL = ("complete", "failed", "rejected", "shutdown", "orphaned", "remove")
HOLDING = ("assigned", "accepted", "preparing", "ready", "starting", "running")
INFRA_STATES = ("rejected", "orphaned", "shutdown", "remove")


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    hostname: str
    state: str
    availability: str
    role: str
    cpus: float
    memory_gb: float
    gpu: str | None
    gpu_memory_gb: float | None
    gpus: int
    free_gpus: int
    free_cpus: float
    free_memory_gb: float
    price_per_hour: float
    price_source: str
    arch: str
    labels: dict[str, str]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "hostname": self.hostname,
            "state": self.state,
            "availability": self.availability,
            "role": self.role,
            "cpus": self.cpus,
            "memory_gb": self.memory_gb,
            "gpu": self.gpu,
            "gpu_memory_gb": self.gpu_memory_gb,
            "gpus": self.gpus,
            "free_gpus": self.free_gpus,
            "free_cpus": self.free_cpus,
            "free_memory_gb": self.free_memory_gb,
            "price_per_hour": self.price_per_hour,
            "price_source": self.price_source,
            "arch": self.arch,
        }

    def as_offer(self) -> Offer:
        return Offer(
            supplier="swarm",
            machine_id=self.hostname,
            region=self.labels.get(LABEL_REGION, "swarm"),
            gpu=self.gpu if self.gpus else None,
            gpu_count=self.gpus if self.gpu else 0,
            gpu_memory_gb=self.gpu_memory_gb or 0.0,
            vcpus=self.cpus,
            memory_gb=self.memory_gb,
            disk_gb=None,
            arch=self.arch,
            price_per_hour=self.price_per_hour,
        )


def manager_client() -> Any:
    client = engine.connect()
    info = client.info()
    swarm_info = info.get("Swarm") or {}
    if swarm_info.get("LocalNodeState") != "active":
        raise NodusError(
            "this Docker engine is not part of a Swarm cluster",
            exit_code=2,
            hint="point DOCKER_HOST (or the Docker context) at a Swarm manager, or create a "
            "cluster with `docker swarm init` (see README: Run on a cluster)",
        )
    if not swarm_info.get("ControlAvailable"):
        raise NodusError(
            "this Docker engine is a Swarm worker; nodus needs a manager to see the nodes",
            exit_code=2,
            hint="point DOCKER_HOST at a manager node",
        )
    return client


def list_nodes(client: Any, catalog_path: str | None = None) -> list[Node]:
    raw_nodes = client.api.nodes()
    reserved = _reservations(client)
    nodes = [_node(n, reserved.get(n["ID"], (0, 0.0, 0.0)), catalog_path) for n in raw_nodes]
    return sorted(nodes, key=lambda n: (n.hostname, n.id))


def _reservations(client: Any) -> dict[str, tuple[int, float, float]]:
    """GPUs, CPUs and GB reserved on each node by tasks that hold resources now."""
    held: dict[str, tuple[int, float, float]] = {}
    for task in client.api.tasks():
        node = task.get("NodeID")
        state = (task.get("Status") or {}).get("State")
        if not node or state not in HOLDING:
            continue
        res = ((task.get("Spec") or {}).get("Resources") or {}).get("Reservations") or {}
        gpus_held = 0
        for g in res.get("GenericResources") or []:
            if "DiscreteResourceSpec" in g and g["DiscreteResourceSpec"].get("Kind") == GPU_KIND:
                gpus_held += int(g["DiscreteResourceSpec"].get("Value", 0))
            if "NamedResourceSpec" in g and g["NamedResourceSpec"].get("Kind") == GPU_KIND:
                gpus_held += 1
        cpu = (res.get("NanoCPUs") or 0) / 1e9
        mem = (res.get("MemoryBytes") or 0) / 1024**3
        g0, c0, m0 = held.get(node, (0, 0.0, 0.0))
        held[node] = (g0 + gpus_held, c0 + cpu, m0 + mem)
    return held


def _node(
    raw: dict[str, Any], reserved: tuple[int, float, float], catalog_path: str | None
) -> Node:
    desc = raw.get("Description") or {}
    spec = raw.get("Spec") or {}
    labels: dict[str, str] = dict(spec.get("Labels") or {})
    resources = desc.get("Resources") or {}
    total_gpus = 0
    for g in resources.get("GenericResources") or []:
        if "DiscreteResourceSpec" in g and g["DiscreteResourceSpec"].get("Kind") == GPU_KIND:
            total_gpus += int(g["DiscreteResourceSpec"].get("Value", 0))
        if "NamedResourceSpec" in g and g["NamedResourceSpec"].get("Kind") == GPU_KIND:
            total_gpus += 1
    family = None
    label_gpu = labels.get(LABEL_GPU)
    if label_gpu:
        found = gpus.table().lookup(label_gpu)
        family = found.name if found else None
    gpu_memory = _float(labels.get(LABEL_GPU_MEMORY))
    if family and gpu_memory is None:
        gpu_memory = min(gpus.table().get(family).memory_gb or (0.0,))
    price, source = _price(labels, catalog_path)
    cpus = (resources.get("NanoCPUs") or 0) / 1e9
    memory = (resources.get("MemoryBytes") or 0) / 1024**3
    platform = (desc.get("Platform") or {}).get("Architecture", "x86_64")
    return Node(
        id=raw["ID"],
        hostname=desc.get("Hostname", raw["ID"][:12]),
        state=(raw.get("Status") or {}).get("State", "unknown"),
        availability=spec.get("Availability", "active"),
        role=spec.get("Role", "worker"),
        cpus=cpus,
        memory_gb=round(memory, 1),
        gpu=family,
        gpu_memory_gb=gpu_memory,
        gpus=total_gpus,
        free_gpus=max(0, total_gpus - reserved[0]),
        free_cpus=max(0.0, cpus - reserved[1]),
        free_memory_gb=round(max(0.0, memory - reserved[2]), 1),
        price_per_hour=price,
        price_source=source,
        arch="arm64" if platform in ("aarch64", "arm64") else "x86_64",
        labels=labels,
    )


def _price(labels: dict[str, str], catalog_path: str | None) -> tuple[float, str]:
    label = _float(labels.get(LABEL_PRICE))
    if label is not None:
        return label, f"label {LABEL_PRICE}"
    machine = labels.get(LABEL_MACHINE)
    if machine:
        from nodus_cli import catalog

        prices = [
            o.price_per_hour
            for o in catalog.load(catalog_path).offers
            if o.machine_id.lower() == machine.lower()
        ]
        if prices:
            return min(prices), f"catalog price of {machine}"
    return 0.0, "not set"


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def offers(catalog_path: str | None = None) -> tuple[Offer, ...]:
    client = manager_client()
    return tuple(
        n.as_offer()
        for n in list_nodes(client, catalog_path)
        if n.state == "ready" and n.availability == "active"
    )


# -- running ----------------------------------------------------------------------


def service_args(spec: ContainerSpec, node: Node, volume: str | None) -> dict[str, Any]:
    """Arguments for ``services.create``: the Swarm form of the local container contract."""
    from docker.types import Mount, Resources, RestartPolicy, ServiceMode

    constraints = [f"node.id=={node.id}"]
    if spec.gpu_count:
        constraints.append(f"node.labels.{LABEL_GPU}=={node.labels.get(LABEL_GPU, node.gpu)}")
        if LABEL_GPU_MEMORY in node.labels:
            constraints.append(f"node.labels.{LABEL_GPU_MEMORY}=={node.labels[LABEL_GPU_MEMORY]}")
    resources = Resources(
        cpu_limit=spec.nano_cpus,
        mem_limit=spec.memory_bytes,
        cpu_reservation=spec.nano_cpus,
        mem_reservation=spec.memory_bytes,
        generic_resources={GPU_KIND: spec.gpu_count} if spec.gpu_count else None,
    )
    mounts = []
    if volume is not None:
        mounts.append(
            Mount(
                WORK_DIR_IN_CONTAINER,
                volume,
                type="volume",
                labels={LABEL_RUN: spec.labels[LABEL_RUN]},
            )
        )
    else:
        mounts.append(Mount(WORK_DIR_IN_CONTAINER, None, type="tmpfs"))
    env = dict(spec.env)
    env["NODUS_WORK_DIR"] = WORK_DIR_IN_CONTAINER
    return {
        "image": spec.image,
        "command": spec.command[:1] if spec.command else None,
        "args": spec.command[1:] if spec.command else None,
        "name": spec.name,
        "env": [f"{k}={v}" for k, v in env.items()],
        "labels": spec.labels,
        "container_labels": spec.labels,
        "constraints": constraints,
        "resources": resources,
        "mode": ServiceMode("replicated-job", concurrency=1),
        "restart_policy": RestartPolicy(condition="none"),
        "mounts": mounts,
    }


class SwarmRunner:
    def __init__(
        self,
        workload: Workload,
        plan: Plan,
        nodes: list[Node],
        store: RunStore,
        client: Any,
        record: RunRecord,
        out: IO[str],
        status: Callable[[str], None],
        retries: int,
    ) -> None:
        self.workload = workload
        self.plan = plan
        self.nodes = {n.hostname: n for n in nodes}
        self.store = store
        self.client = client
        self.record = record
        self.out = out
        self.status = status
        self.retries = retries
        self.cost = 0.0
        self.explain_after = float(os.environ.get("NODUS_PENDING_EXPLAIN_SECONDS", "3"))
        self._log = store.log_path(record.id).open("a", encoding="utf-8")
        self._volumes: dict[str, str] = {}

    def execute(self) -> Outcome:
        previous = _install_signal_handlers()
        outcome = Outcome("failed", 1, 0.0)
        current: int | None = None
        try:
            shared = self._shared_volumes()
            status, exit_code, message = "succeeded", 0, None
            stages = self.workload.stages
            for idx, stage in enumerate(stages):
                current = idx
                code, stage_status = self._run_stage(idx, stage, shared.get(stage.name))
                if stage_status != "succeeded":
                    status = stage_status
                    exit_code = EXIT_BUDGET if stage_status == "budget_exhausted" else code
                    message = f"stage {stage.name!r} {stage_status} (exit {code})"
                    for later in range(idx + 1, len(stages)):
                        self.store.save_stage(
                            self.record.id,
                            later,
                            StageRecord(
                                stages[later].name,
                                "skipped",
                                None,
                                message=f"not started: {message}",
                            ),
                        )
                    break
            current = None
            outcome = Outcome(status, exit_code, self.cost, message)
        except Cancelled as exc:
            self.remove_services()
            if current is not None:
                st = self.workload.stages[current]
                self.store.save_stage(
                    self.record.id,
                    current,
                    StageRecord(
                        st.name,
                        "cancelled",
                        None,
                        ended_at=now_iso(),
                        message="cancelled; its service was removed",
                    ),
                )
            outcome = Outcome("cancelled", 128 + exc.signum, self.cost, f"cancelled by {exc}")
        finally:
            _restore_signal_handlers(previous)
            self.remove_services()
            self._remove_volumes()
            self.store.finish_run(
                self.record.id, outcome.status, outcome.exit_code, self.cost, outcome.message
            )
            self._log.close()
        return outcome

    def _shared_volumes(self) -> dict[str, str]:
        """Stages placed on one node share a named volume; others get their own tmpfs."""
        by_node: dict[str, list[str]] = {}
        for sp in self.plan.stages:
            if sp.selected is not None:
                by_node.setdefault(sp.selected.offer.machine_id, []).append(sp.name)
        shared: dict[str, str] = {}
        for host, names in by_node.items():
            if len(names) > 1:
                volume = f"nodus-work-{self.record.id}"
                self._volumes[host] = volume
                for name in names:
                    shared[name] = volume
        return shared

    def _node_for(self, stage: Stage) -> Node:
        for sp in self.plan.stages:
            if sp.name == stage.name and sp.selected is not None:
                return self.nodes[sp.selected.offer.machine_id]
        raise NodusError(f"stage {stage.name!r} has no node")

    def _run_stage(self, idx: int, stage: Stage, volume: str | None) -> tuple[int, str]:
        from docker.errors import APIError

        node = self._node_for(stage)
        offer = node.as_offer()
        attempts = 0
        while True:
            attempts += 1
            spec = spec_for(stage, self.record.id, self.workload.name)
            started = now_iso()
            self.store.save_stage(
                self.record.id,
                idx,
                StageRecord(
                    stage.name,
                    "running",
                    None,
                    started_at=started,
                    config=offer.as_json(),
                    attempts=attempts,
                    message=f"submitted to node {node.hostname}",
                ),
            )
            self.status(
                f"stage {stage.name}: submitting to node {node.hostname} "
                f"({stage.requirements.gpu_count}× {node.gpu or 'no GPU'})"
            )
            try:
                service = self.client.services.create(**service_args(spec, node, volume))
            except APIError as exc:
                raise NodusError(
                    f"Swarm refused stage {stage.name!r}: {exc.explanation or exc}"
                ) from None
            t0 = time.monotonic()
            try:
                state, code, err, ran = self._follow(service, stage, node)
            finally:
                with contextlib.suppress(Exception):
                    service.remove()
            runtime = ran if ran is not None else time.monotonic() - t0
            stage_cost = runtime / 3600 * node.price_per_hour
            self.cost += stage_cost
            if state in INFRA_STATES and attempts <= self.retries:
                self.status(
                    f"stage {stage.name}: task {state} ({err}); retrying with the same "
                    f"GPU model and count ({attempts}/{self.retries})"
                )
                continue
            if state == "budget":
                stage_status = "budget_exhausted"
            elif state == "complete" and code == 0:
                stage_status = "succeeded"
            else:
                stage_status = "failed"
            self.store.save_stage(
                self.record.id,
                idx,
                StageRecord(
                    stage.name,
                    stage_status,
                    code,
                    started_at=started,
                    ended_at=now_iso(),
                    runtime_seconds=runtime,
                    cost=stage_cost,
                    config=offer.as_json(),
                    attempts=attempts,
                    message=err or f"ran on node {node.hostname}",
                ),
            )
            self.status(f"stage {stage.name}: {stage_status} (exit {code}) on {node.hostname}")
            return code, stage_status

    def _follow(
        self, service: Any, stage: Stage, node: Node
    ) -> tuple[str, int, str | None, float | None]:
        """Poll the job's task until it ends; stream logs; explain a pending task."""
        streamer: threading.Thread | None = None
        stop = threading.Event()
        explained: str | None = None
        pending_since = time.monotonic()
        deadline = self._budget_deadline(node)
        running_since: float | None = None
        while True:
            tasks = service.tasks()
            task = max(tasks, key=lambda t: t.get("CreatedAt", ""), default=None)
            state = ((task or {}).get("Status") or {}).get("State", "new")
            err = ((task or {}).get("Status") or {}).get("Err")
            if state in ("running", "complete", "failed") and streamer is None:
                running_since = time.monotonic()
                streamer = threading.Thread(
                    target=self._stream, args=(service, stage.name, stop), daemon=True
                )
                streamer.start()
            if state in TERMINAL:
                code = int(
                    (((task or {}).get("Status") or {}).get("ContainerStatus") or {}).get(
                        "ExitCode", 0 if state == "complete" else 1
                    )
                )
                if streamer is not None:
                    streamer.join(timeout=3)
                stop.set()
                ran = time.monotonic() - running_since if running_since else None
                return state, code, err, ran
            if (
                state == "pending"
                and explained is None
                and time.monotonic() - pending_since >= self.explain_after
            ):
                explained = self.explain_pending(stage, node, err)
                self.status(explained)
                self.store.save_stage(
                    self.record.id,
                    self.workload.stages.index(stage),
                    StageRecord(
                        stage.name,
                        "running",
                        None,
                        started_at=now_iso(),
                        config=node.as_offer().as_json(),
                        message=explained,
                    ),
                )
            if deadline is not None and time.time() >= deadline:
                self.status(f"stage {stage.name}: the run's cost reached its budget; stopping")
                stop.set()
                return (
                    "budget",
                    EXIT_BUDGET,
                    "stopped at the budget",
                    (time.monotonic() - running_since if running_since else None),
                )
            time.sleep(0.3)

    def _budget_deadline(self, node: Node) -> float | None:
        budget = self.workload.budget
        if budget is None or node.price_per_hour <= 0:
            return None
        return time.time() + max(0.0, budget - self.cost) / node.price_per_hour * 3600

    def explain_pending(self, stage: Stage, node: Node, err: str | None) -> str:
        """Say which requirement no node meets now, and the largest matching capacity."""
        req = stage.requirements
        current = {n.id: n for n in list_nodes(self.client)}
        here = current.get(node.id, node)
        said = f" (Swarm: {err})" if err else ""
        if req.wants_gpu and here.free_gpus < req.gpu_count:
            matching = [n for n in current.values() if n.gpu == here.gpu]
            best = max(matching, key=lambda n: n.free_gpus, default=here)
            return (
                f"stage {stage.name}: submitted, none running{said}: it needs "
                f"{req.gpu_count} free {here.gpu} GPU(s) and no node has them now; the largest "
                f"matching capacity is {best.free_gpus} free of {best.gpus} on {best.hostname} "
                "(the rest are reserved by other tasks). It starts when they are released; "
                "Ctrl-C to give up."
            )
        if here.free_cpus < req.cpu:
            return (
                f"stage {stage.name}: submitted, none running{said}: it reserves {req.cpu:g} CPUs "
                f"and {here.hostname} has {here.free_cpus:g} free now"
            )
        memory = req.memory_gb or 2 * req.cpu
        if here.free_memory_gb < memory:
            return (
                f"stage {stage.name}: submitted, none running{said}: it reserves {memory:g} GB of "
                f"memory and {here.hostname} has {here.free_memory_gb:g} GB free now"
            )
        if req.wants_gpu and here.gpus < req.gpu_count:
            return (
                f"stage {stage.name}: submitted, none running{said}: {here.hostname} declares "
                f"{here.gpus} {GPU_KIND} generic resources, fewer than {req.gpu_count}"
            )
        return f"stage {stage.name}: submitted, none running{said}"

    def _stream(self, service: Any, stage: str, stop: threading.Event) -> None:
        prefix = f"{stage} | "
        try:
            stream = self.client.api.service_logs(service.id, stdout=True, stderr=True, follow=True)
            pending = b""
            for chunk in stream:
                if stop.is_set() and not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._emit(prefix + line.decode("utf-8", "replace"))
            if pending:
                self._emit(prefix + pending.decode("utf-8", "replace"))
        except Exception:  # the service was removed while following: nothing more to show
            return

    def _emit(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()
        self._log.write(line + "\n")
        self._log.flush()

    def remove_services(self) -> None:
        with contextlib.suppress(Exception):
            for svc in self.client.services.list(
                filters={"label": f"{LABEL_RUN}={self.record.id}"}
            ):
                with contextlib.suppress(Exception):
                    svc.remove()

    def _remove_volumes(self) -> None:
        """Remove shared volumes this engine can reach; name the others to remove by hand."""
        if not self._volumes:
            return
        local = self.client.info().get("Name")
        deadline = time.time() + 20
        for host, volume in self._volumes.items():
            if host != local:
                self.status(
                    f"note: volume {volume} stays on node {host}: remove it there with "
                    f"`docker volume rm {volume}`"
                )
                continue
            while True:
                try:
                    self.client.volumes.get(volume).remove(force=True)
                    break
                except Exception as exc:
                    if "no such volume" in str(exc).lower() or time.time() > deadline:
                        break
                    time.sleep(0.5)  # the job's container is still being removed


def run_swarm(
    workload: Workload,
    file: str | None,
    retries: int,
    catalog_path: str | None,
    out: IO[str] | None = None,
    status: Callable[[str], None] | None = None,
    record: RunRecord | None = None,
) -> tuple[RunRecord, Outcome]:
    from nodus_cli import records

    store = records.open_store()
    assert store is not None
    client = manager_client()
    nodes = list_nodes(client, catalog_path)
    usable = [n for n in nodes if n.state == "ready" and n.availability == "active"]
    plan = plan_workload(
        workload,
        [n.as_offer() for n in usable],
        target="swarm",
        history=store.runtime_lookup(fingerprint(workload)),
    )
    report = status or (lambda m: print(f"nodus: {m}", file=sys.stderr, flush=True))
    for sp in plan.stages:
        if not sp.feasible:
            raise NodusError(
                f"no node of the cluster can run stage {sp.name!r}: "
                f"{(sp.explanation or 'no eligible node').replace('configuration', 'node')}",
                exit_code=EXIT_NOT_RUNNABLE,
                hint="`nodus nodes` shows what each node holds",
            )
    for note in plan.notes:
        report(f"note: {note}")
    if record is None:
        first = plan.stages[0].selected
        price = first.offer.price_per_hour if first else 0.0
        record = store.start_run(workload, "swarm", price, file, pid=os.getpid())
    runner = SwarmRunner(
        workload, plan, usable, store, client, record, out or sys.stdout, report, retries
    )
    return record, runner.execute()
