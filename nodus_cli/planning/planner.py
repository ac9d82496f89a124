"""Planning: inventory x requirements -> ranked configurations, with the reasons for exclusion.

The requirements are applied as filters in a fixed order (``CHECKS``); a configuration
is counted under the first one it fails, so the counts add up to the inventory size and
the requirement that emptied the list is the last one that excluded anything. Each
filter is one pass over what the previous ones kept, so a plan is linear in the size of
the inventory and the first, most selective filters (GPU model and count) keep the
later passes short.

Ranking (SPEC section 4): by estimated cost (measured runtime x hourly price) when every
eligible configuration has a measured runtime of this workload, otherwise by hourly
price. Ties fall back to GPU count, supplier, machine, region, vCPUs and memory, so the
order never depends on the order of the inventory. The ranking orders what the
inventory lists; it makes no claim about the lowest total cost or shortest runtime.

A stage that requests no GPU is placed on a CPU-only configuration when one meets its
requirements: the machines with GPUs are then excluded (counted under ``gpu``), since
paying for a device the stage never touches is waste. Only when no CPU-only configuration
fits is it planned against every machine, and the plan says which requirement ruled out
the CPU-only ones.

Offers whose vCPU and memory figures are a minimum (``Offer.size_is_minimum``) meet a
requirement at or below the figure; above it their size is unknown and they are
excluded like any smaller machine. The plan says so when such an offer is selected and
when some were excluded only because their size is unknown.

The configured ``[limits] max_price_per_hour`` (:class:`PriceCeiling`) is a ceiling no
workload can raise: the price limit applied is the lower of it and the workload's, and
the plan names the configuration file when the ceiling is what excluded offers.

What a plan says also depends on the place it is made for, and the planner never asks
which place that is by name: each place declares its :class:`Capabilities` (a target
as a class attribute, the catalog as :data:`MARKET`), and the plan's notes follow them.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, overload

from nodus_cli import collector
from nodus_cli.catalog import Offer
from nodus_cli.hardware import cuda, gpus, locations
from nodus_cli.planning.capabilities import MARKET, Capabilities
from nodus_cli.structs import field, struct
from nodus_cli.text import plural
from nodus_cli.workload import Requirements, Stage, Workload

if TYPE_CHECKING:
    from nodus_cli.planning.inventory import Inventory

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

#: A plan's note where stages land on different machines of a place whose machines do
#: not share a work folder (``Capabilities.shared_work_dir`` False).
SEPARATE_WORK_DIRS = (
    "stages are placed on different nodes, so they cannot share a local "
    "NODUS_WORK_DIR: each stage gets its own empty directory; pass data "
    "through storage both nodes can reach"
)

BASIS_PRICE = "hourly_price"
BASIS_RUNTIME = "runtime_estimate"


@struct(frozen=True)
class PriceCeiling:
    """A ``max_price_per_hour`` set outside the workload, which no workload can raise."""

    limit: float
    #: Where it was set, for the plan's words ("[limits] max_price_per_hour in FILE").
    source: str

    def as_json(self) -> dict[str, Any]:
        return {"max_price_per_hour": self.limit, "source": self.source}


class _FromConfig:
    """The default of ``plan_workload(ceiling=...)``: read ``[limits]`` from config.toml."""

    def __repr__(self) -> str:
        return "FROM_CONFIG"


FROM_CONFIG = _FromConfig()


def configured_ceiling() -> PriceCeiling | None:
    """``[limits] max_price_per_hour`` of the user's config.toml, if set."""
    from nodus_cli import config

    limits = config.limits()
    if limits.max_price_per_hour is None:
        return None
    return PriceCeiling(
        limits.max_price_per_hour,
        f"[limits] max_price_per_hour in {limits.path or config.config_path()}",
    )


#: Measured runtime in seconds of (stage name, configuration), or None when never measured.
#: ``records.RunStore.runtime_lookup`` builds one from the run records of a workload.
RuntimeLookup = Callable[[str, Offer], float | None]


def no_history(stage: str, offer: Offer) -> float | None:
    return None


#: Ties of hourly price are broken by the offer's own fields, never by inventory order
#: (machine ID first: it usually differs, which keeps comparisons cheap).
_TIE_FIELDS = (
    "machine_id",
    "supplier",
    "region",
    "gpu_count",
    "vcpus",
    "memory_gb",
    "gpu_memory_gb",
    "arch",
)
_PRICE_ORDER = attrgetter("price_per_hour", *_TIE_FIELDS)


