"""Kueue's word on a Job it keeps suspended: why it waits, and its place in line.

Contract: :func:`kueue_pending` is what a task whose Job is suspended (``[kubernetes]
queue``: Kueue admits a Job by unsuspending it) says, or how it ends. It finds the Job's
Workload (``kueue.x-k8s.io`` ``workloads`` in the namespace, owned by the Job: its
``ownerReferences``, or the label ``kueue.x-k8s.io/job-uid``), reads its conditions
(:func:`reading`) and, while it is pending, asks Kueue's visibility API for its place
(``localqueues/QUEUE/pendingworkloads``: ``positionInLocalQueue``,
``positionInClusterQueue``). The words read ``waiting for Kueue to admit Job X: 3rd in
queue 'gpu' (5th in its cluster queue); Kueue says: insufficient unused quota for
nvidia.com/gpu in flavor h100, 2 more needed``, with :attr:`Pending.position` (1: next)
and the kind of wait: ``limit`` for quota, ``priority`` when it was preempted or others
are ahead, ``held`` for a stopped queue, ``other`` for admission checks or a queue Kueue
cannot use, ``scheduling`` while Kueue has said nothing yet. A visibility API the
cluster does not serve (404) or nodus may not read (403) leaves the place out, and the
words say why (docs/targets.md lists the ClusterRole to grant).

It ends the task (a :class:`TaskEnd`, its Job then deleted by the caller) when Kueue
deactivates the Workload (``spec.active: false``; ``Evicted`` for ``Deactivated``,
``InactiveWorkload``) or evicts it for ``PodsReadyTimeout``: the cluster's failure
(``infrastructure``: ``--retries`` runs it again), not the workload's; and, under
``--no-wait``, as soon as Kueue says it cannot admit it now, or the cluster serves no
Kueue Workloads (exit 3, as a pod the scheduler cannot place).

Asking costs a call or two (the Workloads, then the place): once per Job every
:data:`ASK_SECONDS` (as often as a waiting task asks who holds the GPUs,
``follow.HOLDERS_SECONDS``), shared by every item of an Indexed Job; the answer in
between is the last one, so the words change only when Kueue's do. Only a Workload Kueue
has not made yet (it does so as the Job is created) is looked for again at the next look.

Why apart: Kueue is an add-on with an API of its own; the followers of a single Job and
of an Indexed Job call this one function from their ``suspend`` branch.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from nodus_cli.structs import struct
from nodus_cli.targets.base import Pending, PendingKind, TaskEnd, TaskState
from nodus_cli.targets.kubernetes.api import Cluster, KubernetesFailure
from nodus_cli.text import ordinal

__all__ = [
    "ASK_SECONDS",
    "JOB_UID_LABEL",
    "Reading",
    "kueue_pending",
    "place_of",
    "reading",
    "workload_of",
]

#: How often Kueue is asked again about one Job (see the module).
ASK_SECONDS = 10.0
#: The label Kueue puts on the Workload of a Job: the Job's uid.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: Kueue's reasons for an eviction that ends the task (the Workload will not run again
#: by itself): deactivated (``InactiveWorkload`` before Kueue 0.9), pods not ready in time.
_ENDING = ("Deactivated", "InactiveWorkload", "PodsReadyTimeout", "RequeuingLimitExceeded")
_HELD = ("ClusterQueueStopped", "LocalQueueStopped")
#: Kueue's preface for a one-pod-set Job's reason, which says nothing to its user.
_FLAVORS = re.compile(r"^couldn't assign flavors to pod set [^:]+: ")


@struct(frozen=True)
class Reading:
    """What a Workload's conditions say: the kind of wait, Kueue's words ("" when it has
    said nothing), why the task must end (None: it waits), whether Kueue has looked at it
    and cannot admit it now (``--no-wait`` ends the task then), and whether it is in the
    queue (its place is worth asking)."""

    kind: PendingKind
    said: str
    end: str | None = None
    refused: bool = False
    queued: bool = False


@struct(frozen=True)
class _Asked:
    """What Kueue said of one Job at ``at`` (monotonic): its Workload (None: none yet), its
    place (local, cluster; from 1), what keeps nodus from knowing more, and whether the
    cluster serves no Workloads at all (no Kueue: nothing will admit the Job)."""

    at: float
    workload: dict[str, Any] | None
    place: tuple[int, int] | None
    note: str
    no_kueue: bool = False


_ASKED: dict[tuple[str, str, str], _Asked] = {}
_ASKING = threading.Lock()


def _meta(doc: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = doc.get("metadata") or {}
    return meta


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def workload_of(workloads: list[dict[str, Any]], job: dict[str, Any]) -> dict[str, Any] | None:
    """The Workload of ``job`` among ``workloads`` (the newest, for a Job made again under
    the same name), or None."""
    name, uid = _meta(job).get("name"), _meta(job).get("uid")
    found = []
    for workload in workloads:
        meta = _meta(workload)
        if uid and (meta.get("labels") or {}).get(JOB_UID_LABEL) == uid:
            found.append(workload)
            continue
        for ref in meta.get("ownerReferences") or ():
            same = ref.get("kind") == "Job" and ref.get("name") == name
            if same and (not uid or not ref.get("uid") or ref.get("uid") == uid):
                found.append(workload)
                break
    return max(found, key=lambda w: str(_meta(w).get("creationTimestamp") or ""), default=None)


def _conditions(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c.get("type")): c for c in (workload.get("status") or {}).get("conditions") or ()}


def _true(condition: dict[str, Any]) -> bool:
    return condition.get("status") == "True"


def _said(condition: dict[str, Any]) -> str:
    """A condition's reason and message in one line: ``Preempted: ...``."""
    reason = str(condition.get("reason") or "")
    message = _FLAVORS.sub("", _one_line(str(condition.get("message") or "")))
    if reason and message:
        return f"{reason}: {message}"
    return reason or message


