"""Slurm's commands missing from PATH: one line naming the cause and the fix (no cluster
needed: nodus on a machine that is not a login node)."""

from __future__ import annotations

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
