"""``nodus dashboard``: serve the web page of :mod:`nodus_cli.dashboard` until Ctrl-C.

Prints the address with its access token on stdout, as Jupyter does (the one line a
user copies), and a note on stderr when the page is reachable beyond this machine.
"""

from __future__ import annotations

import contextlib

from nodus_cli.cli.output import stderr_line
from nodus_cli.dashboard import serve
from nodus_cli.dashboard.server import LOOPBACK


def run(host: str, port: int, open_browser: bool) -> int:
    def announce(url: str) -> None:
        print(f"nodus dashboard: open {url}", flush=True)
        if host not in LOOPBACK:
            stderr_line(
                f"nodus: the dashboard listens on {host}: other machines can reach it; "
                "each request still needs the token in this address"
            )
        stderr_line("nodus: Ctrl-C stops the dashboard")

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how it ends
        serve(host, port, open_browser, announce)
    return 0
