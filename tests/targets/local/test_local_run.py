# ruff: noqa: F811 - the fixtures imported from docker_support are test parameters here
"""``nodus run`` on the local target, against a real dockerd (tests/harness/engine.sh up).

The engine's stand-in NVIDIA hook makes GPU device requests work without a GPU; the
stand-in ``nvidia-smi`` (tests/fakes/bin) describes the machine named by
``NODUS_FAKE_GPUS``. Every test has its own NODUS_HOME and configuration; the module
checks that the engine is as clean after it as before.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from docker_support import (  # noqa: F401 - fixtures
    CUDA_IMAGE,
    FAKE_BIN,
    IMAGE,
    UNTIL_LET_GO,
    Nodus,
    docker_client,
    engine_clean,
    fixture_gpus,
    nodus_env,
    read_until,
    uuids_of,
)
from interpreter import python

from nodus_cli.api import Client

pytestmark = pytest.mark.docker

H100 = uuids_of("h100x8")


def workload(name: str, command: str, extra: str = "", image: str = IMAGE) -> str:
    return f'name = "{name}"\nimage = "{image}"\ncommand = {json.dumps(command)}\n{extra}'


def containers_of(client: Any, workload_name: str) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"nodus.workload={workload_name}"})


def stage_lines(text: str, stage: str) -> list[str]:
    prefix = f"{stage} | "
    return [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]


# -- stages, exit codes, output ----------------------------------------------------------


def test_exit_code_is_the_failing_stages_and_later_stages_do_not_start(nodus_env: Nodus) -> None:
    path = nodus_env.write(
        workload("three", "echo unused")
        + """
[[stages]]
name = "first"
command = "echo one"
[[stages]]
name = "second"
command = "echo two; exit 7"
[[stages]]
name = "third"
command = "echo three"
"""
    )
    done = nodus_env.run("run", path)
    assert done.returncode == 7, done.stderr
    assert stage_lines(done.stdout, "first") == ["one"]
    assert stage_lines(done.stdout, "second") == ["two"]
    assert "third |" not in done.stdout
    assert "Traceback" not in done.stderr
    (run,) = nodus_env.runs()
    assert run["status"] == "failed" and run["exit_code"] == 7
    assert [(s["name"], s["status"], s["exit_code"]) for s in run["stages"]] == [
        ("first", "succeeded", 0),
        ("second", "failed", 7),
        ("third", "skipped", None),
    ]


def test_stages_run_in_order_and_share_the_work_dir(nodus_env: Nodus) -> None:
    path = nodus_env.write(
        workload("shared", "true")
        + """
