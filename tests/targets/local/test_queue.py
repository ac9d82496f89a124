"""The machine-wide GPU queue's rules (nodus_cli.targets.local.queue), on pictures of the
engine made by hand: which GPUs a request may take now, the order of those who wait,
what counts as a raced claim, and what a container started by anyone holds.

The same rules against the real engine, from several processes and users, are in
test_local_run.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from nodus_cli.hardware.smi import LocalGpu
from nodus_cli.targets.local.queue import (
    Holder,
    Ledger,
    Owner,
    Picture,
    Request,
    Use,
    Waiter,
    holder_words,
    me,
    since,
)

GPUS = [f"GPU-{i}" for i in range(4)]
MEMORY = dict.fromkeys(GPUS, 24.0)


def holder(
    name: str, share: float | None = None, run: str | None = "run-a", home: str | None = None
) -> Holder:
    return Holder(f"id-{name}", name, run, home, None, share, 1_700_000_000.0)


def waiter(name: str, wants: list[str], priority: int = 50, at: int = 1, need: str = "1") -> Waiter:
    return Waiter(
        f"id-{name}", name, f"run-{name}", "main", priority, at, frozenset(wants), need, None, None
    )


def picture(
    held: dict[str, list[Holder]] | None = None, waiters: list[Waiter] | None = None
) -> Picture:
    uses: dict[str, Use] = {}
    for gpu, holders in (held or {}).items():
        use = uses.setdefault(gpu, Use())
        for h in holders:
            (use.whole if h.share_gb is None else use.shared).append(h)
    return Picture(uses, sorted(waiters or [], key=lambda w: w.key))


def test_free_gpus_are_taken_in_the_candidates_order_and_busy_ones_skipped() -> None:
    busy = picture({"GPU-0": [holder("a")], "GPU-1": [holder("a")]})
    assert busy.choose(Request(tuple(GPUS), 2), MEMORY, None, 50) == ("GPU-2", "GPU-3")
    assert busy.choose(Request(tuple(GPUS), 3), MEMORY, None, 50) is None  # must wait
    # only the candidates (the planned model and memory) are ever taken
    assert picture().choose(Request(("GPU-3",), 1), MEMORY, None, 50) == ("GPU-3",)


def test_a_retry_keeps_its_gpus_when_they_are_free_and_else_takes_any() -> None:
    again = Request(tuple(GPUS), 2, prefer=("GPU-2", "GPU-3"))
    assert picture().choose(again, MEMORY, None, 50) == ("GPU-2", "GPU-3")
    taken = picture({"GPU-2": [holder("b")]})
    assert taken.choose(again, MEMORY, None, 50) == ("GPU-0", "GPU-1")


@pytest.mark.parametrize(("memory", "per_device"), [(10.0, 2), (5.0, 4), (24.0, 1)])
def test_a_shared_gpu_hosts_floor_memory_over_need_tasks(memory: float, per_device: int) -> None:
    two = ("GPU-0", "GPU-1")
    held: dict[str, list[Holder]] = {}
    picks: list[str] = []
    while True:
        chosen = picture(held).choose(Request(two, 1, memory), MEMORY, None, 50)
        if chosen is None:
            break
        picks.append(chosen[0])
        held.setdefault(chosen[0], []).append(holder(f"t{len(picks)}", share=memory))
    assert sorted(picks) == sorted(list(two) * per_device)
    assert set(picks[:2]) == set(two)  # spread: the device with the most room first


def test_a_shared_task_never_joins_a_whole_gpu_task() -> None:
    whole = picture({"GPU-0": [holder("whole")]})
    assert whole.choose(Request(("GPU-0", "GPU-1"), 1, 5.0), MEMORY, None, 50) == ("GPU-1",)
    shared = picture({"GPU-0": [holder("s", share=5.0)]})
    assert shared.choose(Request(("GPU-0",), 1), MEMORY, None, 50) is None


def test_no_request_overtakes_an_earlier_waiter_that_could_use_the_same_gpus() -> None:
    # B waits for two GPUs; one is free now. C, later, of the same priority, wants one:
    # it must not take the free one (B would starve behind a stream of small requests).
    b = waiter("b", GPUS[:2], at=10, need="2")
    now = picture({"GPU-0": [holder("a")]}, [b])
    assert now.choose(Request(tuple(GPUS[:2]), 1), MEMORY, None, 50) is None
    # ...but a request for GPUs nobody earlier waits for may start at once
    assert now.choose(Request(("GPU-3",), 1), MEMORY, None, 50) == ("GPU-3",)
    # B itself, once its GPUs are free, goes
    free = picture({}, [b])
    assert free.choose(Request(tuple(GPUS[:2]), 2), MEMORY, b.key, 50) == ("GPU-0", "GPU-1")


def test_a_higher_priority_goes_first_and_equal_ones_in_order_of_arrival() -> None:
    low = waiter("low", GPUS[:1], priority=10, at=1)
    high = waiter("high", GPUS[:1], priority=90, at=2)
    later = waiter("later", GPUS[:1], priority=90, at=3)
    line = picture({}, [low, high, later])
    assert [w.name for w in line.waiters] == ["high", "later", "low"]
    one = Request(("GPU-0",), 1)
    assert line.choose(one, MEMORY, high.key, 90) == ("GPU-0",)
    assert line.choose(one, MEMORY, later.key, 90) is None
    assert line.choose(one, MEMORY, low.key, 10) is None
    # a newcomer is behind every entry of its priority or higher, ahead of lower ones
    assert line.choose(one, MEMORY, None, 95) == ("GPU-0",)
    assert line.choose(one, MEMORY, None, 90) is None
    assert (line.place(high), line.place(later), line.place(low)) == (1, 2, 3)


def test_two_claims_of_one_gpu_are_a_conflict_but_not_with_oneself() -> None:
    both = picture({"GPU-0": [holder("mine"), holder("theirs")]})
    clash = both.conflicts("id-mine", ["GPU-0"], None, MEMORY)
    assert [h.name for h in clash] == ["theirs"]
    alone = picture({"GPU-0": [holder("mine")]})
    assert alone.conflicts("id-mine", ["GPU-0"], None, MEMORY) == []
    # shared claims conflict only when their memory passes the device's
    fits = picture({"GPU-0": [holder("mine", 12.0), holder("other", 12.0)]})
    assert fits.conflicts("id-mine", ["GPU-0"], 12.0, MEMORY) == []
    over = picture({"GPU-0": [holder("mine", 12.0), holder("o1", 8.0), holder("o2", 8.0)]})
    assert {h.name for h in over.conflicts("id-mine", ["GPU-0"], 12.0, MEMORY)} == {"o1", "o2"}


def _gpus() -> list[LocalGpu]:
    return [LocalGpu(i, u, "NVIDIA L4", "L4", 22.5, 24.0) for i, u in enumerate(GPUS)]


@pytest.mark.parametrize(
    ("host", "env", "held"),
    [
        ({"DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": ["GPU-2"]}]}, [], ("GPU-2",)),
        (
            {
                "DeviceRequests": [
                    {"Driver": "", "DeviceIDs": ["1", "3"], "Capabilities": [["gpu"]]}
                ]
            },
            [],
            ("GPU-1", "GPU-3"),
        ),
        ({"DeviceRequests": [{"Driver": "nvidia", "Count": 2}]}, [], ("GPU-0", "GPU-1")),
        ({"DeviceRequests": [{"Driver": "nvidia", "Count": -1}]}, [], tuple(GPUS)),
        ({"Runtime": "nvidia"}, ["NVIDIA_VISIBLE_DEVICES=0,GPU-3"], ("GPU-0", "GPU-3")),
        ({"Runtime": "nvidia"}, ["NVIDIA_VISIBLE_DEVICES=all"], tuple(GPUS)),
        ({"Runtime": "nvidia"}, ["NVIDIA_VISIBLE_DEVICES=void"], ()),
        ({"Runtime": "runc"}, ["NVIDIA_VISIBLE_DEVICES=0"], ()),
        ({}, [], ()),
    ],
)
def test_what_a_container_started_by_anyone_holds(
    host: dict, env: list[str], held: tuple[str, ...]
) -> None:
    ledger = Ledger(None, _gpus())  # type: ignore[arg-type]
    assert ledger.devices_of({"HostConfig": host, "Config": {"Env": env}}) == held


def test_an_owner_is_gone_when_its_process_is() -> None:
    assert not me().gone
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = Owner(me().host, child.pid, None)
    assert dead.gone
    assert Owner.parse(dead.label) == dead
    assert not Owner("another-host", child.pid, None).gone  # nobody here can tell
    assert Owner.parse("garbage") is None and Owner.parse(None) is None
    recycled = Owner(me().host, os.getpid(), 1)  # this pid, but another process's start
    assert recycled.gone


def test_holders_are_named_with_their_home_when_it_is_another() -> None:
    ours = holder("c1", run="20260101-000000-aaaa", home="/home/me/.local/share/nodus")
    theirs = holder("c2", run="20260101-000000-bbbb", home="/srv/ci-home")
    foreign = holder("jupyter", run=None)
    words = holder_words([ours, theirs, foreign], "/home/me/.local/share/nodus")
    assert "run 20260101-000000-aaaa since" in words
    assert "run 20260101-000000-bbbb of NODUS_HOME /srv/ci-home since" in words
    assert " and container jupyter, not started by nodus, since" in words
    assert time.strftime("%H:", time.gmtime(1_700_000_000)) in words


def test_holders_are_named_without_nested_parentheses() -> None:
    foreign = holder("happy_cohen", run=None)
    words = holder_words([foreign], None)
    shown = since(foreign.created)
    assert words == f"held by container happy_cohen, not started by nodus, since {shown}"
    many = [holder(f"c{i}", run=f"20260101-000000-000{i}") for i in range(5)]
    words = holder_words(many, None)
    assert "(" not in words
    assert words.startswith("held by run 20260101-000000-0000 since ")
    assert words.endswith(f"since {shown} and 2 more holders")


def test_a_warm_worker_is_named_as_one() -> None:
    warm = holder("nodus-warm-123-0", run=None, home="/srv/ci-home")
    words = holder_words([warm], "/home/me/.local/share/nodus")
    assert words.startswith("held by warm worker nodus-warm-123-0 of NODUS_HOME /srv/ci-home since")
    assert "not started by nodus" not in words
