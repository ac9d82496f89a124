"""What :meth:`LocalTarget.prepare` checks of a workload on this machine before the
first container starts: every host path it mounts exists, every host port it publishes is
free. Each failure is the user's to fix, so each says what to change.
"""

from __future__ import annotations

import errno
import os
import socket
from typing import TYPE_CHECKING

from nodus_cli.errors import InvalidInput, NotRunnable

if TYPE_CHECKING:
    from nodus_cli.workload import Workload

__all__ = ["mounts", "ports"]


def mounts(workload: Workload) -> None:
    """Every host path a stage mounts exists (named volumes are created when missing)."""
    missing = []
    for stage in workload.stages:
        for m in stage.mounts:
            if m.type == "bind" and not os.path.exists(m.source):
                where = f"{m.where}: " if m.where else ""
                missing.append(f"{where}{m.written or m.source}: {m.source} does not exist")
    if missing:
        raise InvalidInput(
            "a mounted host path does not exist:\n  " + "\n  ".join(dict.fromkeys(missing)),
            hint="create it, or fix the path (relative paths are relative to the workload file)",
        )


def ports(workload: Workload) -> None:
    """Every host port a stage publishes is free now."""
    for stage in workload.stages:
        for p in stage.ports:
            kind = socket.SOCK_DGRAM if p.protocol == "udp" else socket.SOCK_STREAM
            with socket.socket(socket.AF_INET, kind) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((p.host_ip or "0.0.0.0", p.host))
                except OSError as exc:
                    if exc.errno == errno.EADDRNOTAVAIL:
                        raise InvalidInput(
                            f"stage {stage.name!r}: ports: {p.host_ip} is not an address of "
                            "this machine",
                            hint="publish on 127.0.0.1, 0.0.0.0 or one of its addresses",
                        ) from None
                    raise NotRunnable(
                        f"stage {stage.name!r}: host port {p.host}/{p.protocol} is in use on "
                        f"this machine ({exc.strerror})",
                        hint="stop what uses it, or publish on another host port "
                        f'(ports = ["{p.host + 1}:{p.container}"])',
                    ) from None
