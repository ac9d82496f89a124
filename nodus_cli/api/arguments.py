"""Keyword arguments as a workload: what ``client.run(...)`` and ``client.workload(...)``
are given (the workload file's keys, :class:`Requirements` their typed table), checked by
the file's rules.

Why a module of its own: a Python function call's workload (:mod:`nodus_cli.api.calling`)
is these arguments' workload plus the function's own rules, and the client calls that; with
the arguments' rules here, neither module needs the other's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_cli.errors import InvalidWorkload
from nodus_cli.structs import fields, replace, struct

if TYPE_CHECKING:
    from nodus_cli.workload import Workload

__all__ = ["Requirements", "workload_of"]


@struct(frozen=True, kw_only=True)
class Requirements:
    """The ``[requirements]`` table, typed. Unset fields (None) are left out."""

    gpu: str | None = None
    gpu_count: int | None = None
    peak_memory_gb: float | None = None
    gpu_interconnect: str | None = None
    optimization: str | None = None
    share_gpu: bool | None = None
    cpu: float | None = None
    memory_gb: float | None = None
    disk_gb: float | None = None
    location: str | None = None
    max_price_per_hour: float | None = None
    arch: str | None = None

    def as_dict(self) -> dict[str, Any]:
        values = ((f.name, getattr(self, f.name)) for f in fields(self))
        return {name: value for name, value in values if value is not None}


def workload_of(arguments: Mapping[str, Any]) -> Workload:
    """The workload of ``client.run()``'s keyword arguments (InvalidWorkload lists every
    problem)."""
    from nodus_cli.workload import normalize
    from nodus_cli.workload.hints import in_python

    doc = _document(arguments)
    image = doc.get("image")
    default = str(image).rsplit("/", 1)[-1].split(":")[0] if isinstance(image, str) else "run"
    result = normalize(
        doc,
        path="client.run()",
        default_name=default or "run",
        mapping_wins=True,
        base_dir=Path.cwd(),
    )
    if result.workload is None:
        # The rules word their problems for a file; a caller passed keywords.
        said = [replace(p, message=in_python(p.message)) for p in result.problems]
        raise InvalidWorkload(said, "client.run()")
    return result.workload


def _document(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments as the document a workload file would parse to."""
    doc: dict[str, Any] = {}
    for key, value in arguments.items():
        if value is None:
            continue
        doc[key] = _plain(value)
    return doc


def _plain(value: Any) -> Any:
    """Typed values (Requirements, paths, tuples) as the TOML types the rules expect."""
    if isinstance(value, Requirements):
        return value.as_dict()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
