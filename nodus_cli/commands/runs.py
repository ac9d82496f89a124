"""``nodus runs`` and ``nodus logs``: what ran, how it ended, and what it printed."""

from __future__ import annotations

from nodus_cli import records
from nodus_cli.output import Writer, emit_json, money


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
    out = Writer()
    if not found:
        out.line(f"no runs recorded yet (state in {store.root})")
        out.flush()
        return 0
    colours = {
        "succeeded": "green",
        "failed": "red",
        "running": "cyan",
        "cancelled": "yellow",
        "budget_exhausted": "yellow",
    }
    show_target = {r.target for r in found} != {"local"}
    headers = ["id", "workload", *(["target"] if show_target else []), "status", "exit"]
    headers += ["started (UTC)", "cost", "stages"]
    rows = []
    for r in found:
        stages = " → ".join(f"{s.name}:{s.status}" for s in r.stages)
        if r.id in cluster:
            stages += f" (cluster: {cluster[r.id]})"
        rows.append(
            [
                r.id,
                r.workload,
                *([r.target] if show_target else []),
                out.paint(r.status, colours.get(r.status, "bold")),
                "" if r.exit_code is None else str(r.exit_code),
                r.started_at[:16].replace("T", " "),
                money(r.cost),
                stages,
            ]
        )
    exit_column = headers.index("exit")
    out.table(headers, rows, right=(exit_column, exit_column + 2))
    out.flush()
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
