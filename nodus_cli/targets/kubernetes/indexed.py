"""A fan-out stage on Kubernetes as ONE Indexed Job, followed item by item.

Contract: :class:`IndexedRun` creates the stage's Indexed Job
(:func:`.manifest.indexed_manifest`) and the ConfigMap of its items
(:func:`.manifest.items_config_map`, owned by the Job), then looks at the Job and all its
pods once per :data:`.follow.POLL_SECONDS` and reports each item through its own
:class:`~nodus_cli.targets.base.ItemContext`: submitted with its job id ``JOB/INDEX``
(recorded as the item's ``job_id``), then exactly as a single Job's task
(:func:`.follow.look`: queued with the scheduler's reason, started on its node, its log,
its end) from the newest pod of its index (the Job controller's
``batch.kubernetes.io/job-completion-index``). An index whose pod is not there yet waits
its turn behind ``parallelism`` and says nothing. What a single Job's task does by
deleting its Job (an image that cannot be pulled, ``--no-wait``, :meth:`IndexedRun.stop`)
an item does by deleting its pod: with ``backoffLimitPerIndex: 0`` the controller marks
that index failed and makes no other pod for it, and the other items go on. The Job
deleted from outside ends every item still followed.

An exec-form command runs behind nodus's ``/bin/sh`` line (:func:`.manifest.item_argv`):
a pod whose container cannot start because the image has no ``/bin/sh`` (the runtime's
``StartError``, ``ContainerCannotRun`` or ``RunContainerError`` saying so:
:func:`no_shell`) ends every item left with one line that names the image, why nodus
needs the shell and the fix, exit code 127 as a command that cannot start locally, and
the Job is deleted (every pod of it would fail alike).

:func:`item_job_id` and :func:`split_job_id` are the one spelling of an item's job id;
:func:`items_words` says where the items of a running fan-out stage stand (``nodus runs``).

A map of a Python function is one Indexed Job as well (:func:`indexed`): its calls are
one Secret (:func:`.calls.items_secret`) instead of the items' ConfigMap, and each item's
context is a :class:`.calls.FramedItem`, which cuts its call's outcome out of its pod's log
and ends the item from it.

Why apart from :mod:`.follow`: one Job for many items is its own loop (which pod is whose,
who ended); the single Job's loop stays as it is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_cli.functions import runtime
from nodus_cli.targets.base import (
    ItemContext,
    Started,
    Task,
    TaskEnd,
    TaskState,
)
from nodus_cli.targets.kubernetes import follow as following
from nodus_cli.targets.kubernetes.api import Cluster, KubernetesFailure
from nodus_cli.targets.kubernetes.calls import (
    FramedItem,
    attach_items,
    items_fit,
    items_secret,
)
from nodus_cli.targets.kubernetes.kueue import kueue_pending
from nodus_cli.targets.kubernetes.manifest import (
    INDEX_ANNOTATION,
    ITEMS_LIMIT,
    item_argv,
    items_config_map,
    items_size,
)

if TYPE_CHECKING:
    from nodus_cli.workload import Stage

__all__ = [
    "IndexedRun",
    "indexed",
    "item_job_id",
    "items_words",
    "newest_by_index",
    "no_shell",
    "pod_index",
    "split_job_id",
]


#: How a container runtime says that an executable is not in the image.
_NOT_FOUND = ("no such file", "not found")


def indexed(stage: Stage, home: Path) -> bool:
    """A fan-out stage that runs as one Indexed Job: a map of a function whose calls fit
    in one Secret; a command nodus can run whole after its item is read
    (:func:`.manifest.item_argv`) with items that fit in a ConfigMap. Any other runs one
    Job per item."""
    if stage.map is None:
        return False
    if stage.function is not None:
        return items_fit(stage, home)
    room = ITEMS_LIMIT - 4096  # for the ConfigMap's metadata
    return item_argv(stage) is not None and items_size(stage.map.items) < room


def item_job_id(job: str, index: int) -> str:
    """The job id of item ``index`` of Indexed Job ``job``: ``JOB/INDEX``."""
    return f"{job}/{index}"


def split_job_id(job_id: str) -> tuple[str, int | None]:
    """``(JOB, INDEX)`` of an item's job id; ``(JOB, None)`` for a Job of one task."""
    job, _, index = job_id.partition("/")
    return job, int(index) if index.isdigit() else None


def pod_index(pod: dict[str, Any]) -> int | None:
    """The completion index of a pod of an Indexed Job (None: not one)."""
    meta = pod.get("metadata") or {}
    for where in (meta.get("annotations") or {}, meta.get("labels") or {}):
        value = str(where.get(INDEX_ANNOTATION, ""))
        if value.isdigit():
            return int(value)
    return None