[[stages]]
name = "produce"
command = "echo \\"made by $NODUS_STAGE\\" > $NODUS_WORK_DIR/data.txt; echo wrote"
[[stages]]
name = "consume"
command = "echo dir=$NODUS_WORK_DIR; cat $NODUS_WORK_DIR/data.txt"
"""
    )
    done = nodus_env.run("run", path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if " | " in line]
    assert lines == ["produce | wrote", "consume | dir=/nodus/work", "consume | made by produce"]
    # the shared folder lives only as long as the run
    assert not any((nodus_env.home / "work").iterdir())


def test_output_streams_live_with_the_stage_name(nodus_env: Nodus) -> None:
    command = f"echo early; echo to-stderr >&2; {UNTIL_LET_GO}; echo late"
    proc = nodus_env.popen("run", nodus_env.write(workload("live", command)))
    # the first line arrives while the stage still runs (it waits for the test), not at the end
    read_until(proc, "main | early")
    assert proc.poll() is None
    nodus_env.let_go(nodus_env.runs()[0]["id"])
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "main | late" in rest
    # the container's stderr goes to stderr, with the stage name too
    assert "main | to-stderr" in err
    assert "to-stderr" not in rest


def test_the_command_leaves_its_output_whole_and_its_records_closed(nodus_env: Nodus) -> None:
    """`nodus run` leaves without tearing the interpreter down: the exit handlers still
    run (the records' last close checkpoints SQLite's WAL, which leaves no -wal file) and
    every line of output is there, with the exit code."""
    path = nodus_env.write(workload("leaves", "seq 1 3000; exit 3"))
    done = nodus_env.run("run", path)
    assert done.returncode == 3, done.stderr
    assert stage_lines(done.stdout, "main") == [str(n) for n in range(1, 3001)]
    assert "exit 3" in done.stderr
    left = sorted(p.name for p in nodus_env.home.iterdir() if p.name.startswith("runs."))
    assert left == ["runs.sqlite3"]


def test_json_run_prints_one_document_on_stdout(nodus_env: Nodus) -> None:
    path = nodus_env.write(workload("quiet", "echo hello"))
    done = nodus_env.run("run", "--json", path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["status"] == "succeeded" and doc["workload"] == "quiet"
    assert "main | hello" in done.stderr


def test_a_command_that_cannot_start_exits_127(nodus_env: Nodus) -> None:
    path = nodus_env.write('name = "nocmd"\nimage = "nodus-test/busybox:1"\ncommand = ["nope"]\n')
    done = nodus_env.run("run", path)
    assert done.returncode == 127, done.stderr
    assert "executable file not found" in done.stderr
    assert "Traceback" not in done.stderr


# -- the container contract --------------------------------------------------------------

# cgroup v2 first (cpu.max, memory.max), else v1; then the /dev/shm mount.
LIMITS = (
    "cat /sys/fs/cgroup/cpu.max 2>/dev/null || "
    'echo "$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) '
    '$(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"; '
    "cat /sys/fs/cgroup/memory.max 2>/dev/null || "
    "cat /sys/fs/cgroup/memory/memory.limit_in_bytes; "
    "grep ' /dev/shm ' /proc/mounts"
)


def _limits(stdout: str) -> tuple[int, int, int, int]:
    cpu, memory, shm = stage_lines(stdout, "main")[:3]
    quota, period = (int(x) for x in cpu.split())
    size = re.search(r"size=(\d+)k", shm)
    assert size, shm
    return quota, period, int(memory), int(size.group(1)) * 1024


@pytest.mark.parametrize(
    ("requirements", "cpus", "memory_gib"),
    [
        ("cpu = 0.5\n", 0.5, 1.0),  # memory_gb omitted: 2 GiB per CPU
        ("cpu = 1\nmemory_gb = 3\n", 1.0, 3.0),
    ],
)
def test_cpu_memory_and_shm_limits_inside_the_container(
    nodus_env: Nodus, requirements: str, cpus: float, memory_gib: float
) -> None:
    path = nodus_env.write(workload("limits", LIMITS, "[requirements]\n" + requirements))
    done = nodus_env.run("run", path)
    assert done.returncode == 0, done.stderr
    quota, period, memory, shm = _limits(done.stdout)
    assert quota / period == pytest.approx(cpus)
    assert memory == int(memory_gib * 1024**3)
    # /dev/shm is inside the memory limit
    assert 0 < shm <= memory


def test_env_merges_stage_over_workload(nodus_env: Nodus) -> None:
    path = nodus_env.write(
        workload("envs", "true", 'env = { A = "from-workload", B = "from-workload" }\n')
        + """
