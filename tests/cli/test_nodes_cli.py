"""``nodus nodes --target local``: this machine, one entry per GPU model.

A machine with 2 L4 and 1 T4 is two entries (a request names one model), each named by
its id (``HOST/MODEL``), with the tasks queued for its GPUs. The engine is kept out
(``DOCKER_HOST`` points nowhere): then nobody is known to hold a GPU, and the figures do
not depend on what else runs on a shared engine."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from paths import FAKES


def nodes(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_")}
    env.update(
        NODUS_FAKE_GPUS="mixed",
        NODUS_HOME=str(tmp_path / "home"),
        NODUS_CONFIG=str(tmp_path / "config.toml"),
        PATH=f"{FAKES / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock",
        NO_COLOR="1",
        COLUMNS="80",
    )
    return subprocess.run(
        [sys.executable, "-m", "nodus_cli", "nodes", "--target", "local", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_one_machine_of_two_models_is_two_rows_named_by_model(tmp_path: Path) -> None:
    done = nodes(tmp_path)
    assert done.returncode == 0, done.stderr
    host = socket.gethostname()
    lines = done.stdout.splitlines()
    header = ["node", "state", "CPUs", "memory", "GPUs", "free", "queued", "GPU", "$/h"]
    assert lines[0].split() == header
    l4, t4 = lines[1].split(), lines[2].split()
    assert l4[0] == f"{host}/L4" and l4[5:9] == ["2", "2", "0", "L4"]
    assert t4[0] == f"{host}/T4" and t4[5:9] == ["1", "1", "0", "T4"]
    assert "L4, T4" not in done.stdout
    assert all(len(line) <= 80 for line in lines)
    assert "one entry per GPU model" in done.stdout


def test_the_json_has_an_entry_per_model_with_its_queue(tmp_path: Path) -> None:
    done = nodes(tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    l4, t4 = json.loads(done.stdout)["nodes"]
    host = socket.gethostname()
    assert (l4["id"], l4["hostname"], l4["gpu"], l4["gpus"], l4["free_gpus"]) == (
        f"{host}/L4",
        host,
        "L4",
        2,
        2,
    )
    assert (t4["id"], t4["gpu"], t4["gpus"], t4["queued"]) == (f"{host}/T4", "T4", 1, 0)
    assert l4["cpus"] == t4["cpus"]  # the machine's, on each entry
    assert (l4["holders"], l4["waiting"]) == ([], [])  # no engine: nobody known to hold any
