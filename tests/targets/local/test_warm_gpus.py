# ruff: noqa: F811 - the fixtures imported from the support modules are test parameters here
"""Warm workers of single calls that want GPUs (issue 32), on the real engine and the
stand-in GPUs: two calls of a kind share a worker and both records name its GPU; a GPU
call and a CPU call never share one; ``keep_warm=0`` gives a container each; a queued run
of another ``NODUS_HOME`` gets the GPU an idle worker holds, and so does a map of the same
client; a busy worker finishes its call before it hands the GPU over; a worker killed from
outside fails only its call.

Times are read inside the containers from /proc/uptime: every container shares the
host's kernel, so these are one clock for all of them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from calls_support import PY_IMAGE, client, python_images  # noqa: F401
from docker_support import (  # noqa: F401
    IMAGE,
    Nodus,
    docker_client,
    engine_clean,
    nodus_env,
    uuids_of,
)
from test_warm import wait_for, warm_containers

from nodus_cli import CallFailed, Client, RunStatus

pytestmark = pytest.mark.docker

(L4,) = uuids_of("l4x1")


def where() -> tuple[str, str]:
    """This container's host name and the GPUs it sees."""
    return os.uname()[1], os.environ.get("NVIDIA_VISIBLE_DEVICES", "")


def nap(seconds: float) -> tuple[str, float]:
    """Sleep, then say where, and when it ended (the shared clock)."""
    print("started", flush=True)
    time.sleep(seconds)
    with open("/proc/uptime") as handle:
        return os.uname()[1], float(handle.read().split()[0])


