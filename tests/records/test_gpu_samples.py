"""A run's GPU-use samples: kept beside its log, bounded per GPU, thinned evenly."""

from __future__ import annotations

import itertools
from pathlib import Path

from records_support import make_workload

from nodus_cli.records import GpuSample, RunStore
from nodus_cli.records.gpu_samples import MAX_GPU_SAMPLES, read, thin, write


def series(uuid: str, n: int, start: float = 0.0) -> list[GpuSample]:
    return [GpuSample(start + i, uuid, float(i % 100), 1000.0 + i) for i in range(n)]


def test_thinning_keeps_the_bound_per_gpu_evenly_with_the_first_and_last() -> None:
    kept = thin([*series("GPU-a", 10_000), *series("GPU-b", 50)], limit=100)
    a = [s for s in kept if s.uuid == "GPU-a"]
    b = [s for s in kept if s.uuid == "GPU-b"]
    assert len(a) == 100 and len(b) == 50  # a GPU under the bound keeps every sample
    assert a[0].time == 0 and a[-1].time == 9_999
    gaps = {round(y.time - x.time) for x, y in itertools.pairwise(a)}
    assert gaps <= {100, 101}  # evenly over the whole run, not only the newest
    assert [s.time for s in kept] == sorted(s.time for s in kept)


def test_a_long_run_written_task_by_task_stays_within_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "run.gpu"
    for task in range(30):  # a fan-out: each task adds its own readings
        write(path, series("GPU-a", 100, start=task * 100.0))
    kept = read(path)
    assert len(kept) == MAX_GPU_SAMPLES
    assert kept[0].time == 0 and kept[-1].time == 2_999
    assert len(path.read_text().splitlines()) == MAX_GPU_SAMPLES


def test_unreadable_lines_are_skipped_and_a_missing_file_is_no_samples(tmp_path: Path) -> None:
    path = tmp_path / "run.gpu"
    assert read(path) == []
    write(path, [GpuSample(1.0, "GPU-a", None, 512.0)])
    with path.open("a") as handle:
        handle.write('{"time": "soon"}\nnot json\n')
    assert read(path) == [GpuSample(1.0, "GPU-a", None, 512.0)]


def test_the_store_keeps_them_apart_from_the_logs_and_forgets_them(tmp_path: Path) -> None:
    store = RunStore.open(tmp_path)
    record = store.create_run(make_workload(), "local", 0.0, None)
    store.add_gpu_samples(record.id, series("GPU-a", 3))
    assert [s.time for s in store.gpu_samples(record.id)] == [0.0, 1.0, 2.0]
    assert store.log_ids() == []  # the samples are not a log
    store.forget(record.id)
    assert store.gpu_samples(record.id) == []
    store.close()
