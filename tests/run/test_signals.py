"""SIGINT and SIGTERM: raised as Cancelled while a run runs, only noted while it cleans
up, and the handlers before it restored after."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from nodus_cli.run import signals
from nodus_cli.run.signals import (
    Cancelled,
    defer_signals,
    install_signal_handlers,
    restore_signal_handlers,
    signals_deferred,
)


def test_a_signal_is_raised_as_cancelled_then_noted_then_the_old_handler_is_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    previous = install_signal_handlers()
    try:
        with pytest.raises(Cancelled) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
        assert caught.value.signum == signal.SIGTERM and str(caught.value) == "SIGTERM"
        defer_signals()
        os.kill(os.getpid(), signal.SIGINT)  # noted, not raised
        assert signals._deferred[-1] == signal.SIGINT
    finally:
        restore_signal_handlers(previous)
    assert signal.getsignal(signal.SIGTERM) is before


def test_within_signals_deferred_a_signal_is_only_noted() -> None:
    before = signal.getsignal(signal.SIGINT)
    with signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        assert signals._deferred[-1] == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is before


def test_outside_the_main_thread_nothing_is_installed() -> None:
    found: list[dict[int, object]] = []
    thread = threading.Thread(target=lambda: found.append(install_signal_handlers()))
    thread.start()
    thread.join()
    assert found == [{}]
