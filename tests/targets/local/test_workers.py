# ruff: noqa: F811 - the fixtures imported from the support modules are test parameters here
"""Warm workers on the local engine: the items of a map of a function run in a handful of
long-lived containers, one per allocation, each keeping its devices for its life; a worker
that dies fails only its current item, with the reason, and is replaced; workers go with
the stage; each item's output is its own."""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path
from typing import Any

import pytest
from calls_support import PY_IMAGE, client, python_images  # noqa: F401
from docker_support import IMAGE, docker_client, engine_clean, uuids_of  # noqa: F401

from nodus_cli import CallFailed, Client, RunStatus
from nodus_cli.functions import bootstrap, runtime

pytestmark = pytest.mark.docker


def where(x: int) -> tuple[int, str, str]:
    print(f"item {x} says hello")
    return x, os.uname()[1], os.environ.get("NVIDIA_VISIBLE_DEVICES", "")


def dies_on_three(x: int) -> tuple[int, str]:
    if x == 3:
        os._exit(3)
    return x, os.uname()[1]


def hog_on_one(x: int) -> int:
    if x == 1:
        blocks = []
        while True:
            blocks.append(bytearray(32 * 1024 * 1024))
    return x


def created(docker_client: Any, run_id: str, since: float) -> int:
    events = docker_client.events(
        since=int(since) - 1,
        until=int(time.time()) + 1,
        filters={"label": f"nodus.run={run_id}", "event": "create"},
        decode=True,
    )
    return sum(1 for _ in events)


def test_a_map_of_many_calls_makes_a_handful_of_containers(
    client: Client, docker_client: Any
) -> None:
    t0 = time.time()
    calls = client.map(range(60), fn=where, image=PY_IMAGE, requirements={"cpu": 1})
    results = calls.results(timeout=300)
    assert [r.value[0] for r in results if r.value] == list(range(60))
    hosts = {r.value[1] for r in results if r.value}
    slots = max(1, os.cpu_count() or 1)
    assert 1 <= len(hosts) <= slots
    assert created(docker_client, calls.id, t0) == len(hosts)
    assert docker_client.containers.list(all=True, filters={"label": f"nodus.run={calls.id}"}) == []
    assert calls.logs(item=7) == "item 7 says hello\n"
    assert client.get(calls.id).result().status == RunStatus.SUCCEEDED


