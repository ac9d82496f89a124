"""The service a task becomes on Swarm, and the job mode that suits the engines.

A task is one service with one task that runs once (a replicated job, or on engines
older than Docker 24 a one-replica service that never restarts: see :func:`job_mode`).
A stage's task is pinned to the node the plan chose; a fan-out stage's tasks are not
pinned: Swarm's own scheduler spreads them over the nodes that can run them (GPU generic
resources reserved, the other nodes excluded by constraints), nodus does not schedule.
The constraints that say so come from :mod:`.placement`; the body here carries them.
"""

from __future__ import annotations

import os
from typing import Any

from nodus_cli.structs import struct
from nodus_cli.targets.docker.containers import LABEL_RUN, WORK_DIR_IN_CONTAINER, ContainerSpec
from nodus_cli.targets.swarm.api import GPU_KIND
from nodus_cli.targets.swarm.nodes import Node

#: The first Docker Engine whose Swarm stops, and cleans up after, a removed job.
JOBS_FIXED_IN = (24, 0)
#: Where a node's /tmp is mounted in the tasks that prepare and remove a shared folder.
HOST_TMP = "/nodus-host-tmp"


@struct(frozen=True)
class WorkMount:
    """The work folder a task gets: its own tmpfs, or a folder its node's stages share."""

    host_path: str | None = None  # None: a tmpfs of the task's own

    def mount(self) -> dict[str, Any]:
        if self.host_path is None:
            return _mount(WORK_DIR_IN_CONTAINER, None, "tmpfs")
        return _mount(WORK_DIR_IN_CONTAINER, self.host_path, "bind")


def _mount(
    target: str, source: str | None, kind: str, read_only: bool = False, size: int | None = None
) -> dict[str, Any]:
    """One entry of a container spec's ``Mounts`` (a tmpfs has no source)."""
    mount: dict[str, Any] = {"Target": target, "Type": kind, "ReadOnly": read_only}
    if source is not None:
        mount["Source"] = source
    if size is not None:
        mount["TmpfsOptions"] = {"SizeBytes": size}
    return mount


def shared_folder(run_id: str) -> str:
    """The folder, on a node, that the run's stages placed there share."""
    return f"/tmp/nodus-work-{run_id}"


def shared_folder_inside(run_id: str) -> str:
    """:func:`shared_folder` as the housekeeping task sees it (the node's /tmp at HOST_TMP)."""
    return f"{HOST_TMP}/{shared_folder(run_id).rpartition('/')[2]}"


def service_args(
    spec: ContainerSpec,
    constraints: list[str],
    work: WorkMount,
    job: bool = True,
) -> dict[str, Any]:
    """The body of ``POST /services/create``: the container contract.

    A GPU task carries the GPU model and memory labels of its node as constraints (Swarm
    never places it on another model) and reserves its GPUs as ``NVIDIA-GPU`` generic
    resources. CPU and memory are both reserved and limited; /dev/shm is inside the
    memory limit, as for a local container. Published ports go through the routing mesh.
    """
    # tmpfs is charged to the container's memory cgroup: inside the limit.
    mounts = [_mount("/dev/shm", None, "tmpfs", size=spec.shm_bytes), work.mount()]
    mounts += [_mount(m.target, m.source, m.type, m.read_only) for m in spec.mounts]
    container: dict[str, Any] = {
        "Image": spec.image,
        "Env": [f"{k}={v}" for k, v in spec.env.items()],
        "Labels": spec.labels,
        "Mounts": mounts,
    }
    # `Command` replaces the image's ENTRYPOINT and `Args` its CMD, as docker run's
    # --entrypoint and arguments do.
    if spec.entrypoint is not None:
        container["Command"] = list(spec.entrypoint)
    if spec.command is not None:
        container["Args"] = list(spec.command)
    sizes = {"NanoCPUs": spec.nano_cpus, "MemoryBytes": spec.memory_bytes}
    reserved: dict[str, Any] = dict(sizes)
    if spec.gpu_count:
        kind = {"Kind": GPU_KIND, "Value": spec.gpu_count}
        reserved["GenericResources"] = [{"DiscreteResourceSpec": kind}]
    resources = {"Limits": sizes, "Reservations": reserved}
    body: dict[str, Any] = {
        "Name": spec.name,
        "Labels": spec.labels,
        "TaskTemplate": _template(container, resources, constraints),
        "Mode": _mode(job),
    }
    if spec.ports:
        ports = [
            {
                "Protocol": p.protocol,
                "PublishedPort": p.host,
                "TargetPort": p.container,
                "PublishMode": "ingress",
            }
            for p in spec.ports
        ]
        body["EndpointSpec"] = {"Ports": ports}
    return body


def housekeeping_args(
    run_id: str, node: Node, image: str, script: str, job: bool
) -> dict[str, Any]:
    """A one-off task on ``node`` that runs ``script`` with the node's /tmp mounted: it
    prepares (and later removes) the folder the run's stages on that node share."""
    labels = {LABEL_RUN: run_id, "nodus.stage": "_housekeeping"}
    container = {
        "Image": image,
        "Command": ["/bin/sh", "-c", script],
        "Labels": labels,
        "Mounts": [_mount(HOST_TMP, "/tmp", "bind")],
    }
    limits = {"NanoCPUs": int(0.1e9), "MemoryBytes": 64 * 1024**2}
    return {
        "Name": f"nodus-{run_id}-house-{node.id[:8]}-{os.urandom(2).hex()}",
        "Labels": labels,
        "TaskTemplate": _template(container, {"Limits": limits}, [f"node.id=={node.id}"]),
        "Mode": _mode(job),
    }


def _template(
    container: dict[str, Any], resources: dict[str, Any], constraints: list[str]
) -> dict[str, Any]:
    """A task template that runs its container once, where ``constraints`` allow."""
    return {
        "ContainerSpec": container,
        "Resources": resources,
        "RestartPolicy": {"Condition": "none", "Delay": 0, "MaxAttempts": 0, "Window": 0},
        "Placement": {"Constraints": constraints},
    }


def _mode(job: bool) -> dict[str, Any]:
    """A service that runs its one task once: a replicated job, or (``job`` false) one
    replica that never restarts."""
    if job:
        return {"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}}
    return {"Replicated": {"Replicas": 1}}


def job_mode(nodes: list[Node]) -> bool:
    """Whether to submit tasks as replicated jobs (else as one-replica services).

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
