"""Entry point: turns every error the user can act on into a message and an exit code.

Every command line goes to the one parser, the Typer application (:mod:`nodus_cli.cli.app`):
its options, their bounds and their help are declared once, there. What the commands raise
is printed here: a :class:`~nodus_cli.errors.NodusError` as its message and hint with its
exit code, an interrupt as exit 130, anything else as an internal error (exit 70) that
says how to see the details; never a traceback.

Importing the application (Typer, click) is most of a short command's time, and it makes
many objects that live as long as the process: the garbage collector is paused while it
is imported, and what it made is frozen (:func:`gc.freeze`), so that neither the
collections on the way nor those after it (the last one at exit included) walk it. The
collector runs as usual for the command itself (``nodus run`` drives a run for hours).
"""

from __future__ import annotations

import gc
import os
import sys
from typing import TYPE_CHECKING

from nodus_cli import collector

if TYPE_CHECKING:
    from typer import Typer


def main(argv: list[str] | None = None) -> int:
    """Run one command line (``sys.argv[1:]`` by default); its exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    from nodus_cli.errors import NodusError

    try:
        app = _application()
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


def _application() -> Typer:
    """The Typer application; imported, the first time, with the collector paused."""
    if "nodus_cli.cli.app" in sys.modules:
        from nodus_cli.cli.app import app

        return app
    with collector.paused():
        try:
            from nodus_cli.cli.app import app
        finally:
            gc.freeze()
    return app


def entry() -> None:
    """The ``nodus`` command (and ``python -m nodus_cli``): :func:`main`, then exit."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
