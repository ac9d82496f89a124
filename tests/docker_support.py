"""Helpers for tests that need a real Docker engine (``bash tests/harness/engine.sh up``).

Import the fixtures into a test module::

    from docker_support import Nodus, docker_client, engine_clean, nodus_env  # noqa: F401

* ``docker_client`` (session): a Docker SDK client for the engine nodus will use. When no
  engine answers, the test fails if ``NODUS_REQUIRE_DOCKER=1`` (CI sets it) and is
  skipped otherwise: it never passes silently.
* ``engine_clean`` (module, autouse once imported): snapshots containers, volumes and
  networks before the module and fails its last test if anything the module created is
  left after it (what other work creates meanwhile, e.g. Swarm tasks, is ignored).
* ``nodus_env``: a :class:`Nodus` per test, with its own ``NODUS_HOME`` and
  ``NODUS_CONFIG``, the stand-in ``nvidia-smi`` first on ``PATH`` and fast GPU sampling;
  it runs ``python -m nodus_cli`` as a subprocess.
* ``own_client(tmp_path, monkeypatch, **env)``: the same for the Python API, in-process: a
  :class:`~nodus_cli.Client` of a ``NODUS_HOME`` of its own (test modules wrap it in their
  ``client`` fixture, with the environment they need).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
FAKES = REPO / "tests" / "fakes"
FAKE_BIN = FAKES / "bin"
IMAGE = "nodus-test/busybox:1"
CUDA_IMAGE = "nodus-test/cuda:12.4.1-runtime"
#: A command that waits until the test lets the run go on (:meth:`Nodus.let_go`): it holds
#: its GPUs, or stays running, until the test has seen what it waits to see, however slow
#: the machine (a command that sleeps a few seconds may end first on a loaded one).
UNTIL_LET_GO = "until test -e $NODUS_WORK_DIR/go; do sleep 0.1; done"
LABEL_RUN = "nodus.run"
#: Networks the engine or Swarm creates by itself.
SYSTEM_NETWORKS = {"bridge", "host", "none", "ingress", "docker_gwbridge"}

#: Every NODUS_HOME handed out, so the cleanliness guard knows which runs are ours.
_HOMES: list[Path] = []


@contextlib.contextmanager
def own_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> Iterator[Any]:
    """A Client of its own NODUS_HOME (its containers guarded by ``engine_clean``), in a
    nodus environment cleared of the developer's settings, the stand-in nvidia-smi first
    on PATH, ``env`` set, working in ``tmp_path``."""
    from nodus_cli import Client

    home = tmp_path / "home"
    _HOMES.append(home)
    for key in list(os.environ):
        if key.startswith("NODUS_") and key != "NODUS_REQUIRE_DOCKER":
            monkeypatch.delenv(key)
    monkeypatch.setenv("NODUS_HOME", str(home))
    monkeypatch.setenv("NODUS_CONFIG", str(tmp_path / "config.toml"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.chdir(tmp_path)
    with Client(home=home) as c:
        yield c


def fixture_gpus(name: str) -> list[dict[str, str]]:
    """The rows of a stand-in machine (tests/fakes/gpus/NAME.csv), in index order."""
    with (FAKES / "gpus" / f"{name}.csv").open(encoding="utf-8") as handle:
        lines = [line for line in handle if line.strip() and not line.startswith("#")]
    rows = list(csv.DictReader(lines))
    return sorted(rows, key=lambda r: int(r["index"]))


def uuids_of(name: str, model: str | None = None) -> list[str]:
    """UUIDs of a fixture's GPUs, optionally only those whose product name has ``model``."""
    return [r["uuid"] for r in fixture_gpus(name) if model is None or model in r["name"]]


def _unreachable(reason: str) -> None:
    message = (
        f"no usable Docker engine: {reason}. Start the test engine with "
        "`bash tests/harness/engine.sh up`"
    )
    if os.environ.get("NODUS_REQUIRE_DOCKER") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - a declared dependency
        _unreachable(f"the Docker SDK is missing ({exc})")
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:
        _unreachable(f"{type(exc).__name__}: {str(exc)[:200]}")
    missing = []
    for image in (IMAGE, CUDA_IMAGE):
        try:
            client.images.get(image)
        except Exception:
            missing.append(image)
    if missing:
        _unreachable(f"the test image(s) {', '.join(missing)} are missing")
    yield client
    client.close()