@pytest.fixture
def one_l4(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODUS_FAKE_GPUS", "l4x1")


def other_home_run(nodus_env: Nodus) -> Path:
    """A workload of another NODUS_HOME that wants the L4 and stamps when it started."""
    command = json.dumps("echo T $(cut -d' ' -f1 /proc/uptime)")
    return nodus_env.write(f'name = "other"\nimage = "{IMAGE}"\ngpu = "L4"\ncommand = {command}\n')


def stamp(output: str) -> float:
    (line,) = [line for line in output.splitlines() if "| T " in line]
    return float(line.split("T ", 1)[1])


def test_two_gpu_calls_of_a_kind_share_a_worker_and_both_records_name_the_gpu(
    client: Client, docker_client: Any, one_l4: None, tmp_path: Path
) -> None:
    (tmp_path / "config.toml").write_text("[local]\nprice_per_hour = 36000\n")
    first = client.run(fn=where, image=PY_IMAGE, gpu="L4")
    assert first.result(timeout=120) == (first.result()[0], L4)
    second = client.run(fn=where, image=PY_IMAGE, gpu="L4")
    assert second.result(timeout=120) == first.result()  # the same container, the same GPU
    (worker,) = warm_containers(docker_client, client.home_folder)
    assert worker.id.startswith(first.result()[0])
    for call in (first, second):
        record = client.get(call.id).result()
        assert record.status == RunStatus.SUCCEEDED
        (stage,) = record.stages
        assert stage.gpus == [L4]
        assert stage.cost > 0 and record.cost == stage.cost  # its own time at the price
        # its GPU's use sampled while the call ran, as on a container of its own
        assert client.get(call.id).record().stages[0].gpu_report is not None
    said = [line.text for line in client.logs(second.id).lines]
    assert any(f"on warm worker warm-{os.getpid()}-" in t and f" on {L4})" in t for t in said)


def test_a_gpu_call_and_a_cpu_call_never_share_a_worker(
    client: Client, docker_client: Any, one_l4: None
) -> None:
    gpu = client.run(fn=where, image=PY_IMAGE, gpu="L4").result(timeout=120)
    cpu = client.run(fn=where, image=PY_IMAGE).result(timeout=120)
    assert gpu[1] == L4 and cpu[1] == ""
    assert gpu[0] != cpu[0]
    again = client.run(fn=where, image=PY_IMAGE).result(timeout=120)
    assert again == cpu  # the CPU worker, still without a GPU
    assert len(warm_containers(docker_client, client.home_folder)) == 2


def test_keep_warm_zero_gives_gpu_calls_a_container_each(
    client: Client, docker_client: Any, one_l4: None
) -> None:
    seen = [
        client.run(fn=where, image=PY_IMAGE, gpu="L4", keep_warm=0).result(timeout=120)
        for _ in range(2)
    ]
    assert [gpus for _, gpus in seen] == [L4, L4]
    assert seen[0][0] != seen[1][0]
    assert warm_containers(docker_client, client.home_folder) == []


def test_a_queued_run_of_another_home_gets_the_gpu_an_idle_worker_holds(
    client: Client, docker_client: Any, nodus_env: Nodus, one_l4: None
) -> None:
    before = client.run(fn=where, image=PY_IMAGE, gpu="L4", keep_warm=600).result(timeout=120)
    assert len(warm_containers(docker_client, client.home_folder)) == 1  # idle, holding the L4
    work = other_home_run(nodus_env)
    # A run that may not wait is no waiter: the worker keeps the GPU, and is named.
    refused = nodus_env.run("run", "--no-wait", work, gpus="l4x1", timeout=90)
    assert refused.returncode == 3, refused.stderr
    assert "needs 1× L4; held by warm worker nodus-warm-" in refused.stderr
    assert "a warm worker gives its GPUs back as soon as a run waits for them" in refused.stderr
    assert len(warm_containers(docker_client, client.home_folder)) == 1
    done = nodus_env.run("run", work, gpus="l4x1", timeout=90)
    assert done.returncode == 0, done.stderr
    assert warm_containers(docker_client, client.home_folder) == []  # it gave the GPU back
    after = client.run(fn=where, image=PY_IMAGE, gpu="L4").result(timeout=120)
    assert after[1] == L4 and after[0] != before[0]  # a new worker, the GPU claimed again


def test_a_busy_worker_finishes_its_call_before_it_hands_the_gpu_over(
    client: Client, docker_client: Any, nodus_env: Nodus, one_l4: None
) -> None:
    call = client.run(fn=nap, args=(3,), image=PY_IMAGE, gpu="L4", keep_warm=600)
    wait_for(lambda: "started" in call.logs(), timeout=120)
    other = nodus_env.popen("run", other_home_run(nodus_env), gpus="l4x1")
    _, ended = call.result(timeout=120)
    out, err = other.communicate(timeout=90)
    assert other.returncode == 0, err
    assert client.get(call.id).result().status == RunStatus.SUCCEEDED
    assert stamp(out) >= ended  # the other run started once the call had ended
    wait_for(lambda: warm_containers(docker_client, client.home_folder) == [], timeout=30)


def test_a_gpu_worker_killed_from_outside_fails_only_its_call(
    client: Client, docker_client: Any, one_l4: None
) -> None:
    before = client.run(fn=where, image=PY_IMAGE, gpu="L4").result(timeout=120)
    call = client.run(fn=nap, args=(600,), image=PY_IMAGE, gpu="L4")
    wait_for(lambda: "started" in call.logs(), timeout=60)
    docker_client.containers.get(before[0]).kill()
    with pytest.raises(CallFailed, match="killed from outside nodus"):
        call.result(timeout=60)
    assert client.get(call.id).result().stages[0].gpus == [L4]
    after = client.run(fn=where, image=PY_IMAGE, gpu="L4").result(timeout=120)
    assert after[1] == L4 and after[0] != before[0]


def test_a_map_of_the_same_client_gets_the_gpu_its_idle_worker_holds(
    client: Client, docker_client: Any, one_l4: None
) -> None:
    single = client.run(fn=where, image=PY_IMAGE, gpu="L4", keep_warm=600).result(timeout=120)
    calls = client.map(range(2), fn=nap, image=PY_IMAGE, gpu="L4")  # its workers queue
    done = [r.value for r in calls.results(timeout=120)]
    hosts = {host for host, _ in done}
    assert len(hosts) == 1 and single[0] not in hosts  # the map's worker, on the one L4
    assert warm_containers(docker_client, client.home_folder) == []
