"""``nodus plan`` (and ``nodus run --dry-run``): what every eligible configuration costs.

Human output is plain text written directly (no rich), like ``nodus validate``: planning
is interactive and its start-up cost is part of the experience. On a terminal it fits the
width (:class:`~nodus_cli.cli.output.Writer`): prose wraps, and a candidates table first
loses memory, vCPU, runtime and $/GPU·h, then clips machine IDs, regions and suppliers
with "…", never the GPUs or a price; the ``selected:`` line below it names the chosen
configuration in full. ``--wide``, a pipe or a file get every column in full, so machine
IDs stay greppable; ``--json`` is never shaped by width.

Planned against a catalog, the header names it and the date of its prices ("embedded
catalog (prices as of DATE)"), and the plan warns (``warnings`` in ``--json``) when those
prices are older than ``[catalog] max_age_days`` (default 30), naming the command that
refreshes them. The configured ``[limits] max_price_per_hour`` is applied by the planner
and shown in the header (``limits`` in ``--json``).
"""

from __future__ import annotations

from nodus_cli.api import (
    BASIS_RUNTIME,
    CHECKS,
    Candidate,
    Client,
    Plan,
    StagePlan,
    image_cuda,
)
from nodus_cli.cli.output import Writer, stderr_line
from nodus_cli.text import gpu_text, money, plural
from nodus_cli.workload import Requirements

EXIT_NOTHING_ELIGIBLE = 3

# -- the command -------------------------------------------------------------------------

#: The ``--json`` document's shape: bumped only when a field is renamed or retyped.
JSON_VERSION = 1


def run(
    file: str,
    target: str,
    catalog_path: str | None,
    top: int,
    as_json: bool,
    wide: bool = False,
    dry_run: bool = False,
) -> int:
    if catalog_path and target == "local":
        stderr_line(
            f"nodus: note: --catalog {catalog_path} is not used by --target local (this "
            "machine); --target catalog plans against it"
        )
    with Client(target=target, catalog=catalog_path) as client:
        plan = client.plan(file, dry_run=dry_run)
    inventory = plan.inventory
    source = inventory.describe() if inventory is not None else None
    if as_json:
        from nodus_cli.cli.output import emit_json

        document = {"version": JSON_VERSION, **plan.as_json()}
        document["inventory"] = source
        document["catalog"] = inventory.catalog_json() if inventory is not None else None
        emit_json(document)
    else:
        out = Writer(wide=wide)
        show(plan, top, out, source)
        out.flush()
    return 0 if plan.feasible else EXIT_NOTHING_ELIGIBLE


def requirements_text(r: Requirements) -> str:
    """The normalized requirements as ``key = value`` pairs (unset ones left out)."""
    parts = []
    for key, value in r.as_json().items():
        if value is None or (key in ("gpu_count", "gpu_interconnect") and not r.wants_gpu):
            continue
        if isinstance(value, bool):
            if value:
                parts.append(f"{key} = true")
            continue
        if isinstance(value, str):
            parts.append(f'{key} = "{value}"')
        elif isinstance(value, float):
            parts.append(f"{key} = {value:g}")
        else:
            parts.append(f"{key} = {value}")
    return ", ".join(parts)


def describe_requirements(stage: StagePlan) -> str:
    r = stage.requirements
    parts = []
    if r.wants_gpu:
        parts.append(f"{r.gpu_count}× {r.gpu or 'any GPU'}")
        if r.peak_memory_gb:
            parts.append(f"≥ {r.peak_memory_gb:g} GB per GPU")
    else:
        parts.append("no GPU")
    parts.append(f"{r.cpu:g} vCPU")
    if r.memory_gb:
        parts.append(f"{r.memory_gb:g} GB memory")
    if r.disk_gb:
        parts.append(f"{r.disk_gb:g} GB disk")
    if r.location:
        parts.append(f"in {r.location}")
    if r.arch:
        parts.append(r.arch)
    if r.max_price_per_hour:
        parts.append(f"≤ {money(r.max_price_per_hour)}/h")
    return ", ".join(parts)


