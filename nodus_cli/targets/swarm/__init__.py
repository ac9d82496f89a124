"""Docker Swarm as a target: its nodes are the inventory, each task a one-off service.

nodus does not schedule across machines itself: it plans against what the nodes hold
(CPUs, memory, GPUs declared as generic resources of kind ``NVIDIA-GPU``, and the labels
``nodus.gpu``, ``nodus.gpu_memory_gb``, ``nodus.price_per_hour``, ``nodus.machine_id``),
then submits each task as a service and lets Swarm run it. The modules, lowest first:

- :mod:`.api`: the manager nodus talks to (``DOCKER_HOST``, else the Docker context's
  engine, else the local socket), its calls and the task states;
- :mod:`.nodes`: the cluster as an inventory, what each node holds and has free;
- :mod:`.placement`: which nodes a stage may use, how many of its tasks they hold, the
  constraints that pin a task or keep it off a node;
- :mod:`.services`: the service a task becomes, and the job mode the engines allow;
- :mod:`.pending`: why Swarm keeps a task pending, in the workload's terms;
- :mod:`.following`: following a submitted task to its end (state, output, exit code);
- :mod:`.notes`: what the plan and prepare say about Swarm, its refusals;
- :mod:`.target`: :class:`SwarmTarget`, composing them behind the target interface.
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