def reading(workload: dict[str, Any]) -> Reading:
    """What a Workload's spec and conditions say (see :class:`Reading`)."""
    conditions = _conditions(workload)
    evicted = conditions.get("Evicted") or {}
    evicted_why = str(evicted.get("reason") or "") if _true(evicted) else ""
    if (workload.get("spec") or {}).get("active") is False:
        said = _said(evicted) if evicted_why else "its Workload is inactive (spec.active: false)"
        return Reading(PendingKind.HELD, said, end=f"Kueue deactivated it ({said})")
    finished = conditions.get("Finished") or {}
    if _true(finished):
        said = _said(finished)
        return Reading(PendingKind.OTHER, said, end=f"Kueue finished its Workload ({said})")
    if evicted_why in _ENDING:
        said = _said(evicted)
        return Reading(PendingKind.OTHER, said, end=f"Kueue evicted it ({said})")
    if _true(conditions.get("Admitted") or {}):
        return Reading(PendingKind.SCHEDULING, "admitted; the Job is about to start")
    reserved = conditions.get("QuotaReserved") or {}
    if _true(reserved):
        checks = [
            f"{c.get('name')} {str(c.get('state') or 'Pending').lower()}"
            + (f" ({_one_line(str(c['message']))})" if c.get("message") else "")
            for c in (workload.get("status") or {}).get("admissionChecks") or ()
            if c.get("state") != "Ready"
        ]
        said = "quota reserved; waiting for its admission checks" + (
            f": {', '.join(checks)}" if checks else ""
        )
        return Reading(PendingKind.OTHER, said)
    if evicted_why in _HELD:
        return Reading(PendingKind.HELD, _said(evicted), refused=True, queued=True)
    preempted = conditions.get("Preempted") or {}
    before = ""
    if _true(preempted) or evicted_why == "Preempted":
        before = f"it was preempted ({_said(preempted if _true(preempted) else evicted)})"
    elif evicted_why:
        before = f"it was evicted ({_said(evicted)})"
    message = _FLAVORS.sub("", _one_line(str(reserved.get("message") or "")))
    if not message:
        kind = PendingKind.PRIORITY if before else PendingKind.SCHEDULING
        return Reading(kind, f"{before} and waits again" if before else "", queued=True)
    said = f"{before} and waits again; {message}" if before else message
    if reserved.get("reason") == "Inadmissible":
        return Reading(PendingKind.OTHER, said, refused=True)
    kind = PendingKind.LIMIT if "quota" in message.lower() else PendingKind.OTHER
    if before and kind is PendingKind.OTHER:
        kind = PendingKind.PRIORITY
    return Reading(kind, said, refused=True, queued=True)


