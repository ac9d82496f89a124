"""The dashboard's pages, each drawn from the document :mod:`.data` gives its ``/api/``
twin (so a page shows what the JSON says, no more).

Contract: each function takes a document and returns a whole page (:func:`.html.page`);
every value from the records, a target or the user is escaped. The GPU-use chart draws
what the records keep for each GPU a stage held (its samples' peak utilisation and
memory), the spend chart each day's recorded cost.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from nodus_cli.dashboard.data import STATUSES
from nodus_cli.dashboard.html import bars, esc, lines, notice, page, table
from nodus_cli.text import cost_text, money, unpriced_runs_text

__all__ = [
    "error_page",
    "gpus_page",
    "plan_page",
    "run_page",
    "runs_page",
    "spend_page",
    "stopped_page",
]


def _status(value: object) -> str:
    return f'<span class="status-{esc(value)}">{esc(value)}</span>'


def _run_link(run_id: object) -> str:
    return f'<a href="/runs/{quote(str(run_id))}">{esc(run_id)}</a>' if run_id else "-"


def error_page(title: str, message: str, hint: str | None = None) -> str:
    return page(title, notice(message, hint))


def gpus_page(doc: dict[str, Any]) -> str:
    parts = []
    for t in doc["targets"]:
        parts.append(f'<section id="target-{esc(t["target"])}"><h2>{esc(t["target"])}</h2>')
        if t["error"]:
            parts.append(notice(t["error"], t["hint"]))
        elif not t["nodes"]:
            parts.append('<p class="empty">no machines</p>')
        rows = []
        for n in t["nodes"]:
            held = ", ".join(
                f"{esc(h['gpu'][-12:])}: "
                + (_run_link(h["run"]) if h["run"] else f"container {esc(h['container'])}")
                for h in n.get("holders") or []
            )
            rows.append(
                [
                    esc(n.get("name") or n["hostname"]),
                    esc(n["state"]),
                    esc(n["gpu"] or "-"),
                    esc(n["gpus"]),
                    esc(n["free_gpus"]),
                    esc(n.get("queued", "")),
                    held or "-",
                ]
            )
        if rows:
            parts.append(
                table(["node", "state", "GPU", "GPUs", "free", "queued", "held by"], rows, "nodes")
            )
        parts.append("</section>")
    queue = [
        [
            esc(i + 1),
            _run_link(w["run"]),
            esc(w["task"]),
            esc(w["priority"]),
            esc(w["since"]),
            esc(w["need"]),
            esc(w["reason"]),
        ]
        for i, w in enumerate(doc["queue"])
    ]
    parts.append("<h2>Queue</h2>")
    if queue:
        parts.append(
            table(["#", "run", "task", "priority", "waiting since", "needs", "why"], queue, "queue")
        )
    else:
        parts.append('<p class="empty">no task waits for GPUs</p>')
    return page("GPUs and the queue", "".join(parts), "/")


def runs_page(doc: dict[str, Any], error: tuple[str, str | None] | None = None) -> str:
    f = doc["filters"]
    options = "".join(
        f"<option{' selected' if f['status'] == s else ''}>{esc(s)}</option>" for s in STATUSES
    )
    form = (
        '<form class="filters" method="get" action="/runs">'
        f'<label>status <select name="status" id="filter-status"><option value="">any</option>'
        f"{options}</select></label>"
        f'<label>target <input name="target" id="filter-target" value="{esc(f["target"])}" '
        'size="8"></label>'
        f'<label>workload <input name="workload" id="filter-workload" '
        f'value="{esc(f["workload"])}" size="16"></label>'
        '<button type="submit" id="filter-apply">filter</button></form>'
    )
    if error is not None:
        return page("Runs", form + notice(*error), "/runs")
    rows = [
        [
            _run_link(r["id"]),
            esc(r["workload"]),
            esc(r["target"]),
            _status(r["status"]),
            esc("" if r["exit_code"] is None else r["exit_code"]),
            esc(r["started_at"][:19].replace("T", " ")),
            esc(cost_text(r["cost"], r["cost_known"])),
            esc(" ".join(f"{s['name']}:{s['status']}" for s in r["stages"])),
        ]
        for r in doc["runs"]
    ]
    body = form
    if rows:
        body += table(
            ["id", "workload", "target", "status", "exit", "started (UTC)", "cost", "stages"],
            rows,
            "runs",
        )
    else:
        body += '<p class="empty">no runs match</p>'
    kept = {k: v for k, v in f.items() if v}
    nav = []
    if doc["page"] > 1:
        nav.append(f'<a href="/runs?{urlencode({**kept, "page": doc["page"] - 1})}">newer</a>')
    if doc["more"]:
        nav.append(
            f'<a id="older" href="/runs?{urlencode({**kept, "page": doc["page"] + 1})}">older</a>'
        )
    body += f"<p>page {doc['page']} {' · '.join(nav)}</p>"
    return page("Runs", body, "/runs")


def run_page(doc: dict[str, Any], gpu: dict[str, Any] | None = None) -> str:
    rid = str(doc["id"])
    head = table(
        ["workload", "target", "status", "exit", "cost", "started", "ended"],
        [
            [
                esc(doc["workload"]),
                esc(doc["target"]),
                _status(doc["status"]),
                esc("" if doc["exit_code"] is None else doc["exit_code"]),
                esc(cost_text(doc["cost"], doc["cost_known"])),
                esc(doc["started_at"]),
                esc(doc["ended_at"] or "-"),
            ]
        ],
        "run",
    )
    parts = [head]
    if doc.get("message"):
        parts.append(notice(doc["message"], kind="info"))
    if doc.get("cluster"):
        parts.append(f"<p>now: {esc(doc['cluster'])}</p>")
    if doc["status"] in ("pending", "queued", "running"):
        parts.append(
            f'<form method="post" action="/runs/{quote(rid)}/stop">'
            '<button class="stop" id="stop" type="submit">stop this run</button></form>'
        )
    parts.append("<h2>Stages</h2>")
    stage_rows = [
        [
            esc(s["name"]),
            _status(s["status"]),
            esc("" if s["exit_code"] is None else s["exit_code"]),
            esc("-" if s["runtime_seconds"] is None else f"{s['runtime_seconds']:.1f}s"),
            esc(cost_text(s["cost"], s["cost_known"])),
            esc(", ".join(s.get("gpus") or []) or "-"),
            esc(" ".join(f"{k}: {v}" for k, v in (s.get("items") or {}).items()) or "-"),
            esc(s.get("message") or ""),
        ]
        for s in doc["stages"]
    ]
    parts.append(
        table(
            ["stage", "status", "exit", "time", "cost", "GPUs", "items", "message"],
            stage_rows,
            "stages",
        )
    )
    for s in doc["stages"]:
        tasks = s.get("tasks") or []
        if tasks:
            parts.append(f"<h2>Items of {esc(s['name'])}</h2>")
            parts.append(
                table(
                    ["#", "item", "status", "exit", "time"],
                    [
                        [
                            esc(t["index"]),
                            esc(t["item"]),
                            _status(t["status"]),
                            esc("" if t["exit_code"] is None else t["exit_code"]),
                            esc(
                                "-"
                                if t["runtime_seconds"] is None
                                else f"{t['runtime_seconds']:.1f}s"
                            ),
                        ]
                        for t in tasks
                    ],
                    "tasks",
                )
            )
        usage = s.get("gpu_usage") or {}
        if usage.get("gpus"):
            util = [(g["uuid"][-8:], float(g["max_utilization"] or 0)) for g in usage["gpus"]]
            mem = [(g["uuid"][-8:], float(g["max_memory_used_mib"] or 0)) for g in usage["gpus"]]
            parts.append(f"<h2>GPU use of {esc(s['name'])}</h2><p>peak utilisation</p>")
            parts.append(bars(util, "%", width=320, height=120))
            parts.append("<p>peak memory used</p>" + bars(mem, " MiB", width=320, height=120))
    if gpu is not None:
        parts.append(_gpu_over_time(gpu, doc["status"] in ("pending", "queued", "running")))
    parts.append('<h2>Log</h2><p id="log-state">following the log live…</p>')
    parts.append(f'<pre class="log" id="log" data-stream="/runs/{quote(rid)}/events"></pre>')
    return page(f"Run {rid}", "".join(parts), "/runs")


def _gpu_over_time(gpu: dict[str, Any], active: bool) -> str:
    """The run's GPU-use samples (``/api/runs/RUN_ID/gpu``) as two charts over time; a
    task's readings are recorded when it ends, which a run still going says."""
    head = '<h2 id="gpu-over-time">GPU use over time</h2>'
    if active:
        head += "<p><small>a task's readings are charted once it ends</small></p>"
    if not gpu["gpus"]:
        return head + (
            '<p class="empty" id="no-gpu-samples">no GPU use was sampled for this run (it held '
            "no GPU, ended before the first reading, or its target cannot sample)</p>"
        )

    def series(key: str) -> list[tuple[str, list[tuple[float, float]]]]:
        return [
            (
                g["uuid"][-8:],
                [(p["time"], float(p[key])) for p in g["samples"] if p[key] is not None],
            )
            for g in gpu["gpus"]
        ]

    return (
        head
        + "<p>utilisation (%)</p>"
        + lines(series("utilization"), "%", height=140)
        + "<p>memory used (MiB)</p>"
        + lines(series("memory_used_mib"), " MiB", height=140)
    )


