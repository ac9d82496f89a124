"""The ``batch/v1`` Job a task becomes: one pod on one node, as SPEC section 13 says.

Contract (:func:`job_manifest`, a pure function): ``limits: nvidia.com/gpu: N`` for a GPU
stage, with node affinity on the label values of the nodes that carry the requested model
(never another model) and the GPU taint tolerated; CPU and memory requests equal to their
limits (2 GiB per CPU when the stage gives no memory, as on the local target); ``/dev/shm``
a memory ``emptyDir`` of half the memory limit, which it counts against; labels
``nodus.run``, ``nodus.stage`` (and ``nodus.item``); never privileged, no privilege
escalation; ``backoffLimit: 0`` and ``restartPolicy: Never`` (retries are nodus's, with
the same model and count); a configured PriorityClass and Kueue queue (Kueue admits a
Job created suspended). Every manifest is checked against Kubernetes' own schemas in the
tests (``kubernetes-validate``).

A fan-out stage is one Indexed Job (:func:`indexed_manifest`): ``completionMode:
Indexed``, ``completions`` one per item, ``parallelism`` its ``parallel``,
``backoffLimitPerIndex: 0`` (an item that fails fails alone: the others go on, and nodus
retries it as a Job of its own). ``NODUS_ITEM_INDEX`` is the pod's
``batch.kubernetes.io/job-completion-index`` annotation (the downward API). A stage with a
command has its items in a ConfigMap (:func:`items_config_map`, one key per index, owned by
the Job so that the cluster deletes it with the Job) mounted at :data:`ITEMS_DIR`, and the
pod runs ``/bin/sh -c 'READ; exec "$@"' nodus-item ARGV...``: the line reads
``NODUS_ITEM`` from the file of its index, then executes the stage's own argv
(:func:`item_argv`) untouched, never parsed by the shell. Only an argv nodus knows whole
can be run so: an exec-form command that keeps the image's ENTRYPOINT (no ``entrypoint``
key) cannot, and runs one Job per item. A function stage's pods run nodus's runtime
instead (:mod:`.calls` sets their command): it reads its index itself.

Why apart: the manifest is the contract with the cluster; it is tested without one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nodus_cli.structs import replace
from nodus_cli.targets.base import Task
from nodus_cli.targets.docker.containers import (
    LABEL_ITEM,
    LABEL_RUN,
    LABEL_STAGE,
    WORK_DIR_IN_CONTAINER,
    invocation,
    memory_bytes,
)
from nodus_cli.targets.kubernetes.nodes import GPU_RESOURCE, GPU_TAINT

if TYPE_CHECKING:
    from nodus_cli.workload import Stage

__all__ = [
    "CONTAINER",
    "INDEX_ANNOTATION",
    "ITEMS_DIR",
    "ITEMS_LIMIT",
    "QUEUE_LABEL",
    "indexed_manifest",
    "item_argv",
    "items_config_map",
    "items_job_name",
    "items_size",
    "job_manifest",
    "job_name",
    "label_value",
]

#: The name of the one container of a task's pod.
CONTAINER = "task"
#: The label Kueue reads a Job's LocalQueue from.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Where the items of an Indexed Job are mounted in its pods (one file per index).
ITEMS_DIR = "/var/run/nodus/items"
#: The annotation (and label) the Job controller gives each pod of an Indexed Job.
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: The most a ConfigMap may hold (the API server refuses more): 1 MiB.
ITEMS_LIMIT = 1024 * 1024
#: What each pod of an Indexed Job runs before the stage's command: its own item.
_READ_ITEM = (
    f'NODUS_ITEM="$(cat "{ITEMS_DIR}/$NODUS_ITEM_INDEX")" || exit 126; export NODUS_ITEM; exec "$@"'
)
_UNSAFE = re.compile(r"[^a-z0-9-]+")
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def job_name(task: Task) -> str:
    """``nodus-RUN-STAGE[-ITEM]-ATTEMPT`` as a DNS label (at most 63 characters: the Job
    controller copies it into a label); a long stage name is cut and a hash keeps it
    unique."""
    key = task.stage.name if task.item is None else f"{task.stage.name}-{task.item.index}"
    name = _UNSAFE.sub("-", f"nodus-{task.run_id}-{key}-{task.attempt}".lower()).strip("-")
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:54].rstrip('-')}-{digest}"


def items_job_name(task: Task) -> str:
    """``nodus-RUN-STAGE-items`` (as :func:`job_name`): the Indexed Job of a fan-out stage."""
    name = _UNSAFE.sub("-", f"nodus-{task.run_id}-{task.stage.name}".lower()).strip("-")
    if len(name) <= 57:
        return f"{name}-items"
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:48].rstrip('-')}-{digest}-items"


def items_size(items: Sequence[str]) -> int:
    """The bytes a fan-out stage's ``items`` take in their ConfigMap (keys and values)."""
    return sum(len(str(i)) + len(value.encode()) for i, value in enumerate(items))


def label_value(text: str) -> str:
    """``text`` as a label value (at most 63 characters of ``[A-Za-z0-9_.-]``)."""
    return _LABEL_UNSAFE.sub("-", text)[:63].strip("-_.")


def _affinity(labels: list[tuple[str, str]]) -> dict[str, Any]:
    """Required node affinity: a node whose label names the model (any of the terms)."""
    by_key: dict[str, list[str]] = {}
    for key, value in labels:
        if value not in by_key.setdefault(key, []):
            by_key[key].append(value)
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
                    for key, values in sorted(by_key.items())
                ]
            }
        }
    }


