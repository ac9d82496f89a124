# ruff: noqa: F811 - the fixtures imported from docker_support are test parameters here
"""A run refused after its checks passed leaves nothing, whichever check refused it.

Between ``prepare`` (every check, nothing recorded yet) and the first task, another user
of the engine can take the GPUs: the run is recorded by then, and, for a background run,
its supervisor checks again. A run that never started anything leaves no record, no work
folder and no log, and its submitter gets the refusal (words, hint, exit code) as a
foreground run gives it, once. The GPUs are taken by a container nodus did not start, as
another user's ``docker run --gpus device=UUID`` would: real, and deterministic."""

from __future__ import annotations

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

from nodus_cli import Client, RunStatus
from nodus_cli.errors import NotRunnable
from nodus_cli.run.sink import NullSink
from nodus_cli.structs import replace

pytestmark = pytest.mark.docker


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    with own_client(tmp_path, monkeypatch, NODUS_FAKE_GPUS="l4x1") as c:
        yield c


@pytest.fixture
def take_the_gpu(docker_client: Any) -> Iterator[Any]:
    """Hold the one L4 with a container nodus did not start (created: it holds it)."""
    import docker

    made: list[Any] = []

    def take() -> Any:
        (uuid,) = uuids_of("l4x1")
        blocker = docker_client.containers.create(
            IMAGE,
            "true",
            labels={"nodus.test": "blocker"},
            device_requests=[docker.types.DeviceRequest(device_ids=[uuid], capabilities=[["gpu"]])],
        )
        made.append(blocker)
        return blocker

    yield take
    for blocker in made:
        blocker.remove(force=True)


def _left(client: Client) -> list[str]:
    """Everything under the state folder but its empty folders and the database."""
    return sorted(
        p.relative_to(client.home_folder).as_posix()
        for p in client.home_folder.rglob("*")
        if p.is_file() and not p.name.startswith("runs.sqlite3")
    )


class Shown(NullSink):
    """What a terminal would have shown of the run."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def status(self, text: str) -> None:
        self.said.append(text)


def _prepared(client: Client) -> Any:
    workload = client.workload(image=IMAGE, command="echo never", gpu="L4")
    return client.prepare(replace(workload, queue=False))  # --no-wait


def test_a_foreground_run_refused_after_its_checks_leaves_nothing(
    client: Client, take_the_gpu: Any
) -> None:
    prepared = _prepared(client)  # the L4 is free now
    blocker = take_the_gpu()
    shown = Shown()
    with pytest.raises(NotRunnable) as caught:
        client.execute(prepared, sink=shown)
    assert shown.said == []  # the error is said once, by whoever prints it (not "run failed")
    assert caught.value.exit_code == 3
    assert caught.value.message.startswith("stage 'main' needs 1× L4; held by container ")
    assert f"{blocker.name}, not started by nodus, since" in caught.value.message
    assert caught.value.hint is not None and "run without --no-wait" in caught.value.hint
    assert client.runs() == []
    assert _left(client) == [] and list(client.home_folder.glob("work/*")) == []


def test_a_background_supervisors_refusal_reaches_its_submitter(
    client: Client, take_the_gpu: Any
) -> None:
    prepared = _prepared(client)
    blocker = take_the_gpu()  # taken between the submitter's checks and the supervisor's
    with pytest.raises(NotRunnable) as caught:
        client.submit(prepared, handshake=True)  # what `nodus run --detach` does
    assert caught.value.exit_code == 3
    assert caught.value.message.startswith("stage 'main' needs 1× L4; held by container ")
    assert f"{blocker.name}, not started by nodus, since" in caught.value.message
    assert caught.value.hint is not None and "run without --no-wait" in caught.value.hint
    assert client.runs() == []
    assert _left(client) == []  # no log, no supervisor's stderr, no work folder


def test_without_a_handshake_the_refusal_is_the_record(client: Client, take_the_gpu: Any) -> None:
    # client.run() returns before the supervisor's checks: its record is how the caller
    # learns of the refusal (run.wait()); the log says it with the hint, nothing else stays.
    prepared = _prepared(client)
    take_the_gpu()
    run = client.submit(prepared)
    result = run.wait(timeout=60)
    assert (result.status, result.exit_code) == (RunStatus.FAILED, 3)
    assert result.message is not None and "needs 1× L4; held by container" in result.message
    said = [line.text for line in run.log_lines() if line.stream == "nodus"]
    assert said[-2:] == [f"error: {result.message}", said[-1]]
    assert said[-1].startswith("hint: run without --no-wait")
    assert list(client.home_folder.glob("work/*")) == []
