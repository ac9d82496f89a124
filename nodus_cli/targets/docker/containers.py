"""The container a task becomes: one spec shared by the local and the Swarm targets.

Resources: ``cpu`` CPUs, ``memory_gb`` GiB of memory (2 GiB per CPU when omitted) with
/dev/shm inside that limit, exactly the GPUs chosen, labels tying the container to its
run, never privileged, no new privileges, and no host path but the run's shared folder
and the ``mounts`` the workload asked for.

What runs: a ``command`` string always runs via ``/bin/sh -c`` (it replaces the image's
ENTRYPOINT, so an image with an ENTRYPOINT does not receive ``/bin/sh -c ...`` as its
arguments); a ``command`` list is given to the image's ENTRYPOINT, as ``docker run IMAGE
ARGS...`` does; ``entrypoint`` replaces the ENTRYPOINT (``[]`` clears it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from nodus_cli.structs import field, struct
from nodus_cli.targets.cluster import resources
from nodus_cli.workload import Mount, Port

if TYPE_CHECKING:
    from nodus_cli.targets.base import Task

GIB = 1024**3
WORK_DIR_IN_CONTAINER = "/nodus/work"
LABEL_RUN = "nodus.run"
LABEL_STAGE = "nodus.stage"
LABEL_ITEM = "nodus.item"
LABEL_WORKLOAD = "nodus.workload"
#: The GPU UUIDs a local container holds, comma-separated: the machine-wide record of
#: which GPUs are taken (by any nodus run, whatever its NODUS_HOME).
LABEL_GPUS = "nodus.gpus"
#: On a container that shares its GPU: the GPU memory (GB) it may use there.
LABEL_GPU_SHARE = "nodus.gpu_share_gb"
#: The process that created it (``host:pid:start``) and its run's NODUS_HOME: whoever sees
#: that the process is gone may remove it, from any NODUS_HOME.
LABEL_OWNER = "nodus.owner"
LABEL_HOME = "nodus.home"
#: On a queue entry (a container created, never started, holding nothing): the task it
#: waits for, its priority, when it began to wait (ns), the GPUs it can use, how many.
LABEL_QUEUE = "nodus.queue"
LABEL_PRIORITY = "nodus.priority"
LABEL_QUEUED_AT = "nodus.queued_at"
LABEL_WANTS = "nodus.wants"
LABEL_NEED = "nodus.need"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


@struct(frozen=True)
class ContainerSpec:
    """One container to create: the Engine API's create request, in our words."""

    name: str
    image: str
    #: Replaces the image's ENTRYPOINT when not None (``[""]`` clears it, as docker's CLI).
    entrypoint: list[str] | None
    #: Replaces the image's CMD when not None.
    command: list[str] | None
    env: dict[str, str]
    cpus: float
    memory_bytes: int
    shm_bytes: int
    labels: dict[str, str]
    gpu_count: int = 0
    gpu_uuids: tuple[str, ...] = ()
    work_dir_host: str | None = None
    mounts: tuple[Mount, ...] = ()
    ports: tuple[Port, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)
    #: The engine removes it when it ends (a warm worker whose caller is gone).
    auto_remove: bool = False

    @property
    def nano_cpus(self) -> int:
        return int(self.cpus * 1e9)


def memory_bytes(cpu: float, memory_gb: float | None) -> int:
    """A task's memory limit in bytes (the default when ``memory_gb`` is unset:
    :func:`~nodus_cli.targets.cluster.resources.memory_gb`)."""
    return int(resources.memory_gb(cpu, memory_gb) * GIB)


def memory_limit(memory: int) -> str:
    """A task's memory limit of ``memory`` bytes as its out-of-memory messages name it,
    on every target."""
    return f"its {memory / GIB:g} GiB memory limit (which includes /dev/shm)"


def container_name(task: Task) -> str:
    base = f"nodus-{task.run_id}-{task.stage.name}"
    if task.item is not None:
        base += f"-{task.item.index}"
    return _UNSAFE.sub("-", base)[:63].rstrip("-.")


