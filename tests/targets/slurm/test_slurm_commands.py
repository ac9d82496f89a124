"""Slurm's client commands as nodus runs them, failures said before a cluster is asked:
the commands missing from PATH, a SLURM_CONF that is not there (no cluster needed: nodus
on a machine that is not a login node)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_slurm_commands_missing_from_path_are_named_with_the_fix(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodus_cli", "nodes", "--target", "slurm"],
        capture_output=True,
        text=True,
        env={"PATH": str(tmp_path), "NODUS_HOME": str(tmp_path / "home"), "HOME": str(tmp_path)},
        timeout=60,
        check=False,
    )
    assert done.returncode == 3
    assert done.stderr.splitlines() == [
        "error: `scontrol` is not on PATH: nodus runs on Slurm from a machine with Slurm's "
        "client commands (sbatch, squeue, sinfo, scontrol, scancel, sacct)",
        "hint: run nodus on the cluster's login node, or add Slurm's bin folder to PATH",
    ]


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
