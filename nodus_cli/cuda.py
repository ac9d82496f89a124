"""Image compatibility: which GPUs the CUDA version an image declares can drive.

An image tag such as ``pytorch:2.8.0-cuda12.8-cudnn9-runtime`` or
``nvidia/cuda:12.4.1-cudnn-runtime`` declares the CUDA release it was built with. A
release builds code for a window of compute capabilities (``data/cuda.json``): too new
a GPU (a B200 for CUDA 12.4) or too old (a K80 for CUDA 12) cannot run it.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources

from nodus_cli.gpus import GpuFamily

_CUDA_IN_TAG = re.compile(r"cuda[-_]?(\d{1,2})\.(\d)", re.IGNORECASE)
_LEADING_VERSION = re.compile(r"^(\d{1,2})\.(\d)(?:\.\d+)?(?:[-_.]|$)")
_TORCH_CU = re.compile(r"(?:^|[-_.])cu(\d{2})(\d)(?:[-_.]|$)", re.IGNORECASE)


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


@cache
def _releases() -> list[tuple[tuple[int, int], tuple[int, int], tuple[int, int]]]:
    raw = json.loads(resources.files("nodus_cli").joinpath("data/cuda.json").read_text("utf-8"))
    return [
        (_version(r["from"]), _version(r["min_cc"]), _version(r["max_cc"]))
        for r in raw["releases"]
    ]


def declared_cuda(image: str) -> tuple[int, int] | None:
    """The CUDA release an image reference declares in its name or tag, if any."""
    name, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
    m = _CUDA_IN_TAG.search(tag) or _CUDA_IN_TAG.search(name.split("/")[-1])
    if m:
        return int(m.group(1)), int(m.group(2))
    if "cuda" in name.lower() and tag:
        m = _LEADING_VERSION.match(tag)
        if m:
            return int(m.group(1)), int(m.group(2))
    m = _TORCH_CU.search(tag)
    if m:
        return int(m.group(1)), int(m.group(2))
    return None


def incompatibility(family: GpuFamily, cuda: tuple[int, int]) -> str | None:
    """Why an image built with ``cuda`` cannot drive ``family``, or None when it can."""
    shown = f"CUDA {cuda[0]}.{cuda[1]}"
    if family.vendor != "nvidia":
        return f"{family.name} is an {family.vendor.upper()} GPU; a {shown} image needs NVIDIA"
    if family.compute_capability is None:
        return None
    cc = _version(family.compute_capability)
    window = None
    for start, low, high in _releases():
        if cuda >= start:
            window = (start, low, high)
    if window is None:
        return None
    _, low, high = window
    if cc > high:
        need = next((s for s, _, h in _releases() if h >= cc), None)
        newer = f" (needs CUDA {need[0]}.{need[1]} or newer)" if need else ""
        return f"{family.name} (sm_{cc[0]}{cc[1]}) is too new for {shown}{newer}"
    if cc < low:
        return f"{family.name} (sm_{cc[0]}{cc[1]}) is too old for {shown}"
    return None
