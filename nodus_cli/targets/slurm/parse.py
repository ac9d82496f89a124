"""What Slurm's commands print, read into records: nodes, jobs in the queue, jobs ended.

Contract: pure functions of the text that ``scontrol show node --oneliner``,
``scontrol show config``, ``squeue -h -o FORMAT`` and ``sacct -n -P -o FIELDS`` print
(Slurm 22.05 and newer; the tests read text captured from the harness's real cluster).
A GPU model comes from the node's GRES type through the one GPU table
(``targets.cluster.pricing.gpu_model``), never guessed: a type the table does not know is
kept as written, with no model.

Why apart: the text formats are Slurm's and change by version; the target's logic reads
records, and the parsing is tested without a cluster.
"""

from __future__ import annotations

import re

from nodus_cli.structs import struct
from nodus_cli.targets.cluster.pricing import gpu_model

__all__ = [
    "MAX_ARRAY_SIZE",
    "NODE_JOBS_FORMAT",
    "QUEUE_FORMAT",
    "RUNS_FIELDS",
    "SACCT_FIELDS",
    "WAITING_FORMAT",
    "Ended",
    "Gres",
    "NodeJob",
    "NodeRecord",
    "Queued",
    "RequeuedRun",
    "Waiting",
    "ended_jobs",
    "gres_of",
    "max_array_size",
    "node_jobs",
    "nodes_of",
    "queued_jobs",
    "requeued_run",
    "waiting_jobs",
]

#: ``squeue -h -o`` format read by :func:`queued_jobs`: id, state, reason, node(s), name.
QUEUE_FORMAT = "%i|%T|%r|%N|%j"
#: ``squeue -h -t PD -o`` format read by :func:`waiting_jobs`: id, priority, user, name,
#: partition.
WAITING_FORMAT = "%i|%Q|%u|%j|%P"
#: ``sacct -n -P -X -o`` fields read by :func:`ended_jobs`.
SACCT_FIELDS = "JobIDRaw,JobName,State,ExitCode,ElapsedRaw,NodeList"
#: ``sacct -D -n -P -X -o`` fields read by :func:`requeued_run`: each run of a job
#: (``-D``: a requeued job's earlier runs too), its state, end and node.
RUNS_FIELDS = "JobID,State,End,NodeList"
#: ``squeue -h -w NODE -o`` format read by :func:`node_jobs`: id, name, user, start time.
NODE_JOBS_FORMAT = "%i|%j|%u|%S"

#: Slurm's ``MaxArraySize`` when ``slurm.conf`` does not set it: the largest array
#: index is one less.
MAX_ARRAY_SIZE = 1001

_KEY = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9_]*)=")


@struct(frozen=True)
class Gres:
    """A node's GPUs as its GRES says (``gpu:h100:2``): the type as written, the model
    it names (None: no type, or a type no known GPU has) and the count."""

    type: str | None
    model: str | None
    memory_gb: float | None
    count: int


@struct(frozen=True)
class NodeRecord:
    """One node as ``scontrol show node`` describes it."""

    name: str
    state: str
    reason: str | None
    partitions: tuple[str, ...]
    cpus: int
    cpus_used: int
    memory_mb: int
    memory_used_mb: int
    gres: Gres | None
    gpus_used: int
    arch: str

    @property
    def usable(self) -> bool:
        """Not drained, down, failing or unknown: Slurm may place jobs on it."""
        flags = set(self.state.replace("*", "").split("+"))
        return not flags & {
            "DRAIN",
            "DRAINED",
            "DRAINING",
            "DOWN",
            "FAIL",
            "FAILING",
            "UNKNOWN",
            "NOT_RESPONDING",
            "POWERED_DOWN",
            "INVAL",
            "FUTURE",
        }

    @property
    def words(self) -> str:
        """Its state in lower case, with Slurm's reason when it gives one."""
        state = self.state.lower()
        return f"{state} ({self.reason})" if self.reason else state


def _fields(line: str) -> dict[str, str]:
    """``Key=value Key=value ...``; a value may hold spaces (``Reason=...``)."""
    marks = list(_KEY.finditer(line))
    found = {}
    for mark, after in zip(marks, [*marks[1:], None], strict=True):
        end = after.start() if after is not None else len(line)
        found[mark.group(1)] = line[mark.end() : end].strip()
    return found


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def gres_of(text: str) -> Gres | None:
    """The GPUs of a GRES string (``gpu:h100:2(S:0-1),shard:4``); None when it has none."""
    for entry in re.split(r",(?![^(]*\))", text):
        parts = re.sub(r"\(.*\)$", "", entry.strip()).split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        kind = parts[1] if len(parts) == 3 else None
        count = _int(parts[-1])
        model = gpu_model(kind)
        return Gres(kind, model.name, model.memory_gb, count)
    return None


