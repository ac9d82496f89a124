"""The container a stage becomes: one spec shared by the local and the Swarm targets.

Resources follow SPEC 2.1: ``cpu`` CPUs, ``memory_gb`` GiB of memory (2 GiB per CPU when
omitted) with /dev/shm inside that limit, exactly the GPUs chosen, labels tying the
container to its run, never privileged, and no host path but the run's shared folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from nodus_cli.workload import Stage

GIB = 1024**3
WORK_DIR_IN_CONTAINER = "/nodus/work"
LABEL_RUN = "nodus.run"
LABEL_STAGE = "nodus.stage"
LABEL_WORKLOAD = "nodus.workload"
#: The GPU UUIDs a local container holds, comma-separated: the machine-wide record of
#: which GPUs are taken (by any nodus run, whatever its NODUS_HOME).
LABEL_GPUS = "nodus.gpus"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    name: str
    image: str
    command: list[str] | None
    env: dict[str, str]
    cpus: float
    memory_bytes: int
    shm_bytes: int
    labels: dict[str, str]
    gpu_count: int = 0
    gpu_uuids: tuple[str, ...] = ()
    work_dir_host: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def nano_cpus(self) -> int:
        return int(self.cpus * 1e9)


def memory_bytes(stage: Stage) -> int:
    req = stage.requirements
    gib = req.memory_gb if req.memory_gb else 2.0 * req.cpu
    return int(gib * GIB)


def container_name(run_id: str, stage: str) -> str:
    return _UNSAFE.sub("-", f"nodus-{run_id}-{stage}")[:63].rstrip("-.")


def spec_for(
    stage: Stage,
    run_id: str,
    workload_name: str,
    gpu_uuids: tuple[str, ...] = (),
    work_dir_host: str | None = None,
) -> ContainerSpec:
    memory = memory_bytes(stage)
    env = dict(stage.env)
    env["NODUS_RUN_ID"] = run_id
    env["NODUS_STAGE"] = stage.name
    if work_dir_host is not None:
        env["NODUS_WORK_DIR"] = WORK_DIR_IN_CONTAINER
    labels = {
        LABEL_RUN: run_id,
        LABEL_STAGE: stage.name,
        LABEL_WORKLOAD: workload_name[:200],
    }
    if gpu_uuids:
        labels[LABEL_GPUS] = ",".join(gpu_uuids)
    return ContainerSpec(
        name=container_name(run_id, stage.name),
        image=stage.image,
        command=stage.command,
        env=env,
        cpus=stage.requirements.cpu,
        memory_bytes=memory,
        # /dev/shm is tmpfs charged to the container's memory cgroup: half of the limit
        # leaves room for the process while letting data loaders share tensors.
        shm_bytes=memory // 2,
        labels=labels,
        gpu_count=stage.requirements.gpu_count,
        gpu_uuids=gpu_uuids,
        work_dir_host=work_dir_host,
    )


def engine_config(spec: ContainerSpec) -> dict[str, Any]:
    """The Engine-API body of ``POST /containers/create`` for a local stage.

    The whole local container contract in one place: limits, /dev/shm inside the memory
    limit, no swap beyond it, exactly the GPUs chosen (by UUID), never privileged, no new
    privileges, and no host path but the run's shared folder.
    """
    host: dict[str, Any] = {
        "NanoCpus": spec.nano_cpus,
        "Memory": spec.memory_bytes,
        "MemorySwap": spec.memory_bytes,
        "ShmSize": spec.shm_bytes,
        "Privileged": False,
        "SecurityOpt": ["no-new-privileges"],
    }
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
    if spec.work_dir_host is not None:
        host["Mounts"] = [
            {
                "Type": "bind",
                "Source": spec.work_dir_host,
                "Target": WORK_DIR_IN_CONTAINER,
                "ReadOnly": False,
            }
        ]
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
    if spec.command is not None:
        config["Cmd"] = list(spec.command)
    return config
