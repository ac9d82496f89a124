# ruff: noqa: F811 - the fixtures imported from docker_support are test parameters here
"""Waiting for GPUs on the local engine, end to end: several nodus processes (and users,
and a container started by hand) against one real engine and the stand-in GPUs.

Times are read inside the containers from /proc/uptime: every container shares the
host's kernel, so these are one clock for all of them, to a hundredth of a second.
"""

from __future__ import annotations

import json
import os
import signal
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
    REPO,
    UNTIL_LET_GO,
    Nodus,
    docker_client,
    engine_clean,
    nodus_env,
    read_until,
    uuids_of,
)

from nodus_cli.records.process import process_alive

pytestmark = pytest.mark.docker

PAIR = uuids_of("rtx4090x2")  # two RTX 4090
ONE = uuids_of("l4x1")  # one L4
#: Prints "T <uptime>" (a clock every container shares), then does the rest.
STAMP = "echo T $(cut -d' ' -f1 /proc/uptime)"


def workload(name: str, command: str, extra: str = "") -> str:
    return f'name = "{name}"\nimage = "{IMAGE}"\ncommand = {json.dumps(command)}\n{extra}'


def stamps(text: str) -> list[float]:
    return [float(line.split("T ", 1)[1]) for line in text.splitlines() if "| T " in line]


