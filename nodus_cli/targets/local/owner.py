"""Who made a container: the process, by host, pid and start time (the owner label).

Why apart from :mod:`.queue`: every container nodus creates carries its owner, a command's
too, while the queue's rules matter only to tasks that want GPUs; a CPU run loads this
module, not the queue's.
"""

from __future__ import annotations

import os

from nodus_cli.records import hostname, process_alive, process_start
from nodus_cli.structs import struct

__all__ = ["Owner", "me"]


@struct(frozen=True)
class Owner:
    """The process that made a container: it is gone when its pid is not alive (or is
    another process now) on its host."""

    host: str
    pid: int
    start: int | None

    @property
    def label(self) -> str:
        return f"{self.host}:{self.pid}:{self.start if self.start is not None else ''}"

    @classmethod
    def parse(cls, text: str | None) -> Owner | None:
        if not text:
            return None
        host, _, rest = text.rpartition(":")
        host, _, pid = host.rpartition(":")
        try:
            return cls(host, int(pid), int(rest) if rest else None)
        except ValueError:
            return None

    @property
    def gone(self) -> bool:
        """Known to be dead: only a process on this host can be known so. This process is
        not (every listing of the engine's containers asks, for each of its own)."""
        if self == _ME.get(os.getpid()):
            return False
        return self.host == hostname() and not process_alive(self.pid, self.start)


def me() -> Owner:
    """This process, as the owner label of what it creates (read once per process)."""
    pid = os.getpid()
    if _ME.get(pid) is None:
        _ME[pid] = Owner(hostname(), pid, process_start(pid))
    return _ME[pid]


_ME: dict[int, Owner] = {}