[[stages]]
name = "s"
command = "echo A=$A B=$B run=$NODUS_RUN_ID stage=$NODUS_STAGE"
env = { B = "from-stage" }
"""
    )
    done = nodus_env.run("run", path)
    assert done.returncode == 0, done.stderr
    (line,) = stage_lines(done.stdout, "s")
    run_id = nodus_env.runs()[0]["id"]
    assert line == f"A=from-workload B=from-stage run={run_id} stage=s"


def test_labels_no_privileges_and_no_host_mount_but_the_work_dir(
    nodus_env: Nodus, docker_client: Any
) -> None:
    path = nodus_env.write(workload("contract", "echo up; sleep 20", "[requirements]\ncpu = 1\n"))
    done = nodus_env.run("run", "--detach", "--json", path)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["id"]
    try:
        (container,) = docker_client.containers.list(
            all=True, filters={"label": f"nodus.run={run_id}"}
        )
        attrs = container.attrs
        labels = attrs["Config"]["Labels"]
        assert labels["nodus.run"] == run_id
        assert labels["nodus.stage"] == "main"
        assert labels["nodus.workload"] == "contract"
        host = attrs["HostConfig"]
        assert host["Privileged"] is False
        assert "no-new-privileges" in (host.get("SecurityOpt") or [])
        assert not host.get("Binds") and not host.get("CapAdd") and not host.get("Devices")
        assert host["NanoCpus"] == 1_000_000_000
        assert host["Memory"] == 2 * 1024**3 and host["MemorySwap"] == 2 * 1024**3
        (mount,) = attrs["Mounts"]
        assert mount["Type"] == "bind" and mount["Destination"] == "/nodus/work"
        assert mount["Source"] == str(nodus_env.home / "work" / run_id)
        assert not host.get("DeviceRequests")  # no GPU asked, none given
    finally:
        nodus_env.stop(run_id)
    record = nodus_env.wait_done(run_id)
    assert record["status"] == "cancelled" and record["exit_code"] == 143
    assert not containers_of(docker_client, "contract")


# -- GPUs ----------------------------------------------------------------------------------


def test_gpu_device_requests_name_the_exact_uuids(nodus_env: Nodus, docker_client: Any) -> None:
    path = nodus_env.write(
        workload(
            "h100s",
            "echo $NVIDIA_VISIBLE_DEVICES",
            'gpu = "H100"\ngpu_count = 2\n',
            image=CUDA_IMAGE,
        )
    )
    done = nodus_env.run("run", path, gpus="h100x8")
    assert done.returncode == 0, done.stderr
    (visible,) = stage_lines(done.stdout, "main")
    assert visible.split(",") == H100[:2]
    (run,) = nodus_env.runs()
    assert run["stages"][0]["gpus"] == H100[:2]
    assert run["stages"][0]["configuration"]["gpu"] == "H100"


def test_mixed_machine_gets_the_l4s_never_the_t4(nodus_env: Nodus) -> None:
    path = nodus_env.write(
        workload("l4s", "echo $NVIDIA_VISIBLE_DEVICES", 'gpu = "L4"\ngpu_count = 2\n')
    )
    done = nodus_env.run("run", path, gpus="mixed")
    assert done.returncode == 0, done.stderr
    (visible,) = stage_lines(done.stdout, "main")
    l4 = uuids_of("mixed", "L4")
    (t4,) = uuids_of("mixed", "T4")
    assert sorted(visible.split(",")) == sorted(l4)
    assert t4 not in visible


@pytest.mark.parametrize(
    ("gpus", "requirements", "has", "why"),
    [
        ("h100x8", 'gpu = "A100"\n', "8× H100 80 GB", "A100"),
        ("l4x1", 'gpu = "L4"\ngpu_count = 2\n', "1× L4 24 GB", "2"),
        ("a100-40gbx2", 'gpu = "A100"\npeak_memory_gb = 80\n', "2× A100 40 GB", "80"),
        (None, 'gpu = "H100"\n', "no NVIDIA GPU", "H100"),
        ("none", "gpu_count = 1\n", "no NVIDIA GPU (nvidia-smi: No devices were found)", "GPU"),
        ("mixed", 'gpu = "T4"\ngpu_count = 2\n', "2× L4 24 GB, 1× T4 16 GB", "T4"),
    ],
)
def test_refusal_before_anything_starts_names_what_this_machine_has(
    nodus_env: Nodus,
    docker_client: Any,
    gpus: str | None,
    requirements: str,
    has: str,
    why: str,
) -> None:
    path = nodus_env.write(workload("refused", "echo never", requirements))
    done = nodus_env.run("run", path, gpus=gpus)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "cannot run stage 'main'" in done.stderr
    assert f"This machine has {has}" in done.stderr
    assert why in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert not containers_of(docker_client, "refused")
    assert nodus_env.runs() == []  # nothing started, nothing recorded


def test_gpus_held_by_another_run_are_not_handed_out_twice(
    nodus_env: Nodus, docker_client: Any
) -> None:
    holder = nodus_env.write(
        workload("holder", "echo holding; sleep 30", 'gpu = "H100"\ngpu_count = 4\n'), "hold.toml"
    )
    done = nodus_env.run("run", "--detach", "--json", holder, gpus="h100x8")
    assert done.returncode == 0, done.stderr
    holder_id = json.loads(done.stdout)["id"]
    try:
        held = nodus_env.record(holder_id)["stages"][0]["gpus"]
        assert len(held) == 4 and set(held) <= set(H100)

        want8 = nodus_env.write(
            workload("want8", "echo never", 'gpu = "H100"\ngpu_count = 8\n'), "want8.toml"
        )
        refused = nodus_env.run("run", "--no-wait", want8, gpus="h100x8")
        assert refused.returncode == 3, refused.stderr
        assert f"needs 8× H100; held by run {holder_id} since" in refused.stderr
        assert "run without --no-wait to wait for them" in refused.stderr
        assert not containers_of(docker_client, "want8")

        want4 = nodus_env.write(
            workload("want4", "echo $NVIDIA_VISIBLE_DEVICES", 'gpu = "H100"\ngpu_count = 4\n'),
            "want4.toml",
        )
        got = nodus_env.run("run", want4, gpus="h100x8")
        assert got.returncode == 0, got.stderr
        (visible,) = stage_lines(got.stdout, "main")
        others = visible.split(",")
        assert len(others) == 4 and not set(others) & set(held)
        assert set(others) | set(held) == set(H100)
    finally:
        nodus_env.stop(holder_id)
    assert nodus_env.wait_done(holder_id)["status"] == "cancelled"


class Readings:
    """The stand-in nvidia-smi on a PATH of its own (:meth:`path`), each of its calls
    counted as it ends: a test waits for nodus's GPU samples (:meth:`wait`) rather than
    sleeping and hoping a loaded machine took them."""

    def __init__(self, tmp: Path) -> None:
        self.calls, self.bin = tmp / "smi-calls", tmp / "smi-bin"
        self.bin.mkdir()
        smi = self.bin / "nvidia-smi"
        smi.write_text(
            f'#!/bin/sh\n"{FAKE_BIN}/nvidia-smi" "$@"\ncode=$?\necho >> "{self.calls}"\n'
            "exit $code\n"
        )
        smi.chmod(0o755)

    def path(self, env: Nodus) -> str:
        return f"{self.bin}{os.pathsep}{env.env['PATH']}"

    def count(self) -> int:
        return len(self.calls.read_text().splitlines()) if self.calls.exists() else 0

    def wait(self, more: int, timeout: float = 60) -> None:
        """Until ``more`` readings ended from now on. Called once the stage runs (its
        sampler is there before it starts), every one of them counted as its sample."""
        wanted = self.count() + more
        deadline = time.monotonic() + timeout
        while self.count() < wanted:
            assert time.monotonic() < deadline, f"{self.count()} of {wanted} GPU readings"
            time.sleep(0.05)


def _sampled_run(nodus_env: Nodus, tmp_path: Path, name: str, readings: int) -> str:
    """Run a stage on 2 of 8 stand-in H100s, of which the first reads busy (87 %, 30000 MiB)
    and the second idle, until nvidia-smi has been read ``readings`` times while it ran;
    the run's stderr."""
    util = nodus_env.root / "util.txt"
    util.write_text(f"{H100[0]}=87:30000\n", "utf-8")
    calls = Readings(tmp_path)
    command = f"echo up; {UNTIL_LET_GO}"
    path = nodus_env.write(workload(name, command, 'gpu = "H100"\ngpu_count = 2\n'))
    proc = nodus_env.popen(
        "run",
        path,
        gpus="h100x8",
        NODUS_FAKE_GPU_UTIL_FILE=str(util),
        PATH=calls.path(nodus_env),
    )
    read_until(proc, "main | up")
    calls.wait(readings)
    nodus_env.let_go(nodus_env.runs()[0]["id"])
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    return stderr


