"""What the dashboard shows, read through the Python API and shaped as JSON documents.

Contract: each function takes what a request asked for and returns the document that
``/api/...`` serves and the page renders, so the two never disagree. The runs are
:meth:`RunResult.as_json`'s shapes, the very ones ``nodus runs --json`` prints; nodes are
``nodus nodes --json``'s; the spend is ``nodus spend --json``'s. Nothing here writes,
except :func:`stop`, the dashboard's one action.

Why every target in its own thread with a deadline: one target that does not answer (a
Swarm manager gone, a Slurm controller down) must leave its section saying so, and the
rest of the page on time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as Late
from pathlib import Path
from typing import Any

from nodus_cli.api import CATALOG, MAX_GPU_SAMPLES, Client, target_names
from nodus_cli.errors import NodusError

__all__ = [
    "JSON_VERSION",
    "PAGE",
    "STATUSES",
    "LogTail",
    "gpus",
    "plan",
    "run",
    "runs",
    "spend",
    "stop",
]

#: The ``/api/`` documents' shape (docs/json.md): bumped only when a field is renamed.
JSON_VERSION = 1
#: Runs on one page of the runs list.
PAGE = 50
#: The statuses the runs page filters by (a run status each).
STATUSES = ("pending", "queued", "running", "succeeded", "failed", "cancelled", "budget_exhausted")
#: How long a target may take to say what it holds before its section says it did not.
TARGET_DEADLINE = 8.0

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="nodus-dashboard-target")


def _client(home: Path | None, target: str = "local") -> Client:
    return Client(target=target, home=home)


def runs(
    home: Path | None,
    page: int = 1,
    status: str | None = None,
    target: str | None = None,
    workload: str | None = None,
) -> dict[str, Any]:
    """One page of the recorded runs, newest first, filtered (``nodus runs --json``'s run
    records); ``more``: whether a next page has any."""
    with _client(home) as client:
        found = client.runs(
            PAGE + 1,
            offset=(max(page, 1) - 1) * PAGE,
            status=status,
            target=target,
            workload=workload,
        )
    return {
        "version": JSON_VERSION,
        "page": max(page, 1),
        "per_page": PAGE,
        "more": len(found) > PAGE,
        "filters": {"status": status, "target": target, "workload": workload},
        "runs": [r.as_json() for r in found[:PAGE]],
    }


def run(home: Path | None, run_id: str) -> dict[str, Any]:
    """One run's record with its tasks (``nodus runs RUN_ID --json``); UsageError for an
    unknown id."""
    with _client(home) as client:
        client.reconcile()
        return {"version": JSON_VERSION, **client.get(run_id).result(tasks=True).as_json(True)}


def gpu(home: Path | None, run_id: str) -> dict[str, Any]:
    """One run's GPU-use samples, per GPU in time order; UsageError for an unknown id."""
    with _client(home) as client:
        run = client.get(run_id)
        samples = run.gpu_samples()
    per_gpu: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        per_gpu.setdefault(s.uuid, []).append(
            {"time": s.time, "utilization": s.utilization, "memory_used_mib": s.memory_used_mib}
        )
    return {
        "version": JSON_VERSION,
        "id": run.id,
        "max_points_per_gpu": MAX_GPU_SAMPLES,
        "gpus": [{"uuid": u, "samples": points} for u, points in per_gpu.items()],
    }


class LogTail:
    """A run's log read piece by piece, for a page that follows it: one client and one
    handle for the whole stream (each read costs a look at the log file and the run's
    status, not a new connection). UsageError for an unknown id."""

    def __init__(self, home: Path | None, run_id: str) -> None:
        self._client = _client(home)
        try:
            self._run = self._client.get(run_id)
        except BaseException:
            self._client.close()
            raise
        self.offset = 0

    def read(self) -> tuple[list[dict[str, Any]], bool]:
        """The lines written since the last read, and whether the run has ended (then
        they are the last)."""
        lines, self.offset = self._run.read_log(self.offset)
        ended = not self._run.status.active
        if ended:  # lines written between the read and the status
            more, self.offset = self._run.read_log(self.offset)
            lines += more
        return [line.as_json() for line in lines], ended

    @property
    def status(self) -> str:
        return str(self._run.status)

    def close(self) -> None:
        self._client.close()


def gpus(home: Path | None) -> dict[str, Any]:
    """Each target's machines and GPUs (who holds them, who waits): ``nodus nodes
    --json``'s entries per target, or the target's error in words."""
    names = [n for n in target_names() if n != CATALOG]

    def nodes(name: str) -> list[dict[str, Any]]:
        with _client(home, name) as client:
            return [n.as_json() for n in client.list_nodes()]

    futures = {name: _pool.submit(nodes, name) for name in names}
    targets = []
    for name, future in futures.items():
        entry: dict[str, Any] = {"target": name, "nodes": [], "error": None, "hint": None}
        try:
            entry["nodes"] = future.result(timeout=TARGET_DEADLINE)
        except Late:
            entry["error"] = f"the {name} target did not answer within {TARGET_DEADLINE:g} s"
        except NodusError as exc:
            entry["error"], entry["hint"] = exc.message, exc.hint
        except Exception as exc:  # a target's own failure: its section says so
            entry["error"] = f"the {name} target failed: {exc}"
        targets.append(entry)
    queue = [
        {"target": t["target"], "node": n.get("hostname"), "gpu": n.get("gpu"), **w}
        for t in targets
        for n in t["nodes"]
        for w in n.get("waiting") or []
    ]
    return {"version": JSON_VERSION, "targets": targets, "queue": queue}


def spend(home: Path | None, days: int = 30) -> dict[str, Any]:
    """``nodus spend --json``'s report, with the cost of each of the last ``days`` days."""
    with _client(home) as client:
        report = client.spend().as_json()
        by_day = client.spend_by_day(days)
    return {**report, "days": [{"day": d, "cost": round(c, 6)} for d, c in by_day]}


def plan(home: Path | None, text: str, name: str, target: str) -> dict[str, Any]:
    """A workload file's text planned on ``target`` (``nodus plan --json``'s plan);
    InvalidWorkload lists every problem. Nothing is written."""
    with _client(home, target) as client:
        made = client.plan_text(text, name)
    inventory = made.inventory
    return {
        "version": JSON_VERSION,
        **made.as_json(),
        "inventory": inventory.describe() if inventory is not None else None,
        "catalog": inventory.catalog_json() if inventory is not None else None,
    }


def stop(home: Path | None, run_id: str) -> dict[str, Any]:
    """Stop a run (the dashboard's one action): what happened, as ``nodus stop --json``
    says it for one run."""
    with _client(home) as client:
        return {"version": JSON_VERSION, **client.stop_run(run_id).as_json()}
