# ruff: noqa: F811 - the fixtures imported from slurm_support are test parameters here
"""Python functions on ``--target slurm`` against the harness's real cluster.

Each call is a real ``sbatch`` job whose container (this machine's Docker engine, which
the nodes share) runs the image's Python on nodus's runtime, with the call's files in
``work_root``: the value, the function's exception with its traceback and its output
come back; a map is a job per item, each with the GPU Slurm allocated to it and only
that one; ``call.stop()`` cancels the job; nothing of the call stays in ``work_root``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from calls_support import PY_IMAGE, PY_OTHER_IMAGE
from slurm_support import STATE, SlurmCluster, slurm_cluster  # noqa: F401 - fixture

from nodus_cli import CallFailed, Client, NodusError, RunStatus

pytestmark = [pytest.mark.slurm, pytest.mark.docker]


def greet(name: str) -> str:
    print(f"hello {name} from the job")
    return f"hello {name}"


def _deeper(x: int) -> int:
    raise ValueError(f"no good: {x}")


def fails(x: int) -> int:
    return _deeper(x)


def visible(item: int) -> tuple[int, str | None]:
    return item, os.environ.get("NVIDIA_VISIBLE_DEVICES")


def hog() -> int:
    blocks = []
    while True:
        blocks.append(bytearray(32 * 1024 * 1024))


def devices(item: int) -> tuple[int, list[str]]:
    return item, sorted(d for d in os.listdir("/dev") if d.startswith("nvidia"))


def sleeper(seconds: float) -> None:
    print("started", flush=True)
    time.sleep(seconds)


def wait_for(what: str, predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout}s"
        time.sleep(0.2)


class Setup:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.work_root = tmp / "work_root"
        self.config = tmp / "config.toml"


@pytest.fixture
def setup(
    slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Setup]:
    for key in list(os.environ):
        if key.startswith("NODUS_") and key not in ("NODUS_REQUIRE_DOCKER", "NODUS_TEST_SYSTEM"):
            monkeypatch.delenv(key)
    found = Setup(tmp_path)
    found.config.write_text(f'[slurm]\nwork_root = "{found.work_root}"\nprice_per_hour = 3.6\n')
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.setenv("NODUS_HOME", str(found.home))
    monkeypatch.setenv("NODUS_CONFIG", str(found.config))
    monkeypatch.chdir(tmp_path)
    yield found
    text = slurm_cluster.run("squeue", "-h", "-o", "%i %j")
    ours = [line.split()[0] for line in text.splitlines() if " nodus-" in line]
    if ours:
        slurm_cluster.cancel(*ours)


@pytest.fixture
def client(setup: Setup) -> Iterator[Client]:
    with Client(target="slurm", home=setup.home) as c:
        yield c


def _left_in_work_root(setup: Setup, run_id: str) -> list[str]:
    """What stays in the run's folder in work_root: its scripts, outputs and work/, as for
    any Slurm run, and none of the call's files."""
    run_dir = setup.work_root / run_id
    assert run_dir.is_dir()
    return sorted(p.name for p in run_dir.iterdir())