def detach(env: Nodus, path: Path, gpus: str, *args: str) -> str:
    done = env.run("run", "--detach", "--json", *args, path, gpus=gpus)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def wait_status(env: Nodus, run_id: str, wanted: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while env.db_status(run_id)[0] != wanted:
        assert time.monotonic() < deadline, f"{run_id} is {env.db_status(run_id)} not {wanted}"
        time.sleep(0.05)


def queued_entries(client: Any) -> list[Any]:
    return client.containers.list(all=True, filters={"label": "nodus.queue"})


def hold(env: Nodus) -> tuple[str, Path]:
    """A detached run holding both RTX 4090 until the test lets it go on, stamping its end."""
    path = env.write(
        workload("holder", f"{UNTIL_LET_GO}; {STAMP}", 'gpu = "RTX 4090"\ngpu_count = 2\n'),
        "hold.toml",
    )
    run_id = detach(env, path, "rtx4090x2")
    wait_status(env, run_id, "running")
    return run_id, path


@pytest.fixture
def holder(nodus_env: Nodus) -> Iterator[tuple[str, Path]]:
    """Both RTX 4090 held until the test lets the holder go on (:meth:`Nodus.let_go`)."""
    run_id, path = hold(nodus_env)
    yield run_id, path
    nodus_env.stop(run_id)


def test_a_second_run_waits_says_for_whom_and_starts_once_they_are_free(
    nodus_env: Nodus, holder: tuple[str, Path], docker_client: Any
) -> None:
    holder_id, _ = holder
    path = nodus_env.write(
        workload(
            "second", f"{STAMP}; echo $NVIDIA_VISIBLE_DEVICES", 'gpu = "RTX 4090"\ngpu_count = 2\n'
        )
    )
    proc = nodus_env.popen("run", path, gpus="rtx4090x2")
    said = read_until_stderr(proc, "queued, 1st in line")
    nodus_env.let_go(holder_id)
    _, rest = proc.communicate(timeout=60)
    stderr = said + rest
    assert proc.returncode == 0, stderr
    assert (
        f"stage main: queued, 1st in line for 2× RTX 4090 (held by run {holder_id} since" in stderr
    )
    held = nodus_env.wait_done(holder_id)
    assert held["status"] == "succeeded"
    logs = nodus_env.run("logs", holder_id).stdout
    (ended,) = stamps(logs)
    second = nodus_env.runs()[0]
    assert second["status"] == "succeeded" and second["stages"][0]["gpus"] == PAIR
    mine = nodus_env.run("logs", second["id"]).stdout
    (started,) = stamps(mine)
    assert started >= ended  # never both on the GPUs at once
    assert not queued_entries(docker_client)  # its queue entry is gone


def test_no_wait_refuses_at_once_naming_the_holder(
    nodus_env: Nodus, holder: tuple[str, Path]
) -> None:
    holder_id, path = holder
    done = nodus_env.run("run", "--no-wait", path, gpus="rtx4090x2")
    assert done.returncode == 3
    assert f"needs 2× RTX 4090; held by run {holder_id} since" in done.stderr
    assert "run without --no-wait to wait for them (queued)" in done.stderr
    assert all(r["id"] == holder_id for r in nodus_env.runs())  # nothing recorded


def test_wait_timeout_gives_up_with_exit_3_and_says_what_it_waited_for(
    nodus_env: Nodus, holder: tuple[str, Path], docker_client: Any
) -> None:
    holder_id, path = holder
    done = nodus_env.run("run", "--wait-timeout", "1s", path, gpus="rtx4090x2")
    assert done.returncode == 3, done.stderr
    assert "gave up after waiting 1 s (wait_timeout) for: stage main: queued" in done.stderr
    (gave_up,) = [r for r in nodus_env.runs() if r["id"] != holder_id]
    assert gave_up["status"] == "failed" and gave_up["exit_code"] == 3
    assert gave_up["cost"] == 0 and "held by run" in gave_up["stages"][0]["message"]
    assert not queued_entries(docker_client)
    bad = nodus_env.run("run", "--wait-timeout", "soon", path, gpus="rtx4090x2")
    assert bad.returncode == 2 and "--wait-timeout soon: 'soon' is not a duration" in bad.stderr


def test_stop_ctrl_c_and_a_killed_supervisor_end_a_queued_run_cancelled(
    nodus_env: Nodus, docker_client: Any
) -> None:
    holder_id, path = hold(nodus_env)
    # nodus stop
    stopped = detach(nodus_env, path, "rtx4090x2")
    wait_status(nodus_env, stopped, "queued")
    assert nodus_env.run("stop", stopped).returncode == 0
    record = nodus_env.record(stopped)
    assert record["status"] == "cancelled" and record["stages"][0]["gpus"] == []
    # Ctrl-C
    proc = nodus_env.popen("run", path, gpus="rtx4090x2")
    read_until_stderr(proc, "queued, 1st in line")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    # SIGKILL of the background supervisor: the next command notices
    killed = detach(nodus_env, path, "rtx4090x2")
    wait_status(nodus_env, killed, "queued")
    shown = json.loads(nodus_env.run("runs", "--json", killed).stdout)
    assert shown["status"] == "queued" and shown["stages"][0]["status"] == "queued"
    pid = _pid(nodus_env, killed)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while process_alive(pid, None):  # as nodus sees it: gone, or a zombie
        assert time.monotonic() < deadline, f"process {pid} lives on after SIGKILL"
        time.sleep(0.05)
    found = nodus_env.run("runs")
    assert "while it waited in the queue for GPUs; nothing had started" in found.stderr
    ended = nodus_env.record(killed)
    assert ended["status"] == "cancelled" and ended["stages"][0]["status"] == "cancelled"
    assert ended["stages"][0]["message"] == (
        "not started: it waited for GPUs when the run ended cancelled"
    )
    assert not queued_entries(docker_client)
    statuses = {r["id"]: r["status"] for r in nodus_env.runs()}
    assert [s for s in statuses.values() if s == "cancelled"] == ["cancelled"] * 3
    nodus_env.stop(holder_id)


def read_until_stderr(proc: subprocess.Popen[str], needle: str, timeout: float = 30) -> str:
    """What ``proc`` wrote on stderr up to the line with ``needle``, that line included."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    said = ""
    for line in iter(proc.stderr.readline, ""):
        said += line
        if needle in line:
            return said
        assert time.monotonic() < deadline
    raise AssertionError(f"{needle!r} never came")


def _pid(env: Nodus, run_id: str) -> int:
    import sqlite3

    with sqlite3.connect(env.home / "runs.sqlite3") as conn:
        (pid,) = conn.execute("SELECT pid FROM runs WHERE id=?", (run_id,)).fetchone()
    return int(pid)


def test_a_larger_earlier_request_is_never_overtaken_and_priority_goes_first(
    nodus_env: Nodus, holder: tuple[str, Path]
) -> None:
    holder_id, _ = holder
    two = nodus_env.write(
        workload("b-two", f"{STAMP}; sleep 1; {STAMP}", 'gpu = "RTX 4090"\ngpu_count = 2\n'),
        "b.toml",
    )
    one = nodus_env.write(workload("c-one", STAMP, 'gpu = "RTX 4090"\n'), "c.toml")
    b = detach(nodus_env, two, "rtx4090x2")
    wait_status(nodus_env, b, "queued")
    c = detach(nodus_env, one, "rtx4090x2")
    wait_status(nodus_env, c, "queued")
    nodus_env.let_go(holder_id)
    for run_id in (holder_id, b, c):
        assert nodus_env.wait_done(run_id, timeout=60)["status"] == "succeeded"
    _, b_end = stamps(nodus_env.run("logs", b).stdout)
    (c_start,) = stamps(nodus_env.run("logs", c).stdout)
    # C needs one GPU: one was free the moment the holder ended, but B (earlier, same
    # priority) could use it, so C waited for B to end.
    assert c_start >= b_end


def test_a_higher_priority_queued_later_starts_first(nodus_env: Nodus) -> None:
    hold = nodus_env.write(
        workload("hold-l4", f"{UNTIL_LET_GO}; {STAMP}", 'gpu = "L4"\n'), "h.toml"
    )
    low = nodus_env.write(
        workload("low", f"{STAMP}; sleep 1", 'gpu = "L4"\npriority = 10\n'), "l.toml"
    )
    high = nodus_env.write(workload("high", f"{STAMP}; sleep 1", 'gpu = "L4"\n'), "x.toml")
    a = detach(nodus_env, hold, "l4x1")
    wait_status(nodus_env, a, "running")
    b = detach(nodus_env, low, "l4x1")
    wait_status(nodus_env, b, "queued")
    c = detach(nodus_env, high, "l4x1", "--priority", "90")
    wait_status(nodus_env, c, "queued")
    listed = nodus_env.run("runs").stdout
    assert f"{c}: main: queued, 1st in line (held by run {a} since" in listed
    assert f"{b}: main: queued, 2nd in line (held by run {a} since" in listed
    nodus_env.let_go(a)
    for run_id in (a, b, c):
        assert nodus_env.wait_done(run_id, timeout=60)["status"] == "succeeded"
    (b_start,) = stamps(nodus_env.run("logs", b).stdout)
    (c_start,) = stamps(nodus_env.run("logs", c).stdout)
    assert c_start + 0.9 <= b_start  # C ran (1 s) before B started


def test_a_container_started_by_hand_holds_its_gpu_for_nodus(
    nodus_env: Nodus, docker_client: Any
) -> None:
    import docker

    request = docker.types.DeviceRequest(device_ids=[PAIR[0]], capabilities=[["gpu"]])
    by_hand = docker_client.containers.run(
        IMAGE, "sleep 30", detach=True, device_requests=[request], name="by-hand-gpu"
    )
    try:
        two = nodus_env.write(workload("two", "true", 'gpu = "RTX 4090"\ngpu_count = 2\n'))
        refused = nodus_env.run("run", "--no-wait", two, gpus="rtx4090x2")
        assert refused.returncode == 3
        assert "held by container by-hand-gpu, not started by nodus, since" in refused.stderr
        one = nodus_env.write(workload("one", "echo $NVIDIA_VISIBLE_DEVICES", 'gpu = "RTX 4090"\n'))
        got = nodus_env.run("run", one, gpus="rtx4090x2")
        assert got.returncode == 0, got.stderr
        assert "main | " + PAIR[1] in got.stdout  # the other one
    finally:
        by_hand.remove(force=True)


def test_queued_time_costs_nothing_and_a_limit_reached_meanwhile_stops_it_when_it_starts(
    nodus_env: Nodus,
) -> None:
    # $1 a second on this machine: the holder is stopped by the daily limit at $2; the
    # run that waited behind it passed the check when it queued, and is stopped by it as
    # soon as it starts.
    nodus_env.config.write_text(
        "[local]\nprice_per_hour = 3600\n[limits]\nmax_spend_per_day = 2.5\n", "utf-8"
    )
    hold = nodus_env.write(workload("priced-hold", "sleep 30", 'gpu = "L4"\n'), "h.toml")
    a = detach(nodus_env, hold, "l4x1")
    wait_status(nodus_env, a, "running")
    after = nodus_env.write(workload("after", "sleep 30", 'gpu = "L4"\n'), "a.toml")
    done = nodus_env.run("run", after, gpus="l4x1", timeout=60)
    assert done.returncode == 4, done.stderr
    assert "daily spending limit of $2.50" in done.stderr
    (ended,) = [r for r in nodus_env.runs() if r["workload"] == "after"]
    assert ended["status"] == "budget_exhausted", nodus_env.runs()
    assert ended["cost"] < 0.5  # what it ran, not the seconds it waited
    assert nodus_env.wait_done(a)["status"] == "budget_exhausted"


def test_budget_clock_does_not_count_the_wait(nodus_env: Nodus, holder: tuple[str, Path]) -> None:
    holder_id, _ = holder
    nodus_env.set_price(3600.0)  # $1 a second; the holder ran before the price was set
    path = nodus_env.write(
        workload("budgeted", "sleep 1", 'gpu = "RTX 4090"\ngpu_count = 2\nbudget = 2.5\n')
    )
    proc = nodus_env.popen("run", path, gpus="rtx4090x2")
    read_until_stderr(proc, "queued, 1st in line")
    time.sleep(3)  # queued 3 s more: $3 had the wait counted
    nodus_env.let_go(holder_id)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err  # queued over 3 s, ran ~1 s: $1, under $2.50
    assert 0.5 < nodus_env.runs()[0]["cost"] < 2.5


def test_a_second_fanout_interleaves_with_the_first(nodus_env: Nodus) -> None:
    many = workload(
        "many",
        f"{UNTIL_LET_GO}; sleep 1; {STAMP}",
        'gpu = "RTX 4090"\n[map]\nitems = [1, 2, 3, 4, 5, 6, 7, 8]\n',
    )
    few = workload("few", STAMP, 'gpu = "RTX 4090"\n[map]\nitems = ["a", "b"]\n')
    first = nodus_env.popen("run", nodus_env.write(many, "many.toml"), gpus="rtx4090x2")
    # Its first items hold both GPUs until the second run waits behind them.
    many_id = _run_of(nodus_env, "many", "running")
    second = nodus_env.popen("run", nodus_env.write(few, "few.toml"), gpus="rtx4090x2")
    _run_of(nodus_env, "few", "queued")
    nodus_env.let_go(many_id)
    second_out, second_err = second.communicate(timeout=90)
    assert second.returncode == 0, second_err
    out, err = first.communicate(timeout=90)
    assert first.returncode == 0, err
    last_of_many = max(stamps(out))
    assert max(stamps(second_out)) < last_of_many  # it did not wait for the whole map


def _run_of(env: Nodus, name: str, status: str, timeout: float = 60) -> str:
    """The id of the run of workload ``name`` once it is ``status``."""
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in env.runs() if r["workload"] == name]
        if found and found[0]["status"] == status:
            return str(found[0]["id"])
        assert time.monotonic() < deadline, f"no run of {name} {status}: {found}"
        time.sleep(0.2)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the second run as another user (needs root)")
def test_two_users_never_get_one_device(nodus_env: Nodus) -> None:
    """A second user (nobody, in the engine's group, with a NODUS_HOME of its own) waits
    for the GPU the first user's run holds, and never gets it at the same time."""
    import grp
    import shutil
    import tempfile

    socket_group = os.stat("/var/run/docker.sock").st_gid
    # Not under pytest's own folder: only its owner may enter that one.
    other = Path(tempfile.mkdtemp(prefix="nodus-other-user-"))
    other.chmod(0o777)
    try:
        _as_another_user(nodus_env, other, socket_group, grp.getgrgid(socket_group).gr_name)
    finally:
        shutil.rmtree(other, ignore_errors=True)


def _copy_runtime_dependencies(site: Path, lib: Path) -> None:
    """Copy nodus's runtime dependencies, and theirs, from ``site`` into ``lib``: the
    other user may not be able to enter the checkout's virtual environment either."""
    import re
    import shutil
    from importlib import metadata

    wanted, seen = ["nodus-cli"], set()
    while wanted:
        name = re.sub(r"[-_.]+", "-", wanted.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # in the standard library, or not needed on this Python
        for requirement in dist.requires or []:
            found = re.match(r"[A-Za-z0-9_.-]+", requirement)
            if found and "extra ==" not in requirement:
                wanted.append(found.group(0))
        if name == "nodus-cli":
            continue  # copied from the checkout
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops - {"__pycache__"}:
            source = site / top
            if source.is_dir() and not (lib / top).exists():
                shutil.copytree(source, lib / top, ignore=shutil.ignore_patterns("__pycache__"))
            elif source.is_file():
                shutil.copy2(source, lib / top)


def _as_another_user(nodus_env: Nodus, other: Path, socket_group: int, group: str) -> None:
    hold = nodus_env.write(workload("mine", f"{STAMP}; sleep 2; {STAMP}", 'gpu = "L4"\n'), "m.toml")
    theirs = other / "theirs.toml"
    theirs.write_text(workload("theirs", STAMP, 'gpu = "L4"\n'), "utf-8")
    theirs.chmod(0o644)
    a = detach(nodus_env, hold, "l4x1")
    wait_status(nodus_env, a, "running")
    site = next((REPO / ".venv" / "lib").glob("python3*/site-packages"))
    # The checkout may sit where only its owner can enter (a clone under `mktemp -d`): the
    # other user runs a copy of the package and of the stand-in nvidia-smi.
    import shutil

    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "nodus_cli", other / "lib" / "nodus_cli", ignore=skip)
    shutil.copytree(REPO / "tests" / "fakes", other / "fakes", ignore=skip)
    _copy_runtime_dependencies(site, other / "lib")
    env = {
        **nodus_env.environ("l4x1"),
        "HOME": str(other),
        "NODUS_HOME": str(other / "home"),
        "NODUS_CONFIG": str(other / "config.toml"),
        "PYTHONPATH": f"{other / 'lib'}{os.pathsep}{site}",
    }
    env["PATH"] = env["PATH"].replace(str(FAKE_BIN), str(other / "fakes" / "bin"))
    python = "/usr/bin/python3.11" if Path("/usr/bin/python3.11").exists() else sys.executable
    done = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            f"--groups={socket_group}",
            python,
            "-m",
            "nodus_cli",
            "run",
            str(theirs),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=other,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr, group)
    assert "queued, 1st in line for 1× L4" in done.stderr
    assert f"of NODUS_HOME {nodus_env.home}" in done.stderr  # the holder is another home's
    (theirs_start,) = stamps(done.stdout)
    _, mine_end = stamps(nodus_env.run("logs", a).stdout)
    assert theirs_start >= mine_end


STRESS_DRIVER = """
import json, random, sys
from nodus_cli import Client

random.seed(int(sys.argv[1]))
with Client() as client:
    runs = [
        client.run(
            image=sys.argv[2],
            command="echo T $(cut -d' ' -f1 /proc/uptime); echo DEV $NVIDIA_VISIBLE_DEVICES; "
            "sleep 0.3; echo T $(cut -d' ' -f1 /proc/uptime)",
            gpu="H100",
            gpu_count=random.choice([1, 1, 2, 2, 4]),
            priority=random.choice([10, 50, 90]),
        )
        for _ in range(10)
    ]
    results = [r.wait(timeout=240) for r in runs]
    print(json.dumps([[r.id, str(r.status)] for r in results]))
"""


def test_no_gpu_is_ever_held_by_two_runs_under_stress(nodus_env: Nodus, tmp_path: Path) -> None:
    """30 runs from 3 processes (each its own NODUS_HOME) on 4 stand-in GPUs, asking for
    1, 2 or 4 at random priorities: each checks the devices it saw against the others'
    intervals on the one clock all containers share."""
    rows = (REPO / "tests" / "fakes" / "gpus" / "h100x8.csv").read_text().splitlines()
    four = tmp_path / "h100x4.csv"  # GPUs 0-3 of the real 8x H100 capture
    four.write_text(
        "\n".join(
            [r for r in rows if r.startswith(("#", "index"))]
            + [r for r in rows if r[:1].isdigit() and int(r.split(",")[0]) < 4]
        )
        + "\n"
    )
    procs = []
    for seed in range(3):
        home = tmp_path / f"home-{seed}"
        env = nodus_env.environ(str(four), NODUS_HOME=str(home))
        procs.append(
            (
                home,
                subprocess.Popen(
                    [sys.executable, "-c", STRESS_DRIVER, str(seed), IMAGE],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                ),
            )
        )
    intervals: list[tuple[float, float, set[str], str]] = []
    for home, proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        for run_id, status in json.loads(out):
            assert status == "succeeded", (run_id, status)
            logs = nodus_env.run("logs", run_id, NODUS_HOME=str(home)).stdout
            start, end = stamps(logs)
            (devices,) = [ln.split("DEV ", 1)[1] for ln in logs.splitlines() if "| DEV " in ln]
            intervals.append((start, end, set(devices.split(",")), run_id))
    assert len(intervals) == 30
    for i, (s1, e1, d1, r1) in enumerate(intervals):
        for s2, e2, d2, r2 in intervals[i + 1 :]:
            if d1 & d2:
                assert e1 <= s2 or e2 <= s1, f"{r1} and {r2} both held {d1 & d2}"
