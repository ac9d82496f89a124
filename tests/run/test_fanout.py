# ruff: noqa: F811 - the fixtures imported from docker_support are test parameters here
"""Fan-out over inputs on the real engine, with the stand-in nvidia-smi and NVIDIA hook:
tasks overlap on every free matching GPU and never share a whole GPU; shared GPUs host
floor(memory / peak_memory_gb) tasks at once; a failing item does not stop the others;
the budget covers every task; Ctrl-C and ``nodus stop`` leave nothing behind.

Each task prints the device it sees and when it started and ended (the kernel's uptime,
one clock for every container), which proves overlap and exclusivity."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from typing import Any

import pytest
from docker_support import (  # noqa: F401 - fixtures
    IMAGE,
    Nodus,
    docker_client,
    engine_clean,
    nodus_env,
    read_until,
    uuids_of,
)

pytestmark = pytest.mark.docker

#: Prints "DEVICES START END" around a sleep, on one clock (/proc/uptime) for all tasks.
TIMED = (
    "s=$(cut -d' ' -f1 /proc/uptime); sleep {sleep}; e=$(cut -d' ' -f1 /proc/uptime); "
    'echo "span $NVIDIA_VISIBLE_DEVICES $s $e"'
)


def fanout(
    name: str, items: int, extra: str = "", command: str | None = None, sleep: float = 1.0
) -> str:
    listed = ", ".join(f'"item-{i}"' for i in range(items))
    return (
        f'name = "{name}"\nimage = "{IMAGE}"\n'
        f"command = {json.dumps(command or TIMED.format(sleep=sleep))}\n{extra}"
        f"[map]\nitems = [{listed}]\n"
    )


def spans(stdout: str) -> list[tuple[int, str, float, float]]:
    """(item, device, start, end) of every task, from its `span` line."""
    found = []
    for line in stdout.splitlines():
        prefix, sep, text = line.partition(" | ")
        if sep and text.startswith("span "):
            _, device, start, end = text.split()
            item = int(prefix[prefix.index("[") + 1 : prefix.index("]")])
            found.append((item, device, float(start), float(end)))
    return sorted(found)


def most_at_once(found: list[tuple[int, str, float, float]], device: str | None = None) -> int:
    events = []
    for _, dev, start, end in found:
        if device is None or dev == device:
            events += [(start, 1), (end, -1)]
    now = best = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        now += step
        best = max(best, now)
    return best


def containers(docker_client: Any, name: str) -> list[Any]:
    return docker_client.containers.list(all=True, filters={"label": f"nodus.workload={name}"})


def test_tasks_run_at_once_on_every_free_gpu_never_two_on_one(nodus_env: Nodus) -> None:
    path = nodus_env.write(
        fanout("whole", 8, 'gpu = "H100"\n[requirements]\ncpu = 0.1\nmemory_gb = 0.1\n')
    )
    done = nodus_env.run("run", path, gpus="h100x8", timeout=120)
    assert done.returncode == 0, done.stderr
    found = spans(done.stdout)
    assert [item for item, *_ in found] == list(range(8))
    assert {dev for _, dev, _, _ in found} <= set(uuids_of("h100x8"))
    assert all("," not in dev for _, dev, _, _ in found)  # one GPU per task
    for device in {dev for _, dev, _, _ in found}:
        assert most_at_once(found, device) == 1, f"two whole-GPU tasks on {device}"
    assert most_at_once(found) >= 4  # they overlapped: one per free GPU
    assert "8 items, up to 8 at once" in done.stderr
    run = nodus_env.runs()[0]
    assert run["stages"][0]["items"] == {"succeeded": 8}


def test_tasks_never_use_another_model(nodus_env: Nodus) -> None:
    path = nodus_env.write(
        fanout("model", 4, 'gpu = "L4"\n[requirements]\ncpu = 0.1\nmemory_gb = 0.1\n')
    )
    done = nodus_env.run("run", path, gpus="mixed", timeout=120)
    assert done.returncode == 0, done.stderr
    l4 = set(uuids_of("mixed", "L4"))
    found = spans(done.stdout)
    assert {dev for _, dev, _, _ in found} == l4  # both L4, never the T4
    assert most_at_once(found) == 2


@pytest.mark.parametrize(("memory", "per_device"), [(10, 2), (6, 4)])
def test_a_shared_gpu_hosts_floor_of_its_memory_over_each_tasks(
    nodus_env: Nodus, memory: int, per_device: int
) -> None:
    extra = (
        f'gpu = "L4"\nshare_gpu = true\npeak_memory_gb = {memory}\n'
        "[requirements]\ncpu = 0.05\nmemory_gb = 0.05\n"
    )
    path = nodus_env.write(fanout(f"shared-{memory}", 2 * per_device + 2, extra, sleep=2))
    done = nodus_env.run("run", path, gpus="mixed", timeout=120)
    assert done.returncode == 0, done.stderr
    found = spans(done.stdout)
    l4 = set(uuids_of("mixed", "L4"))
    assert {dev for _, dev, _, _ in found} == l4  # tasks that share see the same UUID
    for device in l4:
        assert most_at_once(found, device) == per_device  # floor(24 / M), never more
    assert f"up to {2 * per_device} at once" in done.stderr


def test_a_failing_item_does_not_stop_the_others(nodus_env: Nodus) -> None:
    command = (
        'echo "got $NODUS_ITEM_INDEX of $NODUS_ITEM_COUNT: $NODUS_ITEM"; '
        'test "$NODUS_ITEM" != item-2'
    )
    path = nodus_env.write(
        fanout("one-fails", 5, "[requirements]\ncpu = 0.1\nmemory_gb = 0.1\n", command)
    )
    done = nodus_env.run("run", path, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "stage main item 2 (item-2): failed (exit 1)" in done.stderr
    assert "main[4] | got 4 of 5: item-4" in done.stdout
    run = nodus_env.runs()[0]
    assert run["status"] == "failed" and run["stages"][0]["items"] == {"succeeded": 4, "failed": 1}
    assert "1 of 5 items failed (items 2; item 2 exited with 1)" in run["message"]
    table = nodus_env.run("runs", run["id"]).stdout
    assert "item-2" in table and "failed" in table
    only = nodus_env.run("logs", run["id"], "--item", "4")
    assert only.stdout.strip().splitlines()[-1] == "main[4] | got 4 of 5: item-4"
    assert "item-3" not in only.stdout


def test_the_budget_stops_every_task(nodus_env: Nodus, docker_client: Any) -> None:
    nodus_env.set_price(3600)  # $1 per second, shared by the tasks that run at once
    path = nodus_env.write(
        fanout(
            "fan-budget",
            6,
            "budget = 1.0\n[requirements]\ncpu = 0.1\nmemory_gb = 0.1\n",
            "echo started; sleep 600",
        )
    )
    started = time.monotonic()
    done = nodus_env.run("run", path, timeout=120)
    assert done.returncode == 4, done.stderr
    assert time.monotonic() - started < 100  # the budget stopped them, long before their end
    run = nodus_env.runs()[0]
    assert run["status"] == "budget_exhausted"
    statuses = Counter(
        t["status"] for t in nodus_env.run_json("runs", run["id"])["stages"][0]["tasks"]
    )
    assert set(statuses) <= {"budget_exhausted", "skipped"} and statuses["budget_exhausted"] >= 1
    assert 0.9 <= run["cost"] <= 2.0
    assert containers(docker_client, "fan-budget") == []


@pytest.mark.parametrize("how", ["ctrl-c", "nodus stop"])
def test_stopping_a_fanout_leaves_nothing(nodus_env: Nodus, docker_client: Any, how: str) -> None:
    path = nodus_env.write(
        fanout(
            f"fan-{how.replace(' ', '-')}",
            6,
            'gpu = "H100"\n[requirements]\ncpu = 0.1\nmemory_gb = 0.1\n',
            "echo up; sleep 60",
        )
    )
    name = f"fan-{how.replace(' ', '-')}"
    proc = nodus_env.popen("run", path, gpus="h100x8")
    read_until(proc, "| up")
    deadline = time.monotonic() + 30
    while len(containers(docker_client, name)) < 2:
        assert time.monotonic() < deadline, containers(docker_client, name)
        time.sleep(0.1)
    if how == "ctrl-c":
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
    else:
        run_id = nodus_env.runs()[0]["id"]
        stopped = nodus_env.run("stop", run_id)
        assert stopped.returncode == 0, stopped.stderr
        proc.communicate(timeout=60)
        assert proc.returncode == 143
    assert containers(docker_client, name) == []
    run = nodus_env.runs()[0]
    assert run["status"] == "cancelled"
    tasks = nodus_env.run_json("runs", run["id"])["stages"][0]["tasks"]
    assert {t["status"] for t in tasks} <= {"cancelled", "skipped"}
    # the GPUs are free again
    again = nodus_env.write(
        fanout("after", 1, 'gpu = "H100"\ngpu_count = 8\n', "echo ok"), "after.toml"
    )
    assert nodus_env.run("run", again, gpus="h100x8").returncode == 0


def test_plain_progress_lines_when_piped(nodus_env: Nodus) -> None:
    path = nodus_env.write(
        fanout("progress", 3, "[requirements]\ncpu = 0.1\nmemory_gb = 0.1\n", "echo x")
    )
    done = nodus_env.run("run", path)
    assert done.returncode == 0
    final = [ln for ln in done.stderr.splitlines() if "3/3 done" in ln]
    assert final == [
        "nodus: stage main: 3/3 done, 0 running, 0 failed, 0 left, "
        + final[0].split(", 0 left, ")[1]
    ]
    assert "3 of 3 items succeeded" in done.stderr
