"""The cluster as an inventory: what each node holds now and what is free.

A node's GPUs are its generic resources of kind ``NVIDIA-GPU``; their model, memory and
price come from the labels ``nodus.gpu``, ``nodus.gpu_memory_gb``, ``nodus.price_per_hour``
(or the catalog price of ``nodus.machine_id``). This is what exists now, not every
configuration a supplier could offer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from nodus_cli.catalog import Offer
from nodus_cli.structs import struct
from nodus_cli.targets.cluster.pricing import gpu_model, models_listed, node_price, number
from nodus_cli.targets.swarm.api import (
    GPU_KIND,
    HOLDING,
    LABEL_GPU,
    LABEL_GPU_MEMORY,
    LABEL_MACHINE,
    LABEL_PRICE,
    LABEL_REGION,
    SwarmApi,
    manager_client,
)


@struct(frozen=True)
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
    #: The address the node is reached at (Swarm's ``Status.Addr``; a manager's own
    #: address when that says 0.0.0.0): where the routing mesh publishes ports on it.
    addr: str = ""

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
            "addr": self.addr,
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
    from nodus_cli.structs import replace

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
    model = gpu_model(label_gpu)
    if label_gpu:
        family = model.name
        several = models_listed(label_gpu) if family is None else []
        if len(several) > 1:
            problems.append(
                f"label {LABEL_GPU}={label_gpu} names {len(several)} GPU models "
                f"({', '.join(several)}); a node's {GPU_KIND} generic resources cannot tell "
                "models apart, so nodus offers a node's GPUs as one model: declare only one "
                "model's GPUs and name it (`nodus swarm init-node`); its GPUs are not offered"
            )
        elif family is None:
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
    gpu_memory = number(labels.get(LABEL_GPU_MEMORY))
    if family and gpu_memory is None:
        gpu_memory = model.memory_gb
    price = node_price(
        number(labels.get(LABEL_PRICE)),
        f"label {LABEL_PRICE}",
        labels.get(LABEL_MACHINE),
        catalog_path,
    )
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
        price_per_hour=price.per_hour,
        price_source=price.source,
        arch="arm64" if platform in ("aarch64", "arm64") else "x86_64",
        labels=labels,
        problems=tuple(problems),
        engine_version=str(((desc.get("Engine") or {}).get("EngineVersion")) or ""),
        addr=_address(raw),
    )


def _address(raw: dict[str, Any]) -> str:
    """Where the node is reached: ``Status.Addr``, else its manager address's host."""
    addr = str((raw.get("Status") or {}).get("Addr") or "")
    if addr in ("", "0.0.0.0"):
        manager = str((raw.get("ManagerStatus") or {}).get("Addr") or "")
        addr = manager.rpartition(":")[0] if ":" in manager else manager
    return "" if addr == "0.0.0.0" else addr


def offers(catalog_path: str | None = None) -> tuple[Offer, ...]:
    """The inventory of ``--target swarm``: one offer per usable node."""
    client = manager_client()
    nodes = list_nodes(client, catalog_path)
    warn_problems(nodes, lambda m: print(f"nodus: warning: {m}", file=sys.stderr, flush=True))
    return tuple(n.as_offer() for n in nodes if n.usable)


def warn_problems(nodes: list[Node], report: Callable[[str], None]) -> None:
    for n in nodes:
        for problem in n.problems:
            report(f"node {n.key}: {problem}")
