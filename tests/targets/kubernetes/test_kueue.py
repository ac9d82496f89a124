# ruff: noqa: F811 - the fixtures imported from kubernetes_support are test parameters here
"""Kueue's reason and place for a Job it keeps suspended (targets/kubernetes/kueue.py).

The readers of a Workload's conditions and of the visibility API's answer are tested on
documents; the rest against the API server emulator, where the test plays Kueue: it
creates the LocalQueues, the Workload of the Job nodus created (owned by it, as Kueue's
job controller makes it) and others ahead of it, and scripts their conditions. The
emulator answers the visibility API from those Workloads as Kueue does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from command_support import finish
from kubernetes_support import (
    H100_LABELS,
    IMAGE,
    NAMESPACE,
    KubeEmulator,
    KubeNodus,
    kube_emulator,  # noqa: F401 - fixture
)

from nodus_cli.targets.base import Pending, PendingKind, TaskEnd, TaskState
from nodus_cli.targets.kubernetes import kueue
from nodus_cli.targets.kubernetes.api import KubernetesFailure
from nodus_cli.targets.kubernetes.kueue import kueue_pending, place_of, reading, workload_of

SCHEMA_VERSION = "1.33.0"
KUEUE = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}"
QUOTA = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
    "in flavor h100, 2 more needed"
)


def _pending(message: str = QUOTA, reason: str = "Pending") -> list[dict[str, Any]]:
    return [{"type": "QuotaReserved", "status": "False", "reason": reason, "message": message}]


def _workload(conditions: list[dict[str, Any]], active: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": "job-j-1a2b3"},
        "spec": {"active": active, "queueName": "gpu"},
        "status": {"conditions": conditions},
    }


# -- the readers ----------------------------------------------------------------------------


def test_a_workload_pending_for_quota_is_a_limit_in_kueues_words() -> None:
    read = reading(_workload(_pending()))
    assert read.kind == PendingKind.LIMIT
    assert read.said == "insufficient unused quota for nvidia.com/gpu in flavor h100, 2 more needed"
    assert (read.end, read.refused, read.queued) == (None, True, True)


def test_the_conditions_of_a_workload_read_as_their_kind_of_wait() -> None:
    assert reading(_workload([])).kind == PendingKind.SCHEDULING  # Kueue has not looked yet
    inadmissible = reading(_workload(_pending("LocalQueue gpu doesn't exist", "Inadmissible")))
    assert (inadmissible.kind, inadmissible.said) == (
        PendingKind.OTHER,
        "LocalQueue gpu doesn't exist",
    )
    assert not inadmissible.queued  # no place in a queue Kueue cannot use
    preempted = reading(
        _workload(
            [
                {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "by x"},
                {"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": ""},
            ]
        )
    )
    assert (preempted.kind, preempted.said, preempted.end) == (
        PendingKind.PRIORITY,
        "it was preempted (InClusterQueue) and waits again",
        None,
    )
    stopped = reading(
        _workload([{"type": "Evicted", "status": "True", "reason": "ClusterQueueStopped"}])
    )
    assert stopped.kind == PendingKind.HELD
    checks = _workload([{"type": "QuotaReserved", "status": "True"}])
    checks["status"]["admissionChecks"] = [
        {"name": "dws-prov", "state": "Pending", "message": "waiting for capacity"}
    ]
    assert reading(checks).said == (
        "quota reserved; waiting for its admission checks: dws-prov pending (waiting for capacity)"
    )


def test_a_deactivated_or_timed_out_workload_ends_the_task() -> None:
    inactive = reading(_workload([], active=False))
    assert inactive.end == "Kueue deactivated it (its Workload is inactive (spec.active: false))"
    for why in ("InactiveWorkload", "Deactivated", "PodsReadyTimeout"):
        read = reading(
            _workload([{"type": "Evicted", "status": "True", "reason": why, "message": "m"}])
        )
        assert read.end is not None and f"{why}: m" in read.end, why


def test_a_jobs_workload_is_found_by_its_owner_or_its_uid_label() -> None:
    job = {"metadata": {"name": "j", "uid": "u-1"}}
    by_label = {"metadata": {"name": "a", "labels": {"kueue.x-k8s.io/job-uid": "u-1"}}}
    by_owner = {"metadata": {"name": "b", "ownerReferences": [{"kind": "Job", "name": "j"}]}}
    other = {
        "metadata": {"name": "c", "ownerReferences": [{"kind": "Job", "name": "j", "uid": "u-0"}]}
    }
    assert workload_of([other, by_label], job) is by_label
    assert workload_of([other, by_owner], job) is by_owner
    assert workload_of([other], job) is None


def test_the_place_is_counted_from_one() -> None:
    items = [
        {"metadata": {"name": "x"}, "positionInLocalQueue": 0, "positionInClusterQueue": 1},
        {
            "metadata": {"name": "job-j-1a2b3"},
            "positionInLocalQueue": 2,
            "positionInClusterQueue": 4,
        },
    ]
    assert place_of(items, _workload([]), "j") == (3, 5)
    assert place_of(items[:1], _workload([]), "j") is None


class _Kueue:
    """Kueue's answers, each call counted (a stand-in for the API server here: the calls
    themselves are tested against the emulator below)."""

    def __init__(self, workloads: Any, pending: Any) -> None:
        self.server, self.namespace = "https://k", "ml"
        self._workloads = workloads
        self._pending = pending
        self.calls = 0

    def workloads(self, selector: str | None = None) -> list[dict[str, Any]]:
        self.calls += 1
        if isinstance(self._workloads, KubernetesFailure):
            raise self._workloads
        return self._workloads

    def pending_workloads(self, queue: str) -> list[dict[str, Any]]:
        self.calls += 1
        if isinstance(self._pending, KubernetesFailure):
            raise self._pending
        return list(self._pending)


def _owned(workload: dict[str, Any], job: str) -> dict[str, Any]:
    workload["metadata"]["ownerReferences"] = [{"kind": "Job", "name": job}]
    return workload


def test_kueue_is_asked_once_a_while_and_its_words_carry_the_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = {"metadata": {"name": "j-ask"}, "spec": {"suspend": True}}
    place = [{"metadata": {"name": "job-j-1a2b3"}, "positionInLocalQueue": 2,
              "positionInClusterQueue": 4}]  # fmt: skip
    cluster = _Kueue([_owned(_workload(_pending()), "j-ask")], place)
    said = kueue_pending(cluster, job, "gpu")  # type: ignore[arg-type]
    assert said == Pending(
        PendingKind.LIMIT,
        "waiting for Kueue to admit Job j-ask: 3rd in queue 'gpu' (5th in its cluster queue); "
        "Kueue says: insufficient unused quota for nvidia.com/gpu in flavor h100, 2 more needed",
        position=3,
    )
    assert cluster.calls == 2
    for _ in range(5):  # the followers look every half second: Kueue is not asked each time
        assert kueue_pending(cluster, job, "gpu") == said  # type: ignore[arg-type]
    assert cluster.calls == 2
    monkeypatch.setattr(kueue, "ASK_SECONDS", 0.0)
    kueue_pending(cluster, job, "gpu")  # type: ignore[arg-type]
    assert cluster.calls == 4


@pytest.mark.parametrize(
    ("status", "note"),
    [
        (404, "Kueue's visibility API is not served here, so no place in line"),
        (403, "no place in line: nodus may not read Kueue's visibility API (403); "
              "docs/targets.md lists the ClusterRole"),
    ],
)  # fmt: skip
def test_without_the_visibility_api_the_words_say_the_reason_without_the_place(
    status: int, note: str
) -> None:
    job = {"metadata": {"name": f"j-{status}"}, "spec": {"suspend": True}}
    failure = KubernetesFailure("no", status=status)
    cluster = _Kueue([_owned(_workload(_pending()), f"j-{status}")], failure)
    said = kueue_pending(cluster, job, "gpu")  # type: ignore[arg-type]
    assert isinstance(said, Pending) and said.position is None
    assert said.words == (
        f"waiting for Kueue to admit Job j-{status} from queue 'gpu'; Kueue says: insufficient "
        f"unused quota for nvidia.com/gpu in flavor h100, 2 more needed ({note})"
    )


@pytest.mark.parametrize(
    ("status", "note"),
    [
        (404, "the cluster serves no Kueue Workloads: without Kueue the Job stays suspended"),
        (403, "nodus may not read Kueue's Workloads (403); docs/targets.md lists the Role"),
    ],
)
def test_a_cluster_without_kueue_or_its_workloads_says_so(status: int, note: str) -> None:
    job = {"metadata": {"name": f"j-w{status}"}, "spec": {"suspend": True}}
    cluster = _Kueue(KubernetesFailure("no", status=status), [])
    said = kueue_pending(cluster, job, "gpu")  # type: ignore[arg-type]
    words = f"waiting for Kueue to admit Job j-w{status} from queue 'gpu' ({note})"
    assert said == Pending(PendingKind.SCHEDULING, words)
    refused = kueue_pending(cluster, job, "gpu", queue_ok=False)  # type: ignore[arg-type]
    assert cluster.calls == 1  # asked again only a while later
    if status == 404:  # nothing will ever admit it: --no-wait says so at once
        assert isinstance(refused, TaskEnd) and refused.exit_code == 3
        assert refused.message == (
            f"--no-wait: Kueue did not admit Job j-w{status} at once: {words}; its Job is deleted"
        )
    else:  # Kueue may be there: nodus cannot tell
        assert refused == said


def test_no_wait_ends_a_job_kueue_cannot_admit_now() -> None:
    job = {"metadata": {"name": "j-nw"}, "spec": {"suspend": True}}
    cluster = _Kueue([_owned(_workload(_pending()), "j-nw")], [])
    end = kueue_pending(cluster, job, "gpu", queue_ok=False)  # type: ignore[arg-type]
    assert isinstance(end, TaskEnd) and (end.state, end.exit_code) == (TaskState.KILLED, 3)
    assert end.message is not None
    assert end.message.startswith("--no-wait: Kueue did not admit Job j-nw at once: ")
    fresh = {"metadata": {"name": "j-nw2"}, "spec": {"suspend": True}}
    unseen = _Kueue([_owned(_workload([]), "j-nw2")], [])  # Kueue has not looked at it yet
    assert isinstance(kueue_pending(unseen, fresh, "gpu", queue_ok=False), Pending)  # type: ignore[arg-type]


# -- against the emulator -------------------------------------------------------------------


class Nodus(KubeNodus):
    """``nodus`` with ``[kubernetes] queue``."""

    def __init__(self, emulator: KubeEmulator, tmp: Path) -> None:
        super().__init__(emulator, tmp, '[kubernetes]\nqueue = "gpu"\nprice_per_hour = 2.0\n')

    def workload(self, name: str, command: str = "true", gpu: str = "H100", count: int = 2) -> Path:
        return super().workload(name, command, gpu, count)

    def said(self, wanted: str, timeout: float = 30) -> str:
        """The stage's words once they contain ``wanted``."""
        deadline = time.monotonic() + timeout
        said = ""
        while time.monotonic() < deadline:
            runs = self.runs()
            said = str(runs[0]["stages"][0].get("message") or "") if runs else ""
            if wanted in said:
                return said
            time.sleep(0.3)
        raise AssertionError(f"never said {wanted!r}; last: {said!r}")