def test_gpu_use_is_sampled_and_idle_gpus_are_warned_about(
    nodus_env: Nodus, tmp_path: Path
) -> None:
    busy, idle = H100[:2]
    stderr = _sampled_run(nodus_env, tmp_path, "usage", readings=2)
    used_line = next(line for line in stderr.splitlines() if "GPUs used:" in line)
    assert busy in used_line and idle not in used_line
    warning = next(line for line in stderr.splitlines() if "stayed idle" in line)
    assert "warning" in warning and idle in warning and busy not in warning
    usage = nodus_env.runs()[0]["stages"][0]["gpu_usage"]
    by_uuid = {g["uuid"]: g for g in usage["gpus"]}
    assert by_uuid[busy]["used"] is True and by_uuid[busy]["max_utilization"] == 87
    assert by_uuid[idle]["used"] is False and by_uuid[idle]["samples"] >= 1


def test_gpu_use_over_time_is_kept_for_the_run_and_read_through_the_api(
    nodus_env: Nodus, tmp_path: Path
) -> None:
    busy, idle = H100[:2]
    _sampled_run(nodus_env, tmp_path, "curve", readings=4)
    with Client(home=nodus_env.home) as client:
        samples = client.newest().gpu_samples()
    by_gpu = {u: [s for s in samples if s.uuid == u] for u in (busy, idle)}
    assert len(by_gpu[busy]) >= 3 and len(by_gpu[idle]) >= 3  # one a reading while it ran
    assert {s.utilization for s in by_gpu[busy]} == {87}
    assert {s.memory_used_mib for s in by_gpu[busy]} == {30000}
    assert {s.utilization for s in by_gpu[idle]} == {0}
    assert {s.uuid for s in samples} == {busy, idle}  # only the GPUs the task held
    times = [s.time for s in samples]
    assert times == sorted(times) and time.time() - 120 < times[0] <= times[-1] <= time.time()


