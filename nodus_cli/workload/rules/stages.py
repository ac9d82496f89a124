"""What a stage takes from the workload: ``[[stages]]`` and inheritance.

Contract: :func:`stages` checks each ``[[stages]]`` table with the same rule modules as
the top level, then completes it from :class:`Inherited`, what the top level of the file
wrote: the image, command, entrypoint, env, mounts and ports a stage omits; ``cpu`` and
``disk_gb`` when it sets none; ``location``, ``max_price_per_hour`` and ``arch`` always
(they apply to the whole workload: a stage may repeat them, not change them). GPU
requirements and ``memory_gb`` are never inherited (a CPU-only step stays CPU-only):
:func:`unused_requirements` warns when the top level sets them next to ``[[stages]]``.
Stage names are unique; a stage without one is ``stage-N``.
"""

from __future__ import annotations

import re
from typing import Any

from nodus_cli.structs import replace
from nodus_cli.workload.lineindex import Key
from nodus_cli.workload.model import (
    FLAT_SHORTCUTS,
    NOT_INHERITED,
    REQUIREMENT_KEYS,
    STAGE_KEYS,
    WHOLE_WORKLOAD,
    Mount,
    Port,
    Requirements,
    Stage,
)
from nodus_cli.workload.report import ProblemReport, clip, toml
from nodus_cli.workload.rules import command, fanout, keys, mounts, ports, requirements, values

__all__ = ["Inherited", "stages", "unused_requirements"]

_STAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
#: GPU requirements whose unused top-level value the warning describes as a GPU ask.
_GPU_KEYS = ("gpu", "gpu_count", "peak_memory_gb", "share_gpu")


class Inherited:
    """What stages take from the top level of the file (each entry with its key path).

    A plain class, not a dataclass: defining a dataclass is paid at every start of ``nodus
    validate`` (benchmarks/README.md), and this one never leaves the normalizer.
    """

    __slots__ = (
        "command",
        "entrypoint",
        "env",
        "image",
        "mounts",
        "ports",
        "requirements",
        "shell",
    )

    def __init__(
        self,
        image: str | None,
        command: list[str] | None,
        shell: bool,
        entrypoint: list[str] | None,
        env: dict[str, str],
        mounts: list[tuple[Mount, Key]],
        ports: list[tuple[Port, Key]],
        requirements: Requirements,
    ) -> None:
        self.image = image
        self.command = command
        self.shell = shell
        self.entrypoint = entrypoint
        self.env = env
        self.mounts = mounts
        self.ports = ports
        self.requirements = requirements


def stages(report: ProblemReport, raw: Any, base: Inherited, mapping_wins: bool) -> list[Stage]:
    """The ``[[stages]]`` array: each stage checked, and completed with what it inherits."""
    if not isinstance(raw, list) or not all(isinstance(s, dict) for s in raw):
        report.error(
            ("stages",),
            "must be an array of tables: write each stage as a [[stages]] table with "
            'name = "..." below it',
        )
        return []
    if not raw:
        report.error(("stages",), "is empty: add [[stages]] tables or remove `stages`")
        return []
    seen: dict[str, int] = {}
    found: list[Stage] = []
    for index, table in enumerate(raw):
        prefix: Key = ("stages", index)
        keys.check(report, table, prefix, STAGE_KEYS, where="stage")
        nested = table.get("requirements", {})
        if not isinstance(nested, dict):
            report.error(
                (*prefix, "requirements"),
                "must be a table: write [stages.requirements] after this stage's keys",
            )
            nested = {}
        keys.check(
            report, nested, (*prefix, "requirements"), REQUIREMENT_KEYS, where="stage_requirements"
        )
        name = _name(report, table, prefix, seen, index)
        stage_image = values.image(report, table, (*prefix, "image"))
        if stage_image is None and "image" not in table:
            stage_image = base.image
            if base.image is None:
                report.error(
                    (*prefix, "image"),
                    'no image: set image = "registry/name:tag" at the top level or in this stage',
                )
        argv, shell, entrypoint = _command(report, table, prefix, base)
        stage_env = {**base.env, **command.env(report, table.get("env"), (*prefix, "env"))}
        effective = _requirements(report, table, nested, prefix, base.requirements, mapping_wins)
        stage_mounts = mounts.distinct(report, base.mounts, mounts.mounts(report, table, prefix))
        own_ports = ports.ports(report, table, prefix)
        published = ports.distinct(report, base.ports, own_ports)
        fan_out = (
            fanout.map_spec(report, table["map"], (*prefix, "map")) if "map" in table else None
        )
        if fan_out is not None and published:
            if own_ports:
                report.error((*prefix, "ports"), ports.WITH_MAP)
            else:
                report.error(
                    (*prefix, "map"),
                    f"this stage takes the workload's ports{report.at_line(('ports',))}, but "
                    f"{ports.WITH_MAP_WHY}: move ports into the stages that serve them",
                )
        found.append(
            Stage(
                name or f"stage-{index}",
                stage_image or "",
                argv,
                stage_env,
                effective,
                entrypoint=entrypoint,
                mounts=stage_mounts,
                ports=published,
                map=fan_out,
                shell=shell,
            )
        )
    return found


