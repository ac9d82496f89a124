"""Slurm as a target (``--target slurm``): nodus on a login node, each stage one batch job.

Only :class:`SlurmTarget` is public; choosing another target never imports this package
(the registry names it as a string)."""

from __future__ import annotations

from nodus_cli.targets.slurm.target import SlurmTarget

__all__ = ["SlurmTarget"]