def newest_by_index(pods: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The newest pod of each index among ``pods``."""
    found: dict[int, dict[str, Any]] = {}
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp"))):
        index = pod_index(pod)
        if index is not None:
            found[index] = pod
    return found


def no_shell(pod: dict[str, Any]) -> str | None:
    """What the container runtime said when the pod's container could not start because
    its image has no ``/bin/sh`` (None: not that)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        for state in ((status.get("state") or {}).get(k) for k in ("waiting", "terminated")):
            said = str((state or {}).get("message") or "")
            lowered = said.lower()
            if "/bin/sh" in said and any(m in lowered for m in _NOT_FOUND):
                return said
    return None


def items_words(cluster: Cluster, items: Sequence[Any]) -> str | None:
    """Where the pods of a fan-out stage's Indexed Jobs stand, from its items' records
    (their ``job_id``): ``Indexed Job NAME: 2 running, 1 pending``; None: no such Job."""
    jobs = sorted({split_job_id(t.job_id)[0] for t in items if t.job_id and "/" in t.job_id})
    said = []
    for name in jobs:
        if cluster.job(name) is None:
            said.append(f"Indexed Job {name} is gone")
            continue
        pods = newest_by_index(following.job_pods(cluster.pods(f"job-name={name}"), name))
        counts: dict[str, int] = {}
        for pod in pods.values():
            phase = str((pod.get("status") or {}).get("phase") or "Pending").lower()
            counts[phase] = counts.get(phase, 0) + 1
        shown = ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items()))
        said.append(f"Indexed Job {name}: {shown or 'no pod yet'}")
    return "; ".join(said) or None


class _Item:
    def __init__(self, task: Task, ctx: ItemContext, job: str) -> None:
        assert task.item is not None
        self.task = task
        self.ctx = ctx
        self.index = task.item.index
        self.following = following.Following(item_job_id(job, self.index))


