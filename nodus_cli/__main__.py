"""Entry point: turns every error the user can act on into a message and an exit code.

``nodus validate`` runs in CI on every commit, often on hundreds of files, and ``nodus
plan FILE`` / ``nodus run FILE`` are what users type most: their plain forms are parsed
here without Typer (whose import is about half of nodus's start-up). Anything this small
parser does not know (``--help``, a misspelt option, no path, a value out of range) goes
to the Typer application, which explains it; both paths call the same functions
(``commands.validate.run``, :mod:`nodus_cli.cli.invoke`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

_FORMATS = ("text", "github", "json")


def main(argv: list[str] | None = None) -> int:
    """Run one command line (``sys.argv[1:]`` by default); its exit code."""
    return _main(sys.argv[1:] if argv is None else list(argv))[0]


def entry() -> None:
    """The ``nodus`` command (and ``python -m nodus_cli``): :func:`main`, then the exit.

    After a plain ``validate``, ``plan`` or ``run``, only this package and the standard
    library have run, every file and record is written and closed, and tearing the
    interpreter down (freeing each module's objects just before the process ends) is
    30-50 ms of a command that takes a few hundred: those leave at once, once the exit
    handlers have run and the output is flushed, when no other thread is alive.
    """
    code, fast = _main(sys.argv[1:])
    if fast:
        _leave(code)
    sys.exit(code)


def _leave(code: int) -> None:
    """Exit now, skipping the interpreter's teardown; return instead when a thread the
    normal exit waits for is still alive (not a daemon), a job of a lane
    (:mod:`nodus_cli.lanes`, whose idle threads are daemons) still runs, or the output
    cannot be flushed."""
    import atexit
    import threading

    main = threading.main_thread()
    if any(t is not main and not t.daemon for t in threading.enumerate()):
        return
    lanes = sys.modules.get("nodus_cli.lanes")
    if lanes is not None and lanes.busy():
        return
    atexit._run_exitfuncs()  # what the normal exit runs first (the store's close, ...)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # a closed pipe: the normal exit says nothing more about it than we would
    os._exit(code)


def _main(args: list[str]) -> tuple[int, bool]:
    """The exit code, and whether a fast path (no Typer) answered."""
    from nodus_cli.errors import NodusError

    try:
        code = _validate(args)
        if code is None:
            code = _plan_or_run(args)
        if code is not None:
            return code, True
        from nodus_cli.cli.app import app

        app(args=args, prog_name="nodus", standalone_mode=True)
    except SystemExit as exc:
        given = exc.code
        return (given if isinstance(given, int) else (0 if given is None else 1)), False
    except NodusError as exc:
        from nodus_cli.cli.output import fail

        fail(exc.message, exc.hint)
        return exc.exit_code, False
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130, False
    except Exception as exc:  # a bug in nodus, not bad input: say so briefly
        if os.environ.get("NODUS_DEBUG"):
            raise
        print(
            f"nodus: internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in nodus; run again with NODUS_DEBUG=1 for the details.",
            file=sys.stderr,
        )
        return 70, False
    return 0, False


def _validate(args: list[str]) -> int | None:
    """``nodus validate [--json] [--format F] [--strict] PATH...``, or None for Typer."""
    if not args or args[0] != "validate":
        return None
    fmt, strict, paths = "text", False, list[str]()
    rest = iter(args[1:])
    for arg in rest:
        if arg == "--json":
            fmt = "json"
        elif arg == "--strict":
            strict = True
        elif arg == "--format" or arg.startswith("--format="):
            value = arg.partition("=")[2] if "=" in arg else next(rest, None)
            if value not in _FORMATS:
                return None
            fmt = "json" if fmt == "json" else str(value)
        elif arg == "--":
            paths.extend(rest)
        elif arg.startswith("-"):
            return None
        else:
            paths.append(arg)
    if not paths:
        return None
    from nodus_cli.cli.commands import validate

    return validate.run(paths, fmt, strict)


#: ``nodus plan FILE`` and ``nodus run FILE``: their plain options, for the fast path.
_PLAN_FLAGS = {"--json": "as_json", "--wide": "wide"}
_PLAN_VALUES = {"--target": "target", "--catalog": "catalog", "--top": "top"}
_RUN_FLAGS = {
    **_PLAN_FLAGS,
    "--dry-run": "dry_run",
    "--detach": "detach",
    "-d": "detach",
    "--no-wait": "no_wait",
}
_RUN_VALUES = {
    **_PLAN_VALUES,
    "--retries": "retries",
    "--env": "env",
    "-e": "env",
    "--output": "output",
    "--priority": "priority",
    "--wait-timeout": "wait_timeout",
}
#: Bounds of the numeric options (as the Typer app declares them): (low, high).
_BOUNDS = {"retries": (0, 10), "priority": (0, 100), "top": (0, None)}


def _plan_or_run(args: list[str]) -> int | None:
    """``nodus plan FILE ...`` or ``nodus run FILE ...`` in their plain forms, or None."""
    if not args or args[0] not in ("plan", "run"):
        return None
    command = args[0]
    flags, values = (_PLAN_FLAGS, _PLAN_VALUES) if command == "plan" else (_RUN_FLAGS, _RUN_VALUES)
    parsed = _options(args[1:], flags, values, frozenset({"env"}))
    if parsed is None:
        return None
    options, positional = parsed
    if len(positional) != 1:
        return None
    for name, (low, high) in _BOUNDS.items():
        if name in options:
            number = _number(options[name], low, high)
            if number is None:
                return None
            options[name] = number
    from nodus_cli.api import target_names

    places = ["catalog", *target_names()]
    if options.get("target", "catalog") not in places:
        return None
    from nodus_cli.cli import invoke

    if command == "plan":
        return invoke.plan(invoke.PlanOptions(positional[0], **options))
    options.setdefault("target", "local")
    return invoke.run(invoke.RunOptions(positional[0], **options))


def _options(
    args: list[str], flags: dict[str, str], values: dict[str, str], lists: frozenset[str]
) -> tuple[dict[str, Any], list[str]] | None:
    """``args`` as (options by name, positionals) when each is plainly one of ``flags`` or
    ``values`` (``--opt VALUE`` or ``--opt=VALUE``); None for anything else."""
    found: dict[str, Any] = {}
    positional: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            positional.extend(rest)
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        option, eq, inline = arg.partition("=")
        if option in flags and not eq:
            found[flags[option]] = True
        elif option in values:
            value = inline if eq else next(rest, None)
            name = values[option]
            if value is None or (name in found and name not in lists):
                return None  # missing, or given twice: Typer says what it makes of it
            if name in lists:
                found.setdefault(name, []).append(value)
            else:
                found[name] = value
        else:
            return None
    return found, positional


def _number(text: str, low: int, high: int | None) -> int | None:
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= low and (high is None or value <= high) else None


if __name__ == "__main__":
    entry()
