"""Planning: inventory x requirements -> ranked configurations, with the reasons for exclusion.

Contract: :func:`plan_workload` plans every stage of a workload against a list of offers
and returns a :class:`~nodus_cli.planning.plan.Plan`; :func:`plan_stage` plans one. The
pieces are modules of their own: the requirements as filters in a fixed order
(:mod:`.filters`), the order of what passes them (:mod:`.ranking`), a fan-out stage's
price per task (:mod:`.fanout`), and the words for what was left out
(:mod:`.exclusions`).

A stage that requests no GPU is placed on a CPU-only configuration when one meets its
requirements: the machines with GPUs are then excluded (counted under ``gpu``), since
paying for a device the stage never touches is waste. Only when no CPU-only configuration
fits is it planned against every machine, and the plan says which requirement ruled out
the CPU-only ones.

The configured ``[limits] max_price_per_hour`` (:class:`~.plan.PriceCeiling`) is a
ceiling no workload can raise: the price limit applied is the lower of it and the
workload's, and the plan names the configuration file when the ceiling is what excluded
offers.

What a plan says also depends on the place it is made for, and the planner never asks
which place that is by name: each place declares its :class:`Capabilities` (a target
as a class attribute, the catalog as :data:`MARKET`), and the plan's notes follow them.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodus_cli import collector, config
from nodus_cli.catalog import Offer
from nodus_cli.planning.capabilities import MARKET, Capabilities
from nodus_cli.planning.exclusions import (
    describe_removed,
    explain_empty,
    no_cpu_only_fits,
    note_unknown_sizes,
)
from nodus_cli.planning.fanout import fanout, fanout_words, per_task_order
from nodus_cli.planning.filters import Filters
from nodus_cli.planning.plan import Plan, PriceCeiling, StagePlan
from nodus_cli.planning.ranking import (
    BASIS_PRICE,
    BASIS_RUNTIME,
    PRICE_ORDER,
    Ranking,
    RuntimeLookup,
    by_estimated_cost,
    by_price,
    measured_runtimes,
    no_history,
    over_budget,
)
from nodus_cli.workload import Stage, Workload

__all__ = [
    "FROM_CONFIG",
    "SEPARATE_WORK_DIRS",
    "configured_ceiling",
    "plan_stage",
    "plan_workload",
]

#: A plan's note where stages land on different machines of a place whose machines do
#: not share a work folder (``Capabilities.shared_work_dir`` False).
SEPARATE_WORK_DIRS = (
    "stages are placed on different nodes, so they cannot share a local "
    "NODUS_WORK_DIR: each stage gets its own empty directory; pass data "
    "through storage both nodes can reach"
)


class _FromConfig:
    """The default of ``plan_workload(ceiling=...)``: read ``[limits]`` from config.toml."""

    def __repr__(self) -> str:
        return "FROM_CONFIG"


FROM_CONFIG = _FromConfig()


def configured_ceiling() -> PriceCeiling | None:
    """``[limits] max_price_per_hour`` of the user's config.toml, if set."""
    limits = config.limits()
    if limits.max_price_per_hour is None:
        return None
    return PriceCeiling(
        limits.max_price_per_hour,
        f"[limits] max_price_per_hour in {limits.path or config.config_path()}",
    )


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
    filters = Filters(stage, ceiling)
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
            cpu_note = no_cpu_only_fits(stage, cpu_only, cpu_excluded, filters)
    runtimes = measured_runtimes(stage.name, remaining, history)
    if budget is not None and runtimes is not None:
        kept = [
            (o, r)
            for o, r in zip(remaining, runtimes, strict=True)
            if not over_budget(o, r, budget)
        ]
        excluded["budget"] = len(remaining) - len(kept)
        remaining = [o for o, _ in kept]
        runtimes = [r for _, r in kept]
    measured = bool(remaining) and runtimes is not None and None not in runtimes
    if stage.map is not None and not measured:
        # Fan-out: what a task-hour costs decides, not what one machine costs.
        candidates = Ranking(sorted(remaining, key=lambda o: per_task_order(stage, o)))
    elif runtimes is None:
        candidates = Ranking(sorted(remaining, key=PRICE_ORDER))
    else:
        key = by_estimated_cost if measured else by_price
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
        describe_removed(result, stage, pool, filters)
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
    note_unknown_sizes(result, stage, pool, filters, remaining)
    if stage.map is not None and candidates:
        result.fanout = fanout(stage, candidates[0].offer, budget)
        result.notes.append(fanout_words(result.fanout))
    if not candidates:
        explain_empty(result, stage, pool, filters, budget, history)
    elif not stage.requirements.wants_gpu and candidates[0].offer.gpu is not None:
        result.notes.append(
            (cpu_note or "this stage needs no GPU and no CPU-only configuration fits")
            + "; the selected machine carries GPUs it will not use"
        )
    return result