def test_a_run_cancelled_early_is_not_warned_that_its_gpus_stayed_idle(
    nodus_env: Nodus, tmp_path: Path
) -> None:
    # Stopped by nodus after a moment, it had no time to use them: no verdict on their use.
    readings = Readings(tmp_path)
    path = nodus_env.write(workload("early", "echo up; sleep 30", 'gpu = "H100"\ngpu_count = 2\n'))
    proc = nodus_env.popen("run", path, gpus="h100x8", PATH=readings.path(nodus_env))
    read_until(proc, "main | up")
    readings.wait(2)  # a sample or two, all idle, however slow the machine
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "cancelled by SIGTERM" in err
    assert "stayed idle" not in err and "stayed idle" not in nodus_env.run("logs").stdout
    usage = nodus_env.runs()[0]["stages"][0]["gpu_usage"]
    assert usage["sampled"] and all(g["samples"] >= 1 for g in usage["gpus"])  # still kept


# -- recovery ----------------------------------------------------------------------------

ONCE = (
    'if [ -f "$NODUS_WORK_DIR/once" ]; then echo second $NVIDIA_VISIBLE_DEVICES; exit 0; fi; '
    'touch "$NODUS_WORK_DIR/once"; echo first $NVIDIA_VISIBLE_DEVICES; sleep 30'
)


def _kill_when_running(nodus_env: Nodus, docker_client: Any, name: str, *args: str) -> Any:
    path = nodus_env.write(workload(name, ONCE, 'gpu = "H100"\ngpu_count = 2\n'))
    proc = nodus_env.popen("run", *args, path, gpus="h100x8")
    _, first = read_until(proc, "main | first")
    (container,) = docker_client.containers.list(filters={"label": f"nodus.workload={name}"})
    container.kill()
    out, err = proc.communicate(timeout=60)
    return proc.returncode, first + "\n" + out, err


