# ruff: noqa: F811 - the fixtures imported from docker_support are test parameters here
"""The Python API against a real dockerd: ``Client().run(...)`` returns at once, the run
goes on in a background supervisor, and ``wait``, ``logs``, ``stop``, ``results`` read it
back; bad arguments raise :class:`InvalidWorkload` with every problem before anything is
created."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_support import (  # noqa: F401 - fixtures
    FAKE_BIN,
    IMAGE,
    docker_client,
    engine_clean,
    own_client,
    uuids_of,
)

import nodus_cli
from nodus_cli import Client, InvalidWorkload, Requirements, RunStatus, StageStatus
from nodus_cli.targets import REGISTRY

pytestmark = pytest.mark.docker


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    with own_client(tmp_path, monkeypatch, NODUS_GPU_SAMPLE_SECONDS="0.2") as c:
        yield c


def containers(docker_client: Any, run_id: str) -> list[Any]:
    return docker_client.containers.list(all=True, filters={"label": f"nodus.run={run_id}"})


def test_run_returns_at_once_then_wait_and_logs(client: Client, docker_client: Any) -> None:
    started = time.monotonic()
    run = client.run(
        image=IMAGE, command="echo hello; sleep 1.5; echo bye; sleep 0.3; echo err >&2"
    )
    assert time.monotonic() - started < 1.5  # it did not wait for the command
    assert run.status in (RunStatus.PENDING, RunStatus.RUNNING)
    result = run.wait(timeout=60)
    assert result.ok and result.status == "succeeded" and result.exit_code == 0
    assert [(s.name, s.status) for s in result.stages] == [("main", StageStatus.SUCCEEDED)]
    assert run.logs() == "hello\nbye\nerr\n"
    assert run.logs(stage="main").splitlines()[0] == "hello"
    assert any("succeeded" in line.text for line in run.log_lines() if line.stream == "nodus")
    assert containers(docker_client, run.id) == []
    assert [r.id for r in client.runs()] == [run.id]


def test_a_failing_run_reports_its_exit_code(client: Client) -> None:
    result = client.run(image=IMAGE, command=["sh", "-c", "exit 9"]).wait(timeout=60)
    assert (result.status, result.exit_code, result.ok) == ("failed", 9, False)
    assert result.message == "stage 'main' failed with exit code 9"


def test_stop_removes_the_container_and_records_cancelled(
    client: Client, docker_client: Any
) -> None:
    run = client.run(image=IMAGE, command="echo up; sleep 60")
    deadline = time.monotonic() + 30
    while "up" not in run.logs():
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.1)
    assert run.stop() is True
    result = run.wait(timeout=30)
    assert result.status == "cancelled" and result.exit_code == 143
    assert containers(docker_client, run.id) == []
    assert run.stop() is False  # not running any more


def test_wait_with_a_timeout_raises_and_the_run_goes_on(client: Client) -> None:
    run = client.run(image=IMAGE, command="sleep 3")
    with pytest.raises(TimeoutError, match="still"):
        run.wait(timeout=0.2)
    assert run.wait(timeout=60).ok


def test_a_gpu_run_gets_exactly_the_gpus_asked_for(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODUS_FAKE_GPUS", "h100x8")
    run = client.run(
        image=IMAGE,
        command="echo $NVIDIA_VISIBLE_DEVICES",
        gpu="h-100",  # any accepted spelling
        gpu_count=2,
        requirements=Requirements(cpu=0.5, memory_gb=0.5),
    )
    result = run.wait(timeout=60)
    assert result.ok, result.message
    (visible,) = run.logs().split()
    devices = visible.split(",")
    assert len(devices) == 2 and set(devices) <= set(uuids_of("h100x8"))
    record = run.record()
    assert record.stages[0].gpu_uuids == devices
    assert record.workload_json["stages"][0]["requirements"]["gpu"] == "H100"


def test_the_mapping_wins_over_the_flat_keyword(client: Client) -> None:
    workload = client.workload(
        image=IMAGE, gpu="H100", requirements={"peak_memory_gb": 48}, peak_memory_gb=24
    )
    assert workload.requirements.peak_memory_gb == 48
    typed = client.workload(image=IMAGE, gpu="L4", requirements=Requirements(peak_memory_gb=20))
    assert typed.requirements.peak_memory_gb == 20
    as_dict = client.workload(image=IMAGE, requirements={"cpu": 8, "memory_gb": 32})
    assert (as_dict.requirements.cpu, as_dict.requirements.memory_gb) == (8.0, 32.0)
    assert as_dict == client.workload(image=IMAGE, requirements=Requirements(cpu=8, memory_gb=32))


def test_bad_arguments_raise_every_problem_before_anything_is_created(
    client: Client, docker_client: Any
) -> None:
    before = {c.id for c in docker_client.containers.list(all=True)}
    with pytest.raises(InvalidWorkload) as caught:
        client.run(
            image=IMAGE,
            gpu_type="A100-80GB",
            num_gpus=4,
            memory_bytes=32 * 1024**3,
            requirements={"cpu": -1},
        )
    error = caught.value
    assert isinstance(error, ValueError) and error.exit_code == 1
    by_loc = {p.loc: p.message for p in error.problems}
    assert "did you mean `gpu`" in by_loc["gpu_type"]
    assert "did you mean `gpu_count`" in by_loc["num_gpus"] and "gpu_count=4" in by_loc["num_gpus"]
    assert "did you mean `memory_gb=`" in by_loc["memory_bytes"]
    assert "memory_gb=32" in by_loc["memory_bytes"]
    assert "negative" in by_loc["requirements.cpu"]
    assert len(error.errors) == 4
    assert "client.run()" in str(error)
    assert client.runs() == []
    assert {c.id for c in docker_client.containers.list(all=True)} == before


def test_a_gpu_name_error_is_the_files_message_in_the_callers_words(client: Client) -> None:
    with pytest.raises(InvalidWorkload) as caught:
        client.run(image=IMAGE, gpu="A100-80GB")
    (problem,) = caught.value.errors
    assert problem.loc == "gpu"
    assert 'pass gpu="A100" with peak_memory_gb=80' in problem.message


def test_map_runs_every_item_and_results_come_in_item_order(client: Client) -> None:
    run = client.map(
        ["a", "b", "c", "d"],
        image=IMAGE,
        command='echo "$NODUS_ITEM_INDEX/$NODUS_ITEM_COUNT $NODUS_ITEM"; test "$NODUS_ITEM" != c',
        requirements={"cpu": 0.25, "memory_gb": 0.25},
    )
    results = run.results()
    assert [(r.index, r.item, r.status, r.exit_code) for r in results] == [
        (0, "a", "succeeded", 0),
        (1, "b", "succeeded", 0),
        (2, "c", "failed", 1),
        (3, "d", "succeeded", 0),
    ]
    assert run.logs(item=3) == "3/4 d\n"
    result = run.wait()
    assert result.status == "failed" and result.stages[0].items == {"succeeded": 3, "failed": 1}


def test_run_file_and_plan(client: Client, tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text(f'image = "{IMAGE}"\ncommand = "echo from-file"\n', encoding="utf-8")
    plan = client.plan(path)
    assert plan.feasible and plan.target == "local"
    assert plan.stages[0].selected is not None
    run = client.run_file(path)
    assert run.wait(timeout=60).ok and run.logs() == "from-file\n"
    assert run.record().file == str(path)
    assert client.plan(image=IMAGE, gpu="H100").feasible is False  # no GPU here


def test_gpus_and_list_nodes(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    (h100,) = client.gpus("nvidia h100")
    assert h100["name"] == "H100" and h100["min_price_per_gpu_hour"] > 0
    monkeypatch.setenv("NODUS_FAKE_GPUS", "mixed")
    # A machine with two models is one entry per model: a request names one model.
    l4, t4 = client.list_nodes()
    assert (l4.gpu, l4.gpus, l4.free_gpus) == ("L4", 2, 2) and l4.cpus > 0
    assert (t4.gpu, t4.gpus, t4.free_gpus) == ("T4", 1, 1)
    assert l4.hostname == t4.hostname and l4.id != t4.id
    assert l4.as_json()["queued"] == 0


def test_an_unknown_target_is_a_usage_error() -> None:
    with pytest.raises(nodus_cli.NodusError) as caught:
        Client(target="nomad")
    assert caught.value.exit_code == 2 and ", ".join(REGISTRY) in caught.value.message
    # The hint names every target with what it is, from the registry.
    assert caught.value.hint is not None
    assert caught.value.hint.startswith("--target local (this machine), --target swarm")
    for name in REGISTRY:
        assert f"--target {name} (" in caught.value.hint


def test_the_public_surface() -> None:
    assert set(nodus_cli.__all__) >= {"Client", "Requirements", "InvalidWorkload", "Run"}
    assert issubclass(nodus_cli.InvalidWorkload, ValueError)
    assert (Path(nodus_cli.__file__).parent / "py.typed").is_file()


def test_importing_nodus_cli_loads_neither_docker_nor_httpx() -> None:
    code = (
        "import sys, nodus_cli; from nodus_cli import Client, Requirements, InvalidWorkload; "
        "c = Client(); c.workload(image='i:1', gpu='H100'); "
        "print(sorted(m for m in ('docker', 'httpx', 'rich', 'requests', 'kubernetes') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
