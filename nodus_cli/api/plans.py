"""Plans as the Python API gives them: :meth:`Client.plan` returns a
:class:`~nodus_cli.planning.planner.Plan` (re-exported by :mod:`nodus_cli.api` with the
names a reader of it needs), and :func:`image_cuda` says what an image declares.

Why here: the command line renders plans and reaches nothing below the API; what it says
about a stage's image (the CUDA release its tag or name declares) is asked here.
"""

from __future__ import annotations

__all__ = ["image_cuda"]


def image_cuda(image: str | None) -> str | None:
    """The CUDA release an image reference declares in its tag or name, in words
    (``"CUDA 12.4"``); None when it declares none."""
    from nodus_cli.hardware import cuda

    declared = cuda.declared_cuda(image)
    return cuda.shown(declared) if declared else None
