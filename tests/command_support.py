"""The ``nodus`` command as a system test runs it, for the suites of the cluster targets.

:class:`NodusCommand` runs ``python -m nodus_cli`` in a process of its own, with its own
NODUS_HOME and configuration file under the test's folder, the variables the target's
harness needs (:meth:`NodusCommand.target_environ`) and a test's own ``env`` on top. A
suite subclasses it for its harness and image.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class NodusCommand:
    """``nodus`` with its own NODUS_HOME and the configuration ``config`` under ``tmp``."""

    #: The image the suite's workloads name.
    image = "nodus-test/busybox:1"
    #: Seconds a command may take.
    timeout: float = 60

    def __init__(self, tmp: Path, config: str) -> None:
        self.tmp = tmp
        self.config = tmp / "config.toml"
        self.config.write_text(config)
        #: Variables a test sets as it goes, on top of the others.
        self.env: dict[str, str] = {}

    def target_environ(self) -> dict[str, str]:
        """The environment the target's harness gives (default: this process's)."""
        return dict(os.environ)

    def environ(self) -> dict[str, str]:
        return {
            **self.target_environ(),
            "NODUS_HOME": str(self.tmp / "home"),
            "NODUS_CONFIG": str(self.config),
            "NO_COLOR": "1",
            **self.env,
        }

    def workload(self, name: str, command: str = "true", gpu: str = "H100", count: int = 1) -> Path:
        path = self.tmp / f"{name}.toml"
        path.write_text(
            f'name = "{name}"\nimage = "{self.image}"\ncommand = "{command}"\n'
            f'gpu = "{gpu}"\ngpu_count = {count}\n'
        )
        return path

    def run(
        self, *args: str | os.PathLike[str], timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nodus_cli", *map(str, args)],
            capture_output=True,
            text=True,
            env=self.environ(),
            timeout=timeout or self.timeout,
            check=False,
        )

    def popen(self, *args: str | os.PathLike[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "nodus_cli", *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.environ(),
            start_new_session=True,
        )

    def runs(self) -> list[dict[str, Any]]:
        done = self.run("runs", "--json")
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout)["runs"])

    def wait_for(
        self, what: str, want: Callable[[dict[str, Any]], Any], timeout: float = 60
    ) -> dict[str, Any]:
        """The newest run once ``want`` holds of it."""
        deadline = time.monotonic() + timeout
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            runs = self.runs()
            if runs and want(runs[0]):
                return runs[0]
            time.sleep(0.5)
        raise AssertionError(f"{what} within {timeout}s; runs: {runs[:1]}")


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    """``(exit status, output)`` of ``proc`` once it ends; its whole process group killed,
    and the test failed, when it does not end within ``timeout`` seconds."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"nodus did not end: {out}") from None
    return proc.returncode, out
