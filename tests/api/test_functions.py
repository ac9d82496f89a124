# ruff: noqa: F811 - the fixtures imported from the support modules are test parameters here
"""``@function``, maps of a function and pipelines against the real engine: a decorated
function submits when called, ``.options`` changes one call, ``.map`` and
``client.map(fn=...)`` give per-item results in item order with failures isolated, a
Call passed as an argument runs first and its failure fails the dependent naming it."""

from __future__ import annotations

import os
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest
from calls_support import PY_IMAGE, client, python_images  # noqa: F401
from docker_support import docker_client, engine_clean  # noqa: F401

from nodus_cli import CallFailed, Calls, Client, InvalidWorkload, RunStatus, StageStatus, function

pytestmark = pytest.mark.docker


def double(x: int) -> int:
    print(f"doubling {x}")
    return 2 * x


def fails_on_two(x: int) -> int:
    if x == 2:
        raise ValueError(f"two is bad ({x})")
    return x


def wait_for(predicate: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def memory_limit() -> int:
    # cgroup v2, or v1
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        if os.path.exists(path):
            return int(open(path).read().strip())
    return -1


def test_a_decorated_function_submits_when_called_and_runs_here_with_local(
    client: Client,
) -> None:
    doubled = function(double, image=PY_IMAGE, client=client)
    call = doubled(21)
    assert call.result(timeout=120) == 42
    assert doubled.local(5) == 10 and doubled.__name__ == "double"
    assert client.get(call.id).result().workload == f"{__name__}.double"


def test_options_change_the_requirements_of_one_call(client: Client) -> None:
    limited = function(memory_limit, image=PY_IMAGE, client=client, memory_gb=0.5)
    assert limited().result(timeout=120) == int(0.5 * 1024**3)
    assert limited.options(memory_gb=0.75)().result(timeout=120) == int(0.75 * 1024**3)
    assert limited.requirements == {"image": PY_IMAGE, "memory_gb": 0.5}


def test_the_decorator_form(client: Client) -> None:
    @function(image=PY_IMAGE, client=client, requirements={"cpu": 0.5})
    def triple(x: int) -> int:
        return 3 * x

    assert triple(3).result(timeout=120) == 9


def test_map_gives_each_items_value_or_error_in_item_order(client: Client) -> None:
    calls = client.map([1, 2, 3], fn=fails_on_two, image=PY_IMAGE)
    assert isinstance(calls, Calls) and len(calls) == 3
    results = calls.results(timeout=180)
    assert [r.index for r in results] == [0, 1, 2]
    assert [r.item for r in results] == [1, 2, 3]  # the items themselves
    assert [r.value for r in results] == [1, None, 3]
    assert [r.ok for r in results] == [True, False, True]
    error = results[1].error
    assert isinstance(error, ValueError) and str(error) == "two is bad (2)"
    assert calls[0].result() == 1
    with pytest.raises(ValueError):
        calls[1].result()
    record = client.get(calls.id).result(tasks=True)
    assert record.workload == f"{__name__}.fails_on_two" and record.status == RunStatus.FAILED
    tasks = record.stages[0].tasks
    ok, failed = StageStatus.SUCCEEDED, StageStatus.FAILED
    assert [t.status for t in tasks] == [ok, failed, ok]
    assert tasks[1].message == "raised ValueError: two is bad (2)"


def sleep_for(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_each_items_call_settles_when_that_item_ends(client: Client) -> None:
    calls = client.map([0.1, 60], fn=sleep_for, image=PY_IMAGE, cpu=0.5)
    first = next(futures.as_completed(calls, timeout=120))
    assert first is calls[0] and first.result() == 0.1
    assert not calls[1].done() and calls.status == RunStatus.RUNNING  # the slow one runs
    assert calls.cancel() is True
    assert calls[0].result() == 0.1 and calls[1].cancelled()
    wait_for(lambda: client.get(calls.id).status == RunStatus.CANCELLED, timeout=60)
    record = client.get(calls.id).result()
    assert record.message == "cancelled by calls.cancel(); the run's tasks were removed"


def test_a_decorated_functions_map_and_each_items_own_output(client: Client) -> None:
    doubled = function(double, image=PY_IMAGE, client=client)
    calls = doubled.map(range(4))
    assert [r.value for r in calls.results(timeout=180)] == [0, 2, 4, 6]
    assert calls.logs(item=2) == "doubling 2\n" and calls[3].logs() == "doubling 3\n"


def test_a_pipeline_passes_values_along_in_order(client: Client) -> None:
    def parse(text: str) -> list[int]:
        return [int(part) for part in text.split(",")]

    def transform(numbers: list[int], factor: int) -> list[int]:
        return [n * factor for n in numbers]

    def summarize(parts: dict[str, Any]) -> str:
        return f"{parts['label']}: {sum(parts['values'][0])}"

    parsed = client.run(fn=parse, args=("1,2,3",), image=PY_IMAGE)
    transformed = client.run(fn=transform, args=(parsed,), kwargs={"factor": 10}, image=PY_IMAGE)
    summary = client.run(
        fn=summarize, args=({"label": "total", "values": [transformed]},), image=PY_IMAGE
    )
    assert summary.result(timeout=180) == "total: 60"
    runs = {r.id: r for r in client.runs()}
    first, second, third = (runs[c.id] for c in (parsed, transformed, summary))
    assert first.ended_at and second.started_at >= first.ended_at[:19]
    assert second.ended_at and third.started_at >= second.ended_at[:19]


def test_a_failed_dependency_fails_the_dependent_naming_it(client: Client) -> None:
    bad = client.run(fn=fails_on_two, args=(2,), image=PY_IMAGE)
    after = client.run(fn=double, args=([1, bad],), image=PY_IMAGE)
    with pytest.raises(CallFailed) as caught:
        after.result(timeout=180)
    assert caught.value.message == (
        f"{__name__}.double: was not started: its argument args[0][1] is the call "
        f"{__name__}.fails_on_two (run {bad.id}), which failed: ValueError: two is bad (2)"
    )
    assert caught.value.run_id is None
    assert [r.id for r in client.runs()] == [bad.id]  # the dependent was never recorded


def test_a_call_of_another_client_is_refused_with_words(client: Client, tmp_path: Path) -> None:
    with Client(home=tmp_path / "other-home") as other:
        theirs = other.run(fn=double, args=(1,), image=PY_IMAGE)
        with pytest.raises(InvalidWorkload) as caught:
            client.run(fn=double, args=(theirs,), image=PY_IMAGE)
        (problem,) = caught.value.problems
        assert problem.loc == "args[0]"
        assert problem.message.startswith(
            f"is a Call of another Client ({__name__}.double, run {theirs.id}): a call's value "
            "passes on to calls of the same client"
        )
        assert theirs.result(timeout=120) == 2


def test_an_item_that_cannot_be_pickled_is_named_before_anything_runs(client: Client) -> None:
    import threading

    with pytest.raises(InvalidWorkload) as caught:
        client.map([1, threading.Lock()], fn=double, image=PY_IMAGE)
    assert [(p.loc, p.message) for p in caught.value.problems] == [
        ("items[1]: args[0]", "cannot pickle '_thread.lock' object")
    ]
    assert client.runs() == []


def test_the_plan_of_a_function_prices_it(client: Client) -> None:
    plan = client.plan(fn=double, args=(1,), image=PY_IMAGE, requirements={"cpu": 1})
    assert plan.feasible and plan.stages[0].selected is not None
    workload = client.workload(fn=double, image=PY_IMAGE, cpu=2)
    assert workload.name == f"{__name__}.double" and workload.requirements.cpu == 2
    assert workload.stages[0].function is not None
    assert workload.stages[0].function.python == "3.11"
    assert not client.plan(fn=double, image=PY_IMAGE, gpu="H100").feasible


def test_calls_still_in_flight_are_waited_for_when_the_client_closes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    from docker_support import _HOMES

    _HOMES.append(home)
    with Client(home=home) as c:
        call = c.run(fn=time.sleep, args=(1,), image=PY_IMAGE)
    assert call.done() and call.result() is None


def test_leaving_the_block_with_an_error_stops_the_calls(tmp_path: Path) -> None:
    home = tmp_path / "home"
    from docker_support import _HOMES

    _HOMES.append(home)
    t0 = time.monotonic()
    with pytest.raises(KeyError), Client(home=home) as c:
        call = c.run(fn=time.sleep, args=(600,), image=PY_IMAGE)
        while call.status != RunStatus.RUNNING:
            time.sleep(0.05)
        raise KeyError("leaving")
    assert call.cancelled() and time.monotonic() - t0 < 60
    with Client(home=home) as c:
        record = c.get(call.id).result()
    assert record.message == (
        "cancelled by the end of the `with Client()` block (KeyError left it); the run's "
        "tasks were removed"
    )
