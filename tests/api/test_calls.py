# ruff: noqa: F811 - the fixtures imported from the support modules are test parameters here
"""Python functions as workloads, one container per call, against the real engine: the
value comes back, the function's exception is raised as itself, and every other ending is
CallFailed with the words a user reads; bad input is InvalidWorkload before anything is
submitted; a Call is a Future and a run handle."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest
from calls_support import PY_IMAGE, PY_OTHER_IMAGE, client, python_images  # noqa: F401
from docker_support import IMAGE, docker_client, engine_clean, uuids_of  # noqa: F401

from nodus_cli import CallFailed, Client, InvalidWorkload, RunStatus
from nodus_cli.api.calls import Call

pytestmark = pytest.mark.docker


def square(x: int) -> int:
    print(f"squaring {x}")
    return x * x


def sleeper(seconds: float) -> str:
    print("started", flush=True)
    time.sleep(seconds)
    return "slept"


def until_let_go() -> str:
    """Says "started", then waits until the test lets it go on (a file /tmp/go that the
    test makes in its container): it still runs when the test looks, however slow the
    machine. It gives up after 100 s, saying so."""
    print("started", flush=True)
    deadline = time.monotonic() + 100
    while not os.path.exists("/tmp/go"):
        if time.monotonic() > deadline:
            return "never let go"
        time.sleep(0.1)
    os.remove("/tmp/go")  # the warm worker's next call waits again
    return "slept"


class NotFound(Exception):
    pass


def raises(name: str) -> None:
    raise NotFound(f"no such thing: {name}")


def containers(docker_client: Any, run_id: str) -> list[Any]:
    return docker_client.containers.list(all=True, filters={"label": f"nodus.run={run_id}"})


def wait_for(predicate: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# -- values and exceptions ------------------------------------------------------------------


def test_a_call_returns_the_functions_value_and_is_recorded_as_a_run(client: Client) -> None:
    call = client.run(fn=square, args=(7,), image=PY_IMAGE)
    assert isinstance(call, futures.Future)
    assert call.result(timeout=120) == 49
    assert call.logs() == "squaring 7\n"
    (run,) = client.runs()
    assert run.id == call.id and run.workload == f"{__name__}.square"
    assert run.status == RunStatus.SUCCEEDED and call.status == RunStatus.SUCCEEDED
    assert not (client.home_folder / "calls" / call.id).exists()  # read, then removed


def test_the_functions_exception_is_raised_as_itself_with_the_remote_traceback(
    client: Client,
) -> None:
    call = client.run(fn=raises, args=("x",), image=PY_IMAGE)
    with pytest.raises(NotFound, match="no such thing: x") as caught:
        call.result(timeout=120)
    assert "raise NotFound" in str(caught.value.__cause__) or "NotFound: no such thing: x" in str(
        caught.value.__cause__
    )
    record = client.get(call.id).result()
    assert record.status == RunStatus.FAILED and record.exit_code == 101
    assert record.stages[0].message == f"raised {__name__}.NotFound: no such thing: x"


def test_a_function_that_kills_its_own_process_fails_the_call_with_words(
    client: Client,
) -> None:
    def hard_exit() -> None:
        os._exit(3)

    call = client.run(fn=hard_exit, image=PY_IMAGE)
    with pytest.raises(CallFailed) as caught:
        call.result(timeout=120)
    error = caught.value
    assert error.run_id == call.id and error.exit_code == 1
    assert error.message == (
        f"{__name__}.test_a_function_that_kills_its_own_process_fails_the_call_with_words."
        f"<locals>.hard_exit (run {call.id}): the function's process exited with code 3 "
        "without reporting an outcome: it called os._exit(), or it crashed or was killed"
    )
    assert error.hint == f"its output: nodus logs {call.id}"
    assert not (client.home_folder / "work" / call.id).exists()  # empty: not kept


def test_a_failed_call_says_where_its_work_folder_is_kept(client: Client) -> None:
    def leave_a_file() -> None:
        with open(os.path.join(os.environ["NODUS_WORK_DIR"], "partial.txt"), "w") as f:
            f.write("half done")
        os._exit(3)

    call = client.run(fn=leave_a_file, image=PY_IMAGE)
    with pytest.raises(CallFailed) as caught:
        call.result(timeout=120)
    kept = client.home_folder / "work" / call.id
    assert caught.value.hint == (
        f"its output: nodus logs {call.id}; what it left in its work folder is kept in {kept}"
    )
    assert (kept / "partial.txt").read_text() == "half done"


def test_an_unpicklable_return_value_fails_the_call_with_words(client: Client) -> None:
    def generator() -> object:
        return (i for i in range(3))

    with pytest.raises(
        CallFailed,
        match="the return value cannot be pickled: TypeError: cannot pickle 'generator' object",
    ):
        client.run(fn=generator, image=PY_IMAGE).result(timeout=120)


def test_an_image_without_python_fails_the_call_saying_so(client: Client) -> None:
    with pytest.raises(CallFailed) as caught:
        client.run(fn=square, args=(1,), image=IMAGE).result(timeout=120)
    assert caught.value.message.endswith(
        f"the image {IMAGE} has no python3 (nor python) to run the function: it needs an "
        "image with Python 3.11, the caller's version (e.g. python:3.11-slim)"
    )


def test_another_python_in_the_image_names_both_versions(client: Client) -> None:
    with pytest.raises(CallFailed) as caught:
        client.run(fn=square, args=(1,), image=PY_OTHER_IMAGE).result(timeout=120)
    message = caught.value.message
    assert f"the image {PY_OTHER_IMAGE} runs Python 3." in message
    assert "and the function needs Python 3.11 (it was pickled by Python 3.11." in message
    assert "use an image with Python 3.11" in message and "Traceback" not in message


def test_out_of_memory_names_the_limit(client: Client) -> None:
    def hog() -> int:
        blocks = []
        while True:
            blocks.append(bytearray(32 * 1024 * 1024))

    with pytest.raises(CallFailed) as caught:
        client.run(fn=hog, image=PY_IMAGE, requirements={"memory_gb": 0.25}).result(timeout=120)
    message = caught.value.message
    assert "out of memory: it reached its 0.25 GiB memory limit" in message
    assert message.endswith("; raise `memory_gb=`")  # the caller's words, not [requirements]


def test_a_missing_image_fails_the_call_before_anything_is_recorded(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODUS_PULL_TIMEOUT", "5")
    call = client.run(fn=square, args=(1,), image="nodus-test/no-such-image:1")
    with pytest.raises(CallFailed) as caught:
        call.result(timeout=120)
    assert caught.value.message.startswith(
        f"{__name__}.square: could not start: cannot get image nodus-test/no-such-image:1"
    )
    assert caught.value.run_id is None and client.runs() == []


def test_a_budget_fails_the_call(client: Client, tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[local]\nprice_per_hour = 36000\n")
    with pytest.raises(CallFailed, match="budget") as caught:
        client.run(fn=sleeper, args=(30,), image=PY_IMAGE, budget=0.5).result(timeout=120)
    run = client.get(caught.value.run_id or "").result()
    assert run.status == RunStatus.BUDGET_EXHAUSTED


def test_a_gpu_call_sees_exactly_its_device(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODUS_FAKE_GPUS", "h100x8")

    def visible() -> str:
        return os.environ.get("NVIDIA_VISIBLE_DEVICES", "")

    seen = client.run(fn=visible, image=PY_IMAGE, gpu="H100").result(timeout=120)
    assert seen in uuids_of("h100x8") and "," not in seen


def test_large_values_pass_both_ways(client: Client) -> None:
    def reverse(data: bytes) -> bytes:
        return data[::-1]

    data = os.urandom(64 * 1024 * 1024)
    back = client.run(fn=reverse, args=(data,), image=PY_IMAGE).result(timeout=180)
    assert back == data[::-1]


# -- bad input, before anything is submitted --------------------------------------------------


def test_fn_that_is_not_callable_and_fn_with_command(client: Client) -> None:
    with pytest.raises(InvalidWorkload) as caught:
        client.run(fn=square(3), image=PY_IMAGE, command="echo hi")
    by_loc = {p.loc: p.message for p in caught.value.problems}
    assert by_loc["fn"].startswith("must be a function (or another callable), not int 9")
    assert by_loc["command"].startswith("fn and command exclude each other")
    assert client.runs() == []


def test_an_image_is_required(client: Client) -> None:
    with pytest.raises(InvalidWorkload) as caught:
        client.run(fn=square, args=(1,))
    (problem,) = caught.value.problems
    assert problem.loc == "image" and "e.g. image='python:3.11-slim'" in problem.message


def test_other_tools_keywords_get_the_files_hints(client: Client) -> None:
    with pytest.raises(InvalidWorkload) as caught:
        client.run(
            fn=square, image=PY_IMAGE, num_gpus=0.25, gpu_type="A100-80GB", memory_bytes=2**31
        )
    by_loc = {p.loc: p.message for p in caught.value.problems}
    assert "share_gpu" in by_loc["num_gpus"] and "peak_memory_gb" in by_loc["num_gpus"]
    assert "did you mean `gpu`" in by_loc["gpu_type"]
    assert "did you mean `memory_gb=`" in by_loc["memory_bytes"]


def test_a_lambda_capturing_a_lock_and_an_unpicklable_argument(
    client: Client, docker_client: Any
) -> None:
    lock = threading.Lock()
    before = {c.id for c in docker_client.containers.list(all=True)}
    with pytest.raises(InvalidWorkload) as caught:
        client.run(fn=lambda: lock.locked(), image=PY_IMAGE)
    assert caught.value.problems[0].message.startswith(
        "cannot pickle '_thread.lock' object: the function refers to `lock` (a closure variable)"
    )
    with pytest.raises(InvalidWorkload) as caught:
        client.run(fn=square, args=(lock,), image=PY_IMAGE)
    assert [(p.loc, p.message) for p in caught.value.problems] == [
        ("args[0]", "cannot pickle '_thread.lock' object")
    ]
    assert client.runs() == [] and not list((client.home_folder / "calls").iterdir())
    assert {c.id for c in docker_client.containers.list(all=True)} == before


# -- the future and the run handle --------------------------------------------------------------


def test_result_with_a_timeout_raises_and_the_call_goes_on(client: Client) -> None:
    call = client.run(fn=sleeper, args=(1.5,), image=PY_IMAGE)
    with pytest.raises(TimeoutError):
        call.result(timeout=0.1)
    assert call.result(timeout=120) == "slept"


def test_the_functions_prints_are_the_runs_output_live(client: Client, docker_client: Any) -> None:
    call = client.run(fn=until_let_go, image=PY_IMAGE)
    wait_for(lambda: "started" in call.logs(), timeout=60)
    assert not call.done() and call.running()
    (worker,) = docker_client.containers.list(filters={"label": f"nodus.home={client.home_folder}"})
    assert worker.exec_run(["touch", "/tmp/go"]).exit_code == 0
    assert call.result(timeout=120) == "slept"


def test_stop_removes_the_container_and_the_call_fails_cancelled(
    client: Client, docker_client: Any
) -> None:
    call = client.run(fn=sleeper, args=(600,), image=PY_IMAGE)
    wait_for(lambda: "started" in call.logs(), timeout=60)
    assert call.stop() is True
    with pytest.raises(CallFailed, match=r"cancelled by call\.stop\(\)"):
        call.result(timeout=60)
    assert containers(docker_client, call.id) == []
    record = client.get(call.id).result()
    assert record.status == RunStatus.CANCELLED
    assert record.message == "cancelled by call.stop(); the run's tasks were removed"


def test_cancel_stops_the_call_and_cancels_the_future(client: Client, docker_client: Any) -> None:
    call = client.run(fn=sleeper, args=(600,), image=PY_IMAGE)
    wait_for(lambda: "started" in call.logs(), timeout=60)
    assert call.cancel() is True and call.cancelled()
    with pytest.raises(futures.CancelledError):
        call.result()
    wait_for(lambda: client.get(call.id).status == RunStatus.CANCELLED, timeout=60)
    wait_for(lambda: containers(docker_client, call.id) == [], timeout=30)
    assert call.cancel() is False or call.cancelled()
    record = client.get(call.id).result()
    assert record.message == "cancelled by call.cancel(); the run's tasks were removed"


def test_sys_exit_in_the_function_is_the_runs_exit_code_and_system_exit_here(
    client: Client,
) -> None:
    call = client.run(fn=sys.exit, args=(3,), image=PY_IMAGE)
    with pytest.raises(SystemExit) as caught:
        call.result(timeout=120)
    assert caught.value.code == 3
    record = client.get(call.id).result()
    assert record.status == RunStatus.FAILED and record.exit_code == 3
    assert record.stages[0].message == "it called sys.exit(3): exit code 3"
    ok = client.run(fn=sys.exit, args=(0,), image=PY_IMAGE)
    assert ok.result(timeout=120) is None
    assert client.get(ok.id).result().status == RunStatus.SUCCEEDED


def test_calls_work_with_wait_and_as_completed_and_asyncio(client: Client) -> None:
    import asyncio

    calls = [client.run(fn=square, args=(i,), image=PY_IMAGE) for i in range(3)]
    done, _ = futures.wait(calls, timeout=180)
    assert len(done) == 3
    assert sorted(c.result() for c in futures.as_completed(calls)) == [0, 1, 4]

    async def main() -> int:
        return int(await asyncio.wrap_future(client.run(fn=square, args=(5,), image=PY_IMAGE)))

    assert asyncio.run(main()) == 25


def test_nodus_stop_on_the_command_line_stops_the_call_not_the_caller(
    client: Client, tmp_path: Path
) -> None:
    call = client.run(fn=sleeper, args=(600,), image=PY_IMAGE)
    wait_for(lambda: "started" in call.logs(), timeout=60)
    done = subprocess.run(
        [sys.executable, "-m", "nodus_cli", "stop", call.id],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NODUS_HOME": str(client.home_folder)},
    )
    assert done.returncode == 0, done.stderr
    with pytest.raises(CallFailed, match="cancelled by `nodus stop`"):
        call.result(timeout=60)  # this process (the caller) is alive to see it


def test_a_killed_caller_is_reconciled(client: Client, tmp_path: Path, docker_client: Any) -> None:
    script = tmp_path / "caller.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import time
            from nodus_cli import Client

            def sleeper():
                print("started", flush=True)
                time.sleep(600)

            client = Client(home={str(client.home_folder)!r})
            call = client.run(fn=sleeper, image={PY_IMAGE!r})
            print(call.id, flush=True)
            while "started" not in call.logs():
                time.sleep(0.05)
            print("running", flush=True)
            time.sleep(600)
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()
    assert proc.stdout.readline().strip() == "running"
    # the call's folder: its own, or moved into its warm worker's while it runs
    assert [p for p in (client.home_folder / "calls").glob(f"**/{run_id}") if p.is_dir()]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    found = client.reconcile()
    assert any(run_id in line and "removed what it left" in line for line in found), found
    assert containers(docker_client, run_id) == []
    warm = {"label": ["nodus.warm", f"nodus.home={client.home_folder}"]}
    assert docker_client.containers.list(all=True, filters=warm) == []
    assert not list((client.home_folder / "calls").glob(f"**/{run_id}"))
    assert client.get(run_id).status == RunStatus.FAILED


def test_the_call_is_typed_and_repr_says_what_it_is(client: Client) -> None:
    call: Call[int] = client.run(fn=square, args=(2,), image=PY_IMAGE)
    assert repr(call).startswith(f"<Call {__name__}.square {call.id}")
    assert call.result(timeout=120) == 4
    assert json.loads(json.dumps(client.get(call.id).result().as_json()))["workload"] == (
        f"{__name__}.square"
    )


def test_the_price_ceiling_of_the_limits_refuses_the_call(client: Client, tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        "[local]\nprice_per_hour = 50\n[limits]\nmax_price_per_hour = 10\n"
    )
    call = client.run(fn=square, args=(2,), image=PY_IMAGE)
    with pytest.raises(CallFailed) as caught:
        call.result(timeout=120)
    assert caught.value.message.startswith(f"{__name__}.square: could not start: ")
    assert "max_price_per_hour" in caught.value.message
    assert caught.value.exit_code == 3 and client.runs() == []  # NotRunnable's code