@struct
class Candidate:
    """An offer that can run a stage, with its estimated runtime."""

    offer: Offer
    runtime_seconds: float | None = None

    @property
    def estimated_cost(self) -> float | None:
        if self.runtime_seconds is None:
            return None
        return self.runtime_seconds / 3600.0 * self.offer.price_per_hour

    def as_json(self) -> dict[str, Any]:
        cost = self.estimated_cost
        return {
            **self.offer.as_json(),
            "runtime_seconds": self.runtime_seconds,
            "estimated_cost": round(cost, 6) if cost is not None else None,
        }


class Ranking(Sequence[Candidate]):
    """A stage's eligible configurations, best first, as candidates made on demand: a
    plan of a million configurations does not build a million objects to show five."""

    __slots__ = ("offers", "runtimes")

    def __init__(self, offers: list[Offer], runtimes: list[float | None] | None = None) -> None:
        self.offers = offers
        self.runtimes = runtimes

    def __len__(self) -> int:
        return len(self.offers)

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> list[Candidate]: ...

    def __getitem__(self, index: int | slice) -> Candidate | list[Candidate]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self.offers)))]
        offer = self.offers[index]
        return Candidate(offer, self.runtimes[index] if self.runtimes is not None else None)

    def __iter__(self) -> Iterator[Candidate]:
        if self.runtimes is None:
            return (Candidate(o) for o in self.offers)
        return (Candidate(o, r) for o, r in zip(self.offers, self.runtimes, strict=True))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ranking | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Ranking({len(self.offers)} configurations)"


@struct
class StagePlan:
    """One stage's ranked candidates, and why the others were left out."""

    name: str
    requirements: Requirements
    basis: str
    candidates: Sequence[Candidate]
    excluded: dict[str, int]
    notes: list[str] = field(default_factory=list)
    #: What the image and arch checks removed, by GPU model: for the plan to say so.
    removed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    emptied_by: str | None = None
    nearest: list[Candidate] = field(default_factory=list)
    explanation: str | None = None
    image: str | None = None
    #: A fan-out stage's economics on the selected configuration (see :func:`fanout`).
    fanout: dict[str, Any] | None = None

    @property
    def selected(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    @property
    def feasible(self) -> bool:
        return bool(self.candidates)

    @property
    def eligible(self) -> int:
        return len(self.candidates)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.image,
            "basis": self.basis,
            "requirements": self.requirements.as_json(),
            "selected": self.selected.as_json() if self.selected else None,
            "candidates": [c.as_json() for c in self.candidates],
            "eligible": len(self.candidates),
            "excluded": {k: v for k, v in self.excluded.items() if v},
            "removed": self.removed,
            "notes": list(self.notes),
            "emptied_by": self.emptied_by,
            "explanation": self.explanation,
            "nearest": [c.as_json() for c in self.nearest],
            "fanout": self.fanout,
        }


@struct
class Plan:
    """A workload's plan on a target: each stage's candidates, notes and price ceiling."""

    workload: Workload
    target: str
    stages: list[StagePlan]
    notes: list[str] = field(default_factory=list)
    ceiling: PriceCeiling | None = None
    #: Things the user should act on (stale prices): printed as warnings.
    warnings: list[str] = field(default_factory=list)
    #: What it was planned against (set by whoever gathered the offers).
    inventory: Inventory | None = None

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
            "ranking": (
                "by estimated cost (measured runtime x hourly price) when every eligible "
                "configuration of a stage has a measured runtime, else by hourly price; "
                "not a promise of the lowest total cost or the shortest runtime"
            ),
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "limits": self.ceiling.as_json() if self.ceiling else None,
            "stages": [s.as_json() for s in self.stages],
        }


Filter = Callable[[list[Offer]], list[Offer]]


