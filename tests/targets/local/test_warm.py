# ruff: noqa: F811 - the fixtures imported from the support modules are test parameters here
"""Warm workers for single calls on the local engine (issue 32): a call right after another
of its kind runs in the same container; other requirements get another worker;
``keep_warm=0`` a container each; an idle worker ends after ``keep_warm`` and when the
Client closes; each call keeps its own record, log and exit code; a worker killed from
outside fails only its current call. Calls with GPUs: test_warm_gpus.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from calls_support import PY_IMAGE, client, python_images  # noqa: F401
from docker_support import docker_client, engine_clean, own_client  # noqa: F401

from nodus_cli import CallFailed, Client, RunStatus

pytestmark = pytest.mark.docker


def where(x: int) -> tuple[int, str]:
    print(f"call {x} says hello")
    return x, os.uname()[1]


def sleeper(seconds: float) -> str:
    print("started", os.uname()[1], flush=True)
    time.sleep(seconds)
    return "slept"


def uptime() -> float:
    """The clock every container shares (the host's kernel)."""
    with open("/proc/uptime") as handle:
        return float(handle.read().split()[0])


def first_step(seconds: float) -> tuple[str, float]:
    """Sleep, then say where it ran and when it ended."""
    time.sleep(seconds)
    return os.uname()[1], uptime()


def next_step(previous: tuple[str, float]) -> tuple[str, float]:
    """Say where it ran and when it started."""
    return os.uname()[1], uptime()


def warm_containers(docker_client: Any, home: Path) -> list[Any]:
    return docker_client.containers.list(
        all=True, filters={"label": ["nodus.warm", f"nodus.home={home}"]}
    )


def wait_for(predicate: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_call_after_another_of_its_kind_runs_in_the_same_container(
    client: Client, docker_client: Any
) -> None:
    first = client.run(fn=where, args=(1,), image=PY_IMAGE, cpu=0.5)
    assert first.result(timeout=120)[0] == 1
    second = client.run(fn=where, args=(2,), image=PY_IMAGE, cpu=0.5)
    assert second.result(timeout=120)[0] == 2
    assert first.result()[1] == second.result()[1]  # the same container
    (worker,) = warm_containers(docker_client, client.home_folder)
    assert worker.id.startswith(second.result()[1])
    # each call its own run, record and log
    assert first.id != second.id
    for call, x in ((first, 1), (second, 2)):
        record = client.get(call.id).result()
        assert record.status == RunStatus.SUCCEEDED and record.exit_code == 0
        assert call.logs() == f"call {x} says hello\n"
    assert not (client.home_folder / "calls" / first.id).exists()


def test_other_requirements_get_another_worker(client: Client) -> None:
    a = client.run(fn=where, args=(1,), image=PY_IMAGE, cpu=0.5).result(timeout=120)
    b = client.run(fn=where, args=(2,), image=PY_IMAGE, cpu=1).result(timeout=120)
    c = client.run(fn=where, args=(3,), image=PY_IMAGE, cpu=0.5).result(timeout=120)
    assert a[1] != b[1]
    assert a[1] == c[1]


def test_a_pipelines_steps_start_as_soon_as_their_input_is_ready(client: Client) -> None:
    firsts = [client.run(fn=first_step, args=(s,), image=PY_IMAGE, cpu=0.5) for s in (0, 5)]
    seconds = [client.run(fn=next_step, args=(f,), image=PY_IMAGE, cpu=0.5) for f in firsts]
    (fast_host, fast_end), (slow_host, slow_end) = (f.result(timeout=120) for f in firsts)
    (host, started), (last_host, _) = (s.result(timeout=120) for s in seconds)
    # the fast item's next step began once its input was there, not after the slow item
    assert fast_end <= started < slow_end
    # every step on the two warm workers the first steps started
    assert fast_host != slow_host and {host, last_host} <= {fast_host, slow_host}


def test_keep_warm_zero_makes_a_container_per_call(client: Client, docker_client: Any) -> None:
    hosts = {
        client.run(fn=where, args=(i,), image=PY_IMAGE, keep_warm=0).result(timeout=120)[1]
        for i in range(2)
    }
    assert len(hosts) == 2
    assert warm_containers(docker_client, client.home_folder) == []


def test_an_idle_worker_ends_after_keep_warm_and_with_the_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_client: Any, python_images: None
) -> None:
    with own_client(tmp_path, monkeypatch) as c:
        home = c.home_folder
        c.run(fn=where, args=(1,), image=PY_IMAGE, keep_warm=1).result(timeout=120)
        assert len(warm_containers(docker_client, home)) == 1
        wait_for(lambda: warm_containers(docker_client, home) == [], timeout=30)
        assert not list((home / "calls").glob("warm-*"))
        c.run(fn=where, args=(2,), image=PY_IMAGE, keep_warm=600).result(timeout=120)
        assert len(warm_containers(docker_client, home)) == 1
    wait_for(lambda: warm_containers(docker_client, home) == [], timeout=30)
    assert not list((home / "calls").glob("warm-*"))


def test_the_configuration_sets_keep_warm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_client: Any, python_images: None
) -> None:
    with own_client(tmp_path, monkeypatch) as c:
        (tmp_path / "config.toml").write_text("[functions]\nkeep_warm = 0\n")
        hosts = {
            c.run(fn=where, args=(i,), image=PY_IMAGE).result(timeout=120)[1] for i in range(2)
        }
        assert len(hosts) == 2
        assert warm_containers(docker_client, c.home_folder) == []


