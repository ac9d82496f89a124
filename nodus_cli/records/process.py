"""Who supervises a run: the host and process recorded with it, and whether that process
still lives.

Contract: a run's supervisor is named by (host, pid, start time); :func:`process_alive`
is true only while that very process runs (not a zombie, not a later process that got
the same pid). Where there is no ``/proc``, ``kill(pid, 0)`` is trusted alone.

Why: a run whose supervisor died (a crash, a power cut) must be found and ended by the
next nodus command (:mod:`nodus_cli.run.reconcile`), and a recycled pid must not keep it
alive forever.
"""

from __future__ import annotations

import os

__all__ = ["hostname", "process_alive", "process_start"]


def hostname() -> str:
    """This machine's name, as ``socket.gethostname()`` gives it (the socket module is
    not loaded for it: a plan reading the records need not pay for it)."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket  # pragma: no cover - not POSIX

    return socket.gethostname()


def process_start(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (None when it is gone)."""
    fields = _stat(pid)
    return _start_of(fields) if fields is not None else None


def process_alive(pid: int, started: int | None) -> bool:
    """Whether ``pid`` is still the same live (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: look at /proc
    fields = _stat(pid)
    if fields is None:
        return not os.path.isdir("/proc/self")  # no /proc: trust kill(0)
    if not fields or fields[0] == "Z":
        return False
    if started is not None:
        start = _start_of(fields)
        return start is None or start == started
    return True


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command's name, from its state on
    (None: no such process, or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rpartition(")")[2].split()
    except OSError:
        return None


def _start_of(fields: list[str]) -> int | None:
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None
