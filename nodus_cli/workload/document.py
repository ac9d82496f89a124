"""The workload as a file again: :func:`to_toml` writes a file that normalizes to the same
workload (idempotent), stating every stage completely."""

from __future__ import annotations

from typing import Any

from nodus_cli.workload.model import Requirements, Workload


def to_toml(workload: Workload) -> str:
    """A workload file that normalizes to this workload again (``to_toml`` is idempotent).

    Stages are written with their effective requirements (after inheritance), so the
    file states every stage completely; values that mean "not set" are left out.
    """
    import tomli_w

    doc: dict[str, Any] = {"name": workload.name}
    if workload.image is not None:
        doc["image"] = workload.image
    if workload.command is not None:
        doc["command"] = list(workload.command)
    if workload.model is not None:
        doc["model"] = workload.model
    if workload.budget is not None:
        doc["budget"] = workload.budget
    if workload.env:
        doc["env"] = dict(workload.env)
    doc["requirements"] = _requirements_table(workload.requirements)
    if workload.declared_stages:
        stages = []
        for stage in workload.stages:
            table: dict[str, Any] = {"name": stage.name, "image": stage.image}
            if stage.command is not None:
                table["command"] = list(stage.command)
            if stage.env:
                table["env"] = dict(stage.env)
            table["requirements"] = _requirements_table(stage.requirements)
            stages.append(table)
        doc["stages"] = stages
    return tomli_w.dumps(doc)


def _requirements_table(reqs: Requirements) -> dict[str, Any]:
    table = {k: v for k, v in reqs.as_json().items() if v is not None}
    if not reqs.gpu_count:
        table.pop("gpu_count", None)
    if table.get("gpu_interconnect") == "any":
        table.pop("gpu_interconnect")  # the only value, and the default
    return table
