"""Fixtures for tests against the test Slurm cluster (``tests/harness/slurm.sh``).

Import them into a test module::

    from slurm_support import SlurmCluster, slurm_cluster  # noqa: F401

* ``slurm_cluster`` (session): runs ``slurm.sh up`` (munged, MariaDB + slurmdbd,
  slurmctld, and the nodes ``gpu-a`` with 2 ``h100`` and ``gpu-b`` with 2 ``a100``
  stand-in GPUs, each in its own network namespace; partition ``gpu``; ``MaxArraySize=10``;
  a QOS ``urgent`` that preempts the default ``normal``, requeueing) and, at the end
  of the session, ``slurm.sh down``, then checks that every daemon it started is gone,
  with the nodes' namespaces and the harness's state folder. It skips unless
  ``NODUS_TEST_SYSTEM=1`` (the harness installs packages, makes network namespaces and
  device files), as the Swarm harness does; when it cannot be brought up the tests fail
  if ``NODUS_REQUIRE_DOCKER=1`` (CI) and are skipped otherwise.

Slurm's own commands (``sinfo``, ``sbatch``, ``sacct``) reach it through ``SLURM_CONF``;
:meth:`SlurmCluster.run` sets it. A test cancels the jobs it submitted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from swarm_support import SYSTEM_TESTS

REPO = Path(__file__).resolve().parent.parent
SLURM_SH = REPO / "tests" / "harness" / "slurm.sh"
STATE = REPO / ".ci" / "state" / "slurm"
#: node name -> the GPU model (GRES type) of its two stand-in GPUs
NODES = {"gpu-a": "h100", "gpu-b": "a100"}
GPUS_PER_NODE = 2
PARTITION = "gpu"
NAMESPACES = {f"nodus-slurm-{node}" for node in NODES}


@dataclass
class SlurmCluster:
    conf: Path

    def environ(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str | os.PathLike[str], check: bool = True) -> str:
        """A Slurm command (``sinfo``, ``sbatch``...) against the cluster; its stdout."""
        done = subprocess.run(
            [str(a) for a in args],
            capture_output=True,
            text=True,
            env=self.environ(),
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(map(str, args))} failed ({done.returncode}): {done.stderr.strip()}"
            )
        return done.stdout

    def poll(
        self, what: str, args: list[str], want: Callable[[str], bool], timeout: float = 30
    ) -> str:
        """Run ``args`` until ``want(stdout)`` holds; that stdout."""
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            out = self.run(*args)
            if want(out):
                return out
            time.sleep(0.25)
        raise AssertionError(f"{what} within {timeout}s; last `{' '.join(args)}`: {out!r}")

    def cancel(self, *job_ids: str) -> None:
        """Cancel the jobs and wait until none of them runs or pends any more."""
        if not job_ids:
            return
        self.run("scancel", *job_ids, check=False)
        self.poll(
            f"jobs {', '.join(job_ids)} to end",
            ["squeue", "-h", "-j", ",".join(job_ids), "-t", "PD,R,CG", "-o", "%i"],
            lambda out: not out.strip(),
        )


def _fail_or_skip(reason: str) -> None:
    message = (
        f"the test Slurm cluster cannot be brought up: {reason}. "
        "Run `sudo bash tests/harness/slurm.sh up` to see why"
    )
    if os.environ.get("NODUS_REQUIRE_DOCKER") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _pids() -> dict[str, int]:
    """The harness's daemons by name, from their pid files."""
    files = {
        "munged": STATE / "munge" / "munged.pid",
        "mariadbd": STATE / "mariadb" / "mariadbd.pid",
        "slurmdbd": STATE / "slurmdbd.pid",
        "slurmctld": STATE / "slurmctld.pid",
        **{f"slurmd {node}": STATE / "node" / node / "slurmd.pid" for node in NODES},
    }
    return {name: int(path.read_text().strip()) for name, path in files.items()}


def _running(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    if not SYSTEM_TESTS:
        pytest.skip(
            "the Slurm harness installs slurm-wlm and MariaDB and makes network namespaces "
            "on this machine: set NODUS_TEST_SYSTEM=1 to run these tests (CI does)"
        )
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        _fail_or_skip("no `ip` or `nsenter` on PATH (iproute2, util-linux)")
    if os.geteuid() != 0:
        _fail_or_skip("the harness needs root (network namespaces, mknod, daemons)")
    up = subprocess.run(["bash", str(SLURM_SH), "up"], capture_output=True, text=True, timeout=600)
    if up.returncode != 0:
        _fail_or_skip(up.stderr.strip().splitlines()[-1] if up.stderr.strip() else "exit 1")
    conf = next(
        line.split("=", 1)[1] for line in up.stdout.splitlines() if line.startswith("SLURM_CONF=")
    )
    pids = _pids()
    try:
        yield SlurmCluster(Path(conf))
    finally:
        down = subprocess.run(
            ["bash", str(SLURM_SH), "down"], capture_output=True, text=True, timeout=300
        )
        assert down.returncode == 0, f"slurm.sh down failed: {down.stderr}"
    # Torn down completely: no daemon, no namespace, no state.
    left = [f"{name} (pid {pid})" for name, pid in pids.items() if _running(pid)]
    assert not left, f"still running after slurm.sh down: {left}"
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not NAMESPACES & set(namespaces.split()), namespaces
    assert not STATE.exists()