def _clear_kueue(kube: KubeEmulator) -> None:
    for plural in ("workloads", "localqueues"):
        for doc in kube.call("GET", f"{KUEUE}/{plural}")["items"]:
            kube.call("DELETE", f"{KUEUE}/{plural}/{doc['metadata']['name']}")


@pytest.fixture
def nodus(kube_emulator: KubeEmulator, tmp_path: Path) -> Iterator[Nodus]:
    kube_emulator.clear()
    _clear_kueue(kube_emulator)
    kube_emulator.add_node("gpu-h100", H100_LABELS, 8)
    before = len(kube_emulator.manifests())
    yield Nodus(kube_emulator, tmp_path)
    for manifest in kube_emulator.manifests()[before:]:
        kubernetes_validate.validate(manifest, SCHEMA_VERSION, strict=True)


def _local_queue(kube: KubeEmulator, name: str, visibility: str = "") -> None:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if visibility:
        meta["annotations"] = {"emulator.nodus.test/visibility": visibility}
    kube.call(
        "POST",
        f"{KUEUE}/localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": meta,
            "spec": {"clusterQueue": "team"},
        },
    )


def _kueue_workload(
    kube: KubeEmulator,
    name: str,
    queue: str,
    created: str,
    job: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> None:
    """A Workload as Kueue makes it for a Job (``job``: owned by that Job)."""
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "creationTimestamp": created}
    if job is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job, "controller": True}
        ]
    kube.call(
        "POST",
        f"{KUEUE}/workloads",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": meta,
            "spec": {"queueName": queue, "priority": 0, "active": True, "podSets": []},
            "status": {"conditions": conditions if conditions is not None else _pending()},
        },
    )


