"""Docker Swarm as a target: its nodes are the inventory, each task a one-off service.

nodus does not schedule across machines itself: it plans against what the nodes hold
(CPUs, memory, GPUs declared as generic resources of kind ``NVIDIA-GPU``, and the labels
``nodus.gpu``, ``nodus.gpu_memory_gb``, ``nodus.price_per_hour``, ``nodus.machine_id``),
then submits each task as a service and lets Swarm run it (:mod:`.target`).

The engine is the one ``DOCKER_HOST`` names, else the current Docker context's (read
from the Docker CLI's files by :func:`connect`), else the local socket; it must be a
Swarm manager. :class:`SwarmApi` talks to it through the Docker SDK's low-level client,
with the errors of :mod:`nodus_cli.targets.docker.engine`.
"""

from nodus_cli.targets.swarm.api import SwarmApi, connect, manager_client
from nodus_cli.targets.swarm.nodes import Node, list_nodes, offers
from nodus_cli.targets.swarm.services import job_mode, service_args
from nodus_cli.targets.swarm.target import SwarmTarget

__all__ = [
    "Node",
    "SwarmApi",
    "SwarmTarget",
    "connect",
    "job_mode",
    "list_nodes",
    "manager_client",
    "offers",
    "service_args",
]