def _shown(run_id: str) -> dict[str, Any]:
    """``nodus runs RUN_ID --json`` (it has each stage's and task's Slurm job id)."""
    done = subprocess.run(
        [sys.executable, "-m", "nodus_cli", "runs", run_id, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def _hold_gpu(cluster: SlurmCluster, gres: str) -> str:
    """A job of someone else's holding one GPU (index 0) of the nodes of ``gres``, so
    that nodus's jobs get the other one."""
    job = cluster.run(
        "sbatch", "--parsable", f"--gres=gpu:{gres}:1", "-o", "/dev/null", "--wrap", "sleep 300"
    ).strip()
    cluster.poll(
        f"job {job} running",
        ["squeue", "-h", "-j", job, "-o", "%T"],
        lambda out: out.strip() == "RUNNING",
    )
    return job


def _sacct(cluster: SlurmCluster, job: str) -> str:
    return cluster.poll(
        f"job {job} accounted as ended",
        ["sacct", "-n", "-P", "-X", "-j", job, "-o", "State,ExitCode"],
        lambda out: bool(out.strip()) and not out.startswith(("PENDING", "RUNNING")),
    ).strip()


def test_a_function_returns_its_value_and_its_output_reaches_the_log(
    client: Client, setup: Setup, slurm_cluster: SlurmCluster
) -> None:
    call = client.run(fn=greet, args=("slurm",), image=PY_IMAGE, gpu="H100")
    assert call.result(timeout=180) == "hello slurm"
    assert "hello slurm from the job" in call.logs()
    shown = _shown(call.id)
    stage = shown["stages"][0]
    assert (shown["status"], stage["node"], len(stage["gpus"])) == ("succeeded", "gpu-a", 1)
    assert _sacct(slurm_cluster, stage["job_id"]) == "COMPLETED|0:0"
    kept = ["main.1.devices", "main.1.end", "main.1.out", "main.1.sh", "work"]
    assert _left_in_work_root(setup, call.id) == kept
    assert not (setup.home / "calls" / call.id).exists()


def test_a_function_that_raises_raises_here_with_the_remote_traceback(
    client: Client, setup: Setup
) -> None:
    call = client.run(fn=fails, args=(7,), image=PY_IMAGE)
    with pytest.raises(ValueError, match="no good: 7") as caught:
        call.result(timeout=180)
    remote = str(caught.value.__cause__)
    assert "in fails" in remote and "in _deeper" in remote
    record = client.get(call.id).result()
    assert record.status == RunStatus.FAILED
    assert "raised ValueError: no good: 7" in (record.stages[0].message or "")
    assert "function" not in _left_in_work_root(setup, call.id)


def test_a_map_is_a_job_per_item_each_with_only_the_gpu_slurm_allocated_it(
    client: Client, setup: Setup, slurm_cluster: SlurmCluster
) -> None:
    holder = _hold_gpu(slurm_cluster, "a100")
    try:
        calls = client.map([0, 1, 2], fn=visible, image=PY_IMAGE, gpu="A100")
        results = calls.results(timeout=300)
    finally:
        slurm_cluster.cancel(holder)
    assert [r.error for r in results] == [None, None, None]
    seen = {r.value[0]: r.value[1] for r in results}
    tasks = _shown(calls.id)["stages"][0]["tasks"]
    assert len({t["job_id"] for t in tasks}) == 3 and all(t["job_id"] for t in tasks)
    for task in tasks:
        assert task["node"] == "gpu-b"
        assert task["devices"] == ["gpu:1"], task  # GPU 0 is the other job's
        # The container sees the one GPU Slurm allocated to the item's job, no other.
        assert seen[task["index"]] == task["devices"][0].removeprefix("gpu:")
    assert "function" not in _left_in_work_root(setup, calls.id)


def test_stop_cancels_the_running_job(
    client: Client, setup: Setup, slurm_cluster: SlurmCluster
) -> None:
    call = client.run(fn=sleeper, args=(600,), image=PY_IMAGE, gpu="H100")
    wait_for("the call running", lambda: "started" in call.logs(), timeout=120)
    job = _shown(call.id)["stages"][0]["job_id"]
    assert job
    assert call.stop() is True
    with pytest.raises(CallFailed, match=r"cancelled by call\.stop\(\)"):
        call.result(timeout=120)
    assert _sacct(slurm_cluster, job).startswith("CANCELLED")
    assert client.get(call.id).result().status == RunStatus.CANCELLED
    assert "function" not in _left_in_work_root(setup, call.id)


def test_a_work_root_nodus_cannot_write_refuses_the_call_before_sbatch(
    setup: Setup, slurm_cluster: SlurmCluster
) -> None:
    blocker = setup.tmp / "a-file"
    blocker.write_text("")
    setup.config.write_text(f'[slurm]\nwork_root = "{blocker / "sub"}"\n')
    with Client(target="slurm", home=setup.home) as client:
        call = client.run(fn=greet, args=("nobody",), image=PY_IMAGE)
        with pytest.raises(NodusError) as caught:
            call.result(timeout=120)
    said = f"{caught.value.message}\n{caught.value.hint}"
    assert f"the Slurm work_root {blocker / 'sub'} is not writable" in said
    assert "every node sees at the same path" in said
    assert " nodus-" not in slurm_cluster.run("squeue", "-h", "-o", "%i %j")


def test_an_image_without_python_or_with_another_python_is_said_in_words(
    client: Client,
) -> None:
    with pytest.raises(CallFailed) as caught:
        client.run(fn=greet, args=("x",), image="nodus-test/busybox:1").result(timeout=180)
    assert "the image nodus-test/busybox:1 has no python3 (nor python)" in caught.value.message
    with pytest.raises(CallFailed) as caught:
        client.run(fn=greet, args=("x",), image=PY_OTHER_IMAGE).result(timeout=180)
    message = caught.value.message
    assert f"the image {PY_OTHER_IMAGE} runs Python 3." in message
    assert "and the function needs Python 3.11" in message and "Traceback" not in message


def test_out_of_memory_is_said_in_words(client: Client) -> None:
    with pytest.raises(CallFailed) as caught:
        client.run(fn=hog, image=PY_IMAGE, memory_gb=0.25).result(timeout=180)
    # Slurm keeps the container's 137 as 9: the script's own record says what happened.
    assert "out of memory: it reached its 0.25 GiB memory limit" in caught.value.message


def _podman_containers() -> list[str]:
    done = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True
    )
    return done.stdout.split()


@pytest.fixture
def podman(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``[slurm] container = "podman"``: the test image loaded into a podman store of the
    test's own (nothing can be pulled here), and a CDI spec naming the stand-in GPUs of
    node gpu-a by index, as ``nvidia-ctk cdi generate`` names real ones. The settings the
    sandbox needs (ulimits below its hard limits: podman raises them by default, and root
    here lacks CAP_SYS_RESOURCE; no network) reach the jobs through the environment."""
    if shutil.which("podman") is None:
        words = "podman is not installed: `bash tests/harness/podman.sh` installs it"
        if os.environ.get("NODUS_REQUIRE_DOCKER") == "1":  # CI: .ci/run installs it
            pytest.fail(words, pytrace=False)
        pytest.skip(words)
    store = setup.tmp / "podman"
    store.mkdir()
    (store / "storage.conf").write_text(
        f'[storage]\ndriver = "vfs"\nrunroot = "{store / "run"}"\ngraphroot = "{store / "graph"}"\n'
    )
    nofile = min(1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    nproc = min(4096, resource.getrlimit(resource.RLIMIT_NPROC)[1])
    (store / "containers.conf").write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", '
        f'"nproc={nproc}:{nproc}"]\nnetns = "none"\n[engine]\nevents_logger = "file"\n'
    )
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", str(store / "storage.conf"))
    monkeypatch.setenv("CONTAINERS_CONF", str(store / "containers.conf"))
    saved = subprocess.run(["docker", "save", PY_IMAGE], capture_output=True, check=True)
    subprocess.run(["podman", "load", "-q"], input=saved.stdout, capture_output=True, check=True)
    dev = STATE / "node" / "gpu-a" / "dev"
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {
                "name": str(i),
                "containerEdits": {
                    "deviceNodes": [
                        {"path": f"/dev/nvidia{i}", "hostPath": str(dev / f"nvidia{i}")}
                    ]
                },
            }
            for i in range(2)
        ],
    }
    cdi = Path("/var/run/cdi") / f"nodus-test-{os.getpid()}.json"
    cdi.parent.mkdir(parents=True, exist_ok=True)
    cdi.write_text(json.dumps(spec))
    setup.config.write_text(
        f'[slurm]\nwork_root = "{setup.work_root}"\ncontainer = "podman"\nprice_per_hour = 3.6\n'
    )
    try:
        yield
    finally:
        cdi.unlink()
        subprocess.run(["podman", "rmi", "-a", "-f"], capture_output=True, check=False)


def test_with_podman_a_map_item_sees_only_the_gpu_slurm_allocated_it(
    podman: None, setup: Setup, slurm_cluster: SlurmCluster
) -> None:
    holder = _hold_gpu(slurm_cluster, "h100")
    with Client(target="slurm", home=setup.home) as client:
        try:
            calls = client.map([0, 1], fn=devices, image=PY_IMAGE, gpu="H100")
            results = calls.results(timeout=300)
        finally:
            slurm_cluster.cancel(holder)
        assert [r.error for r in results] == [None, None]
        seen = {r.value[0]: r.value[1] for r in results}
        tasks = _shown(calls.id)["stages"][0]["tasks"]
        for task in tasks:
            assert task["node"] == "gpu-a" and task["devices"] == ["gpu:1"], task
            # Podman's CDI device of that index, and no other GPU, in the container.
            assert seen[task["index"]] == ["nvidia1"]
        assert _podman_containers() == []
        assert "function" not in _left_in_work_root(setup, calls.id)


def test_with_podman_stop_cancels_the_job_and_leaves_no_container(
    podman: None, setup: Setup, slurm_cluster: SlurmCluster
) -> None:
    with Client(target="slurm", home=setup.home) as client:
        call = client.run(fn=sleeper, args=(600,), image=PY_IMAGE)
        wait_for("the call running", lambda: "started" in call.logs(), timeout=120)
        job = _shown(call.id)["stages"][0]["job_id"]
        assert call.stop() is True
        with pytest.raises(CallFailed, match=r"cancelled by call\.stop\(\)"):
            call.result(timeout=120)
    assert _sacct(slurm_cluster, job).startswith("CANCELLED")
    assert _podman_containers() == []