def test_an_outside_kill_is_a_decision_and_never_retried(
    nodus_env: Nodus, docker_client: Any
) -> None:
    code, out, err = _kill_when_running(nodus_env, docker_client, "decided", "--retries", "2")
    assert code == 137, err
    assert stage_lines(out, "main")[1:] == [], out  # never started a second time
    assert "killed from outside nodus (signal 9); not retried" in err
    assert "retrying" not in err
    (run,) = nodus_env.runs()
    assert run["status"] == "failed" and run["stages"][0]["attempts"] == 1


def test_without_retries_an_outside_kill_fails_the_run(
    nodus_env: Nodus, docker_client: Any
) -> None:
    code, _, err = _kill_when_running(nodus_env, docker_client, "killed")
    assert code == 137, err
    (run,) = nodus_env.runs()
    assert run["status"] == "failed" and run["stages"][0]["attempts"] == 1
    assert "killed from outside" in run["stages"][0]["message"]


def test_the_workloads_own_failure_is_not_retried(nodus_env: Nodus) -> None:
    path = nodus_env.write(workload("own", "echo try; exit 137"))
    done = nodus_env.run("run", "--retries", "2", path)
    assert done.returncode == 137
    assert stage_lines(done.stdout, "main") == ["try"]
    assert nodus_env.runs()[0]["stages"][0]["attempts"] == 1


# -- cancellation and budget -------------------------------------------------------------


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_removes_the_runs_containers_and_records_it_cancelled(
    nodus_env: Nodus, docker_client: Any, signum: int, code: int
) -> None:
    name = f"cancel-{signum}"
    nodus_env.set_price(3600)  # the time it ran is paid for, cancelled or not
    path = nodus_env.write(
        workload(name, "true")
        + """
[[stages]]
name = "long"
command = "echo ready; sleep 30"
[[stages]]
name = "after"
command = "echo never"
"""
    )
    proc = nodus_env.popen("run", path)
    read_until(proc, "long | ready")
    assert containers_of(docker_client, name)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert "after |" not in out
    assert "Traceback" not in err
    assert containers_of(docker_client, name) == []
    (run,) = nodus_env.runs()
    assert run["status"] == "cancelled" and run["exit_code"] == code
    assert [s["status"] for s in run["stages"]] == ["cancelled", "skipped"]
    assert run["cost"] > 0 and run["stages"][0]["cost"] == pytest.approx(run["cost"], rel=0.01)


def test_the_budget_stops_the_run_when_its_cost_reaches_it(
    nodus_env: Nodus, docker_client: Any
) -> None:
    nodus_env.set_price(3600)  # $1 per second
    path = nodus_env.write(
        workload("budgeted", "echo start; sleep 30", "budget = 2.0\n")
        + '[[stages]]\nname = "spend"\n[[stages]]\nname = "later"\ncommand = "echo never"\n'
    )
    started = time.monotonic()
    done = nodus_env.run("run", path)
    took = time.monotonic() - started
    assert done.returncode == 4, done.stderr
    assert took < 15
    assert "reached its budget" in done.stderr
    assert stage_lines(done.stdout, "spend") == ["start"]
    (run,) = nodus_env.runs()
    assert run["status"] == "budget_exhausted" and run["exit_code"] == 4
    assert 1.9 <= run["cost"] <= 4.0
    assert [s["status"] for s in run["stages"]] == ["budget_exhausted", "skipped"]
    assert not containers_of(docker_client, "budgeted")


# -- records, logs, plans, reruns, detach ------------------------------------------------


