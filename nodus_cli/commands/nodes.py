"""``nodus nodes`` and ``nodus swarm init-node``: the cluster's capacity, and joining it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nodus_cli import localhost
from nodus_cli.output import console, emit_json, money
from nodus_cli.problems import NodusError

NOW_NOTE = (
    "What the cluster's nodes hold now, not every configuration a supplier could offer; "
    "free GPUs are those no running task reserves."
)


def run(as_json: bool) -> int:
    from nodus_cli import swarm

    client = swarm.manager_client()
    nodes = swarm.list_nodes(client)
    if as_json:
        emit_json({"nodes": [n.as_json() for n in nodes], "note": NOW_NOTE})
        return 0
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_edge=False, box=None)
    for col in ("node", "state", "role", "CPUs", "memory", "GPUs", "free", "GPU", "$/h"):
        table.add_column(col, justify="right" if col in ("CPUs", "GPUs", "free", "$/h") else "left")
    for n in nodes:
        gpu = f"{n.gpu} {n.gpu_memory_gb:g} GB" if n.gpu and n.gpu_memory_gb else (n.gpu or "-")
        table.add_row(
            escape(n.hostname),
            n.state if n.availability == "active" else f"{n.state} ({n.availability})",
            n.role,
            f"{n.cpus:g}",
            f"{n.memory_gb:g} GB",
            str(n.gpus),
            str(n.free_gpus),
            escape(gpu),
            money(n.price_per_hour) if n.price_source != "not set" else "-",
        )
    out = console()
    out.print(table)
    out.print(f"[dim]{NOW_NOTE}[/]")
    return 0


def node_settings(
    found: list[localhost.LocalGpu], price: float | None, machine_id: str | None
) -> dict[str, Any]:
    """The daemon settings and node labels that make this machine a GPU node for nodus."""
    if not found:
        raise NodusError(
            "nvidia-smi reports no GPU on this machine: nothing to declare",
            hint="install the NVIDIA driver and nvidia-container-toolkit first",
        )
    families = {g.family or g.product for g in found}
    if len(families) > 1:
        raise NodusError(
            f"this machine has several GPU models ({', '.join(sorted(families))}); a node "
            "label can name only one: declare one model's GPUs by hand"
        )
    family = found[0].family or found[0].product
    labels = {
        "nodus.gpu": family,
        "nodus.gpu_memory_gb": f"{min(g.nominal_memory_gb for g in found):g}",
    }
    if price is not None:
        labels["nodus.price_per_hour"] = f"{price:g}"
    if machine_id is not None:
        labels["nodus.machine_id"] = machine_id
    return {
        "daemon": {
            "node-generic-resources": [f"NVIDIA-GPU={g.uuid}" for g in found],
            "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}},
            "default-runtime": "nvidia",
        },
        "nvidia_container_runtime": 'swarm-resource = "DOCKER_RESOURCE_NVIDIA-GPU"',
        "labels": labels,
    }


def init_node(
    price: float | None, machine_id: str | None, apply: bool, daemon_json: str, as_json: bool
) -> int:
    settings = node_settings(localhost.query_gpus(), price, machine_id)
    label_args = " ".join(f"--label-add {k}={v}" for k, v in settings["labels"].items())
    applied: list[str] = []
    if apply:
        applied = _apply(settings, Path(daemon_json))
    if as_json:
        emit_json({**settings, "applied": applied})
        return 0
    out = console()
    out.print(
        f"[bold]1. Docker daemon settings[/] (merge into {daemon_json}, then restart dockerd):"
    )
    out.print(json.dumps(settings["daemon"], indent=2), markup=False)
    out.print("[bold]2. NVIDIA runtime[/] (/etc/nvidia-container-runtime/config.toml):")
    out.print(settings["nvidia_container_runtime"], markup=False)
    out.print("[bold]3. Node labels[/] (on a manager):")
    out.print(
        f"docker node update {label_args} $(docker info -f '{{{{.Swarm.NodeID}}}}')", markup=False
    )
    for line in applied:
        out.print(f"[green]applied:[/] {line}")
    return 0


def _apply(settings: dict[str, Any], path: Path) -> list[str]:
    done = []
    current: dict[str, Any] = {}
    if path.exists():
        try:
            current = json.loads(path.read_text("utf-8") or "{}")
        except (OSError, json.JSONDecodeError) as exc:
            raise NodusError(f"{path}: cannot read it as JSON: {exc}") from None
    merged = {**current, **settings["daemon"]}
    merged["runtimes"] = {**current.get("runtimes", {}), **settings["daemon"]["runtimes"]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(merged, indent=2) + "\n", "utf-8")
    except OSError as exc:
        raise NodusError(f"{path}: cannot write it: {exc}", hint="run as root") from None
    done.append(f"wrote {path} (restart dockerd to take it into account)")
    from nodus_cli import engine

    client = engine.connect()
    info = client.info().get("Swarm") or {}
    if info.get("ControlAvailable"):
        node = client.nodes.get(info["NodeID"])
        spec = node.attrs["Spec"]
        spec["Labels"] = {**(spec.get("Labels") or {}), **settings["labels"]}
        node.update(spec)
        done.append(f"labelled node {info['NodeID'][:12]}")
    else:
        done.append("not a manager: run the `docker node update` command above on a manager")
    return done