class _Filters:
    """One stage's requirements compiled into list filters, in ``CHECKS`` order.

    Each filter takes what the previous ones kept and returns what it keeps; only
    requirements the stage sets get a filter. Budget is applied apart because it needs
    the measured runtimes.
    """

    def __init__(self, stage: Stage, ceiling: PriceCeiling | None = None) -> None:
        req = stage.requirements
        self.req = req
        self.ceiling = ceiling
        #: The price limit applied: the lower of the workload's and the ceiling.
        self.price_limit = req.max_price_per_hour
        #: True when the ceiling, not the workload, set ``price_limit``.
        self.ceiling_decides = False
        if ceiling is not None and (self.price_limit is None or ceiling.limit < self.price_limit):
            self.price_limit = ceiling.limit
            self.ceiling_decides = True
        self.image = stage.image
        self.cuda = cuda.declared_cuda(stage.image) if req.wants_gpu else None
        self._image_verdict: dict[str, str | None] = {}
        self.steps: dict[str, Filter] = {}
        if req.wants_gpu:
            wanted = req.gpu
            if wanted is not None:
                self.steps["gpu"] = lambda xs: [o for o in xs if o.gpu == wanted]
            else:
                self.steps["gpu"] = lambda xs: [o for o in xs if o.gpu is not None]
            count = req.gpu_count
            self.steps["gpu_count"] = lambda xs: [o for o in xs if o.gpu_count >= count]
            memory = req.peak_memory_gb
            if memory is not None:
                self.steps["peak_memory_gb"] = lambda xs: [
                    o for o in xs if o.gpu_memory_gb >= memory
                ]
        cpu = req.cpu
        if cpu:
            self.steps["cpu"] = lambda xs: [o for o in xs if o.vcpus >= cpu]
        host = req.memory_gb
        if host:
            self.steps["memory_gb"] = lambda xs: [o for o in xs if o.memory_gb >= host]
        disk = req.disk_gb
        if disk:
            # An offer that lists no disk size is kept: disk can be attached.
            self.steps["disk_gb"] = lambda xs: [
                o for o in xs if o.disk_gb is None or o.disk_gb >= disk
            ]
        if req.location is not None:
            self.steps["location"] = self._location
        arch = req.arch
        if arch is not None:
            self.steps["arch"] = lambda xs: [o for o in xs if o.arch == arch]
        if self.cuda is not None:
            self.steps["image"] = self._image
        limit = self.price_limit
        if limit is not None:
            self.steps["max_price_per_hour"] = lambda xs: [
                o for o in xs if o.price_per_hour <= limit
            ]

    def prefer_cpu_only(self) -> None:
        """Exclude the machines with GPUs (a stage that requests none, when a CPU-only
        configuration fits)."""
        self.steps["gpu"] = lambda xs: [o for o in xs if o.gpu is None]

    def _location(self, offers: list[Offer]) -> list[Offer]:
        where = self.req.location or ""
        inside = {r for r in {o.region for o in offers} if locations.matches(where, r)}
        return [o for o in offers if o.region in inside]

    def image_problem(self, gpu: str | None) -> str | None:
        """Why this stage's image cannot drive ``gpu`` (None when it can, or can't tell)."""
        if self.cuda is None or gpu is None:
            return None
        if gpu not in self._image_verdict:
            family = gpus.table().lookup(gpu)
            self._image_verdict[gpu] = (
                cuda.incompatibility(family, self.cuda) if family is not None else None
            )
        return self._image_verdict[gpu]

    def _image(self, offers: list[Offer]) -> list[Offer]:
        blocked = {g for g in {o.gpu for o in offers} if self.image_problem(g)}
        if not blocked:
            return offers
        return [o for o in offers if o.gpu not in blocked]

    def run(
        self,
        offers: list[Offer],
        skip: str | None = None,
        stop: str | None = None,
        skip_also: str | None = None,
    ) -> tuple[list[Offer], dict[str, int]]:
        """Apply the filters in order (all but ``skip`` and ``skip_also``; up to, not
        including, ``stop``)."""
        excluded = dict.fromkeys(CHECKS, 0)
        remaining = offers
        for name in CHECKS:
            if name == stop:
                break
            step = self.steps.get(name)
            if step is None or name in (skip, skip_also):
                continue
            kept = step(remaining)
            excluded[name] = len(remaining) - len(kept)
            remaining = kept
            if not remaining:
                break
        return remaining, excluded