def _gpus_used(tres: str) -> int:
    match = re.search(r"gres/gpu=(\d+)", tres)
    return int(match.group(1)) if match else 0


def nodes_of(text: str) -> list[NodeRecord]:
    """Every node of ``scontrol show node --oneliner`` (one node a line)."""
    found = []
    for line in text.splitlines():
        f = _fields(line)
        if "NodeName" not in f:
            continue
        reason = f.get("Reason") or None
        found.append(
            NodeRecord(
                name=f["NodeName"],
                state=f.get("State", "UNKNOWN"),
                reason=reason if reason and reason != "(null)" else None,
                partitions=tuple(p for p in f.get("Partitions", "").split(",") if p),
                cpus=_int(f.get("CPUTot")),
                cpus_used=_int(f.get("CPUAlloc")),
                memory_mb=_int(f.get("RealMemory")),
                memory_used_mb=_int(f.get("AllocMem")),
                gres=gres_of(f.get("Gres", "")),
                gpus_used=_gpus_used(f.get("AllocTRES", "")),
                arch=f.get("Arch", "x86_64"),
            )
        )
    return found


def max_array_size(text: str) -> int:
    """``MaxArraySize`` of ``scontrol show config`` (``MaxArraySize = 1001``): how many
    tasks one job array may have, its indices ``0`` to one less (0: no job arrays);
    :data:`MAX_ARRAY_SIZE` when the text does not say."""
    match = re.search(r"^MaxArraySize\s*=\s*(\d+)\s*$", text, re.MULTILINE)
    return int(match.group(1)) if match else MAX_ARRAY_SIZE


@struct(frozen=True)
class Queued:
    """A job ``squeue`` still lists: PENDING, RUNNING, COMPLETING ..."""

    job_id: str
    state: str
    reason: str
    nodes: str
    name: str


def queued_jobs(text: str) -> list[Queued]:
    """The jobs of ``squeue -h -o QUEUE_FORMAT``."""
    found = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) == 5:
            found.append(Queued(*(p.strip() for p in parts)))
    return found


@struct(frozen=True)
class Waiting:
    """A pending job of ``squeue -t PD``: its id (``41_[0-9]`` for an array's pending
    tasks), priority, user, name and partition."""

    job_id: str
    priority: int
    user: str
    name: str
    partition: str

    @property
    def number(self) -> int:
        """The job's number (an array's, for its tasks), by which Slurm breaks ties."""
        return _int(self.job_id.split("_")[0])


def waiting_jobs(text: str) -> list[Waiting]:
    """The jobs of ``squeue -h -o WAITING_FORMAT``."""
    found = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 5:
            found.append(Waiting(parts[0], _int(parts[1]), parts[2], parts[3], parts[4]))
    return found


@struct(frozen=True)
class Ended:
    """A job as ``sacct`` records it: its state (``CANCELLED by 0`` reads ``CANCELLED``),
    exit code and the signal that ended it, seconds it ran, its node."""

    job_id: str
    name: str
    state: str
    exit_code: int
    signal: int
    elapsed_seconds: int
    node: str

    @property
    def finished(self) -> bool:
        return self.state not in ("PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED")


def ended_jobs(text: str) -> list[Ended]:
    """The jobs of ``sacct -n -P -X -o SACCT_FIELDS``."""
    found = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 6:
            continue
        job, name, state, code, elapsed, node = (p.strip() for p in parts)
        exit_code, _, signal = code.partition(":")
        found.append(
            Ended(
                job,
                name,
                state.split()[0] if state else "UNKNOWN",
                _int(exit_code),
                _int(signal),
                _int(elapsed),
                node,
            )
        )
    return found


@struct(frozen=True)
class RequeuedRun:
    """The last run of a job that ended by a requeue: whether Slurm preempted it
    (``PREEMPTED``) or something else requeued it (``REQUEUED``: ``scontrol requeue``), when
    it ended (ISO) and on which node."""

    preempted: bool
    end: str
    node: str


def requeued_run(text: str, job_id: str) -> RequeuedRun | None:
    """The last run of job ``job_id`` that Slurm requeued, from ``sacct -D -o RUNS_FIELDS``;
    None: accounting holds no such run (yet: slurmdbd records a run after the controller
    ends it)."""
    found = None
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 4 and parts[0] == job_id:
            state = parts[1].split()[0] if parts[1] else ""
            if state in ("PREEMPTED", "REQUEUED"):
                found = RequeuedRun(state == "PREEMPTED", parts[2], parts[3])
    return found


@struct(frozen=True)
class NodeJob:
    """A job ``squeue -w NODE`` lists: its id, name, user and start time (ISO)."""

    job_id: str
    name: str
    user: str
    start: str


def node_jobs(text: str) -> list[NodeJob]:
    """The jobs of ``squeue -h -o NODE_JOBS_FORMAT``."""
    found = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 4:
            found.append(NodeJob(*parts))
    return found
