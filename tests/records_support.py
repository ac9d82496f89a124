"""Helpers for the tests of the run records (tests/records): a two-stage workload and an
offer to record runs of, and a long history made in a moment."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nodus_cli.catalog import Offer
from nodus_cli.records import RunStatus, RunStore
from nodus_cli.records.model import PRICE_KNOWN
from nodus_cli.structs import replace
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


def make_workload(text: str = TWO_STAGES) -> Workload:
    result = load_text(text, "rec.toml")
    assert result.workload is not None, result.problems
    return result.workload


def make_offer(gpu: str | None = "H100", count: int = 8, machine: str = "box") -> Offer:
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


def priced_stage(store: RunStore, run_id: str, known: bool, idx: int = 0) -> None:
    """Record that stage ``idx`` of a run ran on a node whose price was set (``known``) or
    not, as a cluster target records it (``configuration.price_known``)."""
    stage = store.get(run_id).stages[idx]
    source = "[kubernetes] price_per_hour" if known else "not set"
    config = {**(stage.config or {}), "price_source": source, PRICE_KNOWN: known}
    store.save_stage(run_id, idx, replace(stage, config=config))


def long_history(home: Path, count: int) -> list[str]:
    """``count`` ended runs under ``home``, their ids newest first: one recorded through
    the store, copied in SQL (with its stages) under other ids, three a second (runs of
    one second are listed newest recorded first)."""
    store = RunStore.open(home)
    try:
        run = store.create_run(make_workload(), "local", 0.0, None)
        store.finish_run(run.id, RunStatus.SUCCEEDED, 0, 0.25)
    finally:
        store.close()
    ids = [f"20250101-{i // 3:06d}-{i:06x}" for i in range(count - 1)]
    with sqlite3.connect(home / "runs.sqlite3") as db:
        runs = [r[1] for r in db.execute("PRAGMA table_info(runs)")]
        stages = [r[1] for r in db.execute("PRAGMA table_info(stages)")]
        (row,) = db.execute(f"SELECT {', '.join(runs)} FROM runs").fetchall()
        rows = db.execute(f"SELECT {', '.join(stages)} FROM stages").fetchall()
        at, key = runs.index("started_at"), stages.index("run_id")
        copies = []
        for i, run_id in enumerate(ids):
            copy = list(row)
            copy[0], copy[at] = (
                run_id,
                f"2025-01-01T{i // 3 // 3600:02d}:{i // 3 // 60 % 60:02d}:{i // 3 % 60:02d}+00:00",
            )
            copies.append(copy)
        db.executemany(f"INSERT INTO runs VALUES ({', '.join('?' * len(runs))})", copies)
        db.executemany(
            f"INSERT INTO stages VALUES ({', '.join('?' * len(stages))})",
            [[*s[:key], run_id, *s[key + 1 :]] for run_id in ids for s in rows],
        )
    return [run.id, *ids[::-1]]
