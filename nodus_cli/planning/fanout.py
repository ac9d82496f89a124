"""A fan-out stage priced honestly: what one task-hour costs, not what one machine costs.

Contract: :func:`tasks_per_machine` says how many tasks of a ``[map]`` stage one machine
of an offer hosts at once (whole GPUs, shared GPUs sized by ``peak_memory_gb``, or CPUs
and memory); :func:`fanout` gives the stage's economics on a configuration (machines the
requested parallelism needs, the price of a task-hour, what the budget buys across the
items) and :func:`fanout_words` the plan's note about them. A fan-out stage without
measured runtimes is ranked by :func:`per_task_order`: the price of a task-hour first.
"""

from __future__ import annotations

from typing import Any

from nodus_cli.catalog import Offer
from nodus_cli.planning.ranking import PRICE_ORDER
from nodus_cli.text import plural
from nodus_cli.workload import Stage

__all__ = ["fanout", "fanout_words", "per_task_order", "tasks_per_machine"]


def tasks_per_machine(stage: Stage, offer: Offer) -> int:
    """How many tasks of a fan-out stage one machine of ``offer`` hosts at once.

    Whole GPUs: its GPUs divided by ``gpu_count``; shared GPUs: floor(GPU memory /
    ``peak_memory_gb``) per device; no GPU: its vCPUs divided by ``cpu`` (and its memory
    by ``memory_gb`` when set). At least 1.
    """
    req = stage.requirements
    if req.wants_gpu:
        if req.share_gpu and req.peak_memory_gb:
            per_device = int(offer.gpu_memory_gb // req.peak_memory_gb)
            return max(1, per_device * offer.gpu_count)
        return max(1, offer.gpu_count // max(1, req.gpu_count))
    fits = int(offer.vcpus // req.cpu) if req.cpu else 1
    if req.memory_gb and offer.memory_gb:
        fits = min(fits, int(offer.memory_gb // req.memory_gb))
    return max(1, fits)


def per_task_order(stage: Stage, offer: Offer) -> tuple[Any, ...]:
    return (offer.price_per_hour / tasks_per_machine(stage, offer), PRICE_ORDER(offer))


def fanout(stage: Stage, offer: Offer, budget: float | None) -> dict[str, Any]:
    """A fan-out stage priced honestly: tasks per machine, machines the requested
    parallelism needs, the price of a task-hour, and what the budget buys across items."""
    assert stage.map is not None
    items = len(stage.map.items)
    wanted = min(items, stage.map.parallel or items)
    per_machine = tasks_per_machine(stage, offer)
    per_task_hour = offer.price_per_hour / per_machine
    doc: dict[str, Any] = {
        "items": items,
        "parallel": wanted,
        "tasks_per_machine": per_machine,
        "machines_needed": -(-wanted // per_machine),
        "price_per_task_hour": round(per_task_hour, 6),
        "budget_task_hours": (
            round(budget / per_task_hour, 3) if budget is not None and per_task_hour else None
        ),
    }
    return doc


def fanout_words(f: dict[str, Any]) -> str:
    text = (
        f"fan-out: {f['items']} items, {f['parallel']} at once; one machine hosts "
        f"{plural(f['tasks_per_machine'], 'task')}, so that takes "
        f"{plural(f['machines_needed'], 'machine')}; "
        f"${f['price_per_task_hour']:,.4f} per task-hour"
    )
    if f["budget_task_hours"] is not None:
        per_item = f["budget_task_hours"] / f["items"] * 3600
        text += (
            f"; the budget covers every item: {f['budget_task_hours']:,.2f} task-hours, "
            f"{per_item:,.0f} s per item"
        )
    return text
