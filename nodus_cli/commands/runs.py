"""``nodus runs`` and ``nodus logs``: what ran, how it ended, and what it printed."""

from __future__ import annotations

from nodus_cli import records
from nodus_cli.output import console, emit_json, money


def list_runs(limit: int, as_json: bool) -> int:
    store = records.open_store()
    assert store is not None
    found = store.list_runs(limit)
    cluster: dict[str, str] = {}  # what the cluster says about running Swarm runs
    if any(r.target == "swarm" and r.status == "running" for r in found):
        from nodus_cli import swarm

        cluster = {r.id: s for r in found if (s := swarm.cluster_state(r)) is not None}
    if as_json:
        docs = [
            r.as_json() | ({"cluster": cluster[r.id]} if r.id in cluster else {}) for r in found
        ]
        emit_json({"runs": docs})
        return 0
    from rich.markup import escape
    from rich.table import Table

    if not found:
        console().print("no runs recorded yet (state in " + escape(str(store.root)) + ")")
        return 0
    table = Table(show_edge=False, box=None)
    # The id is what `nodus logs` and `nodus rerun` take: never cut it.
    table.add_column("id", no_wrap=True, min_width=max(len(r.id) for r in found))
    table.add_column("workload", overflow="fold", min_width=8)
    targets = {r.target for r in found}
    if targets != {"local"}:
        table.add_column("target", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("exit", no_wrap=True, justify="right")
    table.add_column("started (UTC)", no_wrap=True)
    table.add_column("cost", no_wrap=True, justify="right")
    table.add_column("stages", overflow="fold", min_width=12)
    colours = {
        "succeeded": "green",
        "failed": "red",
        "running": "cyan",
        "cancelled": "yellow",
        "budget_exhausted": "magenta",
    }
    for r in found:
        stages = " → ".join(f"{s.name}:{s.status}" for s in r.stages)
        if r.id in cluster:
            stages += f" (cluster: {cluster[r.id]})"
        row = [r.id, escape(r.workload)]
        if targets != {"local"}:
            row.append(r.target)
        row += [
            f"[{colours.get(r.status, 'white')}]{r.status}[/]",
            "" if r.exit_code is None else str(r.exit_code),
            r.started_at[5:16].replace("T", " "),
            money(r.cost),
            escape(stages),
        ]
        table.add_row(*row)
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
