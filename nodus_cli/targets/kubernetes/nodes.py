"""A cluster's nodes as the API server describes them, read into records: their GPUs,
the GPU model their labels name, what the pods on them hold, and whether pods may go there.

Contract: pure functions of the JSON documents of ``GET /api/v1/nodes`` and of the pods
that hold resources (``GET /api/v1/pods``). GPUs are the node's allocatable
``nvidia.com/gpu``; the model comes from its labels (:data:`GPU_LABELS`, in that order)
through the one GPU name table (:meth:`nodus_cli.hardware.gpus.GpuTable.node_label`) and
is never guessed: a label the table does not know is kept as written, with no model.
A node's instance type and region (:data:`INSTANCE_TYPE_LABELS`, :data:`REGION_LABELS`)
are what the catalog prices it by when the configuration does not.
Free GPUs are the allocatable ones minus the requests of the pods bound to the node that
have not ended. Tests read documents with real GPU-operator and cloud labels.

Why apart: the target's logic reads records; the reading is tested without a server, and
it is the part a plan of a thousand nodes spends its time in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from nodus_cli.hardware import gpus
from nodus_cli.structs import struct

__all__ = [
    "GPU_LABELS",
    "GPU_RESOURCE",
    "GPU_TAINT",
    "INSTANCE_TYPE_LABELS",
    "REGION_LABELS",
    "NodeRecord",
    "gpu_of",
    "node_records",
    "quantity",
]

#: The extended resource the NVIDIA device plugin advertises.
GPU_RESOURCE = "nvidia.com/gpu"
#: The taint GPU node pools carry (GKE, AKS, the GPU operator's docs): pods that request
#: GPUs tolerate it.
GPU_TAINT = "nvidia.com/gpu"
#: Labels that name a node's GPU model, in the order nodus reads them: the GPU operator's
#: (GPU feature discovery), GKE's, karpenter's on AWS.
GPU_LABELS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "karpenter.k8s.aws/instance-gpu-name",
)
#: Labels that name a node's machine type (``p4d.24xlarge``), the well-known one first,
#: then the older one clusters still write.
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
#: Labels that name a node's cloud region (``us-east-1``), likewise.
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
#: GPU feature discovery's memory of one GPU, in MiB.
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"

_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "Ki": 1024.0,
    "Mi": 1024.0**2,
    "Gi": 1024.0**3,
    "Ti": 1024.0**4,
    "Pi": 1024.0**5,
}


def quantity(text: object) -> float:
    """A Kubernetes quantity (``"95500m"``, ``"1056Gi"``, ``8``) as a number; 0 for none."""
    if isinstance(text, int | float):
        return float(text)
    if not isinstance(text, str):
        return 0.0
    match = _QUANTITY.match(text.strip())
    if match is None or match.group(2) not in _SUFFIX:
        return 0.0
    try:
        return float(match.group(1)) * _SUFFIX[match.group(2)]
    except ValueError:
        return 0.0


@struct(frozen=True)
class NodeRecord:
    """One node: its GPUs and their model, CPUs, memory, what pods hold, and its state."""

    name: str
    labels: dict[str, str]
    #: The label that names its GPUs (``nvidia.com/gpu.product``) and its value.
    gpu_label: tuple[str, str] | None
    #: The model the label names (None: no label, or one nodus does not know).
    gpu: str | None
    gpu_memory_gb: float | None
    gpus: int
    gpus_used: int
    cpus: float
    cpus_used: float
    memory_gb: float
    memory_used_gb: float
    ready: bool
    cordoned: bool
    #: Taints that keep pods away (NoSchedule, NoExecute), other than the GPU taint.
    taints: tuple[str, ...]
    arch: str
    zone: str | None

    @property
    def usable(self) -> bool:
        """Ready, not cordoned, not tainted against nodus's pods: pods may go there."""
        return self.ready and not self.cordoned and not self.taints

    @property
    def free_gpus(self) -> int:
        return max(0, self.gpus - self.gpus_used) if self.usable else 0

    @property
    def instance_type(self) -> str | None:
        """Its machine type, as its labels name it (None: they do not)."""
        return next((self.labels[k] for k in INSTANCE_TYPE_LABELS if self.labels.get(k)), None)

    @property
    def region(self) -> str | None:
        """Its cloud region, as its labels name it (None: they do not)."""
        return next((self.labels[k] for k in REGION_LABELS if self.labels.get(k)), None)

    @property
    def words(self) -> str:
        """Its state as ``nodus nodes`` shows it."""
        if not self.ready:
            return "not ready"
        if self.cordoned:
            return "cordoned"
        if self.taints:
            return f"tainted ({', '.join(self.taints)})"
        return "ready"


