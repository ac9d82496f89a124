"""What a target is: the mechanism that runs one task somewhere, behind a small interface.

The run policy (stage order, fan-out, budget on one clock, retries, signals, records,
status lines, the log) lives in one driver, :class:`nodus_cli.run.driver.Runner`, for every
target. A target only knows how to run *one task* — a stage's command, or one item of a
fan-out stage — and how to stop it. It never imports the driver: it reports through the
:class:`TaskContext` it is handed (``say``, ``emit``, ``submitted``, ``started``). A stage
may call a Python function instead of a command (``stage.function``):
:mod:`nodus_cli.targets.calls` says what such a task's end means.

A target, in the order the driver uses it:

1. :meth:`Target.offers` — the configurations it can run a stage on now; :meth:`Target.plan`
   plans every stage against them (with the notes its :attr:`Target.capabilities` call for).
2. :meth:`Target.prepare` — refuse before anything starts (GPUs missing, the engine down,
   an image that cannot be had, a host path that does not exist), and say what a run costs
   per hour there.
3. :meth:`Target.capacity` — how many tasks of a fan-out stage may run at once.
4. :meth:`Target.begin` — before the first task (a shared work folder, say).
5. :meth:`Target.run_task` — run one task to its end (blocking; called from a worker
   thread, several at once for a fan-out stage) and say how it ended. A target that
   submits a fan-out stage's items together (a Slurm job array) says so in
   :meth:`Target.runs_items`; the driver then hands them all to one
   :meth:`Target.run_items`, and each item's end comes back through its own
   :class:`ItemContext` (retries of an item are ``run_task`` calls again).
6. :meth:`Target.stop_task` — from another thread: stop a task now (budget, Ctrl-C,
   ``nodus stop``); its ``run_task`` then returns with :attr:`TaskState.STOPPED`.
7. :meth:`Target.release` — after the last task: the shared work folder is copied out,
   kept or removed.
8. :meth:`Target.cleanup` — remove everything the run left (containers, services,
   volumes), for a run whose supervisor died or that ``nodus stop`` ends.

A target whose jobs belong to a scheduler (:attr:`Target.owns_jobs`: Slurm) records each
task's job id (``ctx.submitted(job_id=...)``); when the supervisor dies its jobs go on,
and reconcile asks :meth:`Target.settle` how they ended instead of calling ``cleanup``.

And to look: :meth:`Target.describe` (a running run now) and :meth:`Target.nodes` (the
machines and what they hold). What shows on a terminal never comes from here: a target
that pulls images reports through the :class:`PullProgress` it was given.

Adding a target is one module implementing this class plus one line in
:data:`nodus_cli.targets.REGISTRY` (docs/targets.md walks through it).
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from nodus_cli.planning.capabilities import ONE_MACHINE, Capabilities
from nodus_cli.structs import field, struct
from nodus_cli.targets.usage import UsageReport

if TYPE_CHECKING:
    from nodus_cli.catalog import Offer
    from nodus_cli.planning.plan import Plan, StagePlan
    from nodus_cli.planning.ranking import RuntimeLookup
    from nodus_cli.records import RunRecord, RunStatus, RunStore, StageRecord, TaskRecord
    from nodus_cli.workload import Stage, Workload


class TargetFailure(Exception):
    """The root of a target's own failures that the driver handles (never shown raw)."""


@struct(frozen=True)
class Item:
    """One input of a fan-out stage."""

    index: int
    value: str
    count: int


@struct(frozen=True)
class Task:
    """One container to run: a stage's command, or one item of a fan-out stage."""

    run_id: str
    workload: str
    stage: Stage
    stage_index: int
    #: The stage's environment with ``${NAME}`` resolved from the host (never recorded).
    env: Mapping[str, str]
    item: Item | None = None
    attempt: int = 1
    #: Devices an earlier attempt held: a retry keeps them when they are still free.
    previous_devices: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Unique within the run: ``train``, or ``shard[3]`` for item 3."""
        return self.stage.name if self.item is None else f"{self.stage.name}[{self.item.index}]"

    def environment(self, work_dir: str | None) -> dict[str, str]:
        """What the container's environment holds: the stage's, then nodus's own."""
        env = dict(self.env)
        env["NODUS_RUN_ID"] = self.run_id
        env["NODUS_STAGE"] = self.stage.name
        if work_dir is not None:
            env["NODUS_WORK_DIR"] = work_dir
        if self.item is not None:
            env["NODUS_ITEM"] = self.item.value
            env["NODUS_ITEM_INDEX"] = str(self.item.index)
            env["NODUS_ITEM_COUNT"] = str(self.item.count)
        return env