def test_exit_codes_and_failures_stay_per_call(client: Client) -> None:
    failed = client.run(fn=sys.exit, args=(3,), image=PY_IMAGE)
    with pytest.raises(SystemExit) as caught:
        failed.result(timeout=120)
    assert caught.value.code == 3
    record = client.get(failed.id).result()
    assert record.status == RunStatus.FAILED and record.exit_code == 3
    assert record.stages[0].message == "it called sys.exit(3): exit code 3"
    ok = client.run(fn=where, args=(4,), image=PY_IMAGE)
    assert ok.result(timeout=120)[0] == 4
    assert client.get(ok.id).result().status == RunStatus.SUCCEEDED
    assert ok.logs() == "call 4 says hello\n"


def test_a_worker_killed_from_outside_fails_only_its_call_and_is_replaced(
    client: Client, docker_client: Any
) -> None:
    before = client.run(fn=where, args=(0,), image=PY_IMAGE).result(timeout=120)[1]
    call = client.run(fn=sleeper, args=(600,), image=PY_IMAGE)
    wait_for(lambda: "started" in call.logs(), timeout=60)
    assert call.logs().split()[1] == before  # it runs on the warm worker
    docker_client.containers.get(before).kill()
    with pytest.raises(CallFailed, match="killed from outside nodus"):
        call.result(timeout=60)
    after = client.run(fn=where, args=(1,), image=PY_IMAGE).result(timeout=120)
    assert after[0] == 1 and after[1] != before


def test_stopping_a_call_on_a_warm_worker_cancels_only_it(client: Client) -> None:
    client.run(fn=where, args=(0,), image=PY_IMAGE).result(timeout=120)
    call = client.run(fn=sleeper, args=(600,), image=PY_IMAGE)
    wait_for(lambda: "started" in call.logs(), timeout=60)
    assert call.stop() is True
    with pytest.raises(CallFailed, match=r"cancelled by call\.stop\(\)"):
        call.result(timeout=60)
    assert client.get(call.id).result().status == RunStatus.CANCELLED
    assert client.run(fn=where, args=(1,), image=PY_IMAGE).result(timeout=120)[0] == 1


def test_a_killed_callers_idle_worker_goes_with_it(
    client: Client, tmp_path: Path, docker_client: Any
) -> None:
    script = tmp_path / "caller.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import time
            from nodus_cli import Client

            def one():
                return 1

            client = Client(home={str(client.home_folder)!r})
            assert client.run(fn=one, image={PY_IMAGE!r}).result() == 1
            print("done", flush=True)
            time.sleep(600)
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "done"
    assert len(warm_containers(docker_client, client.home_folder)) == 1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # its worker reads the end of its requests, exits, and the engine removes it
    wait_for(lambda: warm_containers(docker_client, client.home_folder) == [], timeout=30)
    # the next call's worker sweeps the dead caller's folder
    assert client.run(fn=where, args=(1,), image=PY_IMAGE).result(timeout=120)[0] == 1
    folders = list((client.home_folder / "calls").glob("warm-*"))
    assert [f.name.split("-")[1] for f in folders] == [str(os.getpid())]