def _patch_workload(kube: KubeEmulator, name: str, doc: dict[str, Any]) -> None:
    kube.call("PATCH", f"{KUEUE}/workloads/{name}", doc)


def _job(kube: KubeEmulator, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = kube.jobs()
        if jobs:
            assert jobs[0]["spec"]["suspend"] is True
            return str(jobs[0]["metadata"]["name"])
        time.sleep(0.2)
    raise AssertionError("nodus created no Job")


def _admit(kube: KubeEmulator, job: str) -> None:
    kube.call(
        "PATCH", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job}", {"spec": {"suspend": False}}
    )
    pod = kube.wait_pod()["metadata"]["name"]
    kube.run_pod(pod, "gpu-h100")
    kube.end_pod(pod, 0)


def test_a_queued_job_says_kueues_reason_and_its_place_and_says_it_again_when_it_moves(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    _local_queue(kube_emulator, "gpu")
    _local_queue(kube_emulator, "other")  # the same ClusterQueue: ahead in it, not in 'gpu'
    for n, (queue, created) in enumerate(
        [("gpu", "00:00"), ("other", "00:01"), ("gpu", "00:02"), ("other", "00:03")]
    ):
        _kueue_workload(kube_emulator, f"ahead-{n}", queue, f"2026-12-05T{created}:00Z")
    proc = nodus.popen("run", nodus.workload("kq"), "--target", "kubernetes")
    job = _job(kube_emulator)
    _kueue_workload(kube_emulator, f"job-{job}-1a2b3", "gpu", "2026-12-05T01:00:00Z", job=job)
    said = nodus.said("in queue 'gpu'")
    assert said == (
        f"waiting for Kueue to admit Job {job}: 3rd in queue 'gpu' (5th in its cluster queue); "
        "Kueue says: insufficient unused quota for nvidia.com/gpu in flavor h100, 2 more needed"
    )
    assert nodus.runs()[0]["status"] == "queued"
    # Kueue admits the first one ahead: one place up in both, said again
    _patch_workload(
        kube_emulator,
        "ahead-0",
        {"status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]}},
    )
    nodus.said("2nd in queue 'gpu' (4th in its cluster queue)", timeout=kueue.ASK_SECONDS + 20)
    _admit(kube_emulator, job)
    rc, out = finish(proc)
    assert rc == 0, out
    assert "3rd in queue 'gpu' (5th in its cluster queue)" in out
    assert "2nd in queue 'gpu' (4th in its cluster queue)" in out


@pytest.mark.parametrize(
    ("visibility", "note"),
    [
        ("forbidden", "(no place in line: nodus may not read Kueue's visibility API (403); "
                      "docs/targets.md lists the ClusterRole)"),
        ("unserved", "(Kueue's visibility API is not served here, so no place in line)"),
        ("v1alpha1", ""),  # an older Kueue: its place all the same
    ],
)  # fmt: skip
def test_the_visibility_api_not_allowed_not_served_or_older(
    nodus: Nodus, kube_emulator: KubeEmulator, visibility: str, note: str
) -> None:
    _local_queue(kube_emulator, "gpu", visibility=visibility)
    proc = nodus.popen("run", nodus.workload("kv"), "--target", "kubernetes")
    job = _job(kube_emulator)
    _kueue_workload(kube_emulator, f"job-{job}-1a2b3", "gpu", "2026-12-05T01:00:00Z", job=job)
    reason = "insufficient unused quota for nvidia.com/gpu in flavor h100, 2 more needed"
    said = nodus.said("Kueue says")
    if note:
        assert said == f"waiting for Kueue to admit Job {job} from queue 'gpu'; Kueue says: " + (
            f"{reason} {note}"
        )
    else:
        assert said.startswith(f"waiting for Kueue to admit Job {job}: 1st in queue 'gpu' (1st")
    _admit(kube_emulator, job)
    rc, out = finish(proc)
    assert rc == 0, out


def test_a_workload_kueue_deactivates_ends_the_run_as_the_clusters_failure(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    _local_queue(kube_emulator, "gpu")
    proc = nodus.popen("run", nodus.workload("kd"), "--target", "kubernetes")
    job = _job(kube_emulator)
    name = f"job-{job}-1a2b3"
    _kueue_workload(kube_emulator, name, "gpu", "2026-12-05T01:00:00Z", job=job)
    nodus.said("1st in queue 'gpu'")
    _patch_workload(
        kube_emulator,
        name,
        {
            "spec": {"active": False},
            "status": {
                "conditions": [
                    {
                        "type": "Evicted",
                        "status": "True",
                        "reason": "Deactivated",
                        "message": "The workload is deactivated by an administrator",
                    }
                ]
            },
        },
    )
    rc, out = finish(proc, timeout=kueue.ASK_SECONDS + 40)
    assert rc != 0, out
    assert (
        "Kueue deactivated it (Deactivated: The workload is deactivated by an administrator) "
        f"while Job {job} waited in queue 'gpu': the cluster's decision, not the workload's"
    ) in out
    assert kube_emulator.jobs() == []
    [run] = nodus.runs()
    assert run["status"] == "failed"


def test_no_wait_refuses_with_kueues_reason_and_wait_timeout_says_it(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    _local_queue(kube_emulator, "gpu")
    proc = nodus.popen("run", "--no-wait", nodus.workload("kn"), "--target", "kubernetes")
    job = _job(kube_emulator)
    _kueue_workload(kube_emulator, f"job-{job}-1a2b3", "gpu", "2026-12-05T01:00:00Z", job=job)
    rc, out = finish(proc)
    assert rc == 3, out
    assert f"--no-wait: Kueue did not admit Job {job} at once: waiting for Kueue" in out
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100, 2 more needed" in out
    assert kube_emulator.jobs() == []
    _clear_kueue(kube_emulator)  # Kueue deletes the Workload with its Job
    _local_queue(kube_emulator, "gpu")
    proc = nodus.popen(
        "run", "--wait-timeout", "4s", nodus.workload("kt"), "--target", "kubernetes"
    )
    job = _job(kube_emulator)
    _kueue_workload(kube_emulator, f"job-{job}-1a2b3", "gpu", "2026-12-05T01:00:01Z", job=job)
    rc, out = finish(proc)
    assert rc == 3, out
    assert (
        f"gave up after waiting 4 s (wait_timeout) for: waiting for Kueue to admit Job {job}: "
        "1st in queue 'gpu'"
    ) in out
    assert kube_emulator.jobs() == []


def test_every_item_of_an_indexed_job_kueue_holds_says_its_place(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    _local_queue(kube_emulator, "gpu")
    _kueue_workload(kube_emulator, "ahead", "gpu", "2026-12-05T00:00:00Z")
    path = nodus.tmp / "fan.toml"
    path.write_text(
        f'name = "fan"\nimage = "{IMAGE}"\ncommand = "echo $NODUS_ITEM"\ngpu = "H100"\n'
        'gpu_count = 1\n[map]\nitems = ["a", "b"]\n'
    )
    proc = nodus.popen("run", path, "--target", "kubernetes")
    job = _job(kube_emulator)
    assert kube_emulator.jobs()[0]["spec"]["completionMode"] == "Indexed"
    _kueue_workload(kube_emulator, f"job-{job}-1a2b3", "gpu", "2026-12-05T01:00:00Z", job=job)
    words = f"waiting for Kueue to admit Job {job}: 2nd in queue 'gpu' (2nd in its cluster queue)"
    deadline = time.monotonic() + 30
    tasks: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        run_id = nodus.runs()[0]["id"]
        done = subprocess.run(
            [sys.executable, "-m", "nodus_cli", "runs", run_id, "--json"],
            capture_output=True,
            text=True,
            env=nodus.environ(),
            timeout=60,
            check=False,
        )
        tasks = json.loads(done.stdout)["stages"][0]["tasks"]
        if all(words in str(t.get("message")) for t in tasks):
            break
        time.sleep(0.3)
    else:
        raise AssertionError(tasks)
    assert {t["status"] for t in tasks} == {"queued"}
    kube_emulator.call(
        "PATCH", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job}", {"spec": {"suspend": False}}
    )
    deadline = time.monotonic() + 30
    while len(kube_emulator.pods()) < 2:
        assert time.monotonic() < deadline, kube_emulator.pods()
        time.sleep(0.2)
    for pod in kube_emulator.pods():
        kube_emulator.run_pod(pod["metadata"]["name"], "gpu-h100")
        kube_emulator.end_pod(pod["metadata"]["name"], 0)
    rc, out = finish(proc)
    assert rc == 0, out
