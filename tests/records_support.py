"""Helpers for the tests of the run records (tests/records): a two-stage workload and an
offer to record runs of."""

from __future__ import annotations

from nodus_cli.catalog import Offer
from nodus_cli.workload import Workload, load_text

TWO_STAGES = """
name = "rec"
image = "nodus-test/busybox:1"
command = "echo hi"
env = { A = "1" }
budget = 5.0
gpu = "H100"
gpu_count = 2
peak_memory_gb = 80
[requirements]
cpu = 4
[[stages]]
name = "prep"
[[stages]]
name = "train"
gpu = "H100"
gpu_count = 2
"""


def make_workload(text: str = TWO_STAGES) -> Workload:
    result = load_text(text, "rec.toml")
    assert result.workload is not None, result.problems
    return result.workload


def make_offer(gpu: str | None = "H100", count: int = 8, machine: str = "box") -> Offer:
    return Offer(
        supplier="local",
        machine_id=machine,
        region="local",
        gpu=gpu,
        gpu_count=count,
        gpu_memory_gb=80.0 if gpu else 0.0,
        vcpus=16,
        memory_gb=64.0,
        disk_gb=100.0,
        arch="x86_64",
        price_per_hour=2.0,
    )