@struct(frozen=True)
class Started:
    """A task runs now: where, on which devices, and what it costs per hour."""

    devices: tuple[str, ...] = ()
    node: str | None = None
    #: USD per hour while it runs: the machine's price divided among the tasks it hosts.
    price_per_hour: float = 0.0
    #: The configuration it runs on (``Offer.as_json``), for records and runtime history.
    config: dict[str, Any] | None = None


class TaskState(StrEnum):
    #: The command ended by itself; ``exit_code`` is its own.
    EXITED = "exited"
    #: The command could not be started (not found: 127, not executable: 126).
    CANNOT_START = "cannot_start"
    #: Killed by the kernel at its memory limit.
    OUT_OF_MEMORY = "out_of_memory"
    #: Killed or removed by someone outside nodus: a decision, never retried.
    KILLED = "killed"
    #: The target failed it (engine lost, node gone): worth a retry.
    INFRASTRUCTURE = "infrastructure"
    #: nodus stopped it (:meth:`Target.stop_task`); the driver knows why.
    STOPPED = "stopped"


@struct(frozen=True)
class TaskEnd:
    """How a task ended: its state, exit code and the words that say why."""

    state: TaskState
    exit_code: int
    message: str | None = None
    #: GPU use sampled while it ran, when the target samples.
    gpu_use: UsageReport | None = None


class PendingKind(StrEnum):
    """What a task that is not running yet waits for (:class:`Pending`)."""

    #: What it needs (GPUs, CPUs, memory) is held by other tasks or jobs now.
    RESOURCES = "resources"
    #: Others are ahead of it in line (a queue's order, a scheduler's priority).
    PRIORITY = "priority"
    #: A limit of its account, quota or QOS is reached.
    LIMIT = "limit"
    #: The node(s) it may run on are down, drained or gone.
    NODE_UNAVAILABLE = "node_unavailable"
    #: Held by someone (its user, an administrator) until released.
    HELD = "held"
    #: Submitted: the scheduler has not placed it yet, and gives no reason.
    SCHEDULING = "scheduling"
    #: Another reason, in its words.
    OTHER = "other"


@struct(frozen=True)
class Pending:
    """Why a task is not running yet: the kind of wait, the words the user reads (the
    status line, ``nodus runs``), and, when the target knows them, who holds what it
    waits for and its place in line (1: next)."""

    kind: PendingKind
    words: str
    holders: tuple[str, ...] = ()
    position: int | None = None


#: A task's output stream, as the run's log names it.
OutputStream = Literal["stdout", "stderr"]


class OutputLines:
    """A task's output bytes, cut into lines for :meth:`TaskContext.emit`.

    An engine multiplexes the two streams in frames (stream 1 stdout, 2 stderr) that
    need not end on a line: an unterminated line waits per stream, so a stdout line
    still open when stderr frames arrive is not glued to them. :meth:`flush` shows
    what is left once the output has ended.
    """

    def __init__(self, emit: Callable[[OutputStream, str], None]) -> None:
        self.emit = emit
        self.pending: dict[int, bytes] = {}

    def feed(self, kind: int, data: bytes) -> None:
        """Frame bytes of stream ``kind`` (1 stdout, 2 stderr)."""
        *lines, self.pending[kind] = (self.pending.get(kind, b"") + data).split(b"\n")
        stream: OutputStream = "stderr" if kind == 2 else "stdout"
        for line in lines:
            self.emit(stream, line.decode("utf-8", "replace"))

    def flush(self) -> None:
        """Show each stream's unterminated last line."""
        pending, self.pending = self.pending, {}
        for kind, rest in sorted(pending.items()):
            if rest:
                self.emit("stderr" if kind == 2 else "stdout", rest.decode("utf-8", "replace"))


class TaskContext(Protocol):
    """What the driver hands a running task; every method is thread-safe."""

    def say(self, message: str) -> None:
        """A status line (shown, and kept in the log as stream ``nodus``)."""

    def emit(self, stream: OutputStream, text: str) -> None:
        """One line of the task's output (without its newline)."""

    def submitted(self, note: str | None = None, job_id: str | None = None) -> None:
        """The task holds its place (a container created, a service submitted);
        ``job_id``: the job a scheduler that owns its jobs knows it by (recorded)."""

    def waiting(self, pending: Pending) -> None:
        """Not running yet: it waits for capacity (GPUs other runs hold, a Swarm task
        pending), and why (:class:`Pending`). The run shows ``queued`` until the task
        runs; say it again when the words change (its place in line, who holds what)."""

    def started(self, info: Started) -> None:
        """The task runs now: the driver's clock (and the cost) starts here."""


