"""nodus_cli.lanes: jobs on threads that serve one job after another, never waiting for one."""

from __future__ import annotations

import threading
import time

import pytest

from nodus_cli.lanes import Lanes


def _until(check: object, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(check) and check():
            return True
        time.sleep(0.005)
    return False


def test_jobs_one_after_another_share_one_lane() -> None:
    lanes = Lanes("t")
    names: list[str] = []
    for _ in range(20):
        lanes.run(lambda: names.append(threading.current_thread().name))
        assert lanes.wait(5)
    assert names == ["t-1"] * 20
    assert lanes.threads == 1


def test_a_job_never_waits_for_a_lane_when_every_lane_is_busy() -> None:
    lanes = Lanes("t")
    release = threading.Event()
    started: list[int] = []

    def job(n: int) -> None:
        started.append(n)
        release.wait(5)

    for n in range(6):
        lanes.run(lambda n=n: job(n))
    assert _until(lambda: len(started) == 6), started  # all six at once
    assert lanes.threads == 6
    assert not lanes.wait(0.05)  # they still run
    release.set()
    assert lanes.wait(5)
    lanes.run(lambda: None)  # an idle lane takes it: no seventh
    assert lanes.wait(5) and lanes.threads == 6


def test_an_idle_lane_ends() -> None:
    lanes = Lanes("t", idle_seconds=0.05)
    lanes.run(lambda: None)
    assert lanes.wait(5)
    assert _until(lambda: lanes.threads == 0)
    ran = threading.Event()
    lanes.run(ran.set)  # and a new one starts for the next job
    assert ran.wait(5)


def test_a_job_that_raises_ends_its_lane_not_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(str(args.exc_value)))
    lanes = Lanes("t")

    def boom() -> None:
        raise RuntimeError("boom")

    lanes.run(boom)
    assert lanes.wait(5)
    assert _until(lambda: seen == ["boom"])
    assert lanes.threads == 0
    ran = threading.Event()
    lanes.run(ran.set)
    assert ran.wait(5)


def test_a_job_s_last_word_comes_once_its_lane_is_idle() -> None:
    # The driver gives the next task when it hears a task ended: heard from the job's
    # last word, the next task finds the lane idle and takes it (no new thread).
    lanes = Lanes("t")
    names: list[str] = []
    chain = iter(range(10))

    def job() -> object:
        names.append(threading.current_thread().name)
        return lambda: lanes.run(job) if next(chain, None) is not None else None

    lanes.run(job)
    assert _until(lambda: len(names) == 11)
    assert set(names) == {"t-1"} and lanes.threads == 1
