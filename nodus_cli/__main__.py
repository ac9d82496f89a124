"""Entry point: turns every error the user can act on into a message and an exit code.

``nodus validate`` runs in CI on every commit, often on hundreds of files: it is parsed
here without Typer (whose import is about half of nodus's start-up). Anything this small
parser does not know (``--help``, a misspelt option, no path) goes to the Typer
application, which explains it; both paths call the same ``commands.validate.run``.
"""

from __future__ import annotations

import os
import sys

_FORMATS = ("text", "github", "json")


def main(argv: list[str] | None = None) -> int:
    from nodus_cli.errors import NodusError

    args = sys.argv[1:] if argv is None else list(argv)
    try:
        fast = _validate(args)
        if fast is not None:
            return fast
        from nodus_cli.cli.app import app

        app(args=args, prog_name="nodus", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except NodusError as exc:
        from nodus_cli.cli.output import fail

        fail(exc.message, exc.hint)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug in nodus, not bad input: say so briefly
        if os.environ.get("NODUS_DEBUG"):
            raise
        print(
            f"nodus: internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in nodus; run again with NODUS_DEBUG=1 for the details.",
            file=sys.stderr,
        )
        return 70
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
