"""What the plan and prepare say about Swarm: what works differently there, what it
cannot do, and why a stage cannot run.

A workload written for this machine mostly runs on Swarm as it is, but not all of it
means the same there, and the user should read that in the plan, before anything runs:

- a bind mount's host path must exist on the node that runs the stage (Swarm does not
  create it); a named volume lives on the node that runs the stage, so stages (or a
  fan-out stage's tasks) on two nodes see two volumes of that name; published ports go
  through the routing mesh, on every node's address, which the plan, the run's notes
  and its log (``nodus logs``) name;
- a fan-out stage's tasks are spread by Swarm, each with an empty work folder of its own,
  and stages on different nodes cannot share one (the target declares that as a
  capability, ``shared_work_dir=False``, and the planner says it:
  :data:`nodus_cli.planning.planner.SEPARATE_WORK_DIRS`);
- ``output_dir`` is not copied back: the work folder lives on the node that ran the stage
  and is removed there after the run (the plan notes it, prepare warns);
- ``share_gpu`` is refused: Swarm reserves whole GPUs (generic resources) per task;
- a stage no node can run is refused, naming the nodes nodus cannot use and why.

The fixed texts are constants and the rest small functions of the workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from nodus_cli.errors import NotRunnable
from nodus_cli.workload.model import DEFAULT_PRIORITY

if TYPE_CHECKING:
    from nodus_cli.planning.plan import Plan, StagePlan
    from nodus_cli.targets.swarm.nodes import Node
    from nodus_cli.workload import Port, Stage, Workload

__all__ = [
    "FAN_OUT",
    "OUTPUT_DIR",
    "OUTPUT_DIR_WARNING",
    "PRIORITY",
    "SHARE_GPU",
    "cluster_holds",
    "port_notes",
    "reachable",
    "refuse_shared_gpus",
    "run_notes",
    "stage_notes",
    "unplaceable",
    "volume_notes",
    "warnings",
]

SHARE_GPU = (
    "share_gpu: Swarm reserves whole GPUs (generic resources), so tasks cannot "
    "share one there; run this stage on the local target, or without share_gpu"
)
FAN_OUT = (
    "fan-out: Swarm spreads the tasks over every node that can run them; each "
    "task gets an empty work folder of its own"
)
OUTPUT_DIR = (
    "output_dir: on Swarm the work folder lives on the node that ran the stage and "
    "is removed there after the run; nodus cannot copy it back (write results to "
    "storage the nodes share, e.g. a mount)"
)
PRIORITY = (
    "priority: Swarm has no priorities between services, so it has no effect there; a "
    "task Swarm keeps pending waits (queued) until a node has room, and wait_timeout applies"
)
OUTPUT_DIR_WARNING = (
    "output_dir is not copied back on Swarm: the work folder lives on the node "
    "that ran the stage and is removed there after the run; write results to "
    "storage the nodes share"
)


def stage_notes(stage: Stage, nodes: Sequence[Node] = ()) -> list[str]:
    """What the plan says of a stage on Swarm: shared GPUs, bind mounts, named volumes,
    ports (at the addresses of ``nodes``), fan-out."""
    found: list[str] = []
    if stage.requirements.share_gpu:
        found.append(SHARE_GPU)
    binds = [m for m in stage.mounts if m.type == "bind"]
    if binds:
        paths = ", ".join(dict.fromkeys(m.source for m in binds))
        found.append(
            f"mounts: the host path(s) {paths} must exist on the node that runs the "
            "stage (Swarm does not create them)"
        )
    volumes = _volumes(stage)
    if volumes:
        where = "each node that runs a task" if stage.map is not None else "the node"
        found.append(
            f"mounts: the named volume(s) {', '.join(volumes)} live on {where} (created "
            "there when missing, kept after the run): another node has its own, not this one"
        )
    if stage.ports:
        shown = ", ".join(f"{p.host}->{p.container}/{p.protocol}" for p in stage.ports)
        addresses = _addresses(nodes)
        at = f" ({', '.join(addresses)})" if addresses else ""
        found.append(
            f"ports {shown}: published through the routing mesh, on every node's address{at}"
        )
    if stage.map is not None:
        found.append(FAN_OUT)
    return found


def run_notes(workload: Workload, plan: Plan | None = None) -> list[str]:
    """What the plan says of the whole run on Swarm: named volumes that stages on two
    nodes would each see apart, ``output_dir``, and ``priority``."""
    found = volume_notes(workload, plan) if plan is not None else []
    if workload.output_dir:
        found.append(OUTPUT_DIR)
    if workload.priority != DEFAULT_PRIORITY:
        found.append(PRIORITY)
    return found


def volume_notes(workload: Workload, plan: Plan) -> list[str]:
    """A named volume that stages placed on different nodes mount: each node has its own,
    so they do not see each other's files (a volume is local to its node's engine)."""
    placed: dict[str, dict[str, list[str]]] = {}  # volume -> node -> stages
    for sp, stage in zip(plan.stages, workload.stages, strict=True):
        if sp.selected is None or stage.map is not None:
            continue
        for volume in _volumes(stage):
            placed.setdefault(volume, {}).setdefault(sp.selected.offer.machine_id, []).append(
                stage.name
            )
    found = []
    for volume, by_node in placed.items():
        if len(by_node) < 2:
            continue
        where = "; ".join(f"{', '.join(names)} on node {node}" for node, names in by_node.items())
        found.append(
            f"named volume {volume}: its stages run on different nodes ({where}), and a "
            f"named volume lives on the node that mounts it: each node has its own "
            f"{volume}, so they do not see each other's files; share data through a bind "
            "mount of storage every node mounts, or run them on one node"
        )
    return found


def port_notes(workload: Workload, plan: Plan, nodes: Sequence[Node]) -> list[str]:
    """Where each published port will answer, said when the run is submitted (at the
    address of the node the plan chose first)."""
    found = []
    for sp, stage in zip(plan.stages, workload.stages, strict=True):
        key = sp.selected.offer.machine_id if sp.selected and stage.map is None else None
        first = next((n for n in nodes if n.key == key), None)
        found += [f"stage {stage.name}: {reachable(p, nodes, first)}" for p in stage.ports]
    return found


def reachable(port: Port, nodes: Sequence[Node], first: Node | None = None) -> str:
    """``port 80/tcp answers at http://10.0.0.2:8080 and on every node's address (…)``:
    the routing mesh publishes it on each node; ``first`` (the node that runs the task)
    is named first."""
    addresses = _addresses(nodes)
    if first is not None and first.addr:
        addresses = [first.addr, *(a for a in addresses if a != first.addr)]
    scheme = "udp" if port.protocol == "udp" else "http"
    what = f"port {port.container}/{port.protocol}"
    if not addresses:
        return f"{what} answers at port {port.host} of every node's address (routing mesh)"
    rest = (
        f" and on every other node's address ({', '.join(addresses[1:])})" if addresses[1:] else ""
    )
    return f"{what} answers at {scheme}://{addresses[0]}:{port.host}{rest} (routing mesh)"


def _addresses(nodes: Sequence[Node]) -> list[str]:
    return list(dict.fromkeys(n.addr for n in nodes if n.usable and n.addr))


def _volumes(stage: Stage) -> list[str]:
    return list(dict.fromkeys(m.source for m in stage.mounts if m.type == "volume"))


def warnings(workload: Workload) -> list[str]:
    """What prepare warns of before the run starts (beside the nodes' own problems)."""
    return [OUTPUT_DIR_WARNING] if workload.output_dir else []


def cluster_holds(nodes: list[Node]) -> str:
    """The note on a stage no node can run: what each node holds, in this order."""
    return f"the cluster holds: {'; '.join(_holds(n) for n in nodes) or 'no node'}"


def _holds(n: Node) -> str:
    gpu = f"{n.gpus}× {n.gpu} {n.gpu_memory_gb or 0:g} GB, " if n.gpu and n.gpus else ""
    state = "" if n.usable else f", {n.state}/{n.availability}"
    return f"{n.key} ({gpu}{n.cpus:g} CPUs, {n.memory_gb:g} GB{state})"


def unplaceable(plan: StagePlan, nodes: list[Node], problems: list[str]) -> NotRunnable:
    """The refusal of a stage no node can run: the planner's reason, then every node
    problem (``problems``) and every node that is not ready and active."""
    unusable = [f"node {n.key} is {n.state}/{n.availability}" for n in nodes if not n.usable]
    detail = "".join(f"\n  {line}" for line in problems + unusable)
    return NotRunnable(
        f"no node of the cluster can run stage {plan.name!r}: "
        f"{(plan.explanation or 'no eligible node').replace('configuration', 'node')}" + detail,
        hint="`nodus nodes` shows what each node holds",
    )


def refuse_shared_gpus(workload: Workload) -> None:
    """Refuse a workload with a stage that shares GPUs by memory, which Swarm cannot do."""
    for stage in workload.stages:
        if stage.requirements.share_gpu:
            raise NotRunnable(
                f"stage {stage.name!r} shares GPUs by memory (share_gpu), which Swarm "
                "cannot do: it reserves whole GPUs (generic resources) per task",
                hint="run it with --target local, or remove share_gpu (one GPU per task)",
            )
