"""nodus_cli.targets.cluster.resources: the default memory, tasks per node, price shares."""

from __future__ import annotations

import pytest

from nodus_cli.targets.cluster.resources import (
    MEMORY_GB_PER_CPU,
    memory_gb,
    price_share,
    tasks_per_node,
)
from nodus_cli.targets.docker.containers import memory_bytes
from nodus_cli.workload import Requirements


def test_a_task_without_memory_gb_gets_two_gib_per_cpu() -> None:
    assert MEMORY_GB_PER_CPU == 2.0
    assert memory_gb(3, None) == 6.0
    assert memory_gb(0.5, None) == 1.0
    assert memory_gb(3, 1.5) == 1.5


def test_the_container_limit_is_the_same_default() -> None:
    assert memory_bytes(3, None) == 6 * 2**30
    assert memory_bytes(3, 0.25) == 2**28


@pytest.mark.parametrize(
    ("req", "gpus", "cpus", "held"),
    [
        (Requirements(gpu="H100", gpu_count=1), 8, 16, 8),
        (Requirements(gpu="H100", gpu_count=2), 8, 16, 4),
        (Requirements(gpu="H100", gpu_count=3), 8, 16, 2),
        (Requirements(gpu="H100", gpu_count=9), 8, 16, 0),
        (Requirements(cpu=5), 8, 16, 3),
        (Requirements(cpu=32), 0, 16, 1),
    ],
)
def test_tasks_per_node_by_gpus_else_cpus(
    req: Requirements, gpus: int, cpus: float, held: int
) -> None:
    assert tasks_per_node(req, gpus=gpus, cpus=cpus) == held


def test_gpus_shared_by_memory_hold_as_many_tasks_as_their_memory_fits() -> None:
    req = Requirements(gpu="L4", gpu_count=1, share_gpu=True, peak_memory_gb=10)
    assert tasks_per_node(req, gpus=2, cpus=8, gpu_memory_gb=[24.0, 24.0]) == 4
    # Without the GPUs' memory, whole GPUs.
    assert tasks_per_node(req, gpus=2, cpus=8) == 2


def test_a_task_pays_the_share_of_the_node_that_one_of_its_kind_holds() -> None:
    assert price_share(80.0, Requirements(gpu="H100", gpu_count=2), gpus=8, cpus=64) == 20.0
    assert price_share(80.0, Requirements(cpu=5), gpus=8, cpus=30) == 80.0 / 6
    # A node that cannot hold the task charges it whole, never divides by zero.
    assert price_share(80.0, Requirements(gpu="H100", gpu_count=9), gpus=8, cpus=64) == 80.0
