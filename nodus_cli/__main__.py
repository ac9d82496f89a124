"""Entry point: turns every error the user can act on into a message and an exit code.

Every command line goes to the one parser, the Typer application (:mod:`nodus_cli.cli.app`):
its options, their bounds and their help are declared once, there. What the commands raise
is printed here: a :class:`~nodus_cli.errors.NodusError` as its message and hint with its
exit code, an interrupt as exit 130, anything else as an internal error (exit 70) that
says how to see the details; never a traceback.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Run one command line (``sys.argv[1:]`` by default); its exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    from nodus_cli.errors import NodusError

    try:
        from nodus_cli.cli.app import app

        app(args=args, prog_name="nodus", standalone_mode=True)
    except SystemExit as exc:
        given = exc.code
        return given if isinstance(given, int) else (0 if given is None else 1)
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


def entry() -> None:
    """The ``nodus`` command (and ``python -m nodus_cli``): :func:`main`, then exit."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
