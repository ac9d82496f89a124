"""What this machine's GPUs look like from outside a run: the local target's nodes (one
entry per GPU model, how many are free, who holds each GPU and who waits for them) and
what an active run's containers are doing now.

Apart from the target because it only reads: the engine's containers and the queue's
picture, never a run's state. ``nodus nodes``, ``nodus runs`` and the dashboard show it.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nodus_cli import config
from nodus_cli.errors import NodusError
from nodus_cli.hardware import smi
from nodus_cli.targets.base import NodeInfo
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.containers import LABEL_ITEM, LABEL_QUEUE, LABEL_RUN, LABEL_STAGE
from nodus_cli.targets.local import machine
from nodus_cli.targets.local.claims import Claims

if TYPE_CHECKING:
    from nodus_cli.targets.local.queue import Picture, Waiter

__all__ = ["describe", "nodes"]


def describe(docker: Callable[[], engine.Engine], claims: Claims, run_id: str) -> str | None:
    """What the run's containers are doing now, one task each (None: nothing to add)."""
    try:
        found = docker().containers({"label": [f"{LABEL_RUN}={run_id}"]})
    except (engine.EngineFailure, NodusError):
        return None
    if not found:
        return None
    queued = [c for c in found if LABEL_QUEUE in (c.get("Labels") or {})]
    picture = claims.picture() if queued else None
    parts = []
    for c in found:
        labels = c.get("Labels") or {}
        task = labels.get(LABEL_STAGE, "?")
        if LABEL_ITEM in labels:
            task += f"[{labels[LABEL_ITEM]}]"
        if LABEL_QUEUE not in labels:
            parts.append(f"{task}: {c.get('State', '?')}")
        else:
            parts.append(f"{task}: {claims.entry_words(str(c.get('Id')), picture)}")
    return "; ".join(sorted(parts))


def nodes(found: list[smi.LocalGpu], claims: Claims) -> list[NodeInfo]:
    """This machine, one entry per GPU model it has (a machine with 2 L4 and a T4 is
    two entries: a request names one model), with how many are free and how many
    tasks wait for them in the queue."""
    picture = claims.picture()
    host = socket.gethostname()
    models: dict[str, list[smi.LocalGpu]] = {}
    for g in found:
        models.setdefault(g.family or g.product, []).append(g)

    def node(key: str, model: str | None, gpus: list[smi.LocalGpu]) -> NodeInfo:
        ids = {g.uuid for g in gpus}
        busy = set() if picture is None else {u for u in ids if picture.use(u).holders}
        waiting = [] if picture is None else [w for w in picture.waiters if w.wants & ids]
        details: dict[str, Any] = {}
        if gpus:
            details = {"queued": len(waiting), **_who(gpus, waiting, picture, claims)}
        return NodeInfo(
            id=key,
            hostname=host,
            state="ready",
            cpus=machine.cpu_count(),
            memory_gb=machine.memory_gb(),
            gpu=model,
            gpu_memory_gb=min((g.nominal_memory_gb for g in gpus), default=None),
            gpus=len(gpus),
            free_gpus=len(ids - busy),
            price_per_hour=config.local().price_per_hour,
            details=details,
        )

    if len(models) <= 1:
        return [node(host, next(iter(models), None), found)]
    return [node(f"{host}/{model}", model, gpus) for model, gpus in models.items()]


def _who(
    gpus: list[smi.LocalGpu], waiting: list[Waiter], picture: Picture | None, claims: Claims
) -> dict[str, Any]:
    """Who holds each GPU (``holders``: the run, or a container nodus did not start) and
    who waits for them (``waiting``, in line order: priority, since when, what for, and
    the queue's words), for ``nodus nodes --json`` and the dashboard."""
    holders = []
    for g in gpus:
        for h in [] if picture is None else picture.use(g.uuid).holders:
            holders.append(
                {
                    "gpu": g.uuid,
                    "run": h.run,
                    "container": h.name,
                    "shared_gb": h.share_gb,
                    "since": datetime.fromtimestamp(h.created, UTC).isoformat(timespec="seconds"),
                }
            )
    line = []
    for w in sorted(waiting, key=lambda w: w.key):
        since = datetime.fromtimestamp(w.queued_at / 1e9, UTC)
        line.append(
            {
                "run": w.run,
                "task": w.task,
                "priority": w.priority,
                "since": since.isoformat(timespec="seconds"),
                "need": w.need,
                "reason": claims.entry_words(w.id, picture),
            }
        )
    return {"holders": holders, "waiting": line}
