"""Docker Swarm as a target: its nodes are the inventory, each stage a replicated job.

nodus does not schedule across machines itself: it plans against what the nodes hold
(CPUs, memory, GPUs declared as generic resources of kind ``NVIDIA-GPU``, and the labels
``nodus.gpu``, ``nodus.gpu_memory_gb``, ``nodus.price_per_hour``, ``nodus.machine_id``),
then submits each stage as a service in ``replicated-job`` mode pinned to the chosen node
and lets Swarm run it: nodus follows the task to its end, streams its output, takes its
exit code, records the run like a local one and removes the service. When a task stays
pending, nodus says which requirement no node meets instead of waiting silently.
Ctrl-C stops and removes the run's services.

Before Docker 24, Swarm neither stops nor cleans up a removed job (see
:func:`job_mode`): on such engines each stage is the same one task as a one-replica
service with restart condition ``none``.

The engine is the one ``DOCKER_HOST`` names, else the current Docker context's (read
from the Docker CLI's files by :func:`connect`), else the local socket; it must be a
Swarm manager. :class:`SwarmApi` talks to it through the Docker SDK's low-level client
(services built of ``docker.types``), with the errors of :mod:`nodus_cli.engine`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import IO, Any

from nodus_cli import engine, gpus
from nodus_cli.catalog import Offer
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
#: Task states that hold the resources the task reserves on its node.
HOLDING = ("assigned", "accepted", "preparing", "ready", "starting", "running")
#: Task states from which the container may have printed something.
STARTED = ("starting", "running", "complete", "failed")
#: Terminal states that are the infrastructure's doing, not the workload's: worth a retry.
INFRA_STATES = ("rejected", "orphaned", "shutdown", "remove")
#: Status polls: every POLL_FIRST seconds for the first POLL_FAST seconds (Swarm runs a
#: short job in about half a second; one poll is a cheap call), then slowing to POLL_MAX.
POLL_FIRST, POLL_FAST, POLL_MAX = 0.02, 2.0, 0.5


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
    #: What keeps nodus from using this node's GPUs as declared (bad or missing labels).
    problems: tuple[str, ...] = ()
    #: The node's name in plans: its host name, or host name and id when two nodes share one.
    name: str = ""
    #: The node's Docker Engine version ("20.10.24", "26.1.0").
    engine_version: str = ""

    @property
    def key(self) -> str:
        return self.name or self.hostname

    @property
    def usable(self) -> bool:
        return self.state == "ready" and self.availability == "active"

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
            "labels": {k: v for k, v in self.labels.items() if k.startswith("nodus.")},
            "problems": list(self.problems),
        }

    def as_offer(self) -> Offer:
        has_gpus = bool(self.gpu and self.gpus)
        return Offer(
            supplier="swarm",
            machine_id=self.key,
            region=self.labels.get(LABEL_REGION, "swarm"),
            gpu=self.gpu if has_gpus else None,
            gpu_count=self.gpus if has_gpus else 0,
            gpu_memory_gb=(self.gpu_memory_gb or 0.0) if has_gpus else 0.0,
            vcpus=self.cpus,
            memory_gb=self.memory_gb,
            disk_gb=None,
            arch=self.arch,
            price_per_hour=self.price_per_hour,
        )


# -- the cluster ----------------------------------------------------------------------


class SwarmApi(engine.Engine):
    """The Swarm calls of the target, on the SDK's client, with nodus's errors."""

    _node_id: str | None = None
    #: The manager check's node list, for the first listing after it: one call, not two.
    _checked_nodes: list[dict[str, Any]] | None = None

    @property
    def node_id(self) -> str:
        """The Swarm node id of the engine nodus talks to."""
        if self._node_id is None:
            self._node_id = str((self.info().get("Swarm") or {}).get("NodeID") or "")
        return self._node_id

    def info(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.call(self.client.info)
        return doc

    def nodes(self) -> list[dict[str, Any]]:
        found, self._checked_nodes = self._checked_nodes, None
        if found is None:
            found = self.call(self.client.nodes)
        return found

    def node(self, node_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = self.call(self.client.inspect_node, node_id)
        return doc

    def update_node(self, node_id: str, version: int, spec: dict[str, Any]) -> None:
        self.call(self.client.update_node, node_id, version, spec)

    def tasks(self, filters: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.call(self.client.tasks, filters=filters)
        return found

    def services(self, filters: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.call(self.client.services, filters=filters)
        return found

    def create_service(self, body: dict[str, Any]) -> str:
        """Create the service :func:`service_args` describes; its id."""
        doc = self.call(
            self.client.create_service,
            body["TaskTemplate"],
            name=body["Name"],
            labels=body["Labels"],
            mode=body["Mode"],
        )
        return str(doc["ID"])

    def remove_service(self, service_id: str) -> None:
        """Remove a service; one that is gone already is fine."""
        self.tolerate((404,), self.client.remove_service, service_id)

    def service(self, service_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = self.call(self.client.inspect_service, service_id)
        return doc

    def discard_service(self, service: dict[str, Any] | str) -> None:
        """Stop a service's tasks and remove it; one that is gone already is fine.

        A job is first updated to zero completions: that stops its running task and
        drops its pending one, which removing it alone does not do before Docker 24
        (its task would keep running, or start later).
        """
        from docker.types import ServiceMode

        try:
            doc = self.service(service) if isinstance(service, str) else service
        except engine.EngineError as exc:
            if exc.status == 404:
                return
            raise
        spec = doc.get("Spec") or {}
        job = (spec.get("Mode") or {}).get("ReplicatedJob")
        if job is not None and job.get("TotalCompletions") != 0:
            with contextlib.suppress(engine.EngineError):
                self.call(
                    self.client.update_service,
                    doc["ID"],
                    (doc.get("Version") or {}).get("Index", 0),
                    task_template=spec.get("TaskTemplate"),
                    name=spec.get("Name"),
                    labels=spec.get("Labels"),
                    mode=ServiceMode("replicated-job", replicas=0),
                )
        self.remove_service(doc["ID"])

    def remove_volume(self, name: str) -> None:
        self.call(self.client.remove_volume, name, force=True)

    def service_logs(self, service_id: str, follow: bool, since: str | None = None) -> Any:
        """A service's output, ``(stream, b"TIMESTAMP text")`` frames; ``close()`` cuts it.

        Its tasks are never TTYs, so the output is multiplexed (stdout and stderr frames).
        A finished job's log comes at once: a node that stops answering must not keep
        nodus waiting long for the rest of it.
        """
        params = {"follow": int(follow), "stdout": 1, "stderr": 1, "timestamps": 1, "tail": "all"}
        if since is not None:
            params["since"] = since
        return self.stream("/services/{0}/logs", service_id, params, None if follow else 15.0)


def connect() -> SwarmApi:
    """The engine of ``DOCKER_HOST``, else of the current Docker context, else the socket."""
    host, tls_dir = _context_endpoint()
    return SwarmApi(host=host, tls=_context_tls(tls_dir) if tls_dir is not None else None)


def _context_endpoint() -> tuple[str | None, str | None]:
    """(host, TLS folder) of the current Docker context, when DOCKER_HOST does not say.

    Read from the Docker CLI's own files (``docker context use`` writes them): the
    context named by ``DOCKER_CONTEXT`` or by ``currentContext`` in config.json.
    """
    if os.environ.get("DOCKER_HOST"):
        return None, None
    config_dir = os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker")
    name = os.environ.get("DOCKER_CONTEXT")
    if not name:
        try:
            with open(os.path.join(config_dir, "config.json"), encoding="utf-8") as handle:
                name = (json.load(handle) or {}).get("currentContext")
        except (OSError, ValueError, AttributeError):
            name = None
    if not name or name == "default":
        return None, None
    import hashlib

    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = os.path.join(config_dir, "contexts", "meta", digest, "meta.json")
    try:
        with open(meta, encoding="utf-8") as handle:
            endpoint = json.load(handle)["Endpoints"]["docker"]
    except (OSError, ValueError, KeyError, TypeError):
        raise NodusError(
            f"the current Docker context {name!r} cannot be read ({meta})",
            hint="`docker context ls` lists the contexts; or set DOCKER_HOST",
        ) from None
    tls_dir = os.path.join(config_dir, "contexts", "tls", digest, "docker")
    host = endpoint.get("Host")
    if not host:
        return None, None
    return str(host), tls_dir if os.path.isdir(tls_dir) else None


def _context_tls(folder: str) -> Any:
    """The SDK's TLS settings from a context's folder: its CA, its client certificate."""
    from docker.tls import TLSConfig

    ca, cert, key = (os.path.join(folder, f) for f in ("ca.pem", "cert.pem", "key.pem"))
    return TLSConfig(
        client_cert=(cert, key) if os.path.exists(cert) and os.path.exists(key) else None,
        ca_cert=ca if os.path.exists(ca) else None,
        verify=True,
    )


def manager_client() -> SwarmApi:
    """The engine, checked to be a Swarm manager (one cheap call: listing the nodes)."""
    api = connect()
    try:
        api._checked_nodes = api.nodes()
    except engine.EngineUnreachable as exc:
        raise exc.as_nodus_error() from None
    except engine.EngineTimeout as exc:
        raise NodusError(f"the Docker engine at {api.where} does not answer: {exc}") from None
    except engine.EngineError as exc:
        if exc.status != 503:
            raise NodusError(f"the Docker engine at {api.where}: {exc.message}") from None
        if "worker" in exc.message.lower():
            raise NodusError(
                f"the Docker engine at {api.where} is a Swarm worker; nodus needs a manager "
                "to see the nodes",
                exit_code=2,
                hint="point DOCKER_HOST (or the Docker context) at a manager node",
            ) from None
        raise NodusError(
            f"the Docker engine at {api.where} is not part of a Swarm cluster",
            exit_code=2,
            hint="point DOCKER_HOST (or the Docker context) at a Swarm manager, or create a "
            "cluster with `docker swarm init`, then prepare GPU nodes with "
            "`nodus swarm init-node`",
        ) from None
    return api


def list_nodes(client: SwarmApi, catalog_path: str | None = None) -> list[Node]:
    """Every node with what it holds and what running tasks leave free, by host name."""
    raw_nodes = client.nodes()
    reserved = _reservations(client)
    nodes = [_node(n, reserved.get(n["ID"], (0, 0.0, 0.0)), catalog_path) for n in raw_nodes]
    seen: dict[str, int] = {}
    for n in nodes:
        seen[n.hostname] = seen.get(n.hostname, 0) + 1
    named = [
        _replace(n, name=n.hostname if seen[n.hostname] == 1 else f"{n.hostname}/{n.id[:12]}")
        for n in nodes
    ]
    return sorted(named, key=lambda n: (n.hostname, n.id))


def _replace(node: Node, **changes: Any) -> Node:
    from dataclasses import replace

    return replace(node, **changes)


def _gpu_count(generic: list[dict[str, Any]] | None) -> int:
    count = 0
    for g in generic or []:
        discrete = g.get("DiscreteResourceSpec")
        named = g.get("NamedResourceSpec")
        if discrete and discrete.get("Kind") == GPU_KIND:
            count += int(discrete.get("Value", 0))
        if named and named.get("Kind") == GPU_KIND:
            count += 1
    return count


def _reservations(client: SwarmApi) -> dict[str, tuple[int, float, float]]:
    """GPUs, CPUs and GiB reserved on each node by tasks that hold resources now."""
    held: dict[str, tuple[int, float, float]] = {}
    for task in client.tasks():
        node = task.get("NodeID")
        state = (task.get("Status") or {}).get("State")
        if not node or state not in HOLDING:
            continue
        res = ((task.get("Spec") or {}).get("Resources") or {}).get("Reservations") or {}
        gpus_held = _gpu_count(res.get("GenericResources"))
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
    total_gpus = _gpu_count(resources.get("GenericResources"))
    problems: list[str] = []
    family = None
    label_gpu = labels.get(LABEL_GPU)
    if label_gpu:
        found = gpus.table().lookup(label_gpu)
        family = found.name if found else None
        if family is None:
            problems.append(
                f"label {LABEL_GPU}={label_gpu} is not a GPU model nodus knows (`nodus gpus` "
                "lists them): its GPUs are not offered"
            )
        elif not total_gpus:
            problems.append(
                f"labelled {LABEL_GPU}={label_gpu} but it declares no {GPU_KIND} generic "
                "resources (dockerd's node-generic-resources): no GPU can be reserved on it; "
                "see `nodus swarm init-node`"
            )
    elif total_gpus:
        problems.append(
            f"declares {total_gpus} {GPU_KIND} generic resources but has no {LABEL_GPU} label: "
            "nodus cannot tell their model, so they are not offered; see `nodus swarm init-node`"
        )
    gpu_memory = _float(labels.get(LABEL_GPU_MEMORY))
    if family and gpu_memory is None:
        gpu_memory = min(gpus.table().get(family).memory_gb or (0.0,))
    price, source = _price(labels, catalog_path)
    cpus = (resources.get("NanoCPUs") or 0) / 1e9
    memory = (resources.get("MemoryBytes") or 0) / 1024**3
    platform = (desc.get("Platform") or {}).get("Architecture", "x86_64")
    return Node(
        id=raw["ID"],
        hostname=desc.get("Hostname") or raw["ID"][:12],
        state=(raw.get("Status") or {}).get("State", "unknown"),
        availability=spec.get("Availability", "active"),
        role=spec.get("Role", "worker"),
        cpus=cpus,
        memory_gb=round(memory, 1),
        gpu=family,
        gpu_memory_gb=gpu_memory,
        gpus=total_gpus,
        free_gpus=max(0, total_gpus - reserved[0]),
        free_cpus=round(max(0.0, cpus - reserved[1]), 3),
        free_memory_gb=round(max(0.0, memory - reserved[2]), 1),
        price_per_hour=price,
        price_source=source,
        arch="arm64" if platform in ("aarch64", "arm64") else "x86_64",
        labels=labels,
        problems=tuple(problems),
        engine_version=str(((desc.get("Engine") or {}).get("EngineVersion")) or ""),
    )


def _price(labels: dict[str, str], catalog_path: str | None) -> tuple[float, str]:
    label = _float(labels.get(LABEL_PRICE))
    if label is not None and label >= 0:
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
        value = float(text)
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def offers(catalog_path: str | None = None) -> tuple[Offer, ...]:
    """The inventory of ``--target swarm``: one offer per usable node."""
    client = manager_client()
    nodes = list_nodes(client, catalog_path)
    _warn_problems(nodes, lambda m: print(f"nodus: warning: {m}", file=sys.stderr, flush=True))
    return tuple(n.as_offer() for n in nodes if n.usable)


def _warn_problems(nodes: list[Node], report: Callable[[str], None]) -> None:
    for n in nodes:
        for problem in n.problems:
            report(f"node {n.key}: {problem}")


# -- running ----------------------------------------------------------------------------


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


class LogFollower:
    """A job's output, streamed while it runs and completed from the log once it ends.

    Swarm's ``follow`` stream never ends, not even when the job completes or the service
    is removed, so it cannot say when the output is complete. The follower streams
    frames live in a thread; ``finish`` (once the task is terminal, so its log is
    complete) closes that stream, reads the log again from a little before the newest
    frame shown, and shows what the live stream had not delivered: none lost, none shown
    twice. The two reads need not agree on the order of stdout and stderr lines written
    within a few milliseconds of each other, so the frames are matched by content
    (each carries its nanosecond timestamp), not by position.
    """

    #: Seconds before the newest frame shown live from which the final read starts.
    OVERLAP = 2.0

    def __init__(self, api: SwarmApi, service_id: str, emit: Callable[[str], None]) -> None:
        self.api = api
        self.service_id = service_id
        self.emit = emit
        self.lock = threading.Lock()
        self.closed = False
        self.partial = b""
        self.newest: int | None = None  # nanoseconds since the epoch
        self.recent: deque[tuple[int, bytes]] = deque()
        self.stream: Any = None  # the follow stream, once open
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._follow, daemon=True, name="nodus-logs")
        self.thread.start()

    def _follow(self) -> None:
        try:
            stream = self.api.service_logs(self.service_id, follow=True)
            with self.lock:
                if self.closed:  # finished while the request was under way
                    stream.close()
                    return
                self.stream = stream
            for _, frame in stream:
                with self.lock:
                    if self.closed:
                        return
                    self._remember(frame)
                    self._take(frame)
        except Exception:  # closed under it, or refused: finish() completes the output
            return

    def _remember(self, frame: bytes) -> None:
        stamp = _nanoseconds(frame.partition(b" ")[0])
        if stamp is None:
            return
        if self.newest is None or stamp > self.newest:
            self.newest = stamp
        self.recent.append((stamp, frame))
        horizon = self.newest - int(self.OVERLAP * 1e9)
        while self.recent and self.recent[0][0] < horizon:
            self.recent.popleft()

    def _take(self, frame: bytes) -> None:
        # "2024-05-01T10:00:00.123456789Z text": drop the timestamp, keep partial lines.
        _stamp, sep, text = frame.partition(b" ")
        self.partial += text if sep else frame
        *lines, self.partial = self.partial.split(b"\n")
        for line in lines:
            self.emit(line.decode("utf-8", "replace"))

    def finish(self, complete: bool = True) -> None:
        """Stop following; with ``complete``, show what the live stream had not shown."""
        with self.lock:
            self.closed = True  # from here the live thread shows nothing more
            stream = self.stream
        if stream is not None:  # open: cut it, and the thread ends at once
            with contextlib.suppress(Exception):
                stream.close()
            if self.thread is not None:
                self.thread.join(timeout=2)
        # Else the follow request is still unanswered: its thread closes the stream
        # itself when the answer comes; nothing is left to wait for.
        if complete:
            since = None
            if self.newest is not None:
                start = self.newest - int(self.OVERLAP * 1e9)
                since = f"{start // 1_000_000_000}.{start % 1_000_000_000:09d}"
            shown = Counter(frame for _, frame in self.recent)
            try:
                final = self.api.service_logs(self.service_id, follow=False, since=since)
                try:
                    for _, frame in final:
                        if shown[frame] > 0:
                            shown[frame] -= 1
                        else:
                            self._take(frame)
                finally:
                    with contextlib.suppress(Exception):
                        final.close()
            except Exception as exc:
                self.emit(f"[nodus: the rest of the output is not available: {exc}]")
        if self.partial:
            self.emit(self.partial.decode("utf-8", "replace"))
            self.partial = b""


def _nanoseconds(stamp: bytes) -> int | None:
    """``2024-05-01T10:00:00.123456789Z`` (RFC 3339, UTC) in nanoseconds since the epoch."""
    text = stamp.decode("ascii", "replace")
    if not text.endswith("Z") or len(text) < 20:
        return None
    whole, _, fraction = text[:-1].partition(".")
    seconds = _epoch_seconds(whole)
    if seconds is None or not (fraction.isdigit() or fraction == ""):
        return None
    return seconds * 1_000_000_000 + int((fraction + "000000000")[:9])


@lru_cache(maxsize=64)
def _epoch_seconds(whole: str) -> int | None:
    """``2024-05-01T10:00:00`` (UTC) in seconds since the epoch."""
    from datetime import UTC, datetime

    try:
        return int(datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp())
    except ValueError:
        return None


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
        previous = _install_signal_handlers()
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
            _restore_signal_handlers(previous)
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
    _warn_problems(usable, lambda m: report(f"warning: {m}"))
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