class IndexedRun:
    """Every item of one fan-out stage as one Indexed Job; :meth:`run` until all ended.
    ``manifest``: :func:`.manifest.indexed_manifest`'s, which a map of a function's
    calls (``home``: where their folder is) completes here."""

    def __init__(
        self,
        cluster: Cluster,
        tasks: Sequence[Task],
        contexts: Sequence[ItemContext],
        manifest: dict[str, Any],
        *,
        home: Path,
        memory_said: str,
        started: Callable[[Task, str], Started],
        holders: Callable[[], str],
        queue_ok: bool,
        queue_name: str | None,
        wants: str,
    ) -> None:
        self.cluster = cluster
        self.tasks = list(tasks)
        self.manifest = manifest
        self.name: str = manifest["metadata"]["name"]
        stage = self.tasks[0].stage
        self._home = home
        self._calls = stage.function is not None
        #: nodus's /bin/sh line runs before an exec-form command (:func:`no_shell`).
        self._shell_added = not self._calls and not stage.shell
        if self._calls:
            attach_items(manifest, runtime.INTERPRETERS[0])
            contexts = [FramedItem(t, c, home) for t, c in zip(tasks, contexts, strict=True)]
        self._items = {
            t.item.index: _Item(t, c, self.name)
            for t, c in zip(tasks, contexts, strict=True)
            if t.item is not None
        }
        self._memory_said = memory_said
        self._started = started
        self._holders = holders
        self._queue_ok = queue_ok
        self._queue_name = queue_name
        self._wants = wants
        self._lock = threading.Lock()
        #: Indexes stopped: a pod made for one later is deleted as soon as it is seen.
        self._stopped: set[int] = set()
        self._created = False

    def stop(self, index: int) -> None:
        """Stop item ``index`` now, from any thread (before the Job exists: when it does)."""
        with self._lock:
            self._stopped.add(index)
            item = self._items.get(index)
            if item is not None:
                item.following.stopping = True

    def run(self) -> None:
        """Create the Job and its items' ConfigMap, then follow every item to its end."""
        try:
            job = self.cluster.create_job(self.manifest)
            self._created = True
            if self._calls:  # owned by the Job: its pods wait for it to mount it
                self.cluster.create_secret(
                    items_secret(self.tasks, self._home, self.name, self.cluster.namespace, job)
                )
            else:
                self.cluster.create_config_map(
                    items_config_map(self.tasks, self.cluster.namespace, job)
                )
        except KubernetesFailure as exc:
            said = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
            state = TaskState.CANNOT_START
            if exc.status is None or exc.status >= 500:
                state = TaskState.INFRASTRUCTURE
            if self._created:
                self.cluster.delete_job(self.name)
            self._end_all(TaskEnd(state, 1, said))
            return
        for index, item in sorted(self._items.items()):
            item.ctx.submitted(
                f"created Indexed Job {self.name} (index {index}) in namespace "
                f"{self.cluster.namespace}",
                job_id=item.following.name,
            )
        troubled: float | None = None
        while True:
            with self._lock:
                if not self._items:
                    return
            try:
                self._look()
                troubled = None
            except KubernetesFailure as exc:
                # A moment's failure of the API server does not end items the cluster runs.
                troubled = troubled if troubled is not None else time.monotonic()
                late = time.monotonic() - troubled > following.TROUBLE_SECONDS
                if (exc.status is not None and exc.status < 500) or late:
                    self._end_all(TaskEnd(TaskState.INFRASTRUCTURE, 1, exc.message))
                    return
            time.sleep(following.POLL_SECONDS)

    def _end_all(self, end: TaskEnd) -> None:
        with self._lock:
            left, self._items = list(self._items.values()), {}
        for item in left:
            item.ctx.ended(end)

    def _end(self, item: _Item, end: TaskEnd) -> None:
        with self._lock:
            self._items.pop(item.index, None)
        item.ctx.ended(end)

    def _look(self) -> None:
        job = self.cluster.job(self.name)
        with self._lock:
            items = sorted(self._items.items())
            stopped = set(self._stopped)
        if job is None:
            for _, item in items:
                if item.following.stopping:
                    self._end(item, TaskEnd(TaskState.STOPPED, 143, "stopped by nodus"))
                else:
                    self._end(
                        item,
                        TaskEnd(
                            TaskState.KILLED,
                            137,
                            f"the Job {self.name} was deleted outside nodus (kubectl delete "
                            "job?); not retried",
                        ),
                    )
            return
        pods = following.job_pods(self.cluster.pods(f"job-name={self.name}"), self.name)
        newest = newest_by_index(pods)
        for index in stopped:  # a stopped item's pod, also one made after it stopped
            pod = newest.get(index)
            phase = ((pod or {}).get("status") or {}).get("phase")
            if pod is not None and phase not in ("Succeeded", "Failed"):
                self.cluster.delete_pod(str((pod.get("metadata") or {}).get("name")))
        for index, item in items:
            if item.following.stopping:
                self._end(
                    item, TaskEnd(TaskState.STOPPED, 143, "stopped by nodus (its pod deleted)")
                )
                continue
            pod = newest.get(index)
            if pod is None:
                self._without_pod(item, job)
                continue
            if self._shell_added and self._no_shell(pod):
                return
            end = following.look(
                self.cluster,
                item.following,
                item.ctx,
                job,
                pod,
                self.manifest["spec"]["template"]["spec"]["containers"][0]["image"],
                self._memory_said,
                partial(self._started, item.task),
                self._holders,
                self._queue_ok,
                self._queue_name,
                self._wants,
                partial(self._remove, pod),
            )
            if end is not None:
                self._end(item, end)

    def _no_shell(self, pod: dict[str, Any]) -> bool:
        """The pod cannot start for want of ``/bin/sh``: every item left ends so, and the
        Job is deleted (its other pods would fail alike)."""
        said = no_shell(pod)
        if said is None:
            return False
        image = self.manifest["spec"]["template"]["spec"]["containers"][0]["image"]
        self._end_all(
            TaskEnd(
                TaskState.CANNOT_START,
                127,
                f"the image {image} has no /bin/sh, which nodus needs in each pod of the "
                "Indexed Job to read the pod's item (NODUS_ITEM) before it executes the "
                f"command ({said}); use an image that has /bin/sh (distroless and scratch "
                "images have none)",
            )
        )
        self.cluster.delete_job(self.name)
        return True

    def _remove(self, pod: dict[str, Any]) -> str:
        name = str((pod.get("metadata") or {}).get("name"))
        self.cluster.delete_pod(name)
        return f"its pod {name} (the other items go on)"

    def _without_pod(self, item: _Item, job: dict[str, Any]) -> None:
        """An index the controller has made no pod for yet: its turn has not come (said
        nothing), Kueue has not admitted the Job, or the Job failed without it."""
        status = job.get("status") or {}
        for condition in status.get("conditions") or ():
            if condition.get("type") == "Failed" and condition.get("status") == "True":
                said = condition.get("message") or condition.get("reason") or "Failed"
                self._end(
                    item,
                    TaskEnd(
                        TaskState.KILLED,
                        1,
                        f"the Job {self.name} failed before index {item.index} ran: {said}",
                    ),
                )
                return
        if (job.get("spec") or {}).get("suspend"):  # Kueue admits it by unsuspending it
            said = kueue_pending(self.cluster, job, self._queue_name, self._queue_ok)
            if isinstance(said, TaskEnd):  # the Job goes with the run's cleanup
                self._end(item, said)
            elif said.words != item.following.said:
                item.following.said = said.words
                item.ctx.waiting(said)
