"""Run records (SQLite under NODUS_HOME): what is stored, read back, and used for plans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nodus_cli import records
from nodus_cli.catalog import Offer
from nodus_cli.problems import NodusError
from nodus_cli.records import RunStore, StageRecord
from nodus_cli.workload import Workload, load_text

TWO_STAGES = """
name = "rec"
image = "nodus-test/busybox:1"
command = "echo hi"
env = { A = "1" }
budget = 5.0
gpu = "H100"
gpu_count = 2
peak_memory_gb = 80
[requirements]
cpu = 4
[[stages]]
name = "prep"
[[stages]]
name = "train"
gpu = "H100"
gpu_count = 2
"""


def _workload(text: str = TWO_STAGES) -> Workload:
    result = load_text(text, "rec.toml")
    assert result.workload is not None, result.problems
    return result.workload


def _offer(gpu: str | None = "H100", count: int = 8, machine: str = "box") -> Offer:
    return Offer(
        supplier="local",
        machine_id=machine,
        region="local",
        gpu=gpu,
        gpu_count=count,
        gpu_memory_gb=80.0 if gpu else 0.0,
        vcpus=16,
        memory_gb=64.0,
        disk_gb=100.0,
        arch="x86_64",
        price_per_hour=2.0,
    )


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore(tmp_path / "home")


def test_a_run_is_recorded_with_its_stages(store: RunStore) -> None:
    w = _workload()
    rec = store.start_run(w, "local", 2.0, "rec.toml", pid=os.getpid())
    assert rec.status == "running"
    assert [s.status for s in store.get(rec.id).stages] == ["pending", "pending"]
    store.save_stage(
        rec.id,
        0,
        StageRecord(
            "prep",
            "succeeded",
            0,
            started_at="2025-01-01T00:00:00+00:00",
            ended_at="2025-01-01T00:00:10+00:00",
            runtime_seconds=10.0,
            cost=0.0056,
            config=_offer(None, 0).as_json(),
            attempts=1,
        ),
    )
    store.finish_run(rec.id, "failed", 3, 0.0056, "stage 'train' failed")
    got = store.get(rec.id)
    doc = got.as_json()
    assert doc["status"] == "failed" and doc["exit_code"] == 3
    assert doc["workload"] == "rec" and doc["target"] == "local"
    assert doc["budget"] == 5.0 and doc["price_per_hour"] == 2.0
    assert doc["fingerprint"] == records.fingerprint(w)
    assert doc["ended_at"] is not None
    # a finished run has no stage left pending
    assert [(s["name"], s["status"]) for s in doc["stages"]] == [
        ("prep", "succeeded"),
        ("train", "skipped"),
    ]
    assert doc["stages"][0]["configuration"]["machine_id"] == "box"
    assert got.workload_json == w.as_json()


def test_ids_are_found_by_unique_prefix(store: RunStore) -> None:
    w = _workload()
    a = store.start_run(w, "local", 0.0, None, run_id="20250101-000000-aaaaaa")
    store.start_run(w, "local", 0.0, None, run_id="20250101-000000-aaabbb")
    assert store.get("20250101-000000-aaaaaa").id == a.id
    assert store.get("20250101-000000-aaaa").id == a.id
    with pytest.raises(NodusError, match="matches several runs"):
        store.get("20250101-000000-aaa")
    with pytest.raises(NodusError, match="no run"):
        store.get("nope")
    with pytest.raises(NodusError, match="no run"):
        store.get("2025%")  # no SQL wildcards


def test_runs_are_listed_newest_first(store: RunStore) -> None:
    w = _workload()
    ids = [store.start_run(w, "local", 0.0, None).id for _ in range(3)]
    assert [r.id for r in store.list_runs()] == ids[::-1]
    assert len(store.list_runs(limit=2)) == 2


def test_a_run_whose_process_died_is_recorded_failed(store: RunStore) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    w = _workload()
    stale = store.start_run(w, "local", 0.0, None, pid=dead.pid)
    store.save_stage(stale.id, 0, StageRecord("prep", "running", None, gpu_uuids=["GPU-x"]))
    alive = store.start_run(w, "local", 0.0, None, pid=os.getpid())
    unknown = store.start_run(w, "local", 0.0, None)  # no pid yet (detach in progress)
    assert store.busy_gpus() == {}
    by_id = {r.id: r for r in store.list_runs()}
    assert by_id[stale.id].status == "failed"
    assert "ended without recording" in (by_id[stale.id].message or "")
    assert by_id[stale.id].stages[0].status == "failed"
    assert by_id[alive.id].status == "running"
    assert by_id[unknown.id].status == "running"


def test_busy_gpus_are_those_of_running_stages(store: RunStore) -> None:
    w = _workload()
    rec = store.start_run(w, "local", 0.0, None, pid=os.getpid())
    store.save_stage(rec.id, 1, StageRecord("train", "running", None, gpu_uuids=["GPU-a", "GPU-b"]))
    assert store.busy_gpus() == {"GPU-a": rec.id, "GPU-b": rec.id}
    assert store.busy_gpus(exclude_run=rec.id) == {}
    store.finish_run(rec.id, "cancelled", 130, 0.0)
    assert store.busy_gpus() == {}
    assert store.get(rec.id).stages[1].status == "cancelled"


def _succeed(store: RunStore, w: Workload, stage: int, offer: Offer, seconds: float) -> None:
    rec = store.start_run(w, "local", offer.price_per_hour, None)
    store.save_stage(
        rec.id,
        stage,
        StageRecord(
            w.stages[stage].name,
            "succeeded",
            0,
            runtime_seconds=seconds,
            config=offer.as_json(),
        ),
    )
    store.finish_run(rec.id, "succeeded", 0, 0.0)


def test_runtime_lookup_is_the_median_of_succeeded_stages_per_configuration(
    store: RunStore,
) -> None:
    w = _workload()
    h100 = _offer()
    for seconds in (10.0, 30.0, 20.0):
        _succeed(store, w, 1, h100, seconds)
    lookup = store.runtime_lookup(records.fingerprint(w))
    assert lookup("train", h100) == 20.0
    assert lookup("train", _offer(count=4)) is None  # another configuration
    assert lookup("prep", h100) is None
    other = _workload(TWO_STAGES.replace('"echo hi"', '"echo other"'))
    assert store.runtime_lookup(records.fingerprint(other))("train", h100) is None


def test_a_cpu_only_stage_measured_without_gpus_counts_on_the_same_machine(
    store: RunStore,
) -> None:
    """A local CPU-only run does not ask the driver, so it records the machine GPU-less;
    `plan --target local` lists the machine with its GPUs. Same machine, same stage."""
    w = _workload()
    _succeed(store, w, 0, _offer(None, 0), 12.0)
    lookup = store.runtime_lookup(records.fingerprint(w))
    assert lookup("prep", _offer("H100", 8)) == 12.0
    assert lookup("prep", _offer("H100", 8, machine="elsewhere")) is None


def test_the_fingerprint_ignores_money_and_place_but_not_what_runs() -> None:
    w = _workload()
    limits = _workload(
        TWO_STAGES.replace("budget = 5.0", "budget = 99.0").replace(
            "cpu = 4", 'cpu = 4\nlocation = "eu"\nmax_price_per_hour = 50.0'
        )
    )
    assert records.fingerprint(limits) == records.fingerprint(w)
    other_command = _workload(TWO_STAGES.replace("echo", "echo -n", 1))
    assert records.fingerprint(other_command) != records.fingerprint(w)


def test_the_fingerprint_ignores_the_name_and_survives_a_round_trip() -> None:
    w = _workload()
    renamed = _workload(TWO_STAGES.replace('name = "rec"', 'name = "other"'))
    assert records.fingerprint(w) == records.fingerprint(renamed)
    again = records.workload_from_json(json.loads(json.dumps(w.as_json())))
    assert again.as_json() == w.as_json()
    assert records.fingerprint(again) == records.fingerprint(w)


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    env = {**os.environ, "NODUS_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nodus_cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    return run


def test_runs_and_logs_without_any_run(
    cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    done = cli("runs", "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == {"runs": []}
    assert "no runs recorded yet" in cli("runs").stdout
    missing = cli("logs", "20250101-000000-abcdef")
    assert missing.returncode == 1
    assert "no run '20250101-000000-abcdef'" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert cli("rerun", "nope").returncode == 1