def test_runs_json_shape_and_logs(nodus_env: Nodus) -> None:
    path = nodus_env.write(workload("recorded", "echo out-line; echo err-line >&2"))
    assert nodus_env.run("run", path).returncode == 0
    done = nodus_env.run("runs", "--json")
    assert done.returncode == 0
    doc = json.loads(done.stdout)
    (run,) = doc["runs"]
    for key in ("id", "workload", "target", "status", "exit_code", "started_at", "ended_at"):
        assert key in run
    assert run["workload"] == "recorded" and run["target"] == "local"
    assert run["status"] == "succeeded" and run["exit_code"] == 0
    assert isinstance(run["cost"], float) and run["cost"] == 0.0
    assert run["started_at"] <= run["ended_at"]
    (stage,) = run["stages"]
    assert (stage["name"], stage["status"], stage["exit_code"]) == ("main", "succeeded", 0)
    logs = nodus_env.run("logs", run["id"][:17])
    assert logs.returncode == 0
    assert "main | out-line" in logs.stdout and "main | err-line" in logs.stdout
    lines = [
        json.loads(line) for line in nodus_env.run("logs", "--json", run["id"]).stdout.splitlines()
    ]
    assert all(set(line) == {"time", "stage", "item", "stream", "text"} for line in lines)
    output = [
        (line["stage"], line["stream"], line["text"]) for line in lines if line["stream"] != "nodus"
    ]
    assert output == [("main", "stdout", "out-line"), ("main", "stderr", "err-line")] or output == [
        ("main", "stderr", "err-line"),
        ("main", "stdout", "out-line"),
    ]
    assert any(line["stream"] == "nodus" and "succeeded" in line["text"] for line in lines)
    human = nodus_env.run("runs")
    assert run["id"] in human.stdout and "recorded" in human.stdout


@pytest.mark.parametrize("gpus", [None, "h100x8"])
def test_a_recorded_run_makes_the_local_plan_rank_by_runtime(
    nodus_env: Nodus, gpus: str | None
) -> None:
    path = nodus_env.write(workload("measured", "echo measured"))

    def basis() -> str:
        done = nodus_env.run("plan", "--target", "local", "--json", path, gpus=gpus)
        assert done.returncode == 0, done.stderr
        stage: str = json.loads(done.stdout)["stages"][0]["basis"]
        return stage

    assert basis() == "hourly_price"
    assert nodus_env.run("run", path, gpus=gpus).returncode == 0
    assert basis() == "runtime_estimate"


def test_rerun_runs_the_recorded_workload_again(nodus_env: Nodus) -> None:
    path = nodus_env.write(workload("again", "echo run $NODUS_RUN_ID; exit 3"))
    assert nodus_env.run("run", path).returncode == 3
    first = nodus_env.runs()[0]
    path.unlink()  # a rerun needs only the record
    done = nodus_env.run("rerun", first["id"])
    assert done.returncode == 3, done.stderr
    second = nodus_env.runs()[0]
    assert second["id"] != first["id"]
    assert second["fingerprint"] == first["fingerprint"]
    assert stage_lines(done.stdout, "main") == [f"run {second['id']}"]


def test_detach_returns_the_id_quickly_and_the_run_completes(nodus_env: Nodus) -> None:
    command = f"echo begun; {UNTIL_LET_GO}; echo finished"  # runs until the test lets it go
    path = nodus_env.write(workload("background", command))
    started = time.monotonic()
    done = nodus_env.run("run", "--detach", path)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", run_id), done.stdout
    assert took < 30, took  # it did not wait for the run, which has not ended
    assert nodus_env.db_status(run_id)[0] == "running"
    nodus_env.let_go(run_id)
    record = nodus_env.wait_done(run_id, timeout=30)
    assert record["status"] == "succeeded" and record["exit_code"] == 0
    log = nodus_env.run("logs", run_id).stdout
    assert "main | begun" in log and "main | finished" in log
    assert log.count("main | begun") == 1  # written once, not once per stream


# -- what cannot run ---------------------------------------------------------------------


def test_an_unreachable_engine_is_one_clear_message(nodus_env: Nodus) -> None:
    path = nodus_env.write(workload("nowhere", "echo never"))
    done = nodus_env.run("run", path, DOCKER_HOST="unix:///nonexistent.sock")
    assert done.returncode == 1
    assert "cannot reach the Docker engine at unix:///nonexistent.sock" in done.stderr
    assert "dockerd" in done.stderr  # what to check
    assert "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if "error" in line]) == 1


