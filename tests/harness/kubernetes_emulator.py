"""A Kubernetes API server emulator in its own process, for ``--target kubernetes`` tests.

Run by ``tests/kubernetes_support.py`` (``python tests/harness/kubernetes_emulator.py``):
it serves kmock's ``KubernetesEmulator`` (Nodes, Pods, Events, Jobs, stored in memory and
served as the real API serves them to the official client) on 127.0.0.1, prints
``PORT=N`` once it listens, and runs until SIGTERM (``--load FILE``: objects to serve from
the start, for a benchmark's thousand nodes; ``--record FILE``: each Job created is
appended there, and each ConfigMap and Secret, for the tests that check every manifest against
Kubernetes' schemas).
The test drives it through the same HTTP API nodus uses: it creates the nodes (with real
GPU-operator labels), patches pod phases and container states, creates Events, and
writes a pod's log into its annotation ``emulator.nodus.test/log``.

What it adds to kmock, each a stand-in for what a real cluster does and this machine
cannot run (no scheduler, no kubelet):

* a Job controller's first step: a Job created unsuspended (or unsuspended later, as
  Kueue does when it admits it) gets one pod from its template, ``Pending`` and
  unscheduled (labels ``job-name``, ``batch.kubernetes.io/job-name``);
  deleting a Job deletes its pods (the garbage collector's part);
* an Indexed Job (``completionMode: Indexed``) gets one pod per index, at most
  ``parallelism`` not ended at once: each pod carries its index as the controller writes
  it (annotation and label ``batch.kubernetes.io/job-completion-index``, the
  ``JOB_COMPLETION_INDEX`` variable), and a pod that ends (or is deleted) makes room for
  the next index (no index gets a second pod: ``backoffLimitPerIndex: 0``);
* ``GET .../pods/NAME/log`` answers the pod's annotation ``emulator.nodus.test/log`` as
  a kubelet does its container's log: each line stamped when the emulator first saw it
  (``timestamps=true`` prefixes its RFC 3339 time in nanoseconds), ``sinceSeconds`` back
  from now, and ``follow=true`` as a chunked stream of the lines as they come, ended
  once the pod has (the rest, an unterminated line too, sent first) or is gone; the
  bytes of log served per pod are written to ``--served FILE`` (JSON), for the tests that
  check a log is not read again and again;
* Kueue's ``kueue.x-k8s.io/v1beta2`` Workloads and LocalQueues are stored (the test
  creates them, as Kueue would, and scripts their conditions), and Kueue's visibility API
  answers ``GET /apis/visibility.kueue.x-k8s.io/VERSION/namespaces/NS/localqueues/Q/
  pendingworkloads`` as Kueue does (:meth:`Emulator._pending_workloads`): the pending
  Workloads of LocalQueue Q in their ClusterQueue's order (priority, then age), each with
  ``positionInLocalQueue`` and ``positionInClusterQueue``. The LocalQueue's annotation
  ``emulator.nodus.test/visibility`` scripts the API itself: ``forbidden`` (403, as RBAC
  answers), ``unserved`` (404, as an API server without it), or the versions served
  (``v1alpha1``, as an older Kueue); a LocalQueue that does not exist is 404;
* the bearer token ``expired-token`` is answered 401, namespace ``forbidden`` 403, and
  creating anything in namespace ``missing`` 404 (listing there finds nothing, as on a
  real server), with the Status documents a real API server sends.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import random
import re
import signal
import string
import sys
import time
from typing import Any

import aiohttp.web
import attrs
from kmock import KubernetesEmulator, KubernetesError, Server, resource

LOG_ANNOTATION = "emulator.nodus.test/log"
PODS = resource("", "v1", "pods")
INDEX = "batch.kubernetes.io/job-completion-index"
CORE = ("nodes", "pods", "events", "namespaces", "configmaps", "secrets")
KUEUE = "kueue.x-k8s.io"
VISIBILITY = "visibility.kueue.x-k8s.io"
VISIBILITY_ANNOTATION = "emulator.nodus.test/visibility"
WORKLOADS = resource(KUEUE, "v1beta2", "workloads")
LOCAL_QUEUES = resource(KUEUE, "v1beta2", "localqueues")


def _is(request: Any, group: str, plural: str) -> bool:
    res = request.resource
    return res is not None and res.group == group and res.plural == plural


def _stamp(nanoseconds: int) -> str:
    """RFC 3339 in nanoseconds, as the kubelet stamps a log line."""
    seconds, fraction = divmod(nanoseconds, 1_000_000_000)
    whole = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return f"{whole.strftime('%Y-%m-%dT%H:%M:%S')}.{fraction:09d}Z"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@attrs.define(kw_only=True)
class Emulator(KubernetesEmulator):  # type: ignore[misc]
    #: Where each Job created is recorded (the tests check every manifest nodus made).
    record: str | None = None
    #: Where the bytes of log served per pod are written (JSON ``{pod: bytes}``).
    served: str | None = None
    #: Each pod's log lines as stamped when first seen: ``[(line, nanoseconds)]``.
    stamps: dict[tuple[str, str], list[tuple[str, int]]] = attrs.field(factory=dict)
    served_bytes: dict[str, int] = attrs.field(factory=dict)
    last_stamp: int = 0

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        if request.headers.get("Authorization", "") == "Bearer expired-token":
            raise KubernetesError(401, "Unauthorized", "Unauthorized", {})
        if request.namespace == "forbidden":
            plural = request.resource.plural if request.resource is not None else "?"
            group = request.resource.group if request.resource is not None else ""
            raise KubernetesError(
                403,
                "Forbidden",
                f'{plural}{"." + group if group else ""} is forbidden: User "alice" cannot '
                f'{str(request.action or "get").lower()} resource "{plural}" in API group '
                f'"{group}" in the namespace "forbidden"',
                {"kind": plural},
            )
        if request.namespace == "missing" and request.method == "POST":
            raise KubernetesError(404, "NotFound", 'namespaces "missing" not found', {})
        if _is(request, VISIBILITY, "localqueues") and request.subresource == "pendingworkloads":
            return aiohttp.web.json_response(self._pending_workloads(request))
        if _is(request, "", "pods") and request.subresource == "log":
            return await self._log(request)
        answer = await super()._handle(request)
        made = request.method == "POST" and answer.status < 300
        recorded = _is(request, "batch", "jobs") or any(
            _is(request, "", plural) for plural in ("configmaps", "secrets")
        )
        if made and recorded and self.record:
            with open(self.record, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(request.data) + "\n")
        if _is(request, "batch", "jobs") and made:
            self._job_pod(request.data)
        pod_changed = request.method in ("PATCH", "DELETE") and answer.status < 300
        if _is(request, "", "pods") and pod_changed and request.name:
            self._next_indexes(request.namespace, request.name)
        if _is(request, "batch", "jobs") and request.method == "PATCH" and answer.status < 300:
            spec = (request.data or {}).get("spec") or {}
            if spec.get("suspend") is False:  # Kueue admits it: the controller makes its pod
                for (res, ns, name), stored in list(self.objects.items()):
                    ours = res.plural == "jobs" and (ns, name) == (request.namespace, request.name)
                    if ours and not stored.deleted:
                        self._job_pod(stored.raw)
        if _is(request, "batch", "jobs") and request.method == "DELETE" and answer.status < 300:
            self._delete_pods(request.namespace, request.name)
        return answer

    def _stored(self, res: Any, namespace: str | None = None) -> list[Any]:
        return [
            o
            for (r, ns, _), o in list(self.objects.items())
            if r == res and (namespace is None or ns == namespace) and not o.deleted
        ]

    def _pending_workloads(self, request: Any) -> dict[str, Any]:
        """Kueue's visibility API: the pending Workloads of a LocalQueue (see the module)."""
        version = request.resource.version
        queue = next(
            (
                q
                for q in self._stored(LOCAL_QUEUES, request.namespace)
                if q["metadata"]["name"] == request.name
            ),
            None,
        )
        if queue is None:
            raise KubernetesError(
                404, "NotFound", f'localqueues.{VISIBILITY} "{request.name}" not found', {}
            )
        scripted = ((queue.get("metadata") or {}).get("annotations") or {}).get(
            VISIBILITY_ANNOTATION, ""
        )
        if scripted == "forbidden":
            raise KubernetesError(
                403,
                "Forbidden",
                f'localqueues.{VISIBILITY} "{request.name}" is forbidden: User "alice" cannot '
                f'get resource "localqueues/pendingworkloads" in API group "{VISIBILITY}" in '
                f'the namespace "{request.namespace}"',
                {},
            )
        if scripted == "unserved" or (scripted and version not in scripted.split(",")):
            raise KubernetesError(
                404, "NotFound", "the server could not find the requested resource", {}
            )
        cluster_queue = (queue.get("spec") or {}).get("clusterQueue")
        lanes = {  # (namespace, LocalQueue) -> its ClusterQueue
            (q["metadata"].get("namespace"), q["metadata"]["name"]): (q.get("spec") or {}).get(
                "clusterQueue"
            )
            for q in self._stored(LOCAL_QUEUES)
        }

        def waits(w: Any) -> bool:
            types = {
                c.get("type")
                for c in (w.get("status") or {}).get("conditions") or ()
                if c.get("status") == "True"
            }
            return (w.get("spec") or {}).get("active", True) is not False and not types & {
                "QuotaReserved",
                "Admitted",
                "Finished",
            }

        line = sorted(
            (
                w
                for w in self._stored(WORKLOADS)
                if waits(w)
                and lanes.get(
                    (w["metadata"].get("namespace"), (w.get("spec") or {}).get("queueName"))
                )
                == cluster_queue
            ),
            key=lambda w: (
                -int((w.get("spec") or {}).get("priority") or 0),
                str(w["metadata"].get("creationTimestamp") or ""),
                w["metadata"]["name"],
            ),
        )
        items, in_queue = [], 0
        for place, w in enumerate(line):
            meta = w["metadata"]
            ours = (meta.get("namespace"), (w.get("spec") or {}).get("queueName")) == (
                request.namespace,
                request.name,
            )
            if not ours:
                continue
            items.append(
                {
                    "metadata": {
                        "name": meta["name"],
                        "namespace": meta.get("namespace"),
                        "creationTimestamp": meta.get("creationTimestamp"),
                        "ownerReferences": meta.get("ownerReferences") or [],
                    },
                    "priority": int((w.get("spec") or {}).get("priority") or 0),
                    "localQueueName": request.name,
                    "positionInClusterQueue": place,
                    "positionInLocalQueue": in_queue,
                }
            )
            in_queue += 1
        return {
            "kind": "PendingWorkloadsSummary",
            "apiVersion": f"{VISIBILITY}/{version}",
            "metadata": {"creationTimestamp": None},
            "items": items,
        }

    def _pod(self, namespace: str, name: str) -> Any:
        for (res, ns, n), stored in self.objects.items():
            if res == PODS and (ns, n) == (namespace, name) and not stored.deleted:
                return stored
        return None

    def _lines(self, pod: Any, key: tuple[str, str]) -> list[tuple[str, int]]:
        """The pod's log lines, each stamped when first seen (an unterminated line keeps
        its stamp when its end comes; a line that changed is stamped anew)."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        parts = re.findall(r"[^\n]*\n|[^\n]+$", annotations.get(LOG_ANNOTATION, ""))
        stamped = self.stamps.setdefault(key, [])
        for i, part in enumerate(parts):
            if i < len(stamped) and (
                stamped[i][0] == part
                or (not stamped[i][0].endswith("\n") and part.startswith(stamped[i][0]))
            ):
                stamped[i] = (part, stamped[i][1])
                continue
            del stamped[i:]
            self.last_stamp = max(self.last_stamp + 1, time.time_ns())
            stamped.append((part, self.last_stamp))
        del stamped[len(parts) :]
        return list(stamped)

    def _count(self, pod: str, data: bytes) -> None:
        self.served_bytes[pod] = self.served_bytes.get(pod, 0) + len(data)
        if self.served:
            with open(self.served, "w", encoding="utf-8") as handle:
                json.dump(self.served_bytes, handle)

    async def _log(self, request: Any) -> aiohttp.web.StreamResponse:
        key = (request.namespace, request.name)
        pod = self._pod(*key)
        if pod is None:
            raise KubernetesError(404, "NotFound", f'pods "{request.name}" not found', {})
        params = request.params or {}
        stamps = params.get("timestamps") == "true"
        since = params.get("sinceSeconds")
        oldest = time.time_ns() - int(since) * 1_000_000_000 if since else 0

        def text(lines: list[tuple[str, int]]) -> bytes:
            shown = "".join(
                (_stamp(at) + " " if stamps else "") + line for line, at in lines if at >= oldest
            )
            return shown.encode()

        if params.get("follow") != "true":
            body = text(self._lines(pod, key))
            self._count(request.name, body)
            return aiohttp.web.Response(body=body, content_type="text/plain")
        answer = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain"})
        answer.enable_chunked_encoding()
        await answer.prepare(request._raw_request)
        sent = 0
        while True:
            pod = self._pod(*key)
            ended = pod is None or (pod.get("status") or {}).get("phase") in (
                "Succeeded",
                "Failed",
            )
            lines = self._lines(pod, key) if pod is not None else []
            whole = lines if ended else [(ln, at) for ln, at in lines if ln.endswith("\n")]
            fresh = text(whole[sent:])
            sent = max(sent, len(whole))
            if fresh:
                self._count(request.name, fresh)
                try:
                    await answer.write(fresh)
                except (ConnectionError, RuntimeError):  # the reader closed it
                    return answer
            if ended:
                break
            await asyncio.sleep(0.05)
        await answer.write_eof()
        return answer

    def _job_pod(self, job: dict[str, Any]) -> None:
        spec = job.get("spec") or {}
        if spec.get("suspend"):
            return
        if spec.get("completionMode") != "Indexed":
            self._make_pod(job, None)
            return
        at_once = min(int(spec.get("parallelism", 1)), int(spec.get("completions", 1)))
        for index in range(at_once):
            self._make_pod(job, index)

    def _pods_of(self, namespace: str, job: str) -> list[Any]:
        return [
            stored
            for (res, ns, _), stored in list(self.objects.items())
            if res == PODS
            and ns == namespace
            and ((stored.get("metadata") or {}).get("labels") or {}).get("job-name") == job
        ]

    def _next_indexes(self, namespace: str, pod: str) -> None:
        """A pod of an Indexed Job ended or was deleted: the next indexes get theirs."""
        stored = next(
            (
                o
                for (res, ns, n), o in self.objects.items()
                if (res, ns, n) == (PODS, namespace, pod)
            ),
            None,
        )
        if stored is None:
            return
        job_name = ((stored.get("metadata") or {}).get("labels") or {}).get("job-name")
        job = next(
            (
                o
                for (res, ns, n), o in self.objects.items()
                if res.plural == "jobs" and (ns, n) == (namespace, job_name) and not o.deleted
            ),
            None,
        )
        spec = (job.get("spec") or {}) if job is not None else {}
        if job is None or spec.get("completionMode") != "Indexed" or spec.get("suspend"):
            return
        pods = self._pods_of(namespace, str(job_name))
        made = {int(((p.get("metadata") or {}).get("labels") or {}).get(INDEX, -1)) for p in pods}
        live = [
            p
            for p in pods
            if not p.deleted and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        room = int(spec.get("parallelism", 1)) - len(live)
        for index in range(int(spec.get("completions", 1))):
            if room <= 0:
                break
            if index not in made:
                self._make_pod(job.raw, index)
                room -= 1

    def _make_pod(self, job: dict[str, Any], index: int | None) -> None:
        meta = job.get("metadata") or {}
        name = str(meta["name"])
        suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
        template = (job.get("spec") or {}).get("template") or {}
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels.update({"job-name": name, "batch.kubernetes.io/job-name": name})
        pod_spec = json.loads(json.dumps(template.get("spec") or {}))
        annotations = {}
        pod_name = f"{name}-{suffix}"
        if index is not None:
            labels[INDEX] = annotations[INDEX] = str(index)
            pod_name = f"{name}-{index}-{suffix}"
            for container in pod_spec.get("containers") or ():
                container.setdefault("env", []).append(
                    {"name": "JOB_COMPLETION_INDEX", "value": str(index)}
                )
        self.objects[PODS, meta.get("namespace"), pod_name] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": meta.get("namespace"),
                "labels": labels,
                "annotations": annotations,
                "creationTimestamp": _now(),
                "ownerReferences": [
                    {
                        "kind": "Job",
                        "name": name,
                        "apiVersion": "batch/v1",
                        "uid": name,
                        "controller": True,
                    }
                ],
            },
            "spec": pod_spec,
            "status": {"phase": "Pending"},
        }

    def _delete_pods(self, namespace: str, job: str) -> None:
        for (res, ns, _), stored in list(self.objects.items()):
            labels = (stored.get("metadata") or {}).get("labels") or {}
            ours = res == PODS and ns == namespace and labels.get("job-name") == job
            if ours and not stored.deleted:
                stored.delete()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--record", help="a file each Job created is appended to, one JSON document a line"
    )
    parser.add_argument("--served", help="a file the bytes of log served per pod go to")
    parser.add_argument(
        "--load", help="a JSON file of objects to serve from the start ({plural: [doc...]})"
    )
    args = parser.parse_args()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with (
        Emulator(record=args.record, served=args.served) as kmock,
        Server(kmock, port=args.port or None) as server,
    ):
        for plural in CORE:
            kmock.resources[f"v1/{plural}"] = {}
        kmock.resources["batch/v1/jobs"] = {}
        for plural in ("workloads", "localqueues"):  # Kueue's, as a recent Kueue serves them
            kmock.resources[f"{KUEUE}/v1beta2/{plural}"] = {}
        if args.load:  # many objects at once (a benchmark's cluster): no request each
            with open(args.load, encoding="utf-8") as handle:
                for plural, docs in json.load(handle).items():
                    for doc in docs:
                        meta = doc["metadata"]
                        kmock.objects[f"v1/{plural}", meta.get("namespace"), meta["name"]] = doc
        print(f"PORT={server.port}", flush=True)
        await stop.wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