def plan_workload(
    workload: Workload,
    offers: Sequence[Offer],
    target: str = "catalog",
    history: RuntimeLookup = no_history,
    ceiling: PriceCeiling | _FromConfig | None = FROM_CONFIG,
    capabilities: Capabilities = MARKET,
) -> Plan:
    """Plan every stage of ``workload`` against ``offers`` (an inventory's configurations).

    ``ceiling``: a price limit no workload can raise; by default the configured
    ``[limits] max_price_per_hour`` (None: no ceiling). ``capabilities``: what the place
    planned for can do (default: the catalog's, a market of quotes).
    """
    caps = capabilities
    chosen = configured_ceiling() if isinstance(ceiling, _FromConfig) else ceiling
    pool = offers if isinstance(offers, list) else list(offers)
    with collector.paused():
        stage_plans = [
            plan_stage(s, pool, workload.budget, history, chosen) for s in workload.stages
        ]
    plan = Plan(workload, target, stage_plans, ceiling=chosen)
    for sp in stage_plans:
        if sp.emptied_by == "gpu" and not caps.runs and sp.explanation:
            sp.explanation += "; `nodus gpus` lists the models on offer and their prices"
    if workload.budget is not None and len(stage_plans) > 1:
        costs = [p.selected.estimated_cost for p in stage_plans if p.selected]
        if costs and all(c is not None for c in costs):
            total = sum(c for c in costs if c is not None)
            if total > workload.budget:
                plan.notes.append(
                    f"the selected stages' estimated costs add up to ${total:,.2f}, more than "
                    f"the budget of ${workload.budget:,.2f} for the whole run"
                )
    if not caps.shared_work_dir:
        hosts = {p.selected.offer.machine_id for p in stage_plans if p.selected}
        if len(hosts) > 1 and len(stage_plans) > 1:
            plan.notes.append(SEPARATE_WORK_DIRS)
    return plan


def plan_stage(
    stage: Stage,
    offers: Sequence[Offer],
    budget: float | None = None,
    history: RuntimeLookup = no_history,
    ceiling: PriceCeiling | None = None,
) -> StagePlan:
    """The eligible configurations of one stage, ranked, and why the others were excluded."""
    pool = offers if isinstance(offers, list) else list(offers)
    filters = _Filters(stage, ceiling)
    cpu_note: str | None = None
    if stage.requirements.wants_gpu:
        remaining, excluded = filters.run(pool)
    else:
        # A stage that needs no GPU goes on a CPU-only machine when one fits.
        cpu_only = [o for o in pool if o.gpu is None]
        fits, cpu_excluded = filters.run(cpu_only) if cpu_only else ([], {})
        if fits:
            filters.prefer_cpu_only()
            remaining, excluded = fits, cpu_excluded
            excluded["gpu"] = len(pool) - len(cpu_only)
        else:
            remaining, excluded = filters.run(pool)
            cpu_note = _no_cpu_only_fits(stage, cpu_only, cpu_excluded, filters)
    runtimes = _runtimes(stage.name, remaining, history)
    if budget is not None and runtimes is not None:
        kept = [(o, r) for o, r in zip(remaining, runtimes, strict=True) if not _over(o, r, budget)]
        excluded["budget"] = len(remaining) - len(kept)
        remaining = [o for o, _ in kept]
        runtimes = [r for _, r in kept]
    measured = bool(remaining) and runtimes is not None and None not in runtimes
    if stage.map is not None and not measured:
        # Fan-out: what a task-hour costs decides, not what one machine costs.
        candidates = Ranking(sorted(remaining, key=lambda o: _per_task_order(stage, o)))
    elif runtimes is None:
        candidates = Ranking(sorted(remaining, key=_PRICE_ORDER))
    else:
        key = _by_estimated_cost if measured else _by_price
        pairs = sorted(zip(remaining, runtimes, strict=True), key=key)
        candidates = Ranking([o for o, _ in pairs], [r for _, r in pairs])
    result = StagePlan(
        name=stage.name,
        requirements=stage.requirements,
        basis=BASIS_RUNTIME if measured else BASIS_PRICE,
        candidates=candidates,
        excluded=excluded,
        image=stage.image,
    )
    if excluded["image"] or excluded["arch"]:
        _describe_removed(result, stage, pool, filters)
    if stage.requirements.disk_gb and any(o.disk_gb is None for o in remaining):
        result.notes.append(
            "disk_gb: configurations that list no disk size were kept (disk can be attached)"
        )
    if excluded["gpu"] and not stage.requirements.wants_gpu:
        n = excluded["gpu"]
        result.notes.append(
            f"this stage needs no GPU: {n} configuration{'' if n == 1 else 's'} with GPUs "
            f"{'was' if n == 1 else 'were'} left out because CPU-only configurations fit"
        )
    if filters.ceiling_decides and excluded["max_price_per_hour"] and filters.ceiling:
        n = excluded["max_price_per_hour"]
        result.notes.append(
            f"max_price_per_hour: {n} configuration{'' if n == 1 else 's'} above "
            f"${filters.ceiling.limit:,.2f}/h excluded by the ceiling {filters.ceiling.source}, "
            "which no workload can raise"
        )
    _note_unknown_sizes(result, stage, pool, filters, remaining)
    if stage.map is not None and candidates:
        result.fanout = fanout(stage, candidates[0].offer, budget)
        result.notes.append(_fanout_words(result.fanout))
    if not candidates:
        _explain_empty(result, stage, pool, filters, budget, history)
    elif not stage.requirements.wants_gpu and candidates[0].offer.gpu is not None:
        result.notes.append(
            (cpu_note or "this stage needs no GPU and no CPU-only configuration fits")
            + "; the selected machine carries GPUs it will not use"
        )
    return result


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


