"""SIGINT and SIGTERM during a run: raised as :class:`Cancelled` while the run runs,
noted and not raised while it cleans up.

Contract: between :func:`install_signal_handlers` and :func:`restore_signal_handlers`
either signal raises :class:`Cancelled` in the main thread; after :func:`defer_signals`
(and within :func:`signals_deferred`) it is only noted, so clean-up and the last record
always complete. Outside the main thread every function here does nothing: Python
delivers signals to the main thread only, and a run driven from another thread (the
Python API) is stopped through its record instead.

Why apart from the driver: the handlers are process-wide state with one rule (a second
Ctrl-C never interrupts the clean-up), kept in one place for the driver and for any
clean-up outside it (:func:`signals_deferred`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = [
    "Cancelled",
    "defer_signals",
    "install_signal_handlers",
    "restore_signal_handlers",
    "signals_deferred",
]

_deferred: list[int] = []


class Cancelled(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException, so no ``except Exception`` eats it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_cancelled(signum: int, frame: object) -> None:
    raise Cancelled(signum)


def _remember(signum: int, frame: object) -> None:
    _deferred.append(signum)


def install_signal_handlers() -> dict[int, Any]:
    """Raise :class:`Cancelled` on SIGINT/SIGTERM; the handlers replaced, to restore."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, _raise_cancelled)
    return previous


def defer_signals() -> None:
    """From here on a signal is noted, not raised: clean-up and records must complete."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _remember)


def restore_signal_handlers(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM are noted, not raised (a launcher's own clean-up)."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {int(s): signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        defer_signals()
    try:
        yield
    finally:
        restore_signal_handlers(previous)