def job_manifest(
    task: Task,
    namespace: str,
    model_labels: list[tuple[str, str]],
    priority_class: str | None = None,
    queue: str | None = None,
) -> dict[str, Any]:
    """The Job of ``task`` (see the module); ``model_labels``: the (label, value) pairs of
    the nodes that carry the planned GPU model (empty for a stage without GPUs)."""
    stage = task.stage
    req = stage.requirements
    memory = memory_bytes(req.cpu, req.memory_gb)
    cpu = f"{round(req.cpu * 1000)}m"
    limits: dict[str, Any] = {"cpu": cpu, "memory": str(memory)}
    if req.wants_gpu:
        limits[GPU_RESOURCE] = str(req.gpu_count)
    labels = {LABEL_RUN: label_value(task.run_id), LABEL_STAGE: label_value(stage.name)}
    if task.item is not None:
        labels[LABEL_ITEM] = str(task.item.index)
    entrypoint, command = invocation(task)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": stage.image,
        "env": [
            {"name": name, "value": value}
            for name, value in task.environment(WORK_DIR_IN_CONTAINER).items()
        ],
        "resources": {"limits": limits, "requests": dict(limits)},
        "securityContext": {"privileged": False, "allowPrivilegeEscalation": False},
        "volumeMounts": [
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "work", "mountPath": WORK_DIR_IN_CONTAINER},
        ],
    }
    if entrypoint == [""]:  # the ENTRYPOINT cleared: the command replaces it
        if command is not None:
            container["command"] = command
    else:
        if entrypoint is not None:
            container["command"] = entrypoint
        if command is not None:
            container["args"] = command
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [
            # /dev/shm counts against the memory limit: half of it, as on the local target
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{memory // 2}"}},
            {"name": "work", "emptyDir": {}},
        ],
    }
    if req.wants_gpu:
        pod["affinity"] = _affinity(model_labels)
        pod["tolerations"] = [{"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    if priority_class is not None:
        pod["priorityClassName"] = priority_class
    job_labels = dict(labels)
    if queue is not None:
        job_labels[QUEUE_LABEL] = queue
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "completions": 1,
        "parallelism": 1,
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
    }
    if queue is not None:
        spec["suspend"] = True  # Kueue admits it (unsuspends it) when its queue has room
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(task), "namespace": namespace, "labels": job_labels},
        "spec": spec,
    }


def item_argv(stage: Stage) -> list[str] | None:
    """What each pod of the stage's Indexed Job executes once its item is read: the shell
    form's ``/bin/sh -c TEXT``, an exec-form command with the ``entrypoint`` it names
    (``entrypoint = []``: the command alone); None when nodus cannot know it whole (the
    image's own ENTRYPOINT kept, or no command at all)."""
    if stage.command is not None and stage.shell:
        return list(stage.command)
    if stage.entrypoint is None:
        return None  # the image's ENTRYPOINT, which the pod's command would replace
    argv = [*stage.entrypoint, *(stage.command or ())]
    return argv or None


def indexed_manifest(
    tasks: Sequence[Task],
    namespace: str,
    model_labels: list[tuple[str, str]],
    parallel: int,
    priority_class: str | None = None,
    queue: str | None = None,
) -> dict[str, Any]:
    """The Indexed Job of every item of a fan-out stage (see the module): ``tasks`` its
    items in order, ``parallel`` how many pods run at once at most. A stage with a command
    needs its :func:`item_argv`; a function stage's command is :mod:`.calls`'s to set."""
    first = tasks[0]
    argv = item_argv(first.stage)
    assert first.item is not None and (first.stage.function is not None or argv)
    doc = job_manifest(replace(first, item=None), namespace, model_labels, priority_class, queue)
    doc["metadata"]["name"] = items_job_name(first)
    spec = doc["spec"]
    spec.pop("backoffLimit")
    spec.update(
        completionMode="Indexed",
        completions=len(tasks),
        parallelism=max(1, min(parallel, len(tasks))),
        backoffLimitPerIndex=0,  # an item that fails fails alone; nodus retries it
    )
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    container["env"] += [
        {
            "name": "NODUS_ITEM_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}},
        },
        {"name": "NODUS_ITEM_COUNT", "value": str(len(tasks))},
    ]
    if argv is None:  # a function's call: the runtime reads its own index
        return doc
    container["command"] = ["/bin/sh", "-c", _READ_ITEM, "nodus-item", *argv]
    container.pop("args", None)
    container["volumeMounts"].append({"name": "items", "mountPath": ITEMS_DIR, "readOnly": True})
    pod["volumes"].append({"name": "items", "configMap": {"name": doc["metadata"]["name"]}})
    return doc


def items_config_map(
    tasks: Sequence[Task], namespace: str, job: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ConfigMap of a fan-out stage's items (key: the index, value: the item), named
    as its Indexed Job; ``job``: the Job as the server answered (its ``uid``), which then
    owns it (the cluster's garbage collector deletes it with the Job)."""
    first = tasks[0]
    labels = {LABEL_RUN: label_value(first.run_id), LABEL_STAGE: label_value(first.stage.name)}
    meta: dict[str, Any] = {
        "name": items_job_name(first),
        "namespace": namespace,
        "labels": labels,
    }
    uid = ((job or {}).get("metadata") or {}).get("uid")
    if uid:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": uid}
        ]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {str(t.item.index): t.item.value for t in tasks if t.item is not None},
    }
