"""``nodus nodes`` and ``nodus swarm init-node``: the cluster's capacity, and joining it.

What a node needs and what ``init-node --apply`` writes and sets is the Swarm target's
(:mod:`nodus_cli.targets.swarm.setup`, through :meth:`Client.init_node`); this module
shows it.
"""

from __future__ import annotations

import json

from nodus_cli.api import Client
from nodus_cli.cli.output import Writer, console, emit_json
from nodus_cli.text import money, safe

NOW_NOTE = (
    "What the cluster's nodes hold now, not every configuration a supplier could offer; "
    "free GPUs are those no running task reserves."
)
#: The same for this machine: one entry per GPU model, since a request names one model.
LOCAL_NOTE = (
    "What this machine holds now: one entry per GPU model (a request names one model), "
    "each with the machine's CPUs and memory; free GPUs are those no container holds, "
    "queued the tasks that wait for them."
)
#: The ``--json`` documents' shape: bumped only when a field is renamed or retyped.
JSON_VERSION = 1


def run(as_json: bool, target: str = "swarm") -> int:
    with Client(target=target) as client:
        nodes = client.list_nodes()
    note = LOCAL_NOTE if target == "local" else NOW_NOTE
    if as_json:
        emit_json({"version": JSON_VERSION, "nodes": [n.as_json() for n in nodes], "note": note})
        return 0
    out = Writer()
    hosts = [n.hostname for n in nodes]
    roles = any(n.details.get("role") for n in nodes)
    queues = any("queued" in n.details for n in nodes)
    rows = []
    for n in nodes:
        d = n.details
        gpu = f"{n.gpu} {n.gpu_memory_gb:g} GB" if n.gpu and n.gpu_memory_gb else (n.gpu or "-")
        availability = d.get("availability", "active")
        # One machine with two GPU models is two entries: named by their ids (host/MODEL).
        name = d.get("name") or (n.id if hosts.count(n.hostname) > 1 else n.hostname)
        rows.append(
            [
                safe(str(name)),
                n.state if availability == "active" else f"{n.state} ({availability})",
                *([str(d.get("role", ""))] if roles else []),
                f"{n.cpus:g}",
                f"{n.memory_gb:g} GB",
                str(n.gpus),
                str(n.free_gpus),
                *([str(d.get("queued", ""))] if queues else []),
                gpu,
                money(n.price_per_hour) if d.get("price_source") != "not set" else "-",
            ]
        )
    headers = ["node", "state", *(["role"] if roles else []), "CPUs", "memory", "GPUs", "free"]
    headers += [*(["queued"] if queues else []), "GPU", "$/h"]
    numbers = ("CPUs", "GPUs", "free", "queued", "$/h")
    out.table(headers, rows, right=tuple(i for i, h in enumerate(headers) if h in numbers))
    for n in nodes:
        for problem in n.details.get("problems") or []:
            out.line(f"{out.paint('note:', 'yellow')} node {safe(n.hostname)}: {safe(problem)}")
        source = str(n.details.get("price_source") or "")
        if source.startswith("catalog"):
            out.line(out.paint(f"node {safe(n.hostname)}: $/h is the {safe(source)}", "dim"))
    unpriced = [n for n in nodes if n.details.get("price_hint")]
    if unpriced:
        names = ", ".join(safe(n.hostname) for n in unpriced)
        hint = safe(str(unpriced[0].details["price_hint"]))
        noun = "node" if len(unpriced) == 1 else "nodes"
        out.line(f"{out.paint('note:', 'yellow')} price not set for {noun} {names}: {hint}")
    out.line(out.paint(note, "dim"))
    out.flush()
    return 0


def init_node(
    price: float | None, machine_id: str | None, apply: bool, daemon_json: str, as_json: bool
) -> int:
    setup = Client().init_node(
        price=price, machine_id=machine_id, apply=apply, daemon_json=daemon_json
    )
    settings = setup.settings
    if as_json:
        emit_json({"version": JSON_VERSION, **setup.as_json()})
        return 0
    label_args = " ".join(f"--label-add {k}={v}" for k, v in settings["labels"].items())
    out = console()
    count = len(settings["gpus"])
    out.print(f"this machine: {count}× {settings['labels']['nodus.gpu']} ", end="")
    out.print(f"{settings['labels']['nodus.gpu_memory_gb']} GB")
    out.print(
        f"[bold]1. Docker daemon settings[/] (merge into {daemon_json}, then restart dockerd):"
    )
    out.print(json.dumps(settings["daemon"], indent=2), markup=False)
    out.print(f"[bold]2. NVIDIA container runtime[/] ({setup.runtime_config}):")
    out.print(settings["nvidia_container_runtime"], markup=False)
    out.print("[bold]3. Node labels[/] (on a manager):")
    out.print(
        f"docker node update {label_args} $(docker info -f '{{{{.Swarm.NodeID}}}}')", markup=False
    )
    if not apply:
        out.print("[dim]--apply writes 1 and 2 and sets 3 when this engine is a manager.[/]")
    for line in setup.applied:
        out.print(f"[green]applied:[/] {line}", markup=True)
    return 0
