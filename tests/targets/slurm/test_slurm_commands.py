"""Slurm's client commands as nodus runs them: failures said before Slurm is asked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_a_slurm_conf_that_is_not_there_is_one_line_at_once(tmp_path: Path) -> None:
    # Slurm's own commands retry a missing SLURM_CONF for a minute, then fail; nodus
    # says it before asking them (so it needs no Slurm on this machine either).
    missing = tmp_path / "etc" / "slurm.conf"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_")}
    env.update(SLURM_CONF=str(missing), NODUS_HOME=str(tmp_path / "home"), NO_COLOR="1")
    done = subprocess.run(
        [sys.executable, "-m", "nodus_cli", "nodes", "--target", "slurm"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith(
        f"error: SLURM_CONF names {missing}, which is not a file here: Slurm's commands "
        "cannot find the cluster's configuration"
    )
    assert "hint: set SLURM_CONF to the cluster's slurm.conf, or unset it" in done.stderr
    assert "Traceback" not in done.stderr
