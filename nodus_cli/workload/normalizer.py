"""The workload rules: raw TOML (or the Python API's arguments) to a normalized workload.

Normalizing collects *all* problems of a document in one pass (a CI run should show every
mistake at once; past :data:`~nodus_cli.workload.report.MAX_PROBLEMS` they are counted)
and never raises for bad input. The result is the plain data of
:mod:`nodus_cli.workload.model`. This module is the entry point and the top level of the
file: it reads each top-level key with the rule module of its subject
(:mod:`nodus_cli.workload.rules`), all reporting to one
:class:`~nodus_cli.workload.report.ProblemReport`, and builds the stages: the one ``main`` stage,
or ``[[stages]]`` completed from the top level.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodus_cli import collector
from nodus_cli.workload.lineindex import LineIndex
from nodus_cli.workload.model import (
    DEFAULT_PRIORITY,
    REQUIREMENT_KEYS,
    TOP_LEVEL_KEYS,
    Result,
    Stage,
    Workload,
)
from nodus_cli.workload.report import ProblemReport
from nodus_cli.workload.rules import (
    command,
    fanout,
    keys,
    mounts,
    paths,
    ports,
    requirements,
    stages,
    values,
)
from nodus_cli.workload.tomlsource import LoadFailure, parse, read_text

__all__ = ["load_file", "load_text", "normalize"]


def load_file(path: Path, display: str | None = None) -> Result:
    """Read, parse and normalize one workload file; relative paths in it (``mounts``,
    ``map.over``, ``output_dir``) are relative to the file's folder.

    The default name is the file name without ``.toml`` (and without ``.nodus`` for a
    ``train.nodus.toml``).
    """
    shown = display if display is not None else str(path)
    try:
        text = read_text(path)
    except LoadFailure as failure:
        return Result(shown, None, [failure.problem])
    name = path.stem.removesuffix(".nodus") if path.stem != ".nodus" else path.stem
    return load_text(text, shown, default_name=name, base_dir=path.resolve().parent)


def load_text(
    text: str,
    path: str = "<string>",
    default_name: str = "workload",
    base_dir: Path | None = None,
) -> Result:
    # A large document holds many containers (see nodus_cli.collector). The collector
    # resumes once the parsed document and the line index are gone, so its first
    # collection has little left to look at.
    with collector.paused():
        result = _load_text(text, path, default_name, base_dir)
    return result


def _load_text(text: str, path: str, default_name: str, base_dir: Path | None) -> Result:
    try:
        doc = parse(text)
    except LoadFailure as failure:
        return Result(path, None, [failure.problem])
    return normalize(
        doc, path=path, default_name=default_name, lines=LineIndex(text), base_dir=base_dir
    )


def normalize(
    doc: dict[str, Any],
    path: str = "<workload>",
    default_name: str = "workload",
    lines: LineIndex | None = None,
    *,
    base_dir: Path | None = None,
    mapping_wins: bool = False,
) -> Result:
    """Check every rule of ``doc`` and build the normalized workload.

    ``base_dir`` is the folder relative paths are resolved against (default: the working
    directory). ``mapping_wins`` is the Python API's rule: a key of the ``requirements``
    mapping wins over the matching flat shortcut, where a file must not set both.
    """
    report = ProblemReport(lines, path, base_dir or Path.cwd())
    workload = _workload(report, doc, default_name, mapping_wins)
    problems = report.ordered()
    has_errors = any(p.severity == "error" for p in problems)
    return Result(path, None if has_errors else workload, problems)


def _workload(
    report: ProblemReport, doc: dict[str, Any], default_name: str, mapping_wins: bool
) -> Workload:
    """The top level of the file, then its stages. The order of the calls is the order of
    the problems that share a line (an inline table): keep it."""
    keys.check(report, doc, (), TOP_LEVEL_KEYS, where="top")
    nested_raw = doc.get("requirements", {})
    if not isinstance(nested_raw, dict):
        report.error(
            ("requirements",),
            "must be a table: write [requirements] on its own line, with one key = value "
            "per line below it",
        )
        nested_raw = {}
    keys.check(report, nested_raw, ("requirements",), REQUIREMENT_KEYS, where="requirements")

    name = values.string(report, doc, ("name",)) or default_name
    image = values.image(report, doc, ("image",))
    argv, shell = command.command(report, doc, ("command",))
    entrypoint = command.entrypoint(report, doc, ("entrypoint",))
    if argv is not None and shell and entrypoint is not None:
        command.shell_and_entrypoint(report, argv[2], ("command",), entrypoint, ("entrypoint",))
    env = command.env(report, doc.get("env"), ("env",))
    model = values.string(report, doc, ("model",))
    budget = values.positive(report, doc, ("budget",), "USD for the whole run")
    own_mounts = mounts.mounts(report, doc, ())
    own_ports = ports.ports(report, doc, ())
    output_dir = paths.output_dir(report, doc)
    priority = values.priority(report, doc, ("priority",))
    wait_timeout = values.duration(report, doc, ("wait_timeout",))

    reqs = requirements.requirements(report, doc, nested_raw, (), mapping_wins)
    declared = "stages" in doc
    if declared:
        if "map" in doc:
            report.error(
                ("map",),
                "with [[stages]], [map] belongs in the stage that fans out: move it into "
                "that stage as [stages.map] (each stage runs its own command)",
            )
        base = stages.Inherited(image, argv, shell, entrypoint, env, own_mounts, own_ports, reqs)
        steps = stages.stages(report, doc.get("stages"), base, mapping_wins)
        if steps:
            stages.unused_requirements(report, doc, nested_raw)
    else:
        if image is None and "image" not in doc:
            report.error(("image",), 'required: set image = "registry/name:tag" at the top level')
        fan_out = fanout.map_spec(report, doc["map"], ("map",)) if "map" in doc else None
        published = ports.distinct(report, [], own_ports)
        if fan_out is not None and published:
            report.error(("ports",), ports.WITH_MAP)
        steps = [
            Stage(
                "main",
                image or "",
                argv,
                env,
                reqs,
                entrypoint=entrypoint,
                mounts=mounts.distinct(report, [], own_mounts),
                ports=published,
                map=fan_out,
                shell=shell,
            )
        ]
    return Workload(
        name=name,
        image=image,
        command=argv,
        env=env,
        model=model,
        budget=budget,
        requirements=reqs,
        stages=steps,
        declared_stages=declared,
        output_dir=output_dir,
        priority=DEFAULT_PRIORITY if priority is None else priority,
        wait_timeout=wait_timeout,
    )
