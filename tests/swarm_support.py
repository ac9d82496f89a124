"""Fixtures for tests against the two-node test Swarm (``tests/harness/engine.sh``).

Import them into a test module::

    from swarm_support import Cluster, cluster, nodus_swarm  # noqa: F401

* ``cluster`` (module): runs ``engine.sh swarm-up`` (a manager on the main engine,
  labelled L4 with 2 fake GPUs, and a worker ``nodus-w1`` in its own network namespace,
  labelled H100 80 GB with 4 fake GPUs) and, after the module, checks that no service
  and no volume labelled ``nodus.run`` is left on either engine, then runs
  ``engine.sh swarm-down`` and checks that it is all gone. When the Swarm cannot be
  brought up the tests fail if ``NODUS_REQUIRE_DOCKER=1`` (CI) and are skipped otherwise.
* ``nodus_swarm``: a :class:`SwarmNodus` per test, with its own ``NODUS_HOME``, running
  ``python -m nodus_cli`` as a subprocess against the manager.

Tests only ever remove the services they created (the engine is shared with other work).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
ENGINE_SH = REPO / "tests" / "harness" / "engine.sh"
FAKE_BIN = REPO / "tests" / "fakes" / "bin"
WORKER_SOCK = REPO / ".ci" / "state" / "w1" / "docker.sock"
MAIN_SOCK = "unix:///var/run/docker.sock"
IMAGE = "nodus-test/busybox:1"
WORKER_HOSTNAME = "nodus-w1"
LABEL_RUN = "nodus.run"


def docker(*args: str, worker: bool = False, check: bool = True) -> str:
    """``docker ARGS`` against the manager (or the worker's own engine); its stdout."""
    host = f"unix://{WORKER_SOCK}" if worker else MAIN_SOCK
    done = subprocess.run(
        ["docker", "-H", host, *args], capture_output=True, text=True, check=False, timeout=120
    )
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def docker_json(*args: str, worker: bool = False) -> Any:
    return json.loads(docker(*args, worker=worker))


@dataclass
class Cluster:
    manager_id: str
    manager_hostname: str
    worker_id: str
    worker_hostname: str

    def service(self, run_id: str) -> list[dict[str, Any]]:
        """Services of one run, inspected (the spec as Swarm stores it)."""
        ids = docker("service", "ls", "-q", "--filter", f"label={LABEL_RUN}={run_id}").split()
        return docker_json("service", "inspect", *ids) if ids else []

    def labels(self, node: str) -> dict[str, str]:
        found: dict[str, str] = docker_json("node", "inspect", node)[0]["Spec"]["Labels"] or {}
        return found

    def set_labels(self, node: str, wanted: dict[str, str]) -> None:
        """Make the node's ``nodus.*`` labels exactly ``wanted`` (others untouched)."""
        args: list[str] = []
        for key in self.labels(node):
            if key.startswith("nodus.") and key not in wanted:
                args += ["--label-rm", key]
        for key, value in wanted.items():
            args += ["--label-add", f"{key}={value}"]
        if args:
            docker("node", "update", *args, node)


def _fail_or_skip(reason: str) -> None:
    message = (
        f"the test Swarm cannot be brought up: {reason}. "
        "Run `sudo bash tests/harness/engine.sh swarm-up` to see why"
    )
    if os.environ.get("NODUS_REQUIRE_DOCKER") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _leftovers(worker: bool) -> list[str]:
    found = []
    if not worker:
        found += [
            f"service {line}"
            for line in docker(
                "service", "ls", "--filter", f"label={LABEL_RUN}", "--format", "{{.Name}}"
            ).split()
        ]
    found += [
        f"volume {line} on {'the worker' if worker else 'the manager'}"
        for line in docker(
            "volume", "ls", "-q", "--filter", f"label={LABEL_RUN}", worker=worker
        ).split()
    ]
    return found


#: Tests change this machine (a Swarm on the engine, a network namespace, a second dockerd,
#: tmpfs mounts) only when asked: CI sets it; a developer may (README, "Tests").
SYSTEM_TESTS = os.environ.get("NODUS_TEST_SYSTEM") == "1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not SYSTEM_TESTS:
        pytest.skip(
            "the two-node Swarm turns this machine's Docker engine into a Swarm manager: "
            "set NODUS_TEST_SYSTEM=1 to run these tests (CI does)"
        )
    if shutil.which("docker") is None:
        _fail_or_skip("no docker client on PATH")
    if os.geteuid() != 0:
        _fail_or_skip("the harness needs root (network namespaces, a second dockerd)")
    up = subprocess.run(
        ["bash", str(ENGINE_SH), "swarm-up"], capture_output=True, text=True, timeout=300
    )
    if up.returncode != 0:
        _fail_or_skip(up.stderr.strip().splitlines()[-1] if up.stderr.strip() else "exit 1")
    worker_id = up.stdout.strip().splitlines()[-1]
    manager_id = docker("info", "--format", "{{.Swarm.NodeID}}").strip()
    manager_hostname = docker_json("node", "inspect", manager_id)[0]["Description"]["Hostname"]
    try:
        yield Cluster(manager_id, manager_hostname, worker_id, WORKER_HOSTNAME)
        # Nothing of nodus may stay behind: services and volumes, on either engine.
        left = _leftovers(worker=False) + _leftovers(worker=True)
        assert not left, f"left behind by nodus: {left}"
    finally:
        down = subprocess.run(
            ["bash", str(ENGINE_SH), "swarm-down"], capture_output=True, text=True, timeout=300
        )
        assert down.returncode == 0, f"swarm-down failed: {down.stderr}"
    # Torn down completely: no swarm on the main engine, no namespace, no worker engine.
    assert docker("info", "--format", "{{.Swarm.LocalNodeState}}").strip() == "inactive"
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert WORKER_HOSTNAME not in namespaces
    assert not WORKER_SOCK.parent.exists()


@dataclass
class SwarmNodus:
    """Runs ``python -m nodus_cli`` against the test Swarm with its own state folder."""

    home: Path
    env: dict[str, str] = field(default_factory=dict)

    def environ(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("DOCKER_CONTEXT", None)
        env.update(
            {
                "DOCKER_HOST": MAIN_SOCK,
                "NODUS_HOME": str(self.home),
                "NODUS_CONFIG": str(self.home / "config.toml"),
                "NO_COLOR": "1",
                "COLUMNS": "200",
            }
        )
        env.update(self.env)
        env.update(extra or {})
        return env

    def __call__(
        self, *args: str | os.PathLike[str], env: dict[str, str] | None = None, timeout: float = 90
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nodus_cli", *map(str, args)],
            capture_output=True,
            text=True,
            env=self.environ(env),
            timeout=timeout,
            check=False,
        )

    def json(self, *args: str | os.PathLike[str]) -> Any:
        done = self(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def runs(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.json("runs")["runs"]
        return found

    def start(self, *args: str | os.PathLike[str]) -> Running:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nodus_cli", *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.environ(),
        )
        return Running(proc)


class Running:
    """A nodus process whose stderr is read line by line as it comes."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float) -> tuple[str, float]:
        """The first stderr line containing ``text``, and the seconds it took."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            if text in line:
                return line, time.monotonic() - t0
        raise AssertionError(f"no {text!r} on stderr within {timeout}s; saw: {self.seen}")

    def interrupt(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def nodus_swarm(tmp_path: Path, cluster: Cluster) -> SwarmNodus:
    home = tmp_path / "nodus-home"
    home.mkdir()
    return SwarmNodus(home)


@pytest.fixture
def blocker(cluster: Cluster) -> Iterator[Any]:
    """``blocker(gpus)``: a service of this test (not nodus's) holding GPUs of the worker."""
    created: list[str] = []

    def make(gpus: int) -> str:
        name = f"nodus-test-blocker-{os.getpid()}-{len(created)}"
        docker(
            "service",
            "create",
            "--quiet",
            "--detach",
            "--no-resolve-image",
            "--name",
            name,
            "--label",
            "nodus.test=blocker",
            "--restart-condition",
            "none",
            "--constraint",
            f"node.id=={cluster.worker_id}",
            "--generic-resource",
            f"NVIDIA-GPU={gpus}",
            IMAGE,
            "sleep",
            "600",
        )
        created.append(name)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = docker("service", "ps", name, "--format", "{{.CurrentState}}")
            if states.startswith("Running"):
                return name
            time.sleep(0.2)
        raise AssertionError(f"the blocker service did not start: {states}")

    yield make
    for name in created:
        docker("service", "rm", name, check=False)
