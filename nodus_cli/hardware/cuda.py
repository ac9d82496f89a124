"""Image compatibility: which GPUs the CUDA version an image declares can drive.

An image reference such as ``pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime``,
``nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04`` or ``vllm:0.6-cu121`` declares the CUDA
release it was built with. Each compute capability has a first toolkit release that
can build for it and, for old ones, a last (``data/cuda.json``): a GPU that is too new
(a B200, sm_100, for CUDA 12.4: it needs 12.8) or too old (a K80 for CUDA 12) cannot
run that image. An image that declares no version excludes nothing.
"""

from __future__ import annotations

import json
import re
from functools import cache

from nodus_cli import data
from nodus_cli.hardware.gpus import GpuFamily
from nodus_cli.structs import struct

_DATA = data.path("cuda.json")

Version = tuple[int, int]

_CUDA_WORD = re.compile(r"cuda[-_]?v?(\d{1,2})\.(\d{1,2})(?!\d)", re.IGNORECASE)
_TORCH_CU = re.compile(r"(?:^|[-_.])cu(\d{2})(\d)(?:[-_.]|$)", re.IGNORECASE)
_LEADING_VERSION = re.compile(r"^v?(\d{1,2})\.(\d{1,2})(?:\.\d+)?(?:[-_.+]|$)")
_WORDS = re.compile(r"[-_.]")


@struct(frozen=True)
class Architecture:
    """A GPU architecture: its compute capability and the CUDA versions that support it."""

    cc: Version
    name: str
    first: Version
    last: Version | None


def _version(text: str) -> Version:
    major, minor = text.split(".")
    return int(major), int(minor)


def shown(version: Version) -> str:
    return f"CUDA {version[0]}.{version[1]}"


@cache
def architectures() -> dict[Version, Architecture]:
    raw = json.loads(_DATA.read_text("utf-8"))
    table = {}
    for entry in raw["architectures"]:
        arch = Architecture(
            cc=_version(entry["cc"]),
            name=entry["name"],
            first=_version(entry["first"]),
            last=_version(entry["last"]) if entry.get("last") else None,
        )
        table[arch.cc] = arch
    return table


def _plausible(major: int, minor: int) -> Version | None:
    return (major, minor) if 7 <= major <= 30 else None


def declared_cuda(image: str | None) -> Version | None:
    """The CUDA release an image reference declares in its tag or name, if any."""
    if not image:
        return None
    ref = image.strip().split("@", 1)[0]  # a digest says nothing about CUDA
    last = ref.rsplit("/", 1)[-1]
    name, tag = ref.rsplit(":", 1) if ":" in last else (ref, "")
    repo = name.rsplit("/", 1)[-1]
    for text in (tag, repo):
        m = _CUDA_WORD.search(text)
        if m:
            return _plausible(int(m.group(1)), int(m.group(2)))
    m = _TORCH_CU.search(tag)
    if m:
        return _plausible(int(m.group(1)), int(m.group(2)))
    if tag and ("cuda" in _WORDS.split(repo.lower()) or "cudnn" in _WORDS.split(tag.lower())):
        # nvidia/cuda:12.4.1-runtime-ubuntu22.04, any:12.4.1-cudnn-runtime: the tag starts
        # with the CUDA version.
        m = _LEADING_VERSION.match(tag)
        if m:
            return _plausible(int(m.group(1)), int(m.group(2)))
    return None


def incompatibility(family: GpuFamily, cuda: Version) -> str | None:
    """Why an image built with ``cuda`` cannot drive ``family``, or None when it can."""
    if family.vendor != "nvidia":
        return (
            f"{family.name} is an {family.vendor.upper()} GPU; a {shown(cuda)} image needs NVIDIA"
        )
    if family.compute_capability is None:
        return None
    cc = _version(family.compute_capability)
    arch = architectures().get(cc)
    if arch is None:
        return None
    sm = f"sm_{cc[0]}{cc[1]}"
    if cuda < arch.first:
        return (
            f"{family.name} ({sm}) is too new for {shown(cuda)}: "
            f"it needs {shown(arch.first)} or newer"
        )
    if arch.last is not None and cuda > arch.last:
        return (
            f"{family.name} ({sm}) is too old for {shown(cuda)}: "
            f"{shown(arch.last)} is the last release that supports it"
        )
    return None
