"""Running stages on the cluster: one service per stage, followed to its end.

Each stage is submitted as a service pinned to the chosen node and constrained to the
requested GPU family and memory; nodus follows its task, streams its output, takes its
exit code, records the run like a local one and removes the service. When a task stays
pending, nodus says which requirement no node meets instead of waiting silently.

Before Docker 24, Swarm neither stops nor cleans up a removed job (see
:func:`job_mode`): on such engines each stage is the same one task as a one-replica
service with restart condition ``none``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import IO, Any

from nodus_cli import engine
from nodus_cli.containers import (
    LABEL_RUN,
    WORK_DIR_IN_CONTAINER,
    ContainerSpec,
    spec_for,
)
from nodus_cli.planner import Plan, no_history, plan_workload
from nodus_cli.problems import NodusError
from nodus_cli.records import RunRecord, RunStore, StageRecord, fingerprint, now_iso
from nodus_cli.runner import (
    EXIT_BUDGET,
    EXIT_NOT_RUNNABLE,
    Cancelled,
    Outcome,
    install_signal_handlers,
    restore_signal_handlers,
)
from nodus_cli.swarm.api import (
    GPU_KIND,
    INFRA_STATES,
    LABEL_GPU,
    LABEL_GPU_MEMORY,
    STARTED,
    TERMINAL,
    SwarmApi,
    manager_client,
)
from nodus_cli.swarm.logs import LogFollower
from nodus_cli.swarm.nodes import Node, list_nodes, warn_problems
from nodus_cli.workload import Stage, Workload

#: Status polls: every POLL_FIRST seconds for the first POLL_FAST seconds (Swarm runs a
#: short job in about half a second; one poll is a cheap call), then slowing to POLL_MAX.
POLL_FIRST, POLL_FAST, POLL_MAX = 0.02, 2.0, 0.5


def service_args(
    spec: ContainerSpec, node: Node, volume: str | None, job: bool = True
) -> dict[str, Any]:
    """The body of ``POST /services/create``, of the SDK's types: the container contract.

    A replicated job (one task, never restarted) pinned to the chosen node by id (with
    ``job=False``, the same one task as a one-replica service: see :func:`job_mode`); a GPU
    stage also carries the node's GPU model and memory labels as constraints, so Swarm
    itself never places it on another model, and reserves its GPUs as ``NVIDIA-GPU``
    generic resources. CPU and memory are both reserved and limited; /dev/shm is inside
    the memory limit, as for a local container.
    """
    from docker import types

    constraints = [f"node.id=={node.id}"]
    if spec.gpu_count:
        constraints.append(f"node.labels.{LABEL_GPU}=={node.labels.get(LABEL_GPU, node.gpu)}")
        if LABEL_GPU_MEMORY in node.labels:
            constraints.append(f"node.labels.{LABEL_GPU_MEMORY}=={node.labels[LABEL_GPU_MEMORY]}")
    work = (
        types.Mount(WORK_DIR_IN_CONTAINER, None, type="tmpfs")
        if volume is None
        else types.Mount(WORK_DIR_IN_CONTAINER, volume, labels={LABEL_RUN: spec.labels[LABEL_RUN]})
    )
    container = types.ContainerSpec(
        spec.image,
        # `args` replaces the image's CMD and keeps its ENTRYPOINT, as `docker run IMAGE
        # CMD...` does locally; `command` would replace the entrypoint.
        args=list(spec.command) if spec.command is not None else None,
        env={**spec.env, "NODUS_WORK_DIR": WORK_DIR_IN_CONTAINER},
        labels=spec.labels,
        # tmpfs is charged to the container's memory cgroup: inside the limit.
        mounts=[types.Mount("/dev/shm", None, type="tmpfs", tmpfs_size=spec.shm_bytes), work],
    )
    resources = types.Resources(
        cpu_limit=spec.nano_cpus,
        mem_limit=spec.memory_bytes,
        cpu_reservation=spec.nano_cpus,
        mem_reservation=spec.memory_bytes,
        generic_resources={GPU_KIND: spec.gpu_count} if spec.gpu_count else None,
    )
    return {
        "Name": spec.name,
        "Labels": spec.labels,
        "TaskTemplate": types.TaskTemplate(
            container,
            resources=resources,
            restart_policy=types.RestartPolicy("none"),
            placement=types.Placement(constraints=constraints),
        ),
        "Mode": (
            types.ServiceMode("replicated-job", replicas=1, concurrency=1)
            if job
            else types.ServiceMode("replicated", replicas=1)
        ),
    }


#: The first Docker Engine whose Swarm stops, and cleans up after, a removed job.
JOBS_FIXED_IN = (24, 0)


def job_mode(nodes: list[Node]) -> bool:
    """Whether to submit stages as replicated jobs (else as one-replica services).

    Before Docker 24, removing a ``replicated-job`` service neither stops its running
    task nor removes its finished task and container (moby/moby#42789, #44312); worse,
    a task still pending when its service is removed is placed later and runs anyway.
    Engines that old get the equivalent one-off service instead: one replica, restart
    condition ``none`` (it runs once, to completion, and ``service rm`` stops and
    removes it). ``NODUS_SWARM_MODE=replicated-job`` or ``=replicated`` decides instead.
    """
    forced = os.environ.get("NODUS_SWARM_MODE", "").strip().lower()
    if forced in ("replicated-job", "job"):
        return True
    if forced == "replicated":
        return False
    return all(_version(n.engine_version) >= JOBS_FIXED_IN for n in nodes)


def _version(text: str) -> tuple[int, int]:
    parts = text.split("+")[0].split("-")[0].split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return (0, 0)


@dataclass(slots=True)
class _Ended:
    state: str
    exit_code: int
    error: str | None
    ran_seconds: float | None


@dataclass(slots=True)
class _Current:
    """The stage being run, so a cancellation can record it completely."""

    idx: int
    record: StageRecord
    node: Node
    running_since: float | None = None


class SwarmRunner:
    def __init__(
        self,
        workload: Workload,
        plan: Plan,
        nodes: list[Node],
        store: RunStore,
        client: SwarmApi,
        record: RunRecord,
        out: IO[str],
        status: Callable[[str], None],
        retries: int,
    ) -> None:
        self.workload = workload
        self.plan = plan
        self.nodes = {n.key: n for n in nodes}
        self.store = store
        self.client = client
        self.record = record
        self.out = out
        self.status = status
        self.retries = retries
        self.cost = 0.0
        self.explain_after = float(os.environ.get("NODUS_PENDING_EXPLAIN_SECONDS", "3"))
        self._log = store.log_path(record.id).open("a", encoding="utf-8")
        # A detached run's stdout is its log file: write each line once.
        self._out_is_log = _same_file(out, self._log)
        self._volumes: dict[str, tuple[Node, str]] = {}
        self._current: _Current | None = None
        self.job = job_mode(nodes)

    def execute(self) -> Outcome:
        previous = install_signal_handlers()
        outcome = Outcome("failed", 1, 0.0)
        try:
            try:
                outcome = self._stages()
            except Cancelled as exc:
                _ignore_signals()
                self.remove_services()
                self._record_cancelled()
                outcome = Outcome("cancelled", 128 + exc.signum, self.cost, f"cancelled by {exc}")
            except BaseException as exc:
                _ignore_signals()
                self._record_cancelled(f"nodus stopped: {exc}", status="failed")
                outcome = Outcome("failed", 1, self.cost, f"nodus stopped: {exc}")
                raise
        finally:
            _ignore_signals()
            self.remove_services()
            self._remove_volumes()
            self.store.finish_run(
                self.record.id, outcome.status, outcome.exit_code, self.cost, outcome.message
            )
            self._log.close()
            restore_signal_handlers(previous)
        return outcome

    def _stages(self) -> Outcome:
        shared = self._shared_volumes()
        stages = self.workload.stages
        for idx, stage in enumerate(stages):
            code, stage_status = self._run_stage(idx, stage, shared.get(stage.name))
            if stage_status == "succeeded":
                continue
            message = f"stage {stage.name!r} " + (
                "reached the budget"
                if stage_status == "budget_exhausted"
                else f"exited with {code}"
            )
            for later in range(idx + 1, len(stages)):
                self.store.save_stage(
                    self.record.id,
                    later,
                    StageRecord(
                        stages[later].name, "skipped", None, message=f"not started: {message}"
                    ),
                )
            exit_code = EXIT_BUDGET if stage_status == "budget_exhausted" else code
            return Outcome(stage_status, exit_code, self.cost, message)
        return Outcome("succeeded", 0, self.cost, None)

    def _record_cancelled(self, message: str | None = None, status: str = "cancelled") -> None:
        current = self._current
        if current is None:
            return
        self._current = None
        rec = current.record
        rec.status = status
        rec.ended_at = now_iso()
        if current.running_since is not None:
            rec.runtime_seconds = time.monotonic() - current.running_since
            rec.cost = rec.runtime_seconds / 3600 * current.node.price_per_hour
            self.cost += rec.cost
        rec.message = message or "cancelled; its service was removed"
        with contextlib.suppress(Exception):
            self.store.save_stage(self.record.id, current.idx, rec)

    def _shared_volumes(self) -> dict[str, str]:
        """Stages placed on one node share a named volume; a lone stage gets a tmpfs."""
        by_node: dict[str, list[str]] = {}
        for sp in self.plan.stages:
            if sp.selected is not None:
                by_node.setdefault(sp.selected.offer.machine_id, []).append(sp.name)
        shared: dict[str, str] = {}
        for key, names in by_node.items():
            if len(names) > 1:
                volume = f"nodus-work-{self.record.id}"
                self._volumes[key] = (self.nodes[key], volume)
                for name in names:
                    shared[name] = volume
        return shared

    def _node_for(self, stage: Stage) -> Node:
        for sp in self.plan.stages:
            if sp.name == stage.name and sp.selected is not None:
                return self.nodes[sp.selected.offer.machine_id]
        raise NodusError(f"stage {stage.name!r} has no node")

    def _run_stage(self, idx: int, stage: Stage, volume: str | None) -> tuple[int, str]:
        node = self._node_for(stage)
        offer = node.as_offer()
        gpu_word = (
            f"{stage.requirements.gpu_count}× {node.gpu}"
            if stage.requirements.wants_gpu
            else "no GPU"
        )
        attempts = 0
        while True:
            attempts += 1
            spec = spec_for(stage, self.record.id, self.workload.name)
            rec = StageRecord(
                stage.name,
                "running",
                None,
                started_at=now_iso(),
                config=offer.as_json(),
                attempts=attempts,
                message=f"submitted to node {node.key}",
            )
            self._current = _Current(idx, rec, node)
            self.store.save_stage(self.record.id, idx, rec)
            self.status(f"stage {stage.name}: submitting to node {node.key} ({gpu_word})")
            try:
                service_id = self.client.create_service(
                    service_args(spec, node, volume, job=self.job)
                )
            except engine.EngineError as exc:
                raise NodusError(f"Swarm refused stage {stage.name!r}: {exc.message}") from None
            ended: _Ended | None = None
            try:
                ended = self._follow(service_id, stage, node)
            finally:
                if ended is None:  # cancelled or failed while it ran: stop it for good
                    _ignore_signals()
                with contextlib.suppress(Exception):
                    if ended is not None and ended.state in TERMINAL:
                        self.client.remove_service(service_id)
                    else:
                        self.client.discard_service(service_id)
            runtime = ended.ran_seconds or 0.0
            stage_cost = runtime / 3600 * node.price_per_hour
            self.cost += stage_cost
            if ended.state in INFRA_STATES and attempts <= self.retries:
                self.status(
                    f"stage {stage.name}: task {ended.state} ({ended.error}); retrying with the "
                    f"same GPU model and count ({attempts}/{self.retries})"
                )
                continue
            if ended.state == "budget":
                stage_status = "budget_exhausted"
            elif ended.state == "complete" and ended.exit_code == 0:
                stage_status = "succeeded"
            else:
                stage_status = "failed"
            rec.status = stage_status
            rec.exit_code = ended.exit_code
            rec.ended_at = now_iso()
            rec.runtime_seconds = runtime if ended.ran_seconds is not None else None
            rec.cost = stage_cost
            rec.message = (
                f"{ended.state} on node {node.key}: {ended.error}"
                if ended.error and stage_status != "succeeded"
                else f"ran on node {node.key}"
            )
            self.store.save_stage(self.record.id, idx, rec)
            self._current = None
            self.status(
                f"stage {stage.name}: {stage_status} (exit {ended.exit_code}) on {node.key}"
                + (f" in {runtime:.1f}s" if ended.ran_seconds is not None else "")
            )
            return ended.exit_code, stage_status

    def _task(self, service_id: str) -> dict[str, Any] | None:
        tasks = self.client.tasks({"service": [service_id]})
        return max(tasks, key=lambda t: t.get("CreatedAt", ""), default=None)

    def _follow(self, service_id: str, stage: Stage, node: Node) -> _Ended:
        """Poll the job's task until it ends; stream its output; explain a pending task."""
        current = self._current
        assert current is not None
        prefix = f"{stage.name} | "
        follower: LogFollower | None = None
        explained = False
        submitted = time.monotonic()
        deadline: float | None = None
        try:
            while True:
                task = self._task(service_id) or {}
                status = task.get("Status") or {}
                state = status.get("State", "new")
                err = status.get("Err") or None
                if state in STARTED and current.running_since is None:
                    current.running_since = time.monotonic()
                    deadline = self._budget_deadline(node)
                    self._note_running(current, task)
                    follower = LogFollower(
                        self.client, service_id, lambda s: self._emit(prefix + s)
                    )
                    if state != "complete" and state != "failed":
                        follower.start()
                if state in TERMINAL:
                    if follower is not None:
                        follower.finish(complete=True)
                        follower = None
                    code = _exit_code(state, status)
                    ran = (
                        time.monotonic() - current.running_since
                        if current.running_since is not None
                        else None
                    )
                    return _Ended(state, code, err, ran)
                if (
                    state == "pending"
                    and not explained
                    and (err is not None or time.monotonic() - submitted >= self.explain_after)
                ):
                    explained = True
                    message = self.explain_pending(stage, node, err)
                    self.status(message)
                    current.record.message = message
                    self.store.save_stage(self.record.id, current.idx, current.record)
                if deadline is not None and time.time() >= deadline:
                    self.status(f"stage {stage.name}: the run's cost reached its budget; stopping")
                    if follower is not None:
                        follower.finish(complete=True)
                        follower = None
                    with contextlib.suppress(Exception):
                        self.client.discard_service(service_id)
                    ran = time.monotonic() - (current.running_since or submitted)
                    return _Ended("budget", EXIT_BUDGET, "stopped at the budget", ran)
                time.sleep(_poll_interval(time.monotonic() - submitted))
        finally:
            if follower is not None:  # cancelled or failed while following
                follower.finish(complete=False)

    def _note_running(self, current: _Current, task: dict[str, Any]) -> None:
        """Record the GPUs Swarm assigned to the task, once it starts."""
        # "GenericResources" at the task's top level in API 1.41, "AssignedGenericResources"
        # in later versions.
        given = task.get("AssignedGenericResources") or task.get("GenericResources") or []
        assigned = [
            g["NamedResourceSpec"]["Value"]
            for g in given
            if (g.get("NamedResourceSpec") or {}).get("Kind") == GPU_KIND
        ]
        current.record.gpu_uuids = assigned
        current.record.message = f"running on node {current.node.key}"
        with contextlib.suppress(Exception):
            self.store.save_stage(self.record.id, current.idx, current.record)

    def _budget_deadline(self, node: Node) -> float | None:
        budget = self.workload.budget
        if budget is None or node.price_per_hour <= 0:
            return None
        return time.time() + max(0.0, budget - self.cost) / node.price_per_hour * 3600

    def explain_pending(self, stage: Stage, node: Node, err: str | None) -> str:
        """Say which requirement no node meets now, and the largest matching capacity."""
        req = stage.requirements
        try:
            current = {n.id: n for n in list_nodes(self.client)}
        except Exception:
            current = {}
        here = current.get(node.id, node)
        head = f"stage {stage.name}: submitted, none running"
        said = f" (Swarm: {err})" if err else ""
        tail = " It starts when they are released; Ctrl-C to give up."
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
                    f"{head}{said}: it needs {req.gpu_count} free {here.gpu} GPU(s) and no "
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

    def _emit(self, line: str) -> None:
        if not self._out_is_log:
            self.out.write(line + "\n")
            self.out.flush()
        self._log.write(line + "\n")
        self._log.flush()

    def remove_services(self) -> None:
        with contextlib.suppress(Exception):
            for svc in self.client.services({"label": [f"{LABEL_RUN}={self.record.id}"]}):
                with contextlib.suppress(Exception):
                    self.client.discard_service(svc)

    def _remove_volumes(self) -> None:
        """Remove shared volumes this engine holds; name the others to remove by hand."""
        if not self._volumes:
            return
        here = self.client.node_id
        deadline = time.monotonic() + 20
        for node, volume in self._volumes.values():
            if node.id != here:
                self.status(
                    f"note: volume {volume} stays on node {node.key}: remove it there with "
                    f"`docker volume rm {volume}`"
                )
                continue
            while True:
                try:
                    self.client.remove_volume(volume)
                    break
                except Exception as exc:
                    text = str(exc).lower()
                    if "no such volume" in text or "not found" in text:
                        break
                    if time.monotonic() > deadline:
                        self.status(f"note: could not remove volume {volume}: {exc}")
                        break
                    time.sleep(0.1)  # the job's container is still being removed


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


def _same_file(a: IO[str], b: IO[str]) -> bool:
    try:
        sa, sb = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ignore_signals() -> None:
    """While nodus cleans up, a second Ctrl-C must not leave services behind."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


def plan_swarm(
    workload: Workload, client: SwarmApi, catalog_path: str | None, store: RunStore | None
) -> tuple[Plan, list[Node]]:
    """Plan every stage against the usable nodes; exit 3 when a stage has none."""
    nodes = list_nodes(client, catalog_path)
    usable = [n for n in nodes if n.usable]
    history = store.runtime_lookup(fingerprint(workload)) if store is not None else no_history
    plan = plan_workload(workload, [n.as_offer() for n in usable], target="swarm", history=history)
    for sp in plan.stages:
        if not sp.feasible:
            problems = [f"node {n.key}: {p}" for n in nodes for p in n.problems]
            unusable = [
                f"node {n.key} is {n.state}/{n.availability}" for n in nodes if not n.usable
            ]
            detail = "".join(f"\n  {line}" for line in problems + unusable)
            raise NodusError(
                f"no node of the cluster can run stage {sp.name!r}: "
                f"{(sp.explanation or 'no eligible node').replace('configuration', 'node')}"
                + detail,
                exit_code=EXIT_NOT_RUNNABLE,
                hint="`nodus nodes` shows what each node holds",
            )
    return plan, usable


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
    report = status or (lambda m: print(f"nodus: {m}", file=sys.stderr, flush=True))
    try:
        client = manager_client()
        plan, usable = plan_swarm(workload, client, catalog_path, store)
    except NodusError as exc:
        if record is not None:  # a detached run: its record must not stay "running"
            store.finish_run(record.id, "failed", exc.exit_code, 0.0, exc.message)
        raise
    for note in plan.notes:
        report(f"note: {note}")
    warn_problems(usable, lambda m: report(f"warning: {m}"))
    if record is None:
        first = plan.stages[0].selected
        price = first.offer.price_per_hour if first else 0.0
        record = store.start_run(workload, "swarm", price, file, pid=os.getpid())
    else:
        store.set_pid(record.id, os.getpid())
    runner = SwarmRunner(
        workload, plan, usable, store, client, record, out or sys.stdout, report, retries
    )
    return record, runner.execute()


# -- `nodus runs` --------------------------------------------------------------------


@cache
def _status_client() -> SwarmApi:
    return manager_client()


def cluster_state(record: RunRecord) -> str | None:
    """What the cluster says about a running Swarm run: each stage's task, now."""
    if record.target != "swarm" or record.status != "running":
        return None
    try:
        client = _status_client()
        services = client.services({"label": [f"{LABEL_RUN}={record.id}"]})
    except Exception as exc:
        return f"cluster not reachable: {getattr(exc, 'message', exc)}"
    if not services:
        if record.pid is not None and not _alive(record.pid):
            return f"nothing on the cluster, and its nodus process ({record.pid}) is gone"
        return "no service on the cluster now (between stages)"
    names: dict[str, str] = {}
    parts = []
    for svc in services:
        stage = ((svc.get("Spec") or {}).get("Labels") or {}).get("nodus.stage", svc["ID"][:12])
        try:
            tasks = client.tasks({"service": [svc["ID"]]})
        except Exception:
            tasks = []
        task = max(tasks, key=lambda t: t.get("CreatedAt", ""), default=None)
        if task is None:
            parts.append(f"{stage}: submitted")
            continue
        st = task.get("Status") or {}
        node = task.get("NodeID")
        if node and node not in names:
            with contextlib.suppress(Exception):
                names[node] = client.node(node)["Description"]["Hostname"]
        where = f" on {names.get(node, node[:12])}" if node else ""
        err = f" ({st['Err']})" if st.get("Err") else ""
        parts.append(f"{stage}: {st.get('State', 'new')}{where}{err}")
    return "; ".join(parts)
