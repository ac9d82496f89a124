"""Making a machine a GPU node of a Swarm cluster for nodus (``nodus swarm init-node``).

What nodus needs of a node: its GPUs declared as generic resources of kind
``NVIDIA-GPU`` (the daemon's ``node-generic-resources``), the NVIDIA runtime as the
default runtime, ``swarm-resource`` set in the NVIDIA container runtime's configuration
(``/etc/nvidia-container-runtime/config.toml``, or ``NODUS_NVIDIA_RUNTIME_CONFIG``), and
the node labels that say which GPU it holds and what it costs. :func:`init_node` works
them out from what ``nvidia-smi`` reports; with ``apply`` it writes the daemon settings,
sets the runtime's, and labels the node when its engine is a Swarm manager.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from nodus_cli.errors import NodusError
from nodus_cli.hardware import smi
from nodus_cli.structs import field, struct

__all__ = ["RUNTIME_CONFIG", "SWARM_RESOURCE", "NodeSetup", "init_node", "node_settings"]

RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
SWARM_RESOURCE = 'swarm-resource = "DOCKER_RESOURCE_NVIDIA-GPU"'


@struct(frozen=True)
class NodeSetup:
    """The settings that make this machine a nodus GPU node, and what was applied."""

    settings: dict[str, Any]
    daemon_json: Path
    #: The NVIDIA container runtime's configuration file this machine uses.
    runtime_config: str
    applied: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {**self.settings, "applied": list(self.applied)}


def init_node(
    price: float | None, machine_id: str | None, apply: bool, daemon_json: Path
) -> NodeSetup:
    """The settings for this machine's GPUs; with ``apply``, written and set."""
    settings = node_settings(smi.query_gpus(), price, machine_id)
    applied = _apply(settings, daemon_json) if apply else []
    return NodeSetup(settings, daemon_json, _runtime_config(), applied)


def node_settings(
    found: list[smi.LocalGpu], price: float | None, machine_id: str | None
) -> dict[str, Any]:
    """The daemon settings and node labels that make this machine a GPU node for nodus."""
    if not found:
        raise NodusError(
            "nvidia-smi reports no GPU on this machine: nothing to declare",
            hint="install the NVIDIA driver and nvidia-container-toolkit first",
        )
    models: dict[str, list[str]] = {}
    for g in found:
        models.setdefault(g.family or g.product, []).append(g.uuid)
    if len(models) > 1:
        counts = ", ".join(f"{len(u)}× {m}" for m, u in models.items())
        each = "; ".join(
            f"{m}: " + ", ".join(f"NVIDIA-GPU={uuid}" for uuid in u) for m, u in models.items()
        )
        raise NodusError(
            f"this machine has several GPU models ({counts}); a Swarm node offers its "
            "NVIDIA-GPU generic resources as one model (they cannot be told apart, and "
            "the nodus.gpu label names one), so nodus declares one model per node",
            hint="choose one model and write its GPUs as node-generic-resources in "
            f"daemon.json, with the label nodus.gpu=MODEL ({each}); the others stay outside "
            "Swarm (the local target still runs on every model)",
        )
    unknown = [g.product for g in found if g.family is None]
    if unknown:
        raise NodusError(
            f"nodus does not know the GPU model {unknown[0]!r}: it cannot label this node",
            hint="`nodus gpus` lists the models nodus knows",
        )
    family = found[0].family or found[0].product
    labels = {
        "nodus.gpu": family,
        "nodus.gpu_memory_gb": f"{min(g.nominal_memory_gb for g in found):g}",
    }
    if price is not None:
        if price < 0:
            raise NodusError("--price must be >= 0 (USD per hour)", exit_code=2)
        labels["nodus.price_per_hour"] = f"{price:g}"
    if machine_id is not None:
        labels["nodus.machine_id"] = machine_id
    return {
        "gpus": [
            {"uuid": g.uuid, "name": g.product, "memory_gb": g.nominal_memory_gb} for g in found
        ],
        "daemon": {
            "node-generic-resources": [f"NVIDIA-GPU={g.uuid}" for g in found],
            "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}},
            "default-runtime": "nvidia",
        },
        "nvidia_container_runtime": SWARM_RESOURCE,
        "labels": labels,
    }


def _runtime_config() -> str:
    return os.environ.get("NODUS_NVIDIA_RUNTIME_CONFIG") or RUNTIME_CONFIG


def _apply(settings: dict[str, Any], path: Path) -> list[str]:
    done = [_write_daemon_json(settings, path)]
    done.append(_write_runtime_config(Path(_runtime_config())))
    done.append(_label_node(settings["labels"]))
    return done


def _write_daemon_json(settings: dict[str, Any], path: Path) -> str:
    current: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = json.loads(path.read_text("utf-8") or "{}")
        except (OSError, json.JSONDecodeError) as exc:
            raise NodusError(f"{path}: cannot read it as JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise NodusError(f"{path}: not a JSON object")
        current = loaded
    merged = {**current, **settings["daemon"]}
    merged["runtimes"] = {**(current.get("runtimes") or {}), **settings["daemon"]["runtimes"]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(merged, indent=2) + "\n", "utf-8")
    except OSError as exc:
        raise NodusError(f"{path}: cannot write it: {exc}", hint="run as root") from None
    return f"wrote {path} (restart dockerd to take it into account)"


def _write_runtime_config(path: Path) -> str:
    """Set ``swarm-resource`` (a top-level key) in the NVIDIA runtime's config.toml."""
    if not path.exists():
        return (
            f"not written: {path} does not exist (install nvidia-container-toolkit, then "
            f"set {SWARM_RESOURCE} in it)"
        )
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise NodusError(f"{path}: cannot read it: {exc}") from None
    pattern = re.compile(r"^[ \t]*#?[ \t]*swarm-resource[ \t]*=.*$", re.MULTILINE)
    if pattern.search(text):
        new = pattern.sub(SWARM_RESOURCE, text, count=1)
    else:
        new = SWARM_RESOURCE + "\n" + text  # before any [table]: a top-level key
    if new == text:
        return f"{path} already sets {SWARM_RESOURCE}"
    try:
        path.write_text(new, "utf-8")
    except OSError as exc:
        raise NodusError(f"{path}: cannot write it: {exc}", hint="run as root") from None
    return f"set {SWARM_RESOURCE} in {path}"


def _label_node(labels: dict[str, str]) -> str:
    from nodus_cli.targets import swarm
    from nodus_cli.targets.docker import engine

    api = swarm.connect()
    try:
        info = api.info().get("Swarm") or {}
        if info.get("LocalNodeState") != "active":
            return (
                "not labelled: this engine is not in a Swarm yet; join it, then run the "
                "`docker node update` command above on a manager"
            )
        if not info.get("ControlAvailable"):
            return (
                "not labelled: this engine is a worker; run the `docker node update` "
                "command above on a manager"
            )
        node = api.node(info["NodeID"])
        spec = dict(node.get("Spec") or {})
        spec["Labels"] = {**(spec.get("Labels") or {}), **labels}
        api.update_node(info["NodeID"], int(node["Version"]["Index"]), spec)
    except engine.EngineUnreachable as exc:
        raise exc.as_nodus_error() from None
    except (engine.EngineError, engine.EngineTimeout) as exc:
        raise NodusError(f"cannot label this node: {exc}") from None
    shown = ", ".join(f"{k}={v}" for k, v in labels.items())
    return f"labelled node {info['NodeID'][:12]}: {shown}"
