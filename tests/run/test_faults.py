# ruff: noqa: F811 - the fixtures imported from docker_support are test parameters here
"""Runs under faults, with real processes and the real engine: the supervisor killed hard
(attached and detached), the engine connection lost mid-run, a container killed from
outside, an out-of-memory kill, a full state folder, a damaged records database, a
read-only state folder. After each: no container or GPU reservation is left, and the
record tells what happened.

The full and read-only state folders are tmpfs mounts: they change this machine, so they
run as root with NODUS_TEST_SYSTEM=1 only (CI sets it)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_support import (  # noqa: F401 - fixtures
    _HOMES,
    Nodus,
    docker_client,
    engine_clean,
    nodus_env,
    read_until,
)

from nodus_cli.records.process import process_alive

pytestmark = pytest.mark.docker

IMAGE = "nodus-test/busybox:1"
ENGINE = "/var/run/docker.sock"
SYSTEM = os.environ.get("NODUS_TEST_SYSTEM") == "1" and os.geteuid() == 0
needs_system = pytest.mark.skipif(
    not SYSTEM, reason="mounts a tmpfs: run as root with NODUS_TEST_SYSTEM=1 (CI does)"
)


def workload(name: str, command: str, extra: str = "") -> str:
    return f'name = "{name}"\nimage = "{IMAGE}"\ncommand = {json.dumps(command)}\n{extra}'


def containers(docker_client: Any, name: str) -> list[Any]:
    return docker_client.containers.list(all=True, filters={"label": f"nodus.workload={name}"})


def supervisor(nodus_env: Nodus, run_id: str) -> int:
    with sqlite3.connect(nodus_env.home / "runs.sqlite3") as db:
        return int(db.execute("SELECT pid FROM runs WHERE id=?", (run_id,)).fetchone()[0])


def wait_for(predicate: Any, timeout: float = 30, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.1)


# -- the supervisor killed hard ---------------------------------------------------------


def test_a_killed_attached_run_is_noticed_and_what_it_left_removed(
    nodus_env: Nodus, docker_client: Any
) -> None:
    path = nodus_env.write(
        workload("killed-attached", "echo up; sleep 60", 'gpu = "H100"\ngpu_count = 8\n')
    )
    proc = nodus_env.popen("run", path, gpus="h100x8")
    read_until(proc, "main | up")
    proc.kill()  # what a CI timeout does
    proc.wait(timeout=10)
    assert [c.status for c in containers(docker_client, "killed-attached")] == ["running"]
    (run,) = nodus_env.runs()  # the next command that reads the records notices
    assert run["status"] == "failed" and run["exit_code"] is None
    assert "ended without recording an outcome" in run["message"]
    assert "removed what it left: container nodus-" in run["message"]
    assert run["stages"][0]["status"] == "failed"
    assert containers(docker_client, "killed-attached") == []
    # its eight GPUs are free again: a run that needs them all starts
    other = nodus_env.write(
        workload("after-kill", "echo ok", 'gpu = "H100"\ngpu_count = 8\n'), "after.toml"
    )
    done = nodus_env.run("run", other, gpus="h100x8")
    assert done.returncode == 0, done.stderr


def test_a_killed_detached_supervisor_is_noticed(nodus_env: Nodus, docker_client: Any) -> None:
    path = nodus_env.write(workload("killed-detached", "echo up; sleep 60"))
    started = nodus_env.run("run", "--detach", path)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    wait_for(lambda: containers(docker_client, "killed-detached"), what="the container")
    pid = supervisor(nodus_env, run_id)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not process_alive(pid, None), what=f"process {pid} gone (or a zombie)")
    logs = nodus_env.run("logs", run_id)  # any command that reads the records
    assert logs.returncode == 0
    assert "ended without recording an outcome" in logs.stderr
    run = nodus_env.record(run_id)
    assert run["status"] == "failed" and "killed, or it crashed" in run["message"]
    assert containers(docker_client, "killed-detached") == []
    assert nodus_env.run("stop", run_id).returncode == 1  # not running any more


# -- across state folders: the GPUs are the engine's ----------------------------------------

EIGHT_H100 = 'gpu = "H100"\ngpu_count = 8\n'


def test_an_orphan_of_another_home_does_not_block_this_homes_run(
    nodus_env: Nodus, docker_client: Any
) -> None:
    home_b = nodus_env.root / "home-b"
    _HOMES.append(home_b)
    path = nodus_env.write(workload("orphan-a", "echo up; sleep 60", EIGHT_H100), "a.toml")
    started = nodus_env.run("run", "--detach", path, gpus="h100x8")  # home A
    assert started.returncode == 0, started.stderr
    run_a = started.stdout.strip()
    wait_for(lambda: containers(docker_client, "orphan-a"), what="the container")
    os.kill(supervisor(nodus_env, run_a), signal.SIGKILL)  # it holds all eight GPUs
    other = nodus_env.write(workload("orphan-b", "echo ran", EIGHT_H100), "b.toml")
    done = nodus_env.run("run", "--no-wait", other, gpus="h100x8", NODUS_HOME=str(home_b))
    assert done.returncode == 0, done.stderr  # the dead holder was reclaimed from home B
    assert "main | ran" in done.stdout
    assert containers(docker_client, "orphan-a") == []
    (run,) = nodus_env.runs()  # home A notices its run ended without its supervisor
    assert run["id"] == run_a and run["status"] == "failed"


def test_a_living_holder_of_another_home_is_named_with_its_home(
    nodus_env: Nodus, docker_client: Any
) -> None:
    home_b = nodus_env.root / "home-b"
    _HOMES.append(home_b)
    path = nodus_env.write(workload("holder-a", "echo up; sleep 60", EIGHT_H100), "a.toml")
    started = nodus_env.run("run", "--detach", path, gpus="h100x8")
    assert started.returncode == 0, started.stderr
    run_a = started.stdout.strip()
    held = f"held by run {run_a} of NODUS_HOME {nodus_env.home} since"
    other = nodus_env.write(workload("waiter-b", "echo ran", EIGHT_H100), "b.toml")
    try:
        refused = nodus_env.run("run", "--no-wait", other, gpus="h100x8", NODUS_HOME=str(home_b))
        assert refused.returncode == 3 and held in refused.stderr, refused.stderr
        assert f"NODUS_HOME={nodus_env.home} nodus stop {run_a}" in refused.stderr
        waiting = nodus_env.popen("run", other, gpus="h100x8", NODUS_HOME=str(home_b))

        def queued() -> list[dict[str, Any]]:
            listed = nodus_env.run("runs", "--json", NODUS_HOME=str(home_b))
            found: list[dict[str, Any]] = json.loads(listed.stdout)["runs"] if listed.stdout else []
            return [r for r in found if "queued" in (r["stages"][0]["message"] or "")]

        wait_for(queued, what="the run in home B queued")
        (run_b,) = queued()
        assert held in run_b["stages"][0]["message"]
        shown = nodus_env.run("runs", run_b["id"], NODUS_HOME=str(home_b))
        assert held in shown.stdout.replace("\n  ", " "), shown.stdout
    finally:
        assert nodus_env.run("stop", run_a).returncode == 0
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert "main | ran" in out


# -- the engine connection lost ------------------------------------------------------------


class Proxy:
    """A unix-socket relay to the engine that can be cut: the connection is lost while the
    engine and the container go on (what a dropped DOCKER_HOST tunnel does)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.server: socket.socket | None = None
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.accepting: threading.Thread | None = None

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(self.path))
        server.listen(64)
        self.server = server
        self.accepting = threading.Thread(target=self._accept, args=(server,), daemon=True)
        self.accepting.start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(ENGINE)
            with self.lock:
                if self.server is not server:  # cut while this one was being accepted
                    for s in (client, upstream):
                        s.close()
                    return
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Every connection dropped at once; nothing accepted until :meth:`start`."""
        with self.lock:
            server, self.server = self.server, None
            conns, self.conns = self.conns, []
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)  # wakes the accept() under way (Linux)
            server.close()
        if self.accepting is not None:
            self.accepting.join(timeout=5)
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[Proxy]:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="nodus-proxy-"))  # a short path: AF_UNIX
    relay = Proxy(folder / "docker.sock")
    relay.start()
    yield relay
    relay.cut()
    folder.rmdir()


def test_a_lost_engine_connection_is_recorded_and_cleaned_up_later(
    nodus_env: Nodus, docker_client: Any, proxy: Proxy
) -> None:
    host = f"unix://{proxy.path}"
    path = nodus_env.write(workload("engine-lost", "echo up; sleep 60"))
    proc = nodus_env.popen("run", path, DOCKER_HOST=host)
    read_until(proc, "main | up")
    proxy.cut()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "lost the Docker engine" in err and "Traceback" not in err
    # The engine never saw a stop: the container runs on, and the record says so.
    assert [c.status for c in containers(docker_client, "engine-lost")] == ["running"]
    with sqlite3.connect(nodus_env.home / "runs.sqlite3") as db:
        status, pending = db.execute("SELECT status, cleanup_pending FROM runs").fetchone()
    assert (status, pending) == ("failed", 1)
    proxy.start()  # the engine answers again: the next command removes what was left
    (run,) = json.loads(nodus_env.run("runs", "--json", DOCKER_HOST=host).stdout)["runs"]
    assert run["status"] == "failed" and "lost the Docker engine" in run["message"]
    assert containers(docker_client, "engine-lost") == []
    with sqlite3.connect(nodus_env.home / "runs.sqlite3") as db:
        assert db.execute("SELECT cleanup_pending FROM runs").fetchone()[0] == 0


# -- what the workload or an operator does ---------------------------------------------------


def test_an_out_of_memory_kill_is_explained_on_the_terminal(
    nodus_env: Nodus, docker_client: Any
) -> None:
    path = nodus_env.write(
        workload("oom", "tail /dev/zero", "[requirements]\ncpu = 0.5\nmemory_gb = 0.02\n")
    )
    done = nodus_env.run("run", "--retries", "2", path)
    assert done.returncode == 137, done.stderr
    line = next(ln for ln in done.stderr.splitlines() if "out of memory" in ln)
    assert "0.02 GiB memory limit (which includes /dev/shm)" in line
    assert "raise memory_gb" in line
    (run,) = nodus_env.runs()
    assert run["stages"][0]["attempts"] == 1 and "out of memory" in run["stages"][0]["message"]
    assert containers(docker_client, "oom") == []


def test_an_outside_kill_leaves_nothing_and_says_so(nodus_env: Nodus, docker_client: Any) -> None:
    path = nodus_env.write(workload("outside", "echo up; sleep 60"))
    proc = nodus_env.popen("run", "--retries", "1", path)
    read_until(proc, "main | up")
    (container,) = containers(docker_client, "outside")
    container.kill()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 137 and "killed from outside nodus" in err
    assert containers(docker_client, "outside") == []
    assert nodus_env.runs()[0]["status"] == "failed"


# -- the state folder ----------------------------------------------------------------------


def test_a_damaged_database_is_named_and_logs_stay_readable(nodus_env: Nodus) -> None:
    path = nodus_env.write(workload("before-damage", "echo kept-line"))
    assert nodus_env.run("run", path).returncode == 0
    run_id = nodus_env.runs()[0]["id"]
    db = nodus_env.home / "runs.sqlite3"
    for extra in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            (nodus_env.home / f"runs.sqlite3{extra}").unlink()
    db.write_bytes(b"garbage, not sqlite" * 512)
    runs = nodus_env.run("runs")
    assert runs.returncode == 1 and "internal error" not in runs.stderr
    assert "is damaged" in runs.stderr and f"mv {db}" in runs.stderr
    assert "writable folder" not in runs.stderr
    logs = nodus_env.run("logs", run_id)
    assert logs.returncode == 0 and "main | kept-line" in logs.stdout
    assert "showing the log file alone" in logs.stderr
    again = nodus_env.run("run", path)
    assert again.returncode == 1 and "is damaged" in again.stderr
    assert "Traceback" not in again.stderr


def test_every_file_under_the_state_folder_is_private(nodus_env: Nodus) -> None:
    umask = os.umask(0o022)  # what a user's shell usually has
    try:
        detached = nodus_env.write(workload("private-bg", "echo bg"), "bg.toml")
        started = nodus_env.run("run", "--detach", detached)
        assert started.returncode == 0, started.stderr
        nodus_env.wait_done(started.stdout.strip())
        leaves = "umask 077; echo fg > $NODUS_WORK_DIR/partial; exit 3"
        failing = nodus_env.write(workload("private-fg", leaves), "fg.toml")
        assert nodus_env.run("run", failing).returncode == 3  # its work folder is kept
    finally:
        os.umask(umask)
    seen = {p.relative_to(nodus_env.home).as_posix(): p.lstat() for p in nodus_env.home.rglob("*")}
    assert any(name.endswith(".stderr") for name in seen)  # the background supervisor's
    assert any(name.startswith("work/") for name in seen)
    wrong = {
        name: oct(st.st_mode & 0o777)
        for name, st in seen.items()
        if st.st_mode & 0o777 != (0o700 if stat.S_ISDIR(st.st_mode) else 0o600)
    }
    assert wrong == {}


def test_an_emptied_database_is_damaged_not_an_empty_history(nodus_env: Nodus) -> None:
    path = nodus_env.write(workload("before-emptied", "echo kept-line"))
    assert nodus_env.run("run", path).returncode == 0
    run_id = nodus_env.runs()[0]["id"]
    db = nodus_env.home / "runs.sqlite3"
    for extra in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            (nodus_env.home / f"runs.sqlite3{extra}").unlink()
    db.write_bytes(b"")  # truncated: a crash mid-copy, a full disk, `> runs.sqlite3`
    runs = nodus_env.run("runs")
    assert runs.returncode == 1 and "no runs recorded yet" not in runs.stdout
    assert f"the run records database {db} is damaged (it is empty (0 bytes)" in runs.stderr
    assert "holds the logs of 1 recorded run" in runs.stderr
    assert f"mv {db} {db}.damaged" in runs.stderr
    logs = nodus_env.run("logs", run_id)
    assert logs.returncode == 0 and "main | kept-line" in logs.stdout
    assert "showing the log file alone" in logs.stderr
    again = nodus_env.run("run", path)
    assert again.returncode == 1 and "is damaged" in again.stderr
    assert db.stat().st_size == 0  # nothing recorded over what is left of the history


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@needs_system
def test_a_full_state_folder_keeps_the_workloads_outcome(
    nodus_env: Nodus, docker_client: Any, tmpfs: Path
) -> None:
    home = tmpfs / "home"
    path = nodus_env.write(
        workload(
            "chatty",
            "i=0; while [ $i -lt 40000 ]; do echo line-$i-padding-padding; i=$((i+1)); done; "
            "echo last",
        )
    )
    done = nodus_env.run("run", path, NODUS_HOME=str(home), timeout=120)
    assert done.returncode == 0, done.stderr  # the workload succeeded: so does nodus
    assert "main | last" in done.stdout  # the terminal got everything
    assert "the run's log is incomplete" in done.stderr and "nearly" in done.stderr
    listed = nodus_env.run("runs", "--json", NODUS_HOME=str(home))
    assert listed.returncode == 0, listed.stderr
    (run,) = json.loads(listed.stdout)["runs"]
    assert (run["status"], run["exit_code"]) == ("succeeded", 0)
    logs = nodus_env.run("logs", run["id"], NODUS_HOME=str(home))
    assert "main | line-0-" in logs.stdout and "the log ends here" in logs.stdout
    assert containers(docker_client, "chatty") == []


@needs_system
def test_a_read_only_state_folder_still_lists_runs(nodus_env: Nodus, tmpfs: Path) -> None:
    home = tmpfs / "home"
    path = nodus_env.write(workload("before-ro", "echo hello"))
    assert nodus_env.run("run", path, NODUS_HOME=str(home)).returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    listed = nodus_env.run("runs", "--json", NODUS_HOME=str(home))
    assert listed.returncode == 0, listed.stderr
    assert [r["workload"] for r in json.loads(listed.stdout)["runs"]] == ["before-ro"]
    logs = nodus_env.run("logs", NODUS_HOME=str(home))
    assert logs.returncode == 0 and "main | hello" in logs.stdout
    refused = nodus_env.run("run", path, NODUS_HOME=str(home))
    assert refused.returncode == 1 and "are read-only here" in refused.stderr
    assert "Traceback" not in refused.stderr and "internal error" not in refused.stderr


def fill(folder: Path) -> Path:
    """Take every free byte of the disk holding ``folder``."""
    filler = folder / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as handle:
        while True:
            handle.write(b"\0" * 65536)
    with contextlib.suppress(OSError), filler.open("ab") as handle:
        while True:
            handle.write(b"\0")
            handle.flush()
    return filler


@needs_system
def test_a_full_disk_under_existing_records_is_named_and_they_stay_readable(
    nodus_env: Nodus, tmpfs: Path
) -> None:
    home = tmpfs / "home"
    path = nodus_env.write(workload("before-full", "echo hello"))
    assert nodus_env.run("run", path, NODUS_HOME=str(home)).returncode == 0
    fill(tmpfs)
    listed = nodus_env.run("runs", "--json", NODUS_HOME=str(home))
    assert listed.returncode == 0, listed.stderr
    assert [r["workload"] for r in json.loads(listed.stdout)["runs"]] == ["before-full"]
    full = f"no space left on the disk holding the nodus records ({home / 'runs.sqlite3'})"
    assert f"warning: {full}" in listed.stderr and "disk I/O error" not in listed.stderr
    logs = nodus_env.run("logs", NODUS_HOME=str(home))
    assert logs.returncode == 0 and "main | hello" in logs.stdout, logs.stderr
    assert full in logs.stderr and "showing the log file alone" not in logs.stderr
    refused = nodus_env.run("run", path, NODUS_HOME=str(home))
    assert refused.returncode == 1 and f"error: {full}" in refused.stderr
    assert "free some space there" in refused.stderr and "disk I/O error" not in refused.stderr


@needs_system
def test_stop_on_a_full_disk_stops_first_and_says_what_was_not_recorded(
    nodus_env: Nodus, docker_client: Any, tmpfs: Path
) -> None:
    home = tmpfs / "home"
    path = nodus_env.write(workload("full-stop", "echo up; sleep 60"))
    started = nodus_env.run("run", "--detach", path, NODUS_HOME=str(home))
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    wait_for(lambda: containers(docker_client, "full-stop"), what="the container")
    filler = fill(tmpfs)
    stopped = nodus_env.run("stop", run_id, NODUS_HOME=str(home))
    assert stopped.returncode == 0, stopped.stderr
    assert f"run {run_id} stopped" in stopped.stderr
    assert "warning: it was stopped, but that could not be recorded: no space" in stopped.stderr
    assert containers(docker_client, "full-stop") == []  # stopped first: GPUs free
    filler.unlink()
    (run,) = json.loads(nodus_env.run("runs", "--json", NODUS_HOME=str(home)).stdout)["runs"]
    assert run["status"] == "failed"  # recorded once there was room