def stopped_page(doc: dict[str, Any]) -> str:
    kind = "info" if doc["result"] == "stopped" else "error"
    back = f'<p><a href="/runs/{quote(str(doc["id"]))}">back to the run</a></p>'
    return page(f"Stop {doc['id']}", notice(doc["message"], kind=kind) + back, "/runs")


def spend_page(doc: dict[str, Any]) -> str:
    day, month = doc["day"], doc["month"]
    rows = [
        [
            esc(name),
            esc(cost_text(p["spent"], known=not p["unknown_runs"])),
            esc("-" if p["limit"] is None else money(p["limit"])),
        ]
        for name, p in (("today", day), ("this month", month))
    ]
    points = [(d["day"][5:], d["cost"]) for d in doc["days"]]
    body = table(["period (UTC)", "spent", "limit"], rows, "spend")
    if month["unknown_runs"]:
        unpriced = [t["target"] for t in doc["targets"] if t["unknown_runs"]]
        note = unpriced_runs_text(
            month["unknown_runs"], day["unknown_runs"], unpriced, doc["config"]
        )
        body += notice(note, kind="info")
    body += "<h2>Cost per day, the last 30 days (USD)</h2>"
    body += bars(points, " USD", label_every=5)
    groups = [
        [esc(g["workload"]), esc(cost_text(g["spent"], not g["unknown_runs"])), esc(g["runs"])]
        for g in doc["workloads"]
    ]
    if groups:
        body += "<h2>This month per workload</h2>"
        body += table(["workload", "spent", "runs"], groups, "workloads")
    return page("Spend", body, "/spend")


