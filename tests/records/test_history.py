"""Runtime measurements from the records: the median per stage and configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
from records_support import TWO_STAGES, make_offer, make_workload

from nodus_cli import records
from nodus_cli.catalog import Offer
from nodus_cli.records import RunStatus, RunStore, StageRecord, StageStatus
from nodus_cli.workload import Workload


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore.open(tmp_path / "home")


def _succeed(store: RunStore, w: Workload, stage: int, offer: Offer, seconds: float) -> None:
    rec = store.create_run(w, "local", offer.price_per_hour, None)
    store.save_stage(
        rec.id,
        stage,
        StageRecord(
            w.stages[stage].name,
            StageStatus.SUCCEEDED,
            0,
            runtime_seconds=seconds,
            config=offer.as_json(),
        ),
    )
    store.finish_run(rec.id, RunStatus.SUCCEEDED, 0, 0.0)


def test_runtime_lookup_is_the_median_of_succeeded_stages_per_configuration(
    store: RunStore,
) -> None:
    w = make_workload()
    h100 = make_offer()
    for seconds in (10.0, 30.0, 20.0):
        _succeed(store, w, 1, h100, seconds)
    lookup = records.runtime_lookup(store, records.fingerprint(w))
    assert lookup("train", h100) == 20.0
    assert lookup("train", make_offer(count=4)) is None  # another configuration
    assert lookup("prep", h100) is None
    other = make_workload(TWO_STAGES.replace('"echo hi"', '"echo other"'))
    assert records.runtime_lookup(store, records.fingerprint(other))("train", h100) is None


def test_a_cpu_only_stage_measured_without_gpus_counts_on_the_same_machine(
    store: RunStore,
) -> None:
    """A local CPU-only run does not ask the driver, so it records the machine GPU-less;
    `plan --target local` lists the machine with its GPUs. Same machine, same stage."""
    w = make_workload()
    _succeed(store, w, 0, make_offer(None, 0), 12.0)
    lookup = records.runtime_lookup(store, records.fingerprint(w))
    assert lookup("prep", make_offer("H100", 8)) == 12.0
    assert lookup("prep", make_offer("H100", 8, machine="elsewhere")) is None
