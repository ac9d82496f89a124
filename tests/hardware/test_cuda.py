"""Image compatibility: the CUDA version an image declares, and the GPUs it can drive."""

from __future__ import annotations

import json

import pytest

from nodus_cli import data
from nodus_cli.hardware import cuda, gpus


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime", (12, 8)),
        ("pytorch/pytorch:2.4.0-cuda12.4-cudnn9-devel", (12, 4)),
        ("nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04", (12, 4)),
        ("nvidia/cuda:12.8.0-base-ubuntu24.04", (12, 8)),
        ("nvcr.io/nvidia/cuda:13.0.0-devel", (13, 0)),
        ("localhost:5000/cuda:11.8", (11, 8)),  # a registry port is not a tag
        ("myorg/train:12.4.1-cudnn-runtime", (12, 4)),
        ("myorg/train:cuda12.8", (12, 8)),
        ("myorg/train:cuda-12.4", (12, 4)),
        ("myorg/train-cuda11.7:latest", (11, 7)),  # in the name
        ("vllm/vllm-openai:v0.6.0-cu121", (12, 1)),  # PyTorch wheel spelling
        ("nvidia/cuda:12.8.0-devel@sha256:cu121abc", (12, 8)),  # the digest says nothing
    ],
)
def test_declared_cuda(image: str, version: tuple[int, int]) -> None:
    assert cuda.declared_cuda(image) == version


@pytest.mark.parametrize(
    "image",
    [
        "python:3.12-slim",
        "ubuntu:22.04",
        "nvcr.io/nvidia/pytorch:24.05-py3",  # YY.MM, not a CUDA version
        "vllm/vllm-openai:v0.6.0",
        "myorg/cuda-app:1.0",  # 1.0 is no CUDA release
        "myorg/app:2.1.0-cudnn8",
        "nvidia/cuda@sha256:0123abcd",
        "",
    ],
)
def test_no_declared_cuda(image: str) -> None:
    assert cuda.declared_cuda(image) is None


def _family(name: str) -> gpus.GpuFamily:
    return gpus.table().get(name)


@pytest.mark.parametrize(
    ("gpu", "version", "words"),
    [
        ("B200", (12, 4), "needs CUDA 12.8 or newer"),  # too new for the release
        ("B200", (12, 0), "needs CUDA 12.8 or newer"),
        ("B300", (12, 8), "needs CUDA 12.9 or newer"),  # sm_103 came a release later
        ("RTX 5090", (12, 6), "needs CUDA 12.8 or newer"),
        ("H100", (11, 7), "needs CUDA 11.8 or newer"),
        ("L4", (11, 1), "needs CUDA 11.8 or newer"),
        ("V100", (13, 0), "too old for CUDA 13.0"),  # Volta dropped in 13.0
        ("P100", (13, 0), "too old for CUDA 13.0"),
        ("K80", (12, 0), "too old for CUDA 12.0"),  # Kepler dropped in 12.0
        ("MI300X", (12, 8), "AMD"),  # no CUDA image drives an AMD GPU
    ],
)
def test_incompatible(gpu: str, version: tuple[int, int], words: str) -> None:
    problem = cuda.incompatibility(_family(gpu), version)
    assert problem is not None
    assert words in problem
    assert gpu in problem


@pytest.mark.parametrize(
    ("gpu", "version"),
    [
        ("B200", (12, 8)),
        ("B300", (12, 9)),
        ("H100", (11, 8)),
        ("H100", (12, 4)),
        ("H100", (13, 0)),
        ("A100", (11, 0)),
        ("V100", (12, 9)),
        ("K80", (11, 8)),
        ("T4", (13, 0)),
        ("L4", (12, 8)),
    ],
)
def test_compatible(gpu: str, version: tuple[int, int]) -> None:
    assert cuda.incompatibility(_family(gpu), version) is None


def test_every_nvidia_compute_capability_is_in_the_cuda_table() -> None:
    """A family whose compute capability the table lacks could never be judged."""
    raw = json.loads(data.path("gpus.json").read_text(encoding="utf-8"))
    table = cuda.architectures()
    for family in raw["families"]:
        cc = family.get("compute_capability")
        if family["vendor"] == "nvidia" and cc:
            major, minor = (int(x) for x in cc.split("."))
            assert (major, minor) in table, family["name"]