def test_a_missing_image_is_a_clear_error_within_a_bound(nodus_env: Nodus) -> None:
    path = nodus_env.write(workload("imageless", "true", image="nodus-test/missing:0"))
    started = time.monotonic()
    done = nodus_env.run("run", path, NODUS_PULL_TIMEOUT="20", timeout=60)
    assert time.monotonic() - started < 45
    assert done.returncode == 1
    assert "cannot get image nodus-test/missing:0" in done.stderr
    assert "Traceback" not in done.stderr
    assert nodus_env.runs() == []


def test_the_fixture_machines_are_what_the_tests_assume() -> None:
    assert len(H100) == 8
    assert [r["name"] for r in fixture_gpus("mixed")].count("NVIDIA L4") == 2


def test_a_budget_without_a_price_is_warned_about(nodus_env: Nodus) -> None:
    path = nodus_env.write(workload("unpriced", "echo hi", "budget = 5.0\n"))
    done = nodus_env.run("run", path)
    assert done.returncode == 0, done.stderr
    assert (
        "warning: budget $5.00 cannot be enforced on this machine: it has no price per hour "
        "(set price_per_hour under [local]"
    ) in done.stderr
    nodus_env.set_price(1.0)
    priced = nodus_env.run("run", path)
    assert "cannot be enforced" not in priced.stderr


def test_logs_follow_streams_until_the_run_ends(nodus_env: Nodus) -> None:
    path = nodus_env.write(workload("followed", "echo one; sleep 2; echo two"))
    started = nodus_env.run("run", "--detach", path)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    began = time.monotonic()
    followed = nodus_env.run("logs", "-f", run_id, timeout=60)
    assert followed.returncode == 0, followed.stderr
    assert time.monotonic() - began >= 1.0  # it waited for the run, not just the log so far
    assert stage_lines(followed.stdout, "main") == ["one", "two"]
    assert "nodus: stage main: succeeded (exit 0)" in followed.stdout
    lines = nodus_env.run("logs", "--json", "--tail", "2", run_id).stdout.splitlines()
    assert len(lines) == 2 and all(json.loads(line)["stream"] for line in lines)
    assert nodus_env.run("logs", "--stage", "nope", run_id).returncode == 2


def test_names_with_terminal_escapes_are_shown_escaped(nodus_env: Nodus) -> None:
    path = nodus_env.write(workload("evil\\u001b[2Jname", "true"))  # TOML's escape
    assert nodus_env.run("run", path).returncode == 0
    table = nodus_env.run("runs").stdout
    assert "\x1b" not in table and "evil\\x1b[2Jname"[:16] in table
    run_id = nodus_env.runs()[0]["id"]
    detail = nodus_env.run("runs", run_id).stdout
    assert "\x1b" not in detail and "evil\\x1b[2Jname" in detail


def test_a_local_run_of_a_command_loads_neither_the_docker_sdk_nor_the_function_machinery(
    nodus_env: Nodus,
) -> None:
    # start-up is felt in CI: the SDK is for registry credentials, pickle for Python functions

    path = nodus_env.write(workload("lean", "echo lean"))
    code = (
        "import contextlib, io, sys\n"
        "from nodus_cli.__main__ import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    code = main(['run', {str(path)!r}])\n"
        "heavy = ('docker', 'requests', 'httpx', 'pickle', 'cloudpickle', 'starlette', 'uvicorn')\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in heavy]\n"
        "loaded += [m for m in sys.modules if m.startswith('nodus_cli.functions')]\n"
        "print(code, 'main | lean' in out.getvalue(), sorted(loaded))\n"
    )
    done = python(code, nodus_env.environ())
    assert done.stdout.strip().splitlines()[-1] == "0 True []", done.stdout + done.stderr
