"""The workload as a file again: :func:`to_toml` writes a file that normalizes to the same
workload (idempotent), stating every stage completely."""

from __future__ import annotations

from typing import Any

from nodus_cli.workload.model import MapSpec, Mount, Port, Requirements, Stage, Workload


def to_toml(workload: Workload) -> str:
    """A workload file that normalizes to this workload again (``to_toml`` is idempotent).

    Stages are written with their effective requirements, command, entrypoint, mounts and
    ports (after inheritance), so the file states every stage completely; values that mean
    "not set" are left out. Paths are written absolute (mounts, ``output_dir``), so the file
    means the same wherever it is saved, and ``[map]`` lists its items inline (``over`` was
    read when the workload was normalized).
    """
    import tomli_w  # lazy, for start-up: validate and plan never write a workload file

    doc: dict[str, Any] = {"name": workload.name}
    if workload.image is not None:
        doc["image"] = workload.image
    if workload.declared_stages:
        if workload.command is not None:
            doc["command"] = list(workload.command)  # each stage states its own below
    else:
        _run_keys(doc, workload.stages[0])
    if workload.model is not None:
        doc["model"] = workload.model
    if workload.budget is not None:
        doc["budget"] = workload.budget
    if workload.output_dir is not None:
        doc["output_dir"] = workload.output_dir
    if workload.env:
        doc["env"] = dict(workload.env)
    doc["requirements"] = _requirements_table(workload.requirements)
    if workload.declared_stages:
        stages = []
        for stage in workload.stages:
            table: dict[str, Any] = {"name": stage.name, "image": stage.image}
            _run_keys(table, stage)
            if stage.env:
                table["env"] = dict(stage.env)
            table["requirements"] = _requirements_table(stage.requirements)
            if stage.map is not None:
                table["map"] = _map_table(stage.map)
            stages.append(table)
        doc["stages"] = stages
    elif workload.stages[0].map is not None:
        doc["map"] = _map_table(workload.stages[0].map)
    return tomli_w.dumps(doc)


def _run_keys(table: dict[str, Any], stage: Stage) -> None:
    """command (a string when it was one), entrypoint, mounts and ports of one stage."""
    if stage.command is not None:
        shell = stage.shell and len(stage.command) == 3
        table["command"] = stage.command[2] if shell else list(stage.command)
    if stage.entrypoint is not None:
        table["entrypoint"] = list(stage.entrypoint)
    if stage.mounts:
        table["mounts"] = [_mount(m) for m in stage.mounts]
    if stage.ports:
        table["ports"] = [_port(p) for p in stage.ports]


def _mount(mount: Mount) -> str:
    return f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")


def _port(port: Port) -> int | str:
    if port.host_ip is None and port.host == port.container and port.protocol == "tcp":
        return port.host
    address = ""
    if port.host_ip is not None:
        address = f"[{port.host_ip}]:" if ":" in port.host_ip else f"{port.host_ip}:"
    suffix = "/udp" if port.protocol == "udp" else ""
    return f"{address}{port.host}:{port.container}{suffix}"


def _map_table(spec: MapSpec) -> dict[str, Any]:
    table: dict[str, Any] = {"items": list(spec.items)}
    if spec.parallel is not None:
        table["parallel"] = spec.parallel
    return table


def _requirements_table(reqs: Requirements) -> dict[str, Any]:
    table = {k: v for k, v in reqs.as_json().items() if v is not None}
    if not reqs.gpu_count:
        table.pop("gpu_count", None)
    if table.get("gpu_interconnect") == "any":
        table.pop("gpu_interconnect")  # the only value, and the default
    if not reqs.share_gpu:
        table.pop("share_gpu")
    return table