def gpu_of(labels: dict[str, str]) -> tuple[tuple[str, str] | None, str | None, float | None]:
    """The label naming a node's GPU, the model it names and one GPU's memory (GB)."""
    for key in GPU_LABELS:
        value = labels.get(key)
        if not value:
            continue
        found = gpus.table().node_label(value)
        if found is None:
            return (key, value), None, None
        memory = found.memory_gb
        mib = quantity(labels.get(GPU_MEMORY_LABEL))
        if memory is None and mib > 0:
            memory = found.family.nominal_memory(mib / 1024)
        if memory is None:
            memory = found.family.nominal_memory(None)
        return (key, value), found.family.name, memory
    return None, None, None


def _held(pods: Iterable[dict[str, Any]]) -> dict[str, tuple[int, float, float]]:
    """Per node: the GPUs, CPUs and memory (GB) its bound, unended pods request."""
    held: dict[str, tuple[int, float, float]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or phase in ("Succeeded", "Failed"):
            continue
        gpu = cpu = memory = 0.0
        for container in (pod.get("spec") or {}).get("containers") or ():
            resources = container.get("resources") or {}
            asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            # A request, else its limit (what the scheduler counts for an extended resource)
            gpu += quantity(asked.get(GPU_RESOURCE))
            cpu += quantity(asked.get("cpu"))
            memory += quantity(asked.get("memory"))
        was = held.get(node, (0, 0.0, 0.0))
        held[node] = (was[0] + int(gpu), was[1] + cpu, was[2] + memory / 1024**3)
    return held


def _ready(status: dict[str, Any]) -> bool:
    for condition in status.get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def node_records(
    nodes: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]
) -> list[NodeRecord]:
    """Every node of the documents, with what the pods bound to it hold."""
    held = _held(pods)
    found = []
    for node in nodes:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        name = str(meta.get("name", "?"))
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        allocatable = status.get("allocatable") or {}
        label, model, memory = gpu_of(labels)
        taints = tuple(
            f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}".replace("=:", ":")
            for t in spec.get("taints") or ()
            if t.get("effect") in ("NoSchedule", "NoExecute")
            and t.get("key") != GPU_TAINT
            and t.get("key") != "node.kubernetes.io/unschedulable"
        )
        gpu_used, cpu_used, memory_used = held.get(name, (0, 0.0, 0.0))
        arch = labels.get("kubernetes.io/arch", "amd64")
        found.append(
            NodeRecord(
                name=name,
                labels=labels,
                gpu_label=label,
                gpu=model,
                gpu_memory_gb=memory,
                gpus=int(quantity(allocatable.get(GPU_RESOURCE))),
                gpus_used=gpu_used,
                cpus=quantity(allocatable.get("cpu")),
                cpus_used=cpu_used,
                memory_gb=quantity(allocatable.get("memory")) / 1024**3,
                memory_used_gb=memory_used,
                ready=_ready(status),
                cordoned=bool(spec.get("unschedulable")),
                taints=taints,
                arch={"amd64": "x86_64", "arm64": "arm64"}.get(arch, arch),
                zone=labels.get("topology.kubernetes.io/zone"),
            )
        )
    return found