def place_of(
    pending: list[dict[str, Any]], workload: dict[str, Any], job: str
) -> tuple[int, int] | None:
    """The place (in its LocalQueue, in its ClusterQueue; 1: next) of ``workload`` among
    the visibility API's ``pending`` items (by the Workload's name, else its owner Job)."""
    name = _meta(workload).get("name")
    for item in pending:
        meta = _meta(item)
        owned = any(
            r.get("kind") == "Job" and r.get("name") == job
            for r in meta.get("ownerReferences") or ()
        )
        if meta.get("name") == name or owned:
            try:
                local = int(item.get("positionInLocalQueue", 0))
                cluster = int(item.get("positionInClusterQueue", 0))
            except (TypeError, ValueError):
                return None
            return local + 1, cluster + 1
    return None


def _ask(cluster: Cluster, job: dict[str, Any], queue: str | None) -> _Asked:
    """Ask Kueue once: the Job's Workload, and its place while it is queued."""
    uid = _meta(job).get("uid")
    try:
        workload = workload_of(cluster.workloads(f"{JOB_UID_LABEL}={uid}" if uid else None), job)
    except KubernetesFailure as exc:
        if exc.status == 404:
            note = "the cluster serves no Kueue Workloads: without Kueue the Job stays suspended"
            return _Asked(time.monotonic(), None, None, note, no_kueue=True)
        if exc.status == 403:
            note = "nodus may not read Kueue's Workloads (403); docs/targets.md lists the Role"
        else:
            note = f"Kueue's Workloads cannot be read now: {exc.message}"
        return _Asked(time.monotonic(), None, None, note)
    if workload is None or not queue or "/" in queue or not reading(workload).queued:
        return _Asked(time.monotonic(), workload, None, "")
    try:
        place = place_of(cluster.pending_workloads(queue), workload, str(_meta(job).get("name")))
    except KubernetesFailure as exc:
        if exc.status == 404:
            note = "Kueue's visibility API is not served here, so no place in line"
        elif exc.status == 403:
            note = (
                "no place in line: nodus may not read Kueue's visibility API (403); "
                "docs/targets.md lists the ClusterRole"
            )
        else:
            note = f"no place in line: {exc.message}"
        return _Asked(time.monotonic(), workload, None, note)
    return _Asked(time.monotonic(), workload, place, "")


def _asked(cluster: Cluster, job: dict[str, Any], queue: str | None) -> _Asked:
    """Kueue's last answer about ``job``, asked again once it is :data:`ASK_SECONDS` old."""
    key = (cluster.server, cluster.namespace, str(_meta(job).get("name")))
    with _ASKING:
        now = time.monotonic()
        known = _ASKED.get(key)
        if known is not None and now - known.at < ASK_SECONDS:
            return known
        for old in [k for k, v in _ASKED.items() if now - v.at > 60 * ASK_SECONDS]:
            del _ASKED[old]
        answer = _ask(cluster, job, queue)
        if answer.workload is not None or answer.note:
            _ASKED[key] = answer  # else Kueue has not made it yet: asked again at the next look
        return answer


def kueue_pending(
    cluster: Cluster, job: dict[str, Any], queue: str | None, queue_ok: bool = True
) -> Pending | TaskEnd:
    """What a task whose Job Kueue keeps suspended says now, or how it ends (see the
    module). ``queue``: the LocalQueue (``[kubernetes] queue``); ``queue_ok`` False:
    ``--no-wait``."""
    name = _meta(job).get("name")
    asked = _asked(cluster, job, queue)
    read = reading(asked.workload) if asked.workload is not None else None
    words = f"waiting for Kueue to admit Job {name}"
    if asked.place is not None:
        local, whole = asked.place
        words += f": {ordinal(local)} in queue {queue!r} ({ordinal(whole)} in its cluster queue)"
    else:
        words += f" from queue {queue!r}" if queue else ""
    if read is not None and read.said:
        words += f"; Kueue says: {read.said}"
    if asked.note:
        words += f" ({asked.note})"
    if read is not None and read.end is not None:
        return TaskEnd(
            TaskState.INFRASTRUCTURE,
            1,
            f"{read.end} while Job {name} waited in queue {queue!r}: the cluster's decision, "
            "not the workload's (--retries runs it again); its Job is deleted",
        )
    if not queue_ok and (asked.no_kueue or (read is not None and read.refused)):
        return TaskEnd(
            TaskState.KILLED,
            3,
            f"--no-wait: Kueue did not admit Job {name} at once: {words}; its Job is deleted",
        )
    kind = read.kind if read is not None else PendingKind.SCHEDULING
    if asked.place is not None and asked.place[0] > 1 and kind is PendingKind.SCHEDULING:
        kind = PendingKind.PRIORITY
    return Pending(kind, words, position=asked.place[0] if asked.place else None)
