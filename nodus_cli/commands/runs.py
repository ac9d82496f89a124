"""``nodus runs`` and ``nodus logs``: what ran, how it ended, and what it printed."""

from __future__ import annotations

from nodus_cli import records
from nodus_cli.output import console, emit_json, money


def list_runs(limit: int, as_json: bool) -> int:
    store = records.open_store()
    assert store is not None
    found = store.list_runs(limit)
    if as_json:
        emit_json({"runs": [r.as_json() for r in found]})
        return 0
    from rich.markup import escape
    from rich.table import Table

    if not found:
        console().print("no runs recorded yet (state in " + escape(str(store.root)) + ")")
        return 0
    table = Table(show_edge=False, box=None)
    for col in ("id", "workload", "target", "status", "exit", "started", "cost", "stages"):
        table.add_column(col)
    colours = {
        "succeeded": "green",
        "failed": "red",
        "running": "cyan",
        "cancelled": "yellow",
        "budget_exhausted": "magenta",
    }
    for r in found:
        stages = " → ".join(f"{s.name}:{s.status}" for s in r.stages)
        table.add_row(
            r.id,
            escape(r.workload),
            r.target,
            f"[{colours.get(r.status, 'white')}]{r.status}[/]",
            "" if r.exit_code is None else str(r.exit_code),
            r.started_at.replace("T", " ").replace("+00:00", "Z"),
            money(r.cost),
            escape(stages),
        )
    console().print(table)
    return 0


def show_logs(run_id: str, as_json: bool) -> int:
    store = records.open_store()
    assert store is not None
    record = store.get(run_id)
    path = store.log_path(record.id)
    text = path.read_text("utf-8", errors="replace") if path.exists() else ""
    if as_json:
        emit_json({"run": record.as_json(), "log": text})
        return 0
    import sys

    sys.stdout.write(text)
    sys.stdout.flush()
    return 0
