"""Planning: inventory x requirements -> ranked configurations, with the reasons for exclusion.

Every configuration is checked against the requirements in a fixed order and counted
under the first one it fails, so the counts add up to the inventory size and the
requirement that emptied the list is the last one that excluded anything.

Ranking (SPEC section 4): by estimated cost (measured runtime x hourly price) when every
eligible configuration has a measured runtime of this workload, otherwise by hourly
price. Ties fall back to supplier, machine and region so the order is deterministic.
The ranking orders what the inventory lists; it makes no claim about the lowest total
cost or shortest runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodus_cli import cuda, gpus, locations
from nodus_cli.catalog import Offer
from nodus_cli.workload import Requirements, Stage, Workload

#: The order in which requirements are checked (and the keys of ``excluded``).
CHECKS = (
    "gpu",
    "gpu_count",
    "peak_memory_gb",
    "cpu",
    "memory_gb",
    "disk_gb",
    "location",
    "arch",
    "image",
    "max_price_per_hour",
    "budget",
)

#: Measured runtime in seconds of (stage, configuration), or None when never measured.
RuntimeLookup = Callable[[str, Offer], float | None]


def no_history(stage: str, offer: Offer) -> float | None:
    return None


@dataclass(frozen=True, slots=True)
class Candidate:
    offer: Offer
    runtime_seconds: float | None = None

    @property
    def estimated_cost(self) -> float | None:
        if self.runtime_seconds is None:
            return None
        return self.runtime_seconds / 3600.0 * self.offer.price_per_hour

    def as_json(self) -> dict[str, Any]:
        o = self.offer
        return {
            "supplier": o.supplier,
            "machine_id": o.machine_id,
            "region": o.region,
            "gpu": o.gpu,
            "gpu_count": o.gpu_count,
            "gpu_memory_gb": o.gpu_memory_gb,
            "vcpus": o.vcpus,
            "memory_gb": o.memory_gb,
            "disk_gb": o.disk_gb,
            "arch": o.arch,
            "price_per_hour": o.price_per_hour,
            "price_per_gpu_hour": (
                round(o.price_per_hour / o.gpu_count, 6) if o.gpu_count else None
            ),
            "runtime_seconds": self.runtime_seconds,
            "estimated_cost": (
                round(self.estimated_cost, 6) if self.estimated_cost is not None else None
            ),
        }


@dataclass(slots=True)
class StagePlan:
    name: str
    requirements: Requirements
    basis: str
    candidates: list[Candidate]
    excluded: dict[str, int]
    notes: list[str] = field(default_factory=list)
    emptied_by: str | None = None
    nearest: list[Offer] = field(default_factory=list)
    explanation: str | None = None

    @property
    def selected(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    @property
    def feasible(self) -> bool:
        return bool(self.candidates)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "basis": self.basis,
            "requirements": self.requirements.as_json(),
            "selected": self.selected.as_json() if self.selected else None,
            "candidates": [c.as_json() for c in self.candidates],
            "eligible": len(self.candidates),
            "excluded": {k: v for k, v in self.excluded.items() if v},
            "notes": list(self.notes),
            "emptied_by": self.emptied_by,
            "explanation": self.explanation,
            "nearest": [Candidate(o).as_json() for o in self.nearest],
        }


@dataclass(slots=True)
class Plan:
    workload: Workload
    target: str
    stages: list[StagePlan]
    notes: list[str] = field(default_factory=list)

    @property
    def feasible(self) -> bool:
        return all(s.feasible for s in self.stages)

    def as_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload.name,
            "target": self.target,
            "feasible": self.feasible,
            "budget": self.workload.budget,
            "requirements": self.workload.requirements.as_json(),
            "notes": list(self.notes),
            "stages": [s.as_json() for s in self.stages],
        }


class _Checker:
    """Precomputes what a stage needs so checking one offer is a few comparisons."""

    def __init__(self, stage: Stage, budget: float | None) -> None:
        req = stage.requirements
        self.req = req
        self.budget = budget
        self.family = gpus.table().lookup(req.gpu) if req.gpu else None
        self.cuda = cuda.declared_cuda(stage.image) if req.wants_gpu else None
        self._image_verdict: dict[str | None, str | None] = {}
        self._location_verdict: dict[str, bool] = {}

    def image_problem(self, gpu: str | None) -> str | None:
        if self.cuda is None or gpu is None:
            return None
        if gpu not in self._image_verdict:
            family = gpus.table().lookup(gpu)
            self._image_verdict[gpu] = (
                cuda.incompatibility(family, self.cuda) if family is not None else None
            )
        return self._image_verdict[gpu]

    def first_failure(
        self, offer: Offer, runtime: float | None, skip: str | None = None
    ) -> str | None:
        """The first requirement ``offer`` fails, in CHECKS order; ``skip`` relaxes one."""
        req = self.req
        if req.wants_gpu:
            if offer.gpu is None or (
                skip != "gpu" and req.gpu is not None and offer.gpu != req.gpu
            ):
                return "gpu"
            if skip != "gpu_count" and offer.gpu_count < req.gpu_count:
                return "gpu_count"
            if (
                skip != "peak_memory_gb"
                and req.peak_memory_gb is not None
                and offer.gpu_memory_gb < req.peak_memory_gb
            ):
                return "peak_memory_gb"
        if skip != "cpu" and offer.vcpus < req.cpu:
            return "cpu"
        if skip != "memory_gb" and req.memory_gb is not None and offer.memory_gb < req.memory_gb:
            return "memory_gb"
        if (
            skip != "disk_gb"
            and req.disk_gb is not None
            and offer.disk_gb is not None
            and offer.disk_gb < req.disk_gb
        ):
            return "disk_gb"
        if skip != "location" and req.location is not None:
            verdict = self._location_verdict.get(offer.region)
            if verdict is None:
                verdict = locations.matches(req.location, offer.region)
                self._location_verdict[offer.region] = verdict
            if not verdict:
                return "location"
        if skip != "arch" and req.arch is not None and offer.arch != req.arch:
            return "arch"
        if skip != "image" and self.cuda is not None and self.image_problem(offer.gpu):
            return "image"
        if (
            skip != "max_price_per_hour"
            and req.max_price_per_hour is not None
            and offer.price_per_hour > req.max_price_per_hour
        ):
            return "max_price_per_hour"
        if (
            skip != "budget"
            and self.budget is not None
            and runtime is not None
            and runtime / 3600.0 * offer.price_per_hour > self.budget
        ):
            return "budget"
        return None


def plan_workload(
    workload: Workload,
    offers: Sequence[Offer],
    target: str = "catalog",
    history: RuntimeLookup = no_history,
) -> Plan:
    stage_plans = [plan_stage(s, offers, workload.budget, history) for s in workload.stages]
    plan = Plan(workload, target, stage_plans)
    if target == "swarm":
        hosts = {p.selected.offer.machine_id for p in stage_plans if p.selected}
        if len(hosts) > 1 and len(stage_plans) > 1:
            plan.notes.append(
                "stages are placed on different nodes, so they cannot share a local "
                "NODUS_WORK_DIR: each stage gets its own empty directory; pass data "
                "through storage both nodes can reach"
            )
    return plan


def plan_stage(
    stage: Stage,
    offers: Sequence[Offer],
    budget: float | None = None,
    history: RuntimeLookup = no_history,
) -> StagePlan:
    checker = _Checker(stage, budget)
    excluded = dict.fromkeys(CHECKS, 0)
    eligible: list[Candidate] = []
    image_removed: dict[str, int] = {}
    for offer in offers:
        runtime = history(stage.name, offer)
        failure = checker.first_failure(offer, runtime)
        if failure is None:
            eligible.append(Candidate(offer, runtime))
        else:
            excluded[failure] += 1
            if failure == "image" and offer.gpu is not None:
                image_removed[offer.gpu] = image_removed.get(offer.gpu, 0) + 1
    measured = bool(eligible) and all(c.runtime_seconds is not None for c in eligible)
    basis = "runtime_estimate" if measured else "hourly_price"
    eligible.sort(key=_ranking_key if measured else _price_key)
    result = StagePlan(stage.name, stage.requirements, basis, eligible, excluded)
    for gpu, count in sorted(image_removed.items()):
        reason = checker.image_problem(gpu)
        result.notes.append(
            f"image {stage.image} excluded {count} {gpu} configuration(s): {reason}"
        )
    if stage.requirements.disk_gb is not None and any(o.disk_gb is None for o in offers):
        result.notes.append(
            "disk_gb: configurations that list no disk size were kept (disk can be attached)"
        )
    if not eligible:
        _explain_empty(result, stage, offers, checker, history)
    return result


def _price_key(c: Candidate) -> tuple[Any, ...]:
    o = c.offer
    return (o.price_per_hour, o.gpu_count, o.supplier, o.machine_id, o.region)


def _ranking_key(c: Candidate) -> tuple[Any, ...]:
    return (c.estimated_cost, *_price_key(c))


def _explain_empty(
    result: StagePlan,
    stage: Stage,
    offers: Sequence[Offer],
    checker: _Checker,
    history: RuntimeLookup,
) -> None:
    req = stage.requirements
    nonzero = [k for k in CHECKS if result.excluded[k]]
    if not nonzero:
        result.explanation = "the inventory lists no configuration at all"
        return
    emptied = nonzero[-1]
    result.emptied_by = emptied
    # Offers that fail only this requirement are the nearest: what relaxing it would give.
    near = [
        o
        for o in offers
        if checker.first_failure(o, history(stage.name, o), skip=emptied) is None
    ]
    order: dict[str, Callable[[Offer], Any]] = {
        "gpu_count": lambda o: (-o.gpu_count, o.price_per_hour),
        "peak_memory_gb": lambda o: (-o.gpu_memory_gb, o.price_per_hour),
        "cpu": lambda o: (-o.vcpus, o.price_per_hour),
        "memory_gb": lambda o: (-o.memory_gb, o.price_per_hour),
    }
    near.sort(key=order.get(emptied, lambda o: (o.price_per_hour, o.supplier, o.machine_id)))
    result.nearest = near[:3]
    result.explanation = _words(emptied, req, stage, near, checker)


def _words(
    emptied: str, req: Requirements, stage: Stage, near: list[Offer], checker: _Checker
) -> str:
    gpu = req.gpu or "GPU"
    want = f"{req.gpu_count}× {gpu}" if req.wants_gpu else "this stage"
    best = near[0] if near else None
    where = f"{best.supplier} {best.machine_id} in {best.region}" if best else ""
    if emptied == "gpu":
        if req.gpu:
            return f"no configuration has {req.gpu} GPUs in this inventory"
        return "no configuration has a GPU in this inventory"
    if emptied == "gpu_count":
        if best:
            return (
                f"no machine has {req.gpu_count} {gpu} GPUs; the largest count on offer is "
                f"{best.gpu_count} ({where}, ${best.price_per_hour:,.2f}/h); a group of "
                "machines cannot satisfy gpu_count"
            )
        return f"no machine has {req.gpu_count} {gpu} GPUs"
    if emptied == "peak_memory_gb":
        most = f"; the most on offer is {best.gpu_memory_gb:g} GB ({where})" if best else ""
        return f"no {gpu} offers {req.peak_memory_gb:g} GB per GPU{most}"
    if emptied == "location":
        alt = (
            f"; the cheapest {want} elsewhere is {where} at ${best.price_per_hour:,.2f}/h"
            if best
            else ""
        )
        return f'no {want} configuration is in location "{req.location}"{alt}'
    if emptied == "max_price_per_hour":
        alt = f"; the cheapest is {where} at ${best.price_per_hour:,.2f}/h" if best else ""
        return f"every {want} configuration costs more than ${req.max_price_per_hour:,.2f}/h{alt}"
    if emptied == "budget":
        return f"every {want} configuration's estimated cost exceeds the budget"
    if emptied == "image":
        reasons = sorted({checker.image_problem(o.gpu) or "" for o in near} - {""})
        detail = f": {reasons[0]}" if reasons else ""
        return f"image {stage.image} cannot drive the GPUs that meet the other requirements{detail}"
    if emptied == "arch":
        return f"no {want} configuration is {req.arch}" + (f"; nearest: {where}" if best else "")
    label = {"cpu": "CPUs", "memory_gb": "GB of memory", "disk_gb": "GB of disk"}[emptied]
    value = getattr(req, emptied)
    most = f"; the largest is {where}" if best else ""
    return f"no {want} configuration has {value:g} {label}{most}"


def offers_of(items: Iterable[Offer]) -> list[Offer]:
    return list(items)