class ItemContext(TaskContext, Protocol):
    """What :meth:`Target.run_items` is handed for each item: a :class:`TaskContext` that
    also takes the item's end."""

    def ended(self, end: TaskEnd) -> None:
        """The item ended, as :meth:`Target.run_task` would have returned it (once)."""


class PullProgress(Protocol):
    """An image pull shown as it happens: ``with pulls(image) as shown: shown.event(e)``.

    The command line hands a target one that draws a bar on a terminal; without one a
    target says "pulling IMAGE …" on stderr (:func:`plain_pulls`).
    """

    def __enter__(self) -> PullProgress: ...

    def __exit__(self, *exc: object) -> None: ...

    def event(self, event: Mapping[str, Any]) -> None:
        """One progress event of the engine's pull stream."""


#: Makes the :class:`PullProgress` of one image's pull.
Pulls = Callable[[str], PullProgress]


class _PlainPull:
    def __init__(self, image: str) -> None:
        self.image = image

    def __enter__(self) -> _PlainPull:
        print(f"pulling {self.image} …", file=sys.stderr, flush=True)
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def event(self, event: Mapping[str, Any]) -> None:
        pass


def plain_pulls(image: str) -> PullProgress:
    """One line on stderr per pull: what a background run or a library call shows."""
    return _PlainPull(image)


@struct(frozen=True)
class Preparation:
    """What :meth:`Target.prepare` found: the price a record carries, and notes to show."""

    price_per_hour: float = 0.0
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@struct(frozen=True)
class WorkDir:
    """What became of a run's shared work folder."""

    kind: Literal["copied", "kept", "removed", "none"]
    path: str | None = None
    note: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "note": self.note}


@struct(frozen=True)
class Cleanup:
    """What :meth:`Target.cleanup` removed, and what it could not (yet)."""

    removed: list[str] = field(default_factory=list)
    remaining: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.remaining


@struct(frozen=True)
class Settled:
    """How a run whose supervisor died ended, as a scheduler that owns its jobs tells it
    (:meth:`Target.settle`): the run's status, exit code and why, and each stage's record
    as it now stands, by the stage's index."""

    status: RunStatus
    exit_code: int | None
    message: str
    stages: dict[int, StageRecord] = field(default_factory=dict)
    #: A fan-out stage's task records as they now stand, by the stage's index.
    tasks: dict[int, list[TaskRecord]] = field(default_factory=dict)


@struct(frozen=True)
class NodeInfo:
    """What one machine of a target holds now (``client.list_nodes()``, ``nodus nodes``)."""

    id: str
    hostname: str
    state: str
    cpus: float
    memory_gb: float
    gpu: str | None
    gpu_memory_gb: float | None
    gpus: int
    free_gpus: int
    price_per_hour: float
    details: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "hostname": self.hostname,
            "state": self.state,
            "cpus": self.cpus,
            "memory_gb": self.memory_gb,
            "gpu": self.gpu,
            "gpu_memory_gb": self.gpu_memory_gb,
            "gpus": self.gpus,
            "free_gpus": self.free_gpus,
            "price_per_hour": self.price_per_hour,
            **self.details,
        }


