# ruff: noqa: F811 - the fixtures imported from the support modules are test parameters here
"""Python functions on the two-node test Swarm: the call travels with the service as
secrets, the runtime as configs, the outcome comes back through the service's log; 16 MiB
pass each way and more fails naming the limit; nothing stays on the cluster."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from swarm_support import (  # noqa: F401 - fixtures
    IMAGE,
    MAIN_SOCK,
    Cluster,
    cluster,
    docker,
)

from nodus_cli import CallFailed, Client, RunStatus

pytestmark = pytest.mark.swarm

PY_IMAGE = "nodus-test/python:3.11"
PY_OTHER_IMAGE = "nodus-test/python:other"
MIB = 2**20


def where() -> str:
    print("hello from the node")
    return os.environ.get("NODUS_STAGE", "") + "@" + os.uname()[1]


def reverse(data: bytes) -> bytes:
    return data[::-1]


def big(n: int) -> bytes:
    return os.urandom(n)


class Refused(Exception):
    pass


def refuses(x: int) -> None:
    raise Refused(f"not {x}")


@pytest.fixture
def client(cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    for key in list(os.environ):
        if key.startswith("NODUS_") and key not in ("NODUS_REQUIRE_DOCKER", "NODUS_TEST_SYSTEM"):
            monkeypatch.delenv(key)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("DOCKER_HOST", MAIN_SOCK)
    home = tmp_path / "home"
    monkeypatch.setenv("NODUS_HOME", str(home))
    monkeypatch.setenv("NODUS_CONFIG", str(tmp_path / "config.toml"))
    with Client(target="swarm", home=home) as c:
        yield c


def left_on_the_cluster(run_id: str) -> list[str]:
    found = []
    for kind in ("service", "secret", "config"):
        found += [
            f"{kind} {name}"
            for name in docker(
                kind, "ls", "--filter", f"label=nodus.run={run_id}", "--format", "{{.Name}}"
            ).split()
        ]
    return found


def test_a_call_runs_on_the_planned_node_and_leaves_nothing(
    client: Client, cluster: Cluster
) -> None:
    call = client.run(fn=where, image=PY_IMAGE, gpu="H100")
    assert call.result(timeout=180).startswith("main@")
    record = client.get(call.id).result()
    assert record.target == "swarm" and record.status == RunStatus.SUCCEEDED
    assert record.stages[0].node == cluster.worker_hostname
    assert call.logs() == "hello from the node\n"  # no frame of the outcome among the lines
    assert left_on_the_cluster(call.id) == []


def test_the_functions_exception_comes_back_as_itself(client: Client) -> None:
    with pytest.raises(Refused, match="not 3") as caught:
        client.run(fn=refuses, args=(3,), image=PY_IMAGE).result(timeout=180)
    assert "Refused: not 3" in str(caught.value.__cause__)


def test_16_mib_pass_each_way(client: Client) -> None:
    data = os.urandom(16 * MIB)
    back = client.run(fn=reverse, args=(data,), image=PY_IMAGE).result(timeout=300)
    assert back == data[::-1]


def test_a_result_over_the_limit_fails_naming_it(client: Client) -> None:
    call = client.run(fn=big, args=(20 * MIB,), image=PY_IMAGE)
    with pytest.raises(CallFailed) as caught:
        call.result(timeout=300)
    assert "the return value pickles to 20.0 MiB, over the 17 MiB a value may have on Swarm" in (
        caught.value.message
    )
    assert left_on_the_cluster(call.id) == []


def test_arguments_over_the_limit_are_refused_before_the_run(client: Client) -> None:
    call = client.run(fn=reverse, args=(os.urandom(18 * MIB),), image=PY_IMAGE)
    with pytest.raises(CallFailed) as caught:
        call.result(timeout=120)
    assert "could not start" in caught.value.message
    assert "pickle to 18.0 MiB, over the 17 MiB a call may carry to a Swarm service" in (
        caught.value.message
    )
    assert client.runs() == []


def test_an_image_without_python_or_with_another_version(client: Client) -> None:
    with pytest.raises(CallFailed, match=r"has no python3 \(nor python\)"):
        client.run(fn=where, image=IMAGE).result(timeout=180)
    with pytest.raises(CallFailed, match=r"runs Python 3.* and the function needs Python 3\.11"):
        client.run(fn=where, image=PY_OTHER_IMAGE).result(timeout=180)


def test_a_map_of_a_function_on_swarm(client: Client) -> None:
    calls = client.map(range(4), fn=reverse_text, image=PY_IMAGE, cpu=0.25)
    assert [r.value for r in calls.results(timeout=300)] == ["0", "1", "2", "3"]
    assert left_on_the_cluster(calls.id) == []


def reverse_text(x: int) -> str:
    return str(x)[::-1]


def test_a_lock_in_an_argument_is_refused_before_anything_is_submitted(client: Client) -> None:
    from nodus_cli import InvalidWorkload

    with pytest.raises(InvalidWorkload):
        client.run(fn=reverse, args=(threading.Lock(),), image=PY_IMAGE)
    assert client.runs() == []