def test_each_worker_keeps_its_gpu_for_its_life(
    client: Client, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rows = (Path(__file__).parents[2] / "fakes/gpus/h100x8.csv").read_text().splitlines()
    header = next(i for i, line in enumerate(rows) if line.startswith("index,"))
    (tmp_path / "h100x4.csv").write_text("\n".join(rows[header : header + 5]) + "\n")
    monkeypatch.setenv("NODUS_FAKE_GPUS", str(tmp_path / "h100x4.csv"))
    calls = client.map(range(40), fn=where, image=PY_IMAGE, gpu="H100", cpu=0.25)
    results = calls.results(timeout=300)
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    device_of: dict[str, set[str]] = collections.defaultdict(set)
    for r in results:
        assert r.value is not None
        device_of[r.value[1]].add(r.value[2])
    assert all(len(devices) == 1 for devices in device_of.values()), device_of
    seen = {d for devices in device_of.values() for d in devices}
    assert seen <= set(uuids_of("h100x8")[:4]) and len(seen) == len(device_of)


def test_shared_gpu_slots_are_sized_by_memory(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODUS_FAKE_GPUS", "l4x1")  # one L4 of 24 GB: 3 slots of 8 GB
    calls = client.map(
        range(12),
        fn=where,
        image=PY_IMAGE,
        gpu="L4",
        share_gpu=True,
        peak_memory_gb=8,
        cpu=0.25,
    )
    results = calls.results(timeout=300)
    assert all(r.ok for r in results)
    hosts = {r.value[1] for r in results if r.value}
    devices = {r.value[2] for r in results if r.value}
    assert 1 <= len(hosts) <= 3 and devices == set(uuids_of("l4x1"))


def test_a_worker_that_dies_fails_only_its_item_and_is_replaced(client: Client) -> None:
    calls = client.map(range(8), fn=dies_on_three, image=PY_IMAGE, parallel=1)
    results = calls.results(timeout=300)
    assert [r.ok for r in results] == [True, True, True, False, True, True, True, True]
    error = results[3].error
    assert isinstance(error, CallFailed)
    assert error.message.endswith(
        "the function's process exited with code 3 without reporting an outcome: it called "
        "os._exit(), or it crashed or was killed"
    )
    before = {r.value[1] for r in results[:3] if r.value}
    after = {r.value[1] for r in results[4:] if r.value}
    assert len(before) == len(after) == 1 and before != after  # one worker, then its successor
    record = client.get(calls.id).result(tasks=True)
    assert record.stages[0].items == {"succeeded": 7, "failed": 1}


def test_out_of_memory_in_a_worker_names_the_limit(client: Client) -> None:
    calls = client.map(
        range(3), fn=hog_on_one, image=PY_IMAGE, requirements={"memory_gb": 0.25}, parallel=1
    )
    results = calls.results(timeout=300)
    assert [r.value for r in results] == [0, None, 2]
    assert isinstance(results[1].error, CallFailed)
    assert "out of memory: it reached its 0.25 GiB memory limit" in results[1].error.message


def test_an_image_without_python_fails_every_item_without_a_container_each(
    client: Client, docker_client: Any
) -> None:
    t0 = time.time()
    calls = client.map(range(20), fn=where, image=IMAGE, parallel=2)
    results = calls.results(timeout=300)
    assert not any(r.ok for r in results)
    assert all(
        isinstance(r.error, CallFailed) and "has no python3 (nor python)" in r.error.message
        for r in results
    )
    assert created(docker_client, calls.id, t0) <= 4  # python3, then python, per slot at most


def test_a_worker_of_another_protocol_version_is_refused_with_words(
    client: Client, docker_client: Any, tmp_path: Path
) -> None:
    # The runtime this client mounts, made to speak the next version of the protocol.
    rt = runtime.ensure(tmp_path / "home")
    boot = rt / runtime.BOOTSTRAP
    ours = f"\nPROTOCOL = {bootstrap.PROTOCOL}\n"
    assert ours in boot.read_text()
    boot.write_text(boot.read_text().replace(ours, f"\nPROTOCOL = {bootstrap.PROTOCOL + 1}\n"))
    t0 = time.time()
    calls = client.map(range(12), fn=where, image=PY_IMAGE, parallel=2)
    results = calls.results(timeout=300)
    assert not any(r.ok for r in results)
    words = (
        f"the worker's runtime speaks warm-worker protocol {bootstrap.PROTOCOL + 1}, and this "
        f"nodus speaks protocol {bootstrap.PROTOCOL}: the runtime in {rt} is not this nodus's "
        "own; remove that folder, and the next run builds it again"
    )
    assert all(isinstance(r.error, CallFailed) and words in r.error.message for r in results)
    assert created(docker_client, calls.id, t0) <= 2  # one worker per slot at most, refused
    assert docker_client.containers.list(all=True, filters={"label": f"nodus.run={calls.id}"}) == []


def test_stopping_a_map_removes_its_workers(client: Client, docker_client: Any) -> None:
    calls = client.map([600] * 50, fn=time.sleep, image=PY_IMAGE, parallel=2)
    deadline = time.monotonic() + 60
    while calls.status != RunStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
    assert calls.stop() is True
    results = calls.results(timeout=120)
    assert not any(r.ok for r in results)
    assert all("cancelled by calls.stop()" in str(r.error) for r in results[:2])
    assert docker_client.containers.list(all=True, filters={"label": f"nodus.run={calls.id}"}) == []
    assert client.get(calls.id).status == RunStatus.CANCELLED


def test_a_budget_covers_every_item(client: Client, tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[local]\nprice_per_hour = 3600\n")
    calls = client.map(range(40), fn=time.sleep, image=PY_IMAGE, budget=1.0, parallel=1)
    results = calls.results(timeout=120)
    assert not all(r.ok for r in results)
    assert client.get(calls.id).status == RunStatus.BUDGET_EXHAUSTED
    failed = [r.error for r in results if not r.ok]
    assert all(isinstance(e, CallFailed) for e in failed)