# -- the engine stays clean ------------------------------------------------------------


def _our_run_ids() -> set[str]:
    ids: set[str] = set()
    for home in _HOMES:
        db = home / "runs.sqlite3"
        if not db.exists():
            continue
        try:
            with sqlite3.connect(db) as conn:
                ids.update(row[0] for row in conn.execute("SELECT id FROM runs"))
        except sqlite3.Error:
            continue  # a test damaged it on purpose
    return ids


def _snapshot(client: Any) -> dict[str, dict[str, dict[str, Any]]]:
    api = client.api
    containers = {c["Id"]: c for c in api.containers(all=True)}
    volumes = {v["Name"]: v for v in (api.volumes().get("Volumes") or [])}
    networks = {n["Id"]: n for n in api.networks()}
    return {"container": containers, "volume": volumes, "network": networks}


def _foreign(kind: str, obj: dict[str, Any], ours: set[str]) -> bool:
    """Created by other work running meanwhile (Swarm tasks, another run's objects)."""
    labels = obj.get("Labels") or {}
    if any(k.startswith("com.docker.swarm.") for k in labels):
        return True
    if kind == "network" and (obj.get("Name") in SYSTEM_NETWORKS or obj.get("Scope") == "swarm"):
        return True
    run = labels.get(LABEL_RUN)
    return run is not None and run not in ours


def _describe(kind: str, key: str, obj: dict[str, Any]) -> str:
    labels = obj.get("Labels") or {}
    if kind == "container":
        names = ",".join(n.lstrip("/") for n in obj.get("Names") or [])
        return f"container {key[:12]} {names} ({obj.get('State')}) labels={labels}"
    if kind == "network":
        return f"network {key[:12]} {obj.get('Name')} labels={labels}"
    return f"volume {key} labels={labels}"