def _per_task_order(stage: Stage, offer: Offer) -> tuple[Any, ...]:
    return (offer.price_per_hour / tasks_per_machine(stage, offer), _PRICE_ORDER(offer))


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


def _fanout_words(f: dict[str, Any]) -> str:
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


def _no_cpu_only_fits(
    stage: Stage, cpu_only: list[Offer], excluded: dict[str, int], filters: _Filters
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


def _note_unknown_sizes(
    result: StagePlan, stage: Stage, pool: list[Offer], filters: _Filters, remaining: list[Offer]
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


def _by_estimated_cost(pair: tuple[Offer, float | None]) -> tuple[Any, ...]:
    offer, runtime = pair
    return (offer.price_per_hour * (runtime or 0.0), _PRICE_ORDER(offer))


def _by_price(pair: tuple[Offer, float | None]) -> tuple[Any, ...]:
    return _PRICE_ORDER(pair[0])


def _runtimes(stage: str, offers: list[Offer], history: RuntimeLookup) -> list[float | None] | None:
    """Measured runtimes of ``offers`` (None when nothing could have been measured)."""
    if history is no_history or not offers:
        return None
    found = [history(stage, o) for o in offers]
    return found if any(r is not None for r in found) else None


def _over(offer: Offer, runtime: float | None, budget: float) -> bool:
    return runtime is not None and runtime / 3600.0 * offer.price_per_hour > budget


def _describe_removed(
    result: StagePlan, stage: Stage, pool: list[Offer], filters: _Filters
) -> None:
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
    "gpu_count": lambda o: (-o.gpu_count, _PRICE_ORDER(o)),
    "peak_memory_gb": lambda o: (-o.gpu_memory_gb, _PRICE_ORDER(o)),
    "cpu": lambda o: (-o.vcpus, _PRICE_ORDER(o)),
    "memory_gb": lambda o: (-o.memory_gb, _PRICE_ORDER(o)),
    "disk_gb": lambda o: (-(o.disk_gb or 0.0), _PRICE_ORDER(o)),
}
NEAREST_SHOWN = 3


def _explain_empty(
    result: StagePlan,
    stage: Stage,
    pool: list[Offer],
    filters: _Filters,
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
            runtimes = _runtimes(stage.name, near, history) or [None] * len(near)
            near = [o for o, r in zip(near, runtimes, strict=True) if not _over(o, r, budget)]
        if not near:
            before, _ = filters.run(pool, stop=emptied)
            kept = set(map(id, filters.steps[emptied](before)))
            near = [o for o in before if id(o) not in kept]
            relaxed_only = False
    if emptied == "budget":
        runtimes = _runtimes(stage.name, near, history) or [None] * len(near)
        ranked = sorted(zip(near, runtimes, strict=True), key=_by_estimated_cost)
        result.nearest = [Candidate(o, r) for o, r in ranked[:NEAREST_SHOWN]]
    else:
        # nsmallest: linear in the offers, and never reorders the caller's list.
        closest = heapq.nsmallest(
            NEAREST_SHOWN, near, key=_NEAREST_ORDER.get(emptied, _PRICE_ORDER)
        )
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
    filters: _Filters,
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