def _name(
    report: ProblemReport, table: dict[str, Any], prefix: Key, seen: dict[str, int], index: int
) -> str | None:
    name = values.string(report, table, (*prefix, "name"))
    if "name" not in table:
        report.error(prefix, 'every stage needs a name: add name = "..." to this [[stages]]')
    if name is None:
        return None
    if not _STAGE_NAME.match(name):
        report.error(
            (*prefix, "name"),
            f'"{clip(name)}" is not a valid stage name: use letters, digits, ".", '
            '"_" or "-", starting with a letter or digit, at most 63 characters',
        )
    elif name in seen:
        first = seen[name]
        report.error(
            (*prefix, "name"),
            f'"{name}" is already the name of stages[{first}]'
            f"{report.at_line(('stages', first, 'name'))}: stage names must be unique",
        )
    else:
        seen[name] = index
    return name


def _requirements(
    report: ProblemReport,
    table: dict[str, Any],
    nested: dict[str, Any],
    prefix: Key,
    whole: Requirements,
    mapping_wins: bool,
) -> Requirements:
    """The stage's own requirements, completed with those it takes from the workload."""
    own = requirements.requirements(report, table, nested, prefix, mapping_wins, unset=whole)
    for key in WHOLE_WORKLOAD:
        mine, theirs = getattr(own, key), getattr(whole, key)
        if mine is not None and theirs is not None and mine != theirs:
            report.error(
                (*prefix, "requirements", key),
                f"the whole workload has {key} = {toml(theirs)}, which applies to every "
                f"stage: remove {key} here or change it at the top level",
            )
    return replace(
        own,
        location=whole.location or own.location,
        max_price_per_hour=whole.max_price_per_hour or own.max_price_per_hour,
        arch=whole.arch or own.arch,
    )


def _command(
    report: ProblemReport, table: dict[str, Any], prefix: Key, base: Inherited
) -> tuple[list[str] | None, bool, list[str] | None]:
    """The stage's command, shell flag and entrypoint, each inherited when omitted."""
    command_key: Key = ("command",)
    argv, shell = base.command, base.shell
    if "command" in table:
        command_key = (*prefix, "command")
        argv, shell = command.command(report, table, command_key)
    entrypoint_key: Key = ("entrypoint",)
    entrypoint = base.entrypoint
    if "entrypoint" in table:
        entrypoint_key = (*prefix, "entrypoint")
        entrypoint = command.entrypoint(report, table, entrypoint_key)
    own = "command" in table or "entrypoint" in table  # else the top level said it
    if own and argv is not None and shell and entrypoint is not None:
        command.shell_and_entrypoint(report, argv[2], command_key, entrypoint, entrypoint_key)
    return argv, shell, entrypoint


def unused_requirements(report: ProblemReport, doc: dict[str, Any], nested: dict[str, Any]) -> None:
    """Workload-level GPU and memory requirements reach no stage: say so, with the fix."""
    for key in NOT_INHERITED:
        path: Key | None = None
        if key in doc and key in FLAT_SHORTCUTS:
            path, raw, here = (key,), doc[key], "at the top level"
        elif key in nested:
            path, raw, here = ("requirements", key), nested[key], "in [requirements]"
        if path is None:
            continue
        line = f"{key} = {toml(raw)}"
        if key in _GPU_KEYS:
            own = "each stage asks for its own GPU"
            where = "as a stage key or in [stages.requirements]"
        else:
            own = f"each stage sets its own {key}"
            where = "in [stages.requirements]"
        report.warn(
            path,
            f"{line} {here} reaches no stage: with [[stages]], {own}; add {line} to the "
            f"stages that need it ({where}) or remove it here",
        )
