"""``nodus plan`` (and ``nodus run --dry-run``): what every eligible configuration costs."""

from __future__ import annotations

from nodus_cli import inventory
from nodus_cli.output import console, emit_json, money
from nodus_cli.planner import Plan, StagePlan, plan_workload
from nodus_cli.problems import NodusError
from nodus_cli.workload import Workload

EXIT_NOTHING_ELIGIBLE = 3


def load_valid(file: str) -> Workload:
    """A valid workload, or an error that lists the file's problems like `nodus validate`."""
    from pathlib import Path

    from nodus_cli.workload import load_file

    path = Path(file)
    if not path.is_file():
        raise NodusError(f"{file}: no such file", exit_code=2)
    result = load_file(path, file)
    if result.workload is None:
        detail = "\n".join(p.render(file) for p in result.errors)
        raise NodusError(
            f"{file} is not a valid workload:\n{detail}",
            hint=f"nodus validate {file} shows every problem",
        )
    return result.workload


def make_plan(file: str, target: str, catalog_path: str | None) -> Plan:
    workload = load_valid(file)
    inv = inventory.for_target(target, catalog_path)
    return plan_workload(workload, inv.offers, target=target, history=inv.history(workload))


def run(file: str, target: str, catalog_path: str | None, top: int, as_json: bool) -> int:
    plan = make_plan(file, target, catalog_path)
    if as_json:
        emit_json(plan.as_json())
    else:
        show(plan, top)
    return 0 if plan.feasible else EXIT_NOTHING_ELIGIBLE


def show(plan: Plan, top: int) -> None:
    from rich.markup import escape

    out = console()
    w = plan.workload
    out.print(f"[bold]{escape(w.name)}[/] — planned against the [bold]{plan.target}[/] inventory")
    budget = f", budget {money(w.budget)} for the whole run" if w.budget is not None else ""
    out.print(f"[dim]{len(w.stages)} stage(s){budget}[/]")
    for note in plan.notes:
        out.print(f"[yellow]note:[/] {escape(note)}")
    for stage in plan.stages:
        out.print()
        _show_stage(stage, top)
    out.print()
    out.print(
        "[dim]Ranked by what the inventory lists; this is not a promise of the lowest total "
        "cost or the shortest runtime.[/]"
    )
    if not plan.feasible:
        out.print("[bold red]Not every stage has an eligible configuration (exit 3).[/]")


def describe_requirements(stage: StagePlan) -> str:
    r = stage.requirements
    parts = []
    if r.wants_gpu:
        gpu = r.gpu or "any GPU"
        parts.append(f"{r.gpu_count}× {gpu}")
        if r.peak_memory_gb:
            parts.append(f"≥{r.peak_memory_gb:g} GB per GPU")
    else:
        parts.append("no GPU")
    parts.append(f"{r.cpu:g} CPU")
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


def _show_stage(stage: StagePlan, top: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    out.print(f"[bold cyan]stage {escape(stage.name)}[/]: {escape(describe_requirements(stage))}")
    excluded = ", ".join(f"{k} {v}" for k, v in stage.excluded.items() if v) or "none"
    out.print(f"  eligible: {len(stage.candidates)}; excluded by: {excluded}")
    for note in stage.notes:
        out.print(f"  [yellow]note:[/] {escape(note)}")
    if not stage.candidates:
        out.print(f"  [bold red]no eligible configuration:[/] {escape(stage.explanation or '')}")
        if stage.nearest:
            out.print("  nearest offers:")
            for o in stage.nearest:
                gpu = f"{o.gpu_count}× {o.gpu} {o.gpu_memory_gb:g} GB" if o.gpu else "no GPU"
                out.print(
                    f"    {escape(o.supplier)} {escape(o.machine_id)} ({escape(o.region)}): "
                    f"{gpu}, {o.vcpus:g} vCPU, {money(o.price_per_hour)}/h"
                )
        return
    basis = (
        "estimated cost (measured runtime × hourly price)"
        if stage.basis == "runtime_estimate"
        else "hourly price (no runtime measured on every eligible configuration)"
    )
    out.print(f"  ranked by {basis}")
    table = Table(show_edge=False, pad_edge=False, box=None)
    for col in ("#", "supplier", "machine", "region", "GPUs", "vCPU", "memory", "$/h", "$/GPU·h"):
        table.add_column(col, justify="right" if col in ("#", "vCPU", "$/h", "$/GPU·h") else "left")
    if stage.basis == "runtime_estimate":
        table.add_column("est. cost", justify="right")
    for i, cand in enumerate(stage.candidates[:top], start=1):
        o = cand.offer
        gpu = f"{o.gpu_count}× {o.gpu} {o.gpu_memory_gb:g}GB" if o.gpu else "-"
        row = [
            ("→ " if i == 1 else "") + str(i),
            escape(o.supplier),
            escape(o.machine_id),
            escape(o.region),
            gpu,
            f"{o.vcpus:g}",
            f"{o.memory_gb:g} GB",
            money(o.price_per_hour),
            money(o.price_per_gpu_hour),
        ]
        if stage.basis == "runtime_estimate":
            row.append(money(cand.estimated_cost))
        table.add_row(*row)
    out.print(table)
    if len(stage.candidates) > top:
        out.print(f"  [dim]… {len(stage.candidates) - top} more (--top N, or --json for all)[/]")
    sel = stage.selected
    assert sel is not None
    out.print(
        f"  selected: [bold]{escape(sel.offer.supplier)} {escape(sel.offer.machine_id)}[/] "
        f"in {escape(sel.offer.region)} at {money(sel.offer.price_per_hour)}/h"
    )