class Target(ABC):
    """A place to run tasks. Implementations hold their connection and per-run state."""

    #: The name ``--target`` and ``Client(target=...)`` take (its line in the registry).
    name: ClassVar[str]
    #: Shown where nodus says what this target is ("this machine", "the Swarm cluster").
    description: ClassVar[str]
    #: What it can and cannot do, as its plans must say (planning reads it).
    capabilities: ClassVar[Capabilities] = ONE_MACHINE
    #: Its jobs belong to a scheduler (Slurm) and outlive the nodus process that submitted
    #: them: when that process dies, reconcile asks :meth:`settle` how the run ended
    #: instead of removing what it left; only ``nodus stop`` (:meth:`cleanup`) cancels.
    owns_jobs: ClassVar[bool] = False

    def __init__(self, store: RunStore, catalog: str | None = None) -> None:
        self.store = store
        self.catalog = catalog
        #: How an image pull is shown (a bar on a terminal, a line elsewhere); whoever
        #: makes the target may set another (:func:`nodus_cli.targets.get`).
        self.pulls: Pulls = plain_pulls

    # -- planning ----------------------------------------------------------------------

    @abstractmethod
    def offers(self, workload: Workload) -> tuple[Offer, ...]:
        """The configurations this target can run a stage on now."""

    def plan(self, workload: Workload, history: RuntimeLookup) -> Plan:
        """Plan every stage against :meth:`offers` (a target may add its own notes)."""
        # Lazy, for start-up: the planner loads the catalog, which commands that never
        # plan (runs, logs, stop) do not need.
        from nodus_cli.planning.planner import plan_workload

        plan = plan_workload(
            workload,
            self.offers(workload),
            target=self.name,
            history=history,
            capabilities=self.capabilities,
        )
        warning = self.unpriced_budget(workload, plan)
        if warning is not None:  # `nodus run` shows the plan's warnings before it starts
            plan.warnings.append(warning)
        return plan

    #: How to give this target a price, for the warning that a budget cannot bite.
    price_hint: ClassVar[str] = ""

    def unpriced_budget(self, workload: Workload, plan: Plan) -> str | None:
        """A budget on a target without a price is never reached: say so, and how to fix it."""
        if workload.budget is None:
            return None
        if any(sp.selected and sp.selected.offer.price_per_hour > 0 for sp in plan.stages):
            return None
        return (
            f"budget ${workload.budget:,.2f} cannot be enforced on {self.description}: it has "
            f"no price per hour ({self.price_hint})"
        )

    @abstractmethod
    def prepare(self, workload: Workload, plan: Plan) -> Preparation:
        """Refuse (:class:`~nodus_cli.errors.NotRunnable` and kin) before anything starts."""

    def capacity(self, stage: Stage, plan: StagePlan) -> int:
        """How many tasks of this (fan-out) stage may run at once now; at least 1."""
        return 1

    # -- running -----------------------------------------------------------------------

    def begin(self, record: RunRecord, workload: Workload, plan: Plan) -> None:  # noqa: B027
        """Before the first task of a run (the shared work folder, say)."""

    @abstractmethod
    def run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        """Run one task to its end. Blocking; may run in several threads at once."""

    def runs_items(self, stage: Stage) -> bool:
        """Whether this fan-out stage's items go to :meth:`run_items` together (one
        submission, a Slurm job array); False (the default): one :meth:`run_task` each."""
        return False

    def run_items(
        self, tasks: Sequence[Task], contexts: Sequence[ItemContext], parallel: int
    ) -> None:
        """Run every item of a fan-out stage as one submission, at most ``parallel`` at
        once, until each has ended (blocking, in one worker thread). Each item reports
        through ``contexts[i]`` as :meth:`run_task` would, and its end with
        ``contexts[i].ended``; :meth:`stop_task` stops one item. The driver keeps its
        policy per item: budget, retries (a :meth:`run_task` of the item again), records."""
        raise NotImplementedError(f"the {self.name} target runs each item on its own")

    @abstractmethod
    def stop_task(self, task: Task) -> None:
        """Stop a task now, from any thread; its :meth:`run_task` returns STOPPED."""

    def release(self, record: RunRecord, succeeded: bool, copy_to: Path | None) -> WorkDir:
        """After the last task: copy the work folder out, keep it (a failed run) or remove it."""
        return WorkDir("none")

    @abstractmethod
    def cleanup(self, run_id: str) -> Cleanup:
        """Remove everything of the run still on the target (idempotent)."""

    def settle(self, record: RunRecord) -> Settled | None:
        """For a target that :attr:`owns_jobs`: a run whose supervisor died, as the
        scheduler knows it now (each stage's ``job_id``). None while a job of it still
        runs or waits (the record stays as it is; the next command asks again)."""
        raise NotImplementedError(f"the {self.name} target does not own its jobs")

    # -- looking -----------------------------------------------------------------------

    def describe(self, record: RunRecord) -> str | None:
        """What the target says about a running run now (None when it has nothing to add)."""
        return None

    @abstractmethod
    def nodes(self) -> list[NodeInfo]:
        """The machines of this target and what they hold now."""

    def end_warm(self) -> None:  # noqa: B027
        """End the warm workers this process keeps for single function calls recorded in
        this target's records (the ``Client`` closes); a target without any does nothing."""

    def close(self) -> None:  # noqa: B027
        """Release connections."""
