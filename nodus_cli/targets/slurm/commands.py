"""Slurm's client commands, run from here (the login node), their failures in words.

Contract: :func:`slurm` runs one command (``sinfo``, ``sbatch``, ``squeue``, ``sacct``,
``scontrol``, ``scancel``) with this process's environment (``SLURM_CONF`` included)
and returns its stdout; a command missing from ``PATH``, or finding no cluster's
configuration (``SLURM_CONF`` naming a file that is not there included: Slurm itself
would retry it for a minute before failing), is :class:`~nodus_cli.errors.NotRunnable`
naming it and the fix, a
controller that does not answer is :class:`SlurmDown`, any other refusal
:class:`SlurmRefused` with Slurm's own words.

Why apart: every call site needs the same three failures said the same way.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from nodus_cli.errors import NotRunnable
from nodus_cli.targets.base import TargetFailure

__all__ = ["SlurmDown", "SlurmRefused", "down_error", "environ", "slurm"]

#: How long one Slurm command may take.
COMMAND_SECONDS = 60.0

_DOWN = (
    "unable to contact slurm controller",
    "slurm_load_jobs error",
    "slurm_load_node error",
    "connection refused",
    "socket timed out",
    "unable to establish a connection",
)


#: What Slurm's commands say when they find no configuration for a cluster here.
_NO_CONFIG = (
    "could not establish a configuration source",
    "unable to process configuration file",
)


class SlurmDown(TargetFailure):
    """slurmctld (or slurmdbd, for sacct) does not answer."""


class SlurmRefused(TargetFailure):
    """A Slurm command refused what nodus asked (its stderr is the message)."""


def down_error(exc: SlurmDown) -> NotRunnable:
    """What nodus says when the controller does not answer before a run."""
    return NotRunnable(
        f"the Slurm controller does not answer: {exc}",
        hint="check that slurmctld runs (`scontrol ping`) and that SLURM_CONF, if set, "
        "names this cluster's slurm.conf",
    )


def slurm(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = COMMAND_SECONDS
) -> str:
    """Run a Slurm command; its stdout (failures as this module's docstring says)."""
    conf = (env if env is not None else os.environ).get("SLURM_CONF")
    if conf and not os.path.isfile(conf):
        raise NotRunnable(
            f"SLURM_CONF names {conf}, which is not a file here: Slurm's commands cannot "
            "find the cluster's configuration",
            hint="set SLURM_CONF to the cluster's slurm.conf, or unset it to use the one "
            "Slurm was installed with",
        )
    try:
        done = subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            env=dict(env) if env is not None else None,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise NotRunnable(
            f"`{args[0]}` is not on PATH: nodus runs on Slurm from a machine with Slurm's "
            "client commands (sbatch, squeue, sinfo, scontrol, scancel, sacct)",
            hint="run nodus on the cluster's login node, or add Slurm's bin folder to PATH",
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmDown(f"`{' '.join(args[:2])}` did not answer within {timeout:.0f}s") from None
    if done.returncode != 0:
        said = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
        if any(mark in said.lower() for mark in _NO_CONFIG):
            raise NotRunnable(
                f"Slurm's commands here find no configuration of a cluster (`{args[0]}`: {said})",
                hint="set SLURM_CONF to the cluster's slurm.conf, or run nodus on a login "
                "node of the cluster",
            )
        if any(mark in said.lower() for mark in _DOWN):
            raise SlurmDown(f"`{args[0]}`: {said}")
        raise SlurmRefused(f"`{args[0]}`: {said}")
    return done.stdout


def environ(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with ``extra`` on top (what a submitted job inherits)."""
    return {**os.environ, **extra}
