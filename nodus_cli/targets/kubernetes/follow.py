"""Following one task's Job: what its pod says now, in nodus's words, until it ends.

Contract: :func:`follow` looks at the Job and its newest pod every :data:`POLL_SECONDS`,
in the cluster targets' follow loop (:func:`nodus_cli.targets.cluster.following.follow`),
and reports through the task's context: a pod the scheduler has not placed is ``queued``
with the scheduler's own reason (the ``PodScheduled=False`` condition's message, else the
pod's latest ``FailedScheduling`` event) and who holds the GPUs of the model it waits for
(asked again every :data:`HOLDERS_SECONDS`); a pod placed but not started waits for its
container (the image's pull is not charged); a running pod is started (its node) and its
log is followed (below); the end comes from the pod's container (exit code,
``OOMKilled``), the pod (``Evicted``) or the Job (deleted from outside, failed with no
pod). An image the cluster cannot pull (``ErrImagePull``, ``ImagePullBackOff``,
``InvalidImageName``) ends the task at once as ``CANNOT_START``, its Job deleted, with
the fix. An API server that fails to answer (5xx, unreachable) is looked at again for
:data:`TROUBLE_SECONDS` before the failure ends the task. The readers (:func:`pod_end`,
:func:`pull_problem`, :func:`pending_reason`) are pure functions of the documents;
:func:`look` is one look at a pod not started yet (a single Job's) or at any pod (an
Indexed Job's item, :mod:`.indexed`).

A pod's log is followed as a stream (:class:`~nodus_cli.targets.follower.LogFollower`
over :meth:`.api.Cluster.log_frames`: the API server's ``follow``, with timestamps), and
completed once the pod ended from a little before the newest line shown. Why a stream
rather than a read at each look from the last line's time: the official client has no
``sinceTime``, only ``sinceSeconds`` counted on the API server's clock, so each look would
read seconds of the log again (and lose lines when the clocks disagree); one stream reads
each line once, and the one read at the end drops what it had shown by the lines' own
times. Swarm's services and Docker's containers are completed the same way.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from nodus_cli.targets.base import Pending, PendingKind, Started, TaskContext, TaskEnd, TaskState
from nodus_cli.targets.cluster import following as cluster_following
from nodus_cli.targets.cluster.following import Look
from nodus_cli.targets.follower import LogFollower
from nodus_cli.targets.kubernetes.api import Cluster, KubernetesFailure
from nodus_cli.targets.kubernetes.kueue import kueue_pending

__all__ = [
    "HOLDERS_SECONDS",
    "POLL_SECONDS",
    "TROUBLE_SECONDS",
    "Following",
    "follow",
    "job_pods",
    "look",
    "pending_kind",
    "pending_reason",
    "pod_end",
    "pull_problem",
]

#: How often a Job and its pod are looked at.
POLL_SECONDS = 0.5
#: How often a waiting task asks again who holds the GPUs it waits for.
HOLDERS_SECONDS = 10.0
#: How long the API server may fail to answer before the task ends as a failure of the
#: cluster (retried with ``--retries``; its Job is deleted first).
TROUBLE_SECONDS = 60.0
_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
#: The phases of a pod whose container ran (or runs).
_RAN = ("Running", "Succeeded", "Failed")
_STOPPED = "stopped by nodus (Job deleted)"
_CONFIG_REASONS = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")


def job_pods(pods: list[dict[str, Any]], job: str) -> list[dict[str, Any]]:
    """The pods of Job ``job`` among ``pods`` (the controller's ``job-name`` label)."""
    found = []
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if job in (labels.get("batch.kubernetes.io/job-name"), labels.get("job-name")):
            found.append(pod)
    return found


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return statuses[0] if statuses else {}


def pull_problem(pod: dict[str, Any], image: str) -> TaskEnd | None:
    """The pod cannot start its container (an image the cluster cannot pull, a config it
    cannot make): the end that says so, else None."""
    waiting = (_container(pod).get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason") or ""
    said = waiting.get("message") or ""
    if reason in _PULL_REASONS:
        return TaskEnd(
            TaskState.CANNOT_START,
            125,
            f"the cluster cannot pull the image {image} ({reason}{': ' + said if said else ''}); "
            "check its name and tag, and that the nodes may pull it (an imagePullSecret in "
            "the namespace for a private registry)",
        )
    if reason in _CONFIG_REASONS:
        return TaskEnd(
            TaskState.CANNOT_START,
            126,
            f"the cluster cannot start the container ({reason}{': ' + said if said else ''})",
        )
    return None


def pending_reason(pod: dict[str, Any] | None, events: list[dict[str, Any]]) -> str | None:
    """The scheduler's own words for a pod it has not placed (None: not said yet)."""
    if pod is not None:
        for condition in (pod.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                message = condition.get("message") or condition.get("reason")
                if message:
                    return str(message)
    said = [e for e in events if e.get("reason") == "FailedScheduling" and e.get("message")]
    if said:
        latest = max(said, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return str(latest["message"])
    return None


def pod_end(pod: dict[str, Any], memory_said: str) -> TaskEnd | None:
    """How an ended pod (``Succeeded``/``Failed``) ended; None while it has not.
    ``memory_said``: the task's memory limit in words, for an out-of-memory end."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase not in ("Succeeded", "Failed"):
        return None
    if status.get("reason") == "Evicted":
        return TaskEnd(
            TaskState.INFRASTRUCTURE,
            137,
            f"the node evicted the pod ({status.get('message') or 'Evicted'}); "
            "--retries runs it again, with the same GPU model and count",
        )
    if status.get("reason") == "DeadlineExceeded":
        return TaskEnd(TaskState.KILLED, 137, "the Job's deadline ended it (DeadlineExceeded)")
    terminated = (_container(pod).get("state") or {}).get("terminated") or {}
    if not terminated:
        return TaskEnd(
            TaskState.INFRASTRUCTURE,
            1,
            f"the pod {phase.lower()} without its container's end "
            f"({status.get('reason') or 'no reason given'})",
        )
    code = int(terminated.get("exitCode") or 0)
    reason = terminated.get("reason") or ""
    if reason == "OOMKilled":
        return TaskEnd(
            TaskState.OUT_OF_MEMORY,
            code or 137,
            f"out of memory: it reached {memory_said}; raise memory_gb in [requirements]",
        )
    if reason in ("ContainerCannotRun", "StartError") or code in (126, 127):
        said = terminated.get("message") or reason
        return TaskEnd(
            TaskState.CANNOT_START,
            code if code in (126, 127) else 127,
            f"its command could not be started: {said}",
        )
    return TaskEnd(TaskState.EXITED, code)


class Following:
    """What a followed task has said so far, and whether nodus is stopping it."""

    def __init__(self, name: str) -> None:
        #: The Job's name (its job id in the records).
        self.name = name
        #: nodus created it (a failure before that leaves nothing to delete).
        self.created = False
        self.stopping = False
        self.started = False
        #: Its pod's log, followed once it runs (:func:`_follow_log`).
        self.output: LogFollower | None = None
        self.said = ""
        self._holders = ""
        self._holders_at: float | None = None

    def holders(self, look: Callable[[], str]) -> str:
        """Who holds the GPUs it waits for: ``look()`` again at most every
        :data:`HOLDERS_SECONDS` (it lists the pods of the whole cluster)."""
        now = time.monotonic()
        if self._holders_at is None or now - self._holders_at >= HOLDERS_SECONDS:
            self._holders, self._holders_at = look(), now
        return self._holders


def _follow_log(
    cluster: Cluster, pod: str, following: Following, ctx: TaskContext, final: bool
) -> None:
    """Follow pod ``pod``'s log into ``ctx``: live from the first call (a stream of its
    own), completed when ``final`` (the pod ended: its log is whole; one never followed
    live is read then, once)."""
    if following.output is None:
        following.output = LogFollower(partial(cluster.log_frames, pod), ctx.emit)
        if not final:
            following.output.start()
    if final:
        following.output.finish(complete=True)


class _Job:
    """One task's Job as the cluster targets' follow loop asks about it
    (:class:`~nodus_cli.targets.cluster.following.Job`): its look is the Job and its
    newest pod; while the pod has not started, :func:`look` says why (and ends a task
    that must not wait on); an API server that fails to answer (5xx, unreachable) is
    looked at again for :data:`TROUBLE_SECONDS` before its failure ends the following."""

    def __init__(
        self,
        cluster: Cluster,
        following: Following,
        ctx: TaskContext,
        waits: Callable[[dict[str, Any], dict[str, Any] | None, Callable[[], str]], TaskEnd | None],
        memory_said: str,
        started: Callable[[str], Started],
    ) -> None:
        self.cluster = cluster
        self.following = following
        self.ctx = ctx
        self.waits = waits
        self.memory_said = memory_said
        self.make_started = started
        self.troubled: float | None = None  # since when the API server fails to answer

    @property
    def stopping(self) -> bool:
        return self.following.stopping

    def _trouble(self, exc: KubernetesFailure) -> None:
        """Raise ``exc`` unless it is the API server's moment of trouble (an upgrade, a
        lost connection) that has not lasted :data:`TROUBLE_SECONDS` yet."""
        if exc.status is not None and exc.status < 500:
            raise exc
        self.troubled = self.troubled if self.troubled is not None else time.monotonic()
        if time.monotonic() - self.troubled > TROUBLE_SECONDS:
            raise exc

    def look(self) -> Look | None:
        name = self.following.name
        try:
            job = self.cluster.job(name)
            pods = job_pods(self.cluster.pods(f"job-name={name}"), name) if job is not None else []
        except KubernetesFailure as exc:
            self._trouble(exc)
            return None
        self.troubled = None
        pod = max(
            pods,
            key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")),
            default=None,
        )
        if job is None:
            return Look(started=False, ended=True, doc=(None, None))
        if pod is None:
            return Look(started=False, ended=_job_failed(job) is not None, doc=(job, None))
        phase = (pod.get("status") or {}).get("phase")
        ended = pod_end(pod, self.memory_said) is not None
        return Look(started=phase in _RAN, ended=ended, doc=(job, pod))

    def _remove(self) -> str:
        self.cluster.delete_job(self.following.name)
        return "its Job"

    def pending(self, now: Look, waited: float) -> TaskEnd | None:
        job, pod = now.doc
        try:
            return self.waits(job, pod, self._remove)
        except KubernetesFailure as exc:
            self._trouble(exc)
            return None

    def started(self, now: Look) -> Started:
        self.following.started = True
        _, pod = now.doc
        return self.make_started(str((pod.get("spec") or {}).get("nodeName")))

    def output(self, now: Look) -> LogFollower:
        _, pod = now.doc
        pod_name = str((pod.get("metadata") or {}).get("name"))
        self.following.output = LogFollower(
            partial(self.cluster.log_frames, pod_name), self.ctx.emit
        )
        return self.following.output

    def ended(self, now: Look) -> TaskEnd:
        name = self.following.name
        job, pod = now.doc
        if job is None:
            if self.following.stopping:
                return TaskEnd(TaskState.STOPPED, 143, _STOPPED)
            return TaskEnd(
                TaskState.KILLED,
                137,
                f"the Job {name} was deleted outside nodus (kubectl delete job?); not retried",
            )
        if pod is None:
            return TaskEnd(
                TaskState.KILLED, 1, f"the Job {name} failed with no pod: {_job_failed(job)}"
            )
        end = pod_end(pod, self.memory_said)
        if end is not None:
            return end
        # It ran, and a pod of its Job waits again (its first pod deleted from outside):
        # nodus owns the retries, so this Job goes.
        with contextlib.suppress(KubernetesFailure):
            self.cluster.delete_job(name)
        pod_name = (pod.get("metadata") or {}).get("name")
        return TaskEnd(
            TaskState.INFRASTRUCTURE,
            1,
            f"the Job {name} made a new pod ({pod_name}) after its first one ran; deleted "
            "the Job: --retries runs it again",
        )

    def stopped(self) -> TaskEnd:
        # nodus deletes the Job (again, if the first try failed; else the run's cleanup does)
        with contextlib.suppress(KubernetesFailure):
            self.cluster.delete_job(self.following.name)
        return TaskEnd(TaskState.STOPPED, 143, _STOPPED)


def follow(
    cluster: Cluster,
    following: Following,
    ctx: TaskContext,
    *,
    image: str,
    memory_said: str,
    started: Callable[[str], Started],
    holders: Callable[[], str],
    queue_ok: bool,
    queue_name: str | None,
    wants: str = "",
) -> TaskEnd:
    """Follow the Job until it ends (see the module), in the cluster targets' follow loop
    (:func:`nodus_cli.targets.cluster.following.follow`). ``started(node)`` makes what the
    context is told when the pod runs; ``holders()`` says who holds the GPUs it waits
    for, ``wants`` what it waits for (`` for 2x H100``); ``queue_ok`` False:
    ``--no-wait``, a pod the scheduler cannot place ends the task. The API server may fail
    to answer for :data:`TROUBLE_SECONDS` before the failure is raised."""

    def waits(
        job: dict[str, Any], pod: dict[str, Any] | None, remove: Callable[[], str]
    ) -> TaskEnd | None:
        return look(
            cluster,
            following,
            ctx,
            job,
            pod,
            image,
            memory_said,
            started,
            holders,
            queue_ok,
            queue_name,
            wants,
            remove,
        )

    job = _Job(cluster, following, ctx, waits, memory_said, started)
    return cluster_following.follow(job, ctx, interval=lambda _: POLL_SECONDS)


def look(
    cluster: Cluster,
    following: Following,
    ctx: TaskContext,
    job: dict[str, Any],
    pod: dict[str, Any] | None,
    image: str,
    memory_said: str,
    started: Callable[[str], Started],
    holders: Callable[[], str],
    queue_ok: bool,
    queue_name: str | None,
    wants: str,
    remove: Callable[[], str],
) -> TaskEnd | None:
    """One look at the Job and its (newest) pod: the task's end, or None while it goes
    on. ``remove()`` deletes what the task made (its Job; an item of an Indexed Job: its
    pod) and says what, for a task that must not go on."""
    name = following.name
    if following.stopping:
        # nodus deletes the Job (again, if the first try failed); its pod going away
        # says nothing new: the Job's absence ends the task
        remove()
        return None
    if pod is None:
        failed = _job_failed(job)
        if failed is not None:
            return TaskEnd(TaskState.KILLED, 1, f"the Job {name} failed with no pod: {failed}")
        pending = Pending(PendingKind.SCHEDULING, f"Job {name} created; its pod is not there yet")
        if (job.get("spec") or {}).get("suspend"):  # Kueue admits it by unsuspending it
            said = kueue_pending(cluster, job, queue_name, queue_ok)
            if isinstance(said, TaskEnd):
                remove()
                return said
            pending = said
        if pending.words != following.said:
            following.said = pending.words
            ctx.waiting(pending)
        return None
    pod_name = str((pod.get("metadata") or {}).get("name"))
    problem = pull_problem(pod, image)
    if problem is not None:
        remove()
        return problem
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    if status.get("phase") == "Pending" and not node:
        reason = pending_reason(pod, []) or pending_reason(pod, cluster.events(pod_name))
        kind = pending_kind(reason)
        if reason is None:
            words = f"pod {pod_name}: the scheduler has not placed it yet"
        else:
            held = following.holders(holders)
            words = f"pod {pod_name} waits{wants}: the scheduler says: {reason}" + (
                f"; {held}" if held else ""
            )
            if not queue_ok:
                removed = remove()
                return TaskEnd(
                    TaskState.KILLED,
                    3,
                    f"--no-wait: the cluster could not place pod {pod_name} at once: {words}; "
                    f"deleted {removed}",
                )
        if words != following.said:
            following.said = words
            ctx.waiting(Pending(kind, words))
        return None
    if status.get("phase") == "Pending":  # placed: the kubelet pulls and starts it
        words = f"pod {pod_name} is on node {node}; its container is starting"
        if words != following.said:
            following.said = words
            ctx.waiting(Pending(PendingKind.SCHEDULING, words))
        return None
    if status.get("phase") in ("Running", "Succeeded", "Failed") and not following.started:
        following.started = True
        ctx.started(started(str(node)))
    if status.get("phase") == "Running":
        _follow_log(cluster, pod_name, following, ctx, final=False)
        return None
    end = pod_end(pod, memory_said)
    if end is not None:
        _follow_log(cluster, pod_name, following, ctx, final=True)
    return end


def _job_failed(job: dict[str, Any]) -> str | None:
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return str(condition.get("message") or condition.get("reason") or "Failed")
    return None


def pending_kind(reason: str | None) -> PendingKind:
    """The kind of wait the scheduler's ``reason`` for an unplaced pod is: too few free
    GPUs (or CPUs, memory) is ``resources``; no node it may go to, ``node_unavailable``."""
    if reason is None:
        return PendingKind.SCHEDULING
    if "Insufficient" in reason or "Too many pods" in reason:
        return PendingKind.RESOURCES
    if any(w in reason for w in ("affinity", "selector", "taint", "unschedulable", "NotReady")):
        return PendingKind.NODE_UNAVAILABLE
    if "preemption" in reason.lower() and "Insufficient" not in reason:
        return PendingKind.PRIORITY
    return PendingKind.OTHER