def leftovers(client: Any, before: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    ours = _our_run_ids()
    now = _snapshot(client)
    found = []
    for kind, objects in now.items():
        for key, obj in objects.items():
            if key not in before[kind] and not _foreign(kind, obj, ours):
                found.append((kind, key, obj))
    return [_describe(*item) for item in found]


def _remove(client: Any, description: str) -> None:
    kind, key = description.split()[:2]
    try:
        if kind == "container":
            client.api.remove_container(key, force=True, v=True)
        elif kind == "network":
            client.api.remove_network(key)
        else:
            client.api.remove_volume(key, force=True)
    except Exception:
        pass


@pytest.fixture(scope="module", autouse=True)
def engine_clean(docker_client: Any) -> Iterator[None]:
    """Nothing this module created stays on the engine (checked after its last test)."""
    before = _snapshot(docker_client)
    yield
    deadline = time.monotonic() + 15  # background runs may still be finishing
    left = leftovers(docker_client, before)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = leftovers(docker_client, before)
    for item in left:
        _remove(docker_client, item)
    if left:
        pytest.fail(
            "the engine is not as clean as before this module; left behind:\n  "
            + "\n  ".join(left),
            pytrace=False,
        )


# -- running nodus ---------------------------------------------------------------------


@dataclass
class Nodus:
    """``nodus`` as a user runs it, with a private state folder and configuration."""

    root: Path
    home: Path
    config: Path
    env: dict[str, str] = field(default_factory=dict)

    def write(self, text: str, name: str = "workload.toml") -> Path:
        path = self.root / name
        path.write_text(text, encoding="utf-8")
        return path

    def set_price(self, price_per_hour: float) -> None:
        self.config.write_text(f"[local]\nprice_per_hour = {price_per_hour}\n", "utf-8")

    def environ(self, gpus: str | None = None, **extra: str | None) -> dict[str, str]:
        env = dict(self.env)
        if gpus is not None:
            env["NODUS_FAKE_GPUS"] = gpus
        for key, value in extra.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def run(
        self,
        *args: str | os.PathLike[str],
        gpus: str | None = None,
        timeout: float = 90,
        **extra: str | None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nodus_cli", *map(str, args)],
            capture_output=True,
            text=True,
            env=self.environ(gpus, **extra),
            cwd=self.root,
            timeout=timeout,
            check=False,
        )

    def popen(
        self, *args: str | os.PathLike[str], gpus: str | None = None, **extra: str | None
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "nodus_cli", *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=self.environ(gpus, **extra),
            cwd=self.root,
        )

    def run_json(self, *args: str | os.PathLike[str], **extra: str | None) -> Any:
        """``nodus ARGS --json``, parsed (it must succeed)."""
        done = self.run(*args, "--json", **extra)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def runs(self) -> list[dict[str, Any]]:
        done = self.run("runs", "--json", "--limit", "100")
        assert done.returncode == 0, done.stderr
        found: list[dict[str, Any]] = json.loads(done.stdout)["runs"]
        return found

    def record(self, run_id: str) -> dict[str, Any]:
        for r in self.runs():
            if r["id"] == run_id:
                return r
        raise AssertionError(f"no run {run_id} in {self.home}")

    def db_status(self, run_id: str) -> tuple[str, list[str]]:
        """The run's status and its stages' statuses, straight from the store (cheap)."""
        with sqlite3.connect(self.home / "runs.sqlite3") as conn:
            row = conn.execute("SELECT status FROM runs WHERE id=?", (run_id,)).fetchone()
            stages = [
                s[0]
                for s in conn.execute(
                    "SELECT status FROM stages WHERE run_id=? ORDER BY idx", (run_id,)
                )
            ]
        return (row[0] if row else "missing"), stages

    def wait_done(self, run_id: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while self.db_status(run_id)[0] in ("pending", "queued", "running"):
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} still running after {timeout} s")
            time.sleep(0.1)
        return self.record(run_id)

    def let_go(self, run_id: str) -> None:
        """Let run ``run_id``'s command that waits in :data:`UNTIL_LET_GO` go on."""
        (self.home / "work" / run_id / "go").touch()

    def stop(self, run_id: str) -> None:
        """SIGTERM a background run's process (a detached run's own cancel)."""
        with sqlite3.connect(self.home / "runs.sqlite3") as conn:
            row = conn.execute("SELECT pid FROM runs WHERE id=?", (run_id,)).fetchone()
        if row and row[0]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(row[0]), signal.SIGTERM)


def read_until(proc: subprocess.Popen[str], needle: str, timeout: float = 30) -> tuple[float, str]:
    """Read the process's stdout line by line until one contains ``needle``.

    Returns when it came (``time.monotonic()``) and the line. Fails (after killing the
    process) when the line does not come within ``timeout``. Lines after it stay unread.
    """
    import queue
    import threading

    assert proc.stdout is not None
    stream = proc.stdout
    lines: queue.Queue[str] = queue.Queue()
    found = threading.Event()

    def pump() -> None:
        for line in iter(stream.readline, ""):
            lines.put(line)
            if needle in line:
                found.set()
                return  # leave the rest to the caller (communicate)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        if not line:
            break
        seen.append(line)
        if needle in line:
            return time.monotonic(), line.rstrip("\n")
    proc.kill()
    raise AssertionError(f"{needle!r} did not come within {timeout} s; got {seen!r}")


@pytest.fixture
def nodus_env(tmp_path: Path) -> Nodus:
    home = tmp_path / "home"
    config = tmp_path / "config.toml"
    _HOMES.append(home)
    env = dict(os.environ)
    for key in list(env):
        if key.startswith("NODUS_") and key != "NODUS_REQUIRE_DOCKER":
            del env[key]
    env.update(
        {
            "NODUS_HOME": str(home),
            "NODUS_CONFIG": str(config),
            "NODUS_GPU_SAMPLE_SECONDS": "0.2",
            "PATH": f"{FAKE_BIN}{os.pathsep}{env.get('PATH', '')}",
            "NO_COLOR": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return Nodus(tmp_path, home, config, env)
