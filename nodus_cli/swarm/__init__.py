"""Docker Swarm as a target: its nodes are the inventory, each stage a replicated job.

nodus does not schedule across machines itself: it plans against what the nodes hold
(CPUs, memory, GPUs declared as generic resources of kind ``NVIDIA-GPU``, and the labels
``nodus.gpu``, ``nodus.gpu_memory_gb``, ``nodus.price_per_hour``, ``nodus.machine_id``),
then submits each stage as a service in ``replicated-job`` mode pinned to the chosen node
and lets Swarm run it: nodus follows the task to its end, streams its output, takes its
exit code, records the run like a local one and removes the service. When a task stays
pending, nodus says which requirement no node meets instead of waiting silently.
Ctrl-C stops and removes the run's services.

Before Docker 24, Swarm neither stops nor cleans up a removed job (see
:func:`job_mode`): on such engines each stage is the same one task as a one-replica
service with restart condition ``none``.

The engine is the one ``DOCKER_HOST`` names, else the current Docker context's (read
from the Docker CLI's files by :func:`connect`), else the local socket; it must be a
Swarm manager. :class:`SwarmApi` talks to it through the Docker SDK's low-level client
(services built of ``docker.types``), with the errors of :mod:`nodus_cli.engine`.
"""

from nodus_cli.swarm.api import SwarmApi, connect, manager_client
from nodus_cli.swarm.jobs import (
    SwarmRunner,
    cluster_state,
    job_mode,
    plan_swarm,
    run_swarm,
    service_args,
)
from nodus_cli.swarm.logs import LogFollower
from nodus_cli.swarm.nodes import Node, list_nodes, offers

__all__ = [
    "LogFollower",
    "Node",
    "SwarmApi",
    "SwarmRunner",
    "cluster_state",
    "connect",
    "job_mode",
    "list_nodes",
    "manager_client",
    "offers",
    "plan_swarm",
    "run_swarm",
    "service_args",
]
