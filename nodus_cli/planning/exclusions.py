"""Why configurations were left out of a stage's plan, in the words the plan shows.

Contract: given a :class:`~nodus_cli.planning.plan.StagePlan` and the filters that made
it, each function here adds what the user needs to act on: which GPU models the image or
the architecture removed (:func:`describe_removed`), why no CPU-only machine could take a
stage that needs no GPU (:func:`no_cpu_only_fits`), offers excluded only because their
size is a minimum (:func:`note_unknown_sizes`), and for an empty list the requirement
that emptied it, the nearest configurations and what relaxing it would give
(:func:`explain_empty`). An explicit GPU model is never substituted: other models are
not offered as "nearest".
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable
from typing import Any

from nodus_cli.catalog import Offer
from nodus_cli.hardware import cuda, locations
from nodus_cli.planning.filters import CHECKS, Filters
from nodus_cli.planning.plan import StagePlan
from nodus_cli.planning.ranking import (
    PRICE_ORDER,
    Candidate,
    RuntimeLookup,
    by_estimated_cost,
    measured_runtimes,
    no_history,
    over_budget,
)
from nodus_cli.workload import Requirements, Stage

__all__ = ["describe_removed", "explain_empty", "no_cpu_only_fits", "note_unknown_sizes"]


def no_cpu_only_fits(
    stage: Stage, cpu_only: list[Offer], excluded: dict[str, int], filters: Filters
) -> str:
    """Why no CPU-only configuration can take a stage that needs no GPU, in words."""
    if not cpu_only:
        return "this stage needs no GPU, but the inventory lists no CPU-only configuration"
    nonzero = [k for k in CHECKS if excluded.get(k)]
    emptied = nonzero[-1] if nonzero else "budget"
    req = stage.requirements
    shown: dict[str, str] = {
        "cpu": f"cpu = {req.cpu:g}",
        "memory_gb": f"memory_gb = {req.memory_gb or 0:g}",
        "disk_gb": f"disk_gb = {req.disk_gb or 0:g}",
        "location": f'location = "{req.location}"',
        "arch": f'arch = "{req.arch}"',
        "max_price_per_hour": f"max_price_per_hour = {filters.price_limit or 0:g}",
    }
    what = shown.get(emptied, emptied)
    n = len(cpu_only)
    return (
        f"this stage needs no GPU, but {what} ruled out every CPU-only configuration "
        f"({n} in the inventory), so it is planned on machines with GPUs"
    )


def note_unknown_sizes(
    result: StagePlan, stage: Stage, pool: list[Offer], filters: Filters, remaining: list[Offer]
) -> None:
    """Say when an offer whose size is only a minimum decides the plan: selected, or
    excluded only because its size above that minimum is unknown."""
    req = stage.requirements
    if (req.cpu or req.memory_gb) and (result.excluded["cpu"] or result.excluded["memory_gb"]):
        minimum = [o for o in pool if o.size_is_minimum]
        if minimum:
            passing, _ = filters.run(minimum, skip="cpu", skip_also="memory_gb")
            kept = set(map(id, remaining))
            only = [o for o in passing if id(o) not in kept]
            if only:
                by_supplier = Counter(o.supplier for o in only)
                figures = sorted({(o.vcpus, o.memory_gb) for o in only})
                low = ", ".join(f"{v:g} vCPU / {m:g} GB" for v, m in figures[:3])
                asked = []
                if req.cpu and any(o.vcpus < req.cpu for o in only):
                    asked.append(f"cpu = {req.cpu:g}")
                if req.memory_gb and any(o.memory_gb < req.memory_gb for o in only):
                    asked.append(f"memory_gb = {req.memory_gb:g}")
                who = ", ".join(f"{n} {s}" for s, n in sorted(by_supplier.items()))
                total = sum(by_supplier.values())
                result.notes.append(
                    f"{who} {'configuration was' if total == 1 else 'configurations were'} "
                    "excluded only because their size is "
                    f"unknown: they list {low} as a minimum, below {' and '.join(asked)}, "
                    "and may be larger"
                )
    selected = result.candidates[0].offer if result.candidates else None
    if selected is not None and selected.size_is_minimum:
        result.notes.append(
            f"the selected {selected.supplier} offer lists {selected.vcpus:g} vCPU / "
            f"{selected.memory_gb:g} GB as a minimum, not its size: the machine has at least "
            "that, its real size is unknown until it is rented"
        )


def describe_removed(result: StagePlan, stage: Stage, pool: list[Offer], filters: Filters) -> None:
    """Name the configurations the image and arch requirements removed."""
    before_arch, _ = filters.run(pool, stop="arch")
    req = stage.requirements
    if result.excluded["arch"] and req.arch is not None:
        other = Counter((o.arch, o.gpu or "no GPU") for o in before_arch if o.arch != req.arch)
        rows = [
            {"arch": arch, "gpu": gpu, "configurations": n}
            for (arch, gpu), n in sorted(other.items())
        ]
        result.removed["arch"] = rows
        listed = ", ".join(f"{r['configurations']} {r['gpu']} ({r['arch']})" for r in rows)
        result.notes.append(f"arch = {req.arch} excluded {listed}")
    if result.excluded["image"] and filters.cuda is not None:
        after_arch = [o for o in before_arch if o.arch == req.arch] if req.arch else before_arch
        blocked = Counter(o.gpu for o in after_arch if o.gpu and filters.image_problem(o.gpu))
        rows = [
            {"gpu": gpu, "configurations": n, "reason": filters.image_problem(gpu)}
            for gpu, n in sorted(blocked.items())
        ]
        result.removed["image"] = rows
        for row in rows:
            result.notes.append(
                f"image {stage.image} declares {cuda.shown(filters.cuda)}: excluded "
                f"{row['configurations']} {row['gpu']} "
                f"{'configuration' if row['configurations'] == 1 else 'configurations'}: "
                f"{row['reason']}"
            )


# -- explaining an empty list ------------------------------------------------------------

#: How to order the offers nearest a requirement: what relaxing it would give first.
_NEAREST_ORDER: dict[str, Callable[[Offer], Any]] = {
    "gpu_count": lambda o: (-o.gpu_count, PRICE_ORDER(o)),
    "peak_memory_gb": lambda o: (-o.gpu_memory_gb, PRICE_ORDER(o)),
    "cpu": lambda o: (-o.vcpus, PRICE_ORDER(o)),
    "memory_gb": lambda o: (-o.memory_gb, PRICE_ORDER(o)),
    "disk_gb": lambda o: (-(o.disk_gb or 0.0), PRICE_ORDER(o)),
}
NEAREST_SHOWN = 3


def explain_empty(
    result: StagePlan,
    stage: Stage,
    pool: list[Offer],
    filters: Filters,
    budget: float | None,
    history: RuntimeLookup,
) -> None:
    nonzero = [k for k in CHECKS if result.excluded[k]]
    if not nonzero:
        result.explanation = "the inventory lists no configuration at all"
        return
    emptied = nonzero[-1]
    result.emptied_by = emptied
    if emptied == "gpu":
        # Other models are no "nearest offer": an explicit model is never substituted.
        result.explanation = _words(emptied, stage, result, filters, True, budget, pool)
        return
    # Nearest: the offers that fail only this requirement (what relaxing it would give);
    # failing that, the ones it removed (which also miss an earlier requirement or more).
    relaxed_only = emptied != "budget"
    if emptied == "budget":
        near, _ = filters.run(pool)
    else:
        near, _ = filters.run(pool, skip=emptied)
        if budget is not None and near:
            runtimes = measured_runtimes(stage.name, near, history) or [None] * len(near)
            near = [o for o, r in zip(near, runtimes, strict=True) if not over_budget(o, r, budget)]
        if not near:
            before, _ = filters.run(pool, stop=emptied)
            kept = set(map(id, filters.steps[emptied](before)))
            near = [o for o in before if id(o) not in kept]
            relaxed_only = False
    if emptied == "budget":
        runtimes = measured_runtimes(stage.name, near, history) or [None] * len(near)
        ranked = sorted(zip(near, runtimes, strict=True), key=by_estimated_cost)
        result.nearest = [Candidate(o, r) for o, r in ranked[:NEAREST_SHOWN]]
    else:
        # nsmallest: linear in the offers, and never reorders the caller's list.
        closest = heapq.nsmallest(NEAREST_SHOWN, near, key=_NEAREST_ORDER.get(emptied, PRICE_ORDER))
        result.nearest = [
            Candidate(o, history(stage.name, o) if history is not no_history else None)
            for o in closest
        ]
    result.explanation = _words(emptied, stage, result, filters, relaxed_only, budget, pool)


def _want(req: Requirements) -> str:
    """The configurations a stage asks for, as the words before "configuration"."""
    if not req.wants_gpu:
        return ""
    return f"{req.gpu_count}× {req.gpu or 'GPU'} "


def _where(c: Candidate) -> str:
    o = c.offer
    gpu = f"{o.gpu_count}× {o.gpu} {o.gpu_memory_gb:g} GB, " if o.gpu else ""
    return (
        f"{o.supplier} {o.machine_id} in {o.region or '(no region)'} ({gpu}{o.vcpus:g} vCPU, "
        f"{o.memory_gb:g} GB, ${o.price_per_hour:,.2f}/h)"
    )


def _words(
    emptied: str,
    stage: Stage,
    result: StagePlan,
    filters: Filters,
    relaxed_only: bool,
    budget: float | None,
    pool: list[Offer],
) -> str:
    req = stage.requirements
    want = _want(req)
    best = result.nearest[0] if result.nearest else None
    gpu = req.gpu or "GPU"
    other = "" if relaxed_only else " (it misses other requirements too)"
    if emptied == "gpu":
        if req.gpu:
            return f"gpu: no configuration in this inventory has {req.gpu} GPUs"
        return "gpu: no configuration in this inventory has a GPU"
    if emptied == "gpu_count":
        text = (
            f"gpu_count: no single machine has {req.gpu_count}× {gpu}; gpu_count counts GPUs "
            "on ONE machine and a group of machines cannot satisfy it"
        )
        if best:
            qualifier = "that meets the other requirements " if relaxed_only else "on offer "
            text += (
                f"; the largest {gpu} count {qualifier}is {best.offer.gpu_count}: {_where(best)}"
            )
        return text
    if emptied == "peak_memory_gb":
        text = f"peak_memory_gb: no {want}configuration has {req.peak_memory_gb:g} GB per GPU"
        if best:
            text += f"; the most on offer is {best.offer.gpu_memory_gb:g} GB: {_where(best)}{other}"
        return text
    if emptied in ("cpu", "memory_gb", "disk_gb"):
        label = {"cpu": "vCPUs", "memory_gb": "GB of memory", "disk_gb": "GB of disk"}[emptied]
        value = getattr(req, emptied)
        text = f"{emptied}: no {want}configuration has {value:g} {label}"
        if best:
            text += f"; the largest is {_where(best)}{other}"
        return text
    if emptied == "location":
        text = f'location: no {want}configuration is in location "{req.location}"'
        if not locations.is_known(req.location or "", {o.region for o in pool}):
            text += (
                " (it matches no region in this inventory; write a region id, a prefix such "
                'as "us-east", or an area: ' + ", ".join(locations.areas()) + ")"
            )
        if best:
            text += f"; the cheapest {want or 'configuration '}outside it is {_where(best)}{other}"
        return text
    if emptied == "arch":
        text = f"arch: no {want}configuration is {req.arch}"
        if best:
            text += f"; the cheapest {best.offer.arch} one is {_where(best)}{other}"
        return text
    if emptied == "image":
        shown = cuda.shown(filters.cuda) if filters.cuda else "its CUDA version"
        reasons = sorted({filters.image_problem(c.offer.gpu) or "" for c in result.nearest} - {""})
        detail = f": {'; '.join(reasons)}" if reasons else ""
        text = (
            f"image: {stage.image} declares {shown}, which cannot drive the {want}"
            f"configurations that meet the other requirements{detail}"
        )
        if best:
            text += f"; with another image the cheapest would be {_where(best)}"
        return text
    if emptied == "max_price_per_hour":
        text = (
            f"max_price_per_hour: every {want}configuration that meets the other "
            f"requirements costs more than ${filters.price_limit or 0:,.2f}/h"
        )
        if filters.ceiling_decides and filters.ceiling is not None:
            text += f" (the ceiling {filters.ceiling.source}, which no workload can raise)"
        if best:
            text += f"; the cheapest is {_where(best)}{other}"
        return text
    # budget
    text = (
        f"budget: the estimated cost of every measured {want}configuration exceeds the "
        f"budget of ${budget or 0:,.2f}"
    )
    if best and best.estimated_cost is not None:
        text += (
            f"; the lowest estimate is ${best.estimated_cost:,.2f} "
            f"({best.runtime_seconds or 0:,.0f} s measured) on {_where(best)}"
        )
    return text
