"""Entry point: turns every error the user can act on into a message and an exit code."""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    from nodus_cli.problems import NodusError

    try:
        from nodus_cli.cli import app

        app(args=argv, prog_name="nodus", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except NodusError as exc:
        from nodus_cli.output import fail

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


if __name__ == "__main__":
    sys.exit(main())