def invocation(task: Task) -> tuple[list[str] | None, list[str] | None]:
    """(ENTRYPOINT, CMD) the container gets; None keeps the image's."""
    stage = task.stage
    if stage.shell and stage.command is not None:
        # The whole "/bin/sh -c TEXT" replaces the entrypoint, whatever the image has.
        return list(stage.command), None
    entrypoint = stage.entrypoint
    if entrypoint is not None and not entrypoint:
        entrypoint = [""]  # what `docker run --entrypoint ""` sends: no entrypoint
    command = list(stage.command) if stage.command is not None else None
    return (list(entrypoint) if entrypoint is not None else None), command


def spec_for(
    task: Task,
    gpu_uuids: tuple[str, ...] = (),
    work_dir_host: str | None = None,
    work_dir: str | None = WORK_DIR_IN_CONTAINER,
) -> ContainerSpec:
    stage = task.stage
    req = stage.requirements
    memory = memory_bytes(req.cpu, req.memory_gb)
    labels = {
        LABEL_RUN: task.run_id,
        LABEL_STAGE: stage.name,
        LABEL_WORKLOAD: task.workload[:200],
    }
    if task.item is not None:
        labels[LABEL_ITEM] = str(task.item.index)
    if gpu_uuids:
        labels[LABEL_GPUS] = ",".join(gpu_uuids)
        if req.share_gpu and req.peak_memory_gb is not None:
            labels[LABEL_GPU_SHARE] = f"{req.peak_memory_gb:g}"
    entrypoint, command = invocation(task)
    return ContainerSpec(
        name=container_name(task),
        image=stage.image,
        entrypoint=entrypoint,
        command=command,
        env=task.environment(work_dir),
        cpus=req.cpu,
        memory_bytes=memory,
        # /dev/shm is tmpfs charged to the container's memory cgroup: half of the limit
        # leaves room for the process while letting data loaders share tensors.
        shm_bytes=memory // 2,
        labels=labels,
        gpu_count=req.gpu_count,
        gpu_uuids=gpu_uuids,
        work_dir_host=work_dir_host,
        mounts=stage.mounts,
        ports=stage.ports,
    )


def engine_config(spec: ContainerSpec) -> dict[str, Any]:
    """The Engine-API body of ``POST /containers/create`` for a local task.

    The whole local container contract in one place: limits, /dev/shm inside the memory
    limit, no swap beyond it, exactly the GPUs chosen (by UUID), never privileged, no new
    privileges, and no host path but the run's shared folder and the workload's mounts.
    """
    host: dict[str, Any] = {
        "NanoCpus": spec.nano_cpus,
        "Memory": spec.memory_bytes,
        "MemorySwap": spec.memory_bytes,
        "ShmSize": spec.shm_bytes,
        "Privileged": False,
        "SecurityOpt": ["no-new-privileges"],
    }
    if spec.auto_remove:
        host["AutoRemove"] = True
    if spec.gpu_uuids:
        host["DeviceRequests"] = [
            {
                "Driver": "nvidia",
                "Count": 0,
                "DeviceIDs": list(spec.gpu_uuids),
                "Capabilities": [["gpu"]],
                "Options": {},
            }
        ]
    mounts: list[dict[str, Any]] = []
    if spec.work_dir_host is not None:
        mounts.append(
            {
                "Type": "bind",
                "Source": spec.work_dir_host,
                "Target": WORK_DIR_IN_CONTAINER,
                "ReadOnly": False,
            }
        )
    for m in spec.mounts:
        mounts.append(
            {"Type": m.type, "Source": m.source, "Target": m.target, "ReadOnly": m.read_only}
        )
    if mounts:
        host["Mounts"] = mounts
    config: dict[str, Any] = {
        "Image": spec.image,
        "Env": [f"{k}={v}" for k, v in spec.env.items()],
        "Labels": spec.labels,
        "AttachStdin": False,
        "AttachStdout": True,
        "AttachStderr": True,
        "Tty": False,
        "OpenStdin": False,
        "HostConfig": host,
    }
    if spec.ports:
        config["ExposedPorts"] = {f"{p.container}/{p.protocol}": {} for p in spec.ports}
        bindings: dict[str, list[dict[str, str]]] = {}
        for p in spec.ports:
            bindings.setdefault(f"{p.container}/{p.protocol}", []).append(
                {"HostIp": p.host_ip or "", "HostPort": str(p.host)}
            )
        host["PortBindings"] = bindings
    if spec.entrypoint is not None:
        config["Entrypoint"] = list(spec.entrypoint)
    if spec.command is not None:
        config["Cmd"] = list(spec.command)
    return config
