"""What ``nodus run`` and ``nodus plan`` do with their parsed options: one place that both
the Typer app (:mod:`.app`) and the fast path of ``nodus_cli.__main__`` call.

Why apart from the app: ``nodus run FILE`` and ``nodus plan FILE`` are what users and CI
type most after ``validate``, and Typer costs every start some 30 ms to import and parse.
The fast path parses their plain forms without it; anything else (``--help``, a wrong or
missing option) still goes to Typer, which explains it. Both then land here, so the two
parsers can never mean different things.
"""

from __future__ import annotations

from nodus_cli.structs import struct

__all__ = ["PlanOptions", "RunOptions", "plan", "run"]


# Structs, not dataclasses or named tuples: defined on every `nodus plan` and `nodus run`,
# where a frozen dataclass costs ~1 ms and a named tuple of 14 fields ~0.5 ms.
@struct(frozen=True)
class PlanOptions:
    file: str
    target: str = "catalog"
    catalog: str | None = None
    top: int = 5
    wide: bool = False
    as_json: bool = False


@struct(frozen=True)
class RunOptions:
    file: str
    target: str = "local"
    catalog: str | None = None
    dry_run: bool = False
    detach: bool = False
    retries: int = 0
    env: tuple[str, ...] = ()
    output: str | None = None
    priority: int | None = None
    no_wait: bool = False
    wait_timeout: str | None = None
    top: int = 5
    wide: bool = False
    as_json: bool = False


def plan(o: PlanOptions) -> int:
    from nodus_cli.cli.commands import plan as command

    return command.run(o.file, o.target, o.catalog, o.top, o.as_json, wide=o.wide)


def run(o: RunOptions) -> int:
    if o.dry_run:  # plans against the target `run` would use
        from nodus_cli.cli.commands import plan as planning

        return planning.run(o.file, o.target, o.catalog, o.top, o.as_json, o.wide, dry_run=True)
    from nodus_cli.cli.commands import run as command

    waiting = command.Waiting(o.priority, not o.no_wait, o.wait_timeout)
    return command.run(
        o.file,
        o.target,
        o.catalog,
        o.detach,
        o.retries,
        o.as_json,
        list(o.env) or None,
        o.output,
        waiting,
    )