def plan_page(
    targets: list[str],
    text: str = "",
    name: str = "workload.toml",
    target: str = "local",
    doc: dict[str, Any] | None = None,
    error: tuple[str, str | None] | None = None,
    problems: list[str] | None = None,
) -> str:
    options = "".join(
        f"<option{' selected' if t == target else ''}>{esc(t)}</option>" for t in targets
    )
    form = (
        '<form method="post" action="/plan">'
        "<p>A workload file in, its plan on a target out: which GPUs it would get, and why "
        "every other configuration was left out. Nothing is run or written.</p>"
        '<p><input type="file" id="plan-file" accept=".toml"> '
        f'<label>name <input name="name" id="plan-name" value="{esc(name)}"></label> '
        f'<label>target <select name="target">{options}</select></label></p>'
        f'<textarea name="text" id="plan-text">{esc(text)}</textarea>'
        '<p><button type="submit" id="plan-submit">plan</button></p></form>'
    )
    body = form
    if error is not None:
        body += notice(*error)
    if problems:
        body += "<ul class=problems>" + "".join(f"<li>{esc(p)}</li>" for p in problems) + "</ul>"
    if doc is not None:
        body += _plan_doc(doc)
    return page("Plan", body, "/plan")


def _plan_doc(doc: dict[str, Any]) -> str:
    parts = [
        f"<h2>{esc(doc['workload'])} on {esc(doc['target'])}: "
        f"{'feasible' if doc['feasible'] else 'not feasible'}</h2>"
    ]
    for w in doc["warnings"]:
        parts.append(notice(w, kind="info"))
    for n in doc["notes"]:
        parts.append(f"<p>{esc(n)}</p>")
    for s in doc["stages"]:
        parts.append(f"<h3>stage {esc(s['name'])}</h3>")
        rows = [
            [
                esc(f"{c.get('supplier')} {c.get('machine_id')}"),
                esc(c.get("gpu") or ""),
                esc(c.get("gpu_count", "")),
                esc(c.get("price_per_hour", "")),
            ]
            for c in s["candidates"][:10]
        ]
        if rows:
            parts.append(table(["configuration", "GPU", "count", "$/h"], rows, "candidates"))
        else:
            parts.append(notice(s.get("explanation") or "no configuration fits"))
        excluded = s.get("excluded") or {}
        if excluded:
            parts.append(
                "<p>left out:</p><ul class=excluded>"
                + "".join(f"<li>{esc(k)}: {esc(v)}</li>" for k, v in excluded.items())
                + "</ul>"
            )
        for model, why in (s.get("removed") or {}).items():
            parts.append(f"<p>removed {esc(model)}: {esc(why)}</p>")
        for n in s.get("notes") or []:
            parts.append(f"<p>{esc(n)}</p>")
    return "".join(parts)