def show(plan: Plan, top: int, out: Writer, source: str | None = None) -> None:
    w = plan.workload
    if plan.target == "catalog" and source:
        against = f"the {source}"
    else:
        against = f"the {plan.target} inventory" + (f" ({source})" if source else "")
    out.line(f"{out.paint(w.name, 'bold')}: planned against {against}")
    for warning in plan.warnings:
        out.line(f"{out.paint('warning:', 'yellow')} {warning}")
    out.line(f"requirements: {requirements_text(w.requirements) or 'none'}", keep=(" = ",))
    if plan.ceiling is not None:
        out.line(
            f"price ceiling: {money(plan.ceiling.limit)}/h, {plan.ceiling.source} "
            "(no workload can raise it)"
        )
    if w.budget is not None:
        out.line(f"budget: {money(w.budget)} for the whole run (every stage)")
    for note in plan.notes:
        out.line(f"{out.paint('note:', 'yellow')} {note}")
    for stage in plan.stages:
        out.line()
        _show_stage(stage, max(top, 0), out)
    out.line()
    out.line(
        out.paint(
            "Ranked by what the inventory lists: not a promise of the lowest total cost or "
            "the shortest runtime.",
            "dim",
        )
    )
    out.narrowed_note()
    if not plan.feasible:
        empty = [
            f"{s.name} ({s.emptied_by or 'empty inventory'})" for s in plan.stages if not s.feasible
        ]
        stages = "stage" if len(empty) == 1 else "stages"
        out.line(
            out.paint(f"No eligible configuration for {stages} {', '.join(empty)} (exit 3).", "red")
        )


def _offer_line(c: Candidate) -> str:
    o = c.offer
    text = (
        f"{o.supplier} {o.machine_id} in {o.region or '(no region)'}: "
        f"{gpu_text(o.gpu, o.gpu_count, o.gpu_memory_gb)}, {o.vcpus:g} vCPU, "
        f"{o.memory_gb:g} GB memory, {o.arch}, {money(o.price_per_hour)}/h"
    )
    if o.gpu_count:
        text += f" ({money(o.price_per_hour / o.gpu_count)} per GPU-hour)"
    if c.estimated_cost is not None:
        text += f", est. {money(c.estimated_cost)} ({c.runtime_seconds or 0:,.0f} s measured)"
    return text


def _show_stage(stage: StagePlan, top: int, out: Writer) -> None:
    out.line(f"{out.paint('stage ' + stage.name, 'cyan')}: {describe_requirements(stage)}")
    if stage.image:
        declared = image_cuda(stage.image) if stage.requirements.wants_gpu else None
        shown = f" (declares {declared})" if declared else ""
        out.line(f"  image: {stage.image}{shown}")
    total = stage.eligible + sum(stage.excluded.values())
    excluded = ", ".join(f"{k} {stage.excluded[k]}" for k in CHECKS if stage.excluded[k])
    out.line(f"  excluded: {excluded or 'none'} (of {plural(total, 'configuration')})")
    for note in stage.notes:
        out.line(f"  {out.paint('note:', 'yellow')} {note}")
    if not stage.candidates:
        out.line(f"  {out.paint('no eligible configuration:', 'red')} {stage.explanation or ''}")
        if stage.nearest:
            out.line("  nearest offers:")
            for c in stage.nearest:
                out.line(f"    {_offer_line(c)}")
        return
    if stage.basis == BASIS_RUNTIME:
        basis = "estimated cost (measured runtime × hourly price)"
    elif stage.fanout is not None:
        basis = "price per task-hour (hourly price ÷ the tasks one machine hosts)"
    else:
        basis = (
            "hourly price (this workload has no measured runtime on every eligible configuration)"
        )
    out.line(f"  eligible: {stage.eligible}, ranked by {basis}")
    headers = ["", "#", "supplier", "machine", "region", "GPUs", "vCPU", "memory", "$/h", "$/GPU·h"]
    measured = any(c.runtime_seconds is not None for c in stage.candidates[:top])
    if measured:
        headers += ["runtime", "est. cost"]
    rows = []
    for i, c in enumerate(stage.candidates[:top], start=1):
        o = c.offer
        row = [
            "→" if i == 1 else "",
            str(i),
            o.supplier,
            o.machine_id,
            o.region or "-",
            gpu_text(o.gpu, o.gpu_count, o.gpu_memory_gb),
            f"{o.vcpus:g}",
            f"{o.memory_gb:g} GB",
            money(o.price_per_hour),
            money(o.price_per_gpu_hour),
        ]
        if measured:
            row += [
                f"{c.runtime_seconds:,.0f} s" if c.runtime_seconds is not None else "-",
                money(c.estimated_cost),
            ]
        rows.append(row)
    if rows:
        # Too wide for the terminal: memory and vCPU go first (the selected line below
        # gives them), then the measured runtime (the estimate stays) and $/GPU·h; then
        # machine IDs, regions and suppliers are clipped; never the GPUs or a price.
        out.table(
            headers,
            rows,
            right=(1, 6, 7, 8, 9, 10, 11),
            indent="  ",
            drop=(7, 6, 10, 9),
            clip=(3, 4, 2),
        )
    if stage.eligible > top:
        out.line(
            out.paint(
                f"  … {stage.eligible - top} more (--top N shows more, --json lists all)", "dim"
            )
        )
    sel = stage.selected
    assert sel is not None
    out.line(f"  selected: {out.paint(_offer_line(sel), 'bold')}")
