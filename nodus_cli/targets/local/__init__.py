"""The local Docker engine as a target (:mod:`.target`): each task a container on this
machine, with exactly the GPUs chosen; this machine as an inventory (:mod:`.machine`:
CPUs, memory, disk and what ``nvidia-smi`` reports); and the sampling of GPU use while a
task runs (:mod:`.gpu_usage`).
"""

from nodus_cli.targets.local.target import LocalTarget

__all__ = ["LocalTarget"]
