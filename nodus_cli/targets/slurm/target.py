"""Slurm as a target: nodus on a login node, each task one batch job on one node.

nodus plans against what ``scontrol show node`` says each node holds (its GPU model from
its GRES type, :mod:`.parse`), then submits each task with ``sbatch``: ``--nodes=1``,
``--gres=gpu:TYPE:N`` with the type the nodes of the chosen model carry, CPUs, memory
when the stage sets it, a time limit from the budget and the price when both are known,
its output in the run's folder under ``[slurm] work_root`` (a folder every node sees).
Inside the job the image runs on the node's Docker engine with the GPUs Slurm allocated
(:mod:`.script`). The job is followed with ``squeue`` (pending: ``queued``, with Slurm's
reason in words) and its output file; how it ended comes from ``sacct``.

The jobs are the cluster's (:attr:`owns_jobs`): each task's job id is recorded, a nodus
process that dies leaves them running, and the next nodus command asks ``sacct`` how
they ended (:meth:`SlurmTarget.settle`). Only ``nodus stop`` (or Ctrl-C on the
supervising process) cancels them (``scancel``).

Not built yet (docs/targets.md says so): job arrays for fan-out stages (each item is a
job of its own), Python functions, preemption and requeue handling, container runtimes
other than Docker.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from nodus_cli import config
from nodus_cli.catalog import Offer
from nodus_cli.errors import NotRunnable
from nodus_cli.planning.capabilities import Capabilities
from nodus_cli.planning.ranking import Candidate, RuntimeLookup
from nodus_cli.records import RunStatus, StageRecord, StageStatus
from nodus_cli.targets.base import (
    Cleanup,
    NodeInfo,
    Pending,
    PendingKind,
    Preparation,
    Settled,
    Started,
    Target,
    TargetFailure,
    Task,
    TaskContext,
    TaskEnd,
    TaskState,
)
from nodus_cli.targets.cluster.resources import price_share
from nodus_cli.targets.slurm import parse
from nodus_cli.targets.slurm.commands import SlurmDown, SlurmRefused, down_error, environ, slurm
from nodus_cli.targets.slurm.script import batch_script

if TYPE_CHECKING:
    from nodus_cli.planning.plan import Plan
    from nodus_cli.records import RunRecord, RunStore
    from nodus_cli.workload import Stage, Workload

__all__ = ["END_STATES", "SlurmTarget", "pending_kind", "pending_words", "task_end"]

#: How often a job is looked at while it waits or runs.
POLL_SECONDS = 0.5
#: How long ``sacct`` may lag behind a job that left the queue.
ACCOUNTING_SECONDS = 30.0

#: sacct's end states in words, and what kind of end each is for the driver.
END_STATES: dict[str, tuple[TaskState, str]] = {
    "COMPLETED": (TaskState.EXITED, "completed"),
    "FAILED": (TaskState.EXITED, "failed"),
    "TIMEOUT": (TaskState.KILLED, "Slurm ended it at its time limit (TIMEOUT)"),
    "OUT_OF_MEMORY": (TaskState.OUT_OF_MEMORY, "it ran out of memory (OUT_OF_MEMORY)"),
    "CANCELLED": (TaskState.KILLED, "cancelled outside nodus (scancel) (CANCELLED)"),
    "NODE_FAIL": (TaskState.INFRASTRUCTURE, "its node failed (NODE_FAIL)"),
    "PREEMPTED": (TaskState.INFRASTRUCTURE, "Slurm preempted it for another job (PREEMPTED)"),
    "BOOT_FAIL": (TaskState.INFRASTRUCTURE, "its node failed to boot (BOOT_FAIL)"),
    "DEADLINE": (TaskState.KILLED, "Slurm ended it at its deadline (DEADLINE)"),
}

_REASONS = {
    "Resources": "waiting for GPUs: the nodes that have them are busy with other jobs",
    "Priority": "waiting behind jobs of higher priority in Slurm's queue",
    "ReqNodeNotAvail": "waiting: the nodes it can run on are unavailable (drained or down)",
    "Dependency": "waiting for the job it depends on",
    "JobHeldUser": "held by its user (scontrol release JOBID lets it go)",
    "JobHeldAdmin": "held by an administrator",
    "BeginTime": "waiting for its begin time",
    "None": "submitted; Slurm has not scheduled it yet",
}


#: Slurm's pending reasons by the kind of wait they are (the rest: by prefix, else other).
_KINDS = {
    "Resources": PendingKind.RESOURCES,
    "Priority": PendingKind.PRIORITY,
    "ReqNodeNotAvail": PendingKind.NODE_UNAVAILABLE,
    "JobHeldUser": PendingKind.HELD,
    "JobHeldAdmin": PendingKind.HELD,
    "None": PendingKind.SCHEDULING,
}


def pending_kind(reason: str) -> PendingKind:
    """The kind of wait Slurm's pending ``reason`` is (``QOS*``, ``AssocGrp*``: a limit)."""
    if reason.startswith(("QOSMax", "QOSGrp", "AssocGrp", "AssocMax")):
        return PendingKind.LIMIT
    return _KINDS.get(reason, PendingKind.OTHER)


def pending_words(reason: str, holders: str = "") -> str:
    """Slurm's pending reason in words (``holders``: who holds what it waits for)."""
    if reason.startswith(("QOSMax", "QOSGrp")):
        said = f"waiting: a limit of its QOS is reached ({reason})"
    elif reason.startswith("AssocGrp") or reason.startswith("AssocMax"):
        said = f"waiting: a limit of its account is reached ({reason})"
    else:
        said = _REASONS.get(reason, f"pending ({reason})")
        if reason != "None" and reason in _REASONS:
            said += f" ({reason})"
    return f"{said}; {holders}" if holders else said


class _Job:
    """One submitted task: its job id, and whether nodus is stopping it."""

    def __init__(self) -> None:
        self.job_id: str | None = None
        self.stopping = False


class SlurmTarget(Target):
    name: ClassVar[str] = "slurm"
    description: ClassVar[str] = "the Slurm cluster"
    #: Every node sees work_root: stages on different nodes share NODUS_WORK_DIR.
    capabilities: ClassVar[Capabilities] = Capabilities(shared_work_dir=True)
    owns_jobs: ClassVar[bool] = True
    price_hint: ClassVar[str] = "set [slurm] price_per_hour or [slurm] prices in config.toml"

    def __init__(self, store: RunStore, catalog: str | None = None) -> None:
        super().__init__(store, catalog)
        self.settings = config.slurm()
        self._nodes: list[parse.NodeRecord] | None = None
        self._plan: Plan | None = None
        self._budget: float | None = None
        #: False: ``--no-wait``, a job Slurm cannot start at once is cancelled, not queued.
        self._queue = True
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()

    # -- the cluster -------------------------------------------------------------------

    def work_root(self) -> Path:
        return self.settings.work_root or (self.store.root / "slurm")

    def _all_nodes(self) -> list[parse.NodeRecord]:
        if self._nodes is None:
            try:
                text = slurm("scontrol", "show", "node", "--oneliner")
            except SlurmDown as exc:
                raise down_error(exc) from None
            except SlurmRefused as exc:
                raise NotRunnable(f"Slurm does not list its nodes: {exc}") from None
            nodes = parse.nodes_of(text)
            partition = self.settings.partition
            if partition is not None:
                nodes = [n for n in nodes if partition in n.partitions]
            self._nodes = nodes
        return self._nodes

    def _price(self, node: parse.NodeRecord) -> float:
        return self.settings.price_of(node.name, node.partitions[0] if node.partitions else None)

    def _offer(self, node: parse.NodeRecord) -> Offer:
        gres = node.gres
        has = gres is not None and gres.model is not None and gres.count > 0
        return Offer(
            supplier="slurm",
            machine_id=node.name,
            region=node.partitions[0] if node.partitions else "slurm",
            gpu=gres.model if has and gres else None,
            gpu_count=gres.count if has and gres else 0,
            gpu_memory_gb=(gres.memory_gb or 0.0) if has and gres else 0.0,
            vcpus=float(node.cpus),
            memory_gb=node.memory_mb / 1024,
            disk_gb=None,
            arch=node.arch,
            price_per_hour=self._price(node),
        )

    def offers(self, workload: Workload) -> tuple[Offer, ...]:
        return tuple(self._offer(n) for n in self._all_nodes() if n.usable)

    def _exclusions(self) -> list[str]:
        said = []
        for n in self._all_nodes():
            if not n.usable:
                said.append(f"node {n.name} is {n.words}: Slurm places no job there now")
            if n.gres is not None and n.gres.model is None:
                kind = n.gres.type or "(no type)"
                said.append(
                    f"node {n.name}: GRES gpu:{kind} names no GPU model nodus knows, so it "
                    "matches no `gpu`; name the type after the model in gres.conf (gpu:h100:8)"
                )
        return said

    def plan(self, workload: Workload, history: RuntimeLookup) -> Plan:
        plan = super().plan(workload, history)
        nodes = self._all_nodes()
        for sp in plan.stages:
            if not sp.feasible and not sp.nearest:
                held = sorted(nodes, key=lambda n: (-(n.gres.count if n.gres else 0), n.name))
                sp.nearest = [Candidate(self._offer(n)) for n in held[:3]]
        plan.notes.extend(self._exclusions())
        return plan

    def prepare(self, workload: Workload, plan: Plan) -> Preparation:
        self._plan = plan
        self._budget = workload.budget
        self._queue = workload.queue
        for sp in plan.stages:
            if not sp.feasible:
                lines = self._exclusions()
                if sp.nearest:
                    near = sp.nearest[0].offer
                    gpus = f"{near.gpu_count}× {near.gpu}" if near.gpu else "no GPU"
                    lines.insert(
                        0,
                        f"nearest fit: node {near.machine_id} ({gpus}, {near.vcpus:g} CPUs, "
                        f"{near.memory_gb:.3g} GB)",
                    )
                detail = "".join(f"\n  {line}" for line in lines)
                raise NotRunnable(
                    f"no node of the Slurm cluster can run stage {sp.name!r}: "
                    f"{(sp.explanation or 'no eligible node').replace('configuration', 'node')}"
                    + detail,
                    hint="`nodus nodes --target slurm` shows what each node holds",
                )
        for stage in workload.stages:
            if stage.function is not None:
                raise NotRunnable(
                    f"stage {stage.name!r} calls a Python function: the Slurm target does "
                    "not run functions yet",
                    hint="run it with --target local, or as a command",
                )
        self._check_work_root()
        first = plan.stages[0].selected
        return Preparation(price_per_hour=first.offer.price_per_hour if first else 0.0)

    def _check_work_root(self) -> None:
        root = self.work_root()
        probe = root / f".nodus-write-test-{os.getpid()}"
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise NotRunnable(
                f"the Slurm work_root {root} is not writable: {exc.strerror or exc}",
                hint="set [slurm] work_root in config.toml to a folder you can write that "
                "every node sees at the same path",
            ) from None

    # -- running -----------------------------------------------------------------------

    def _gres(self, stage: Stage) -> str | None:
        """``gpu:TYPE:N`` for the stage's model, with the type its nodes carry."""
        req = stage.requirements
        if not req.wants_gpu:
            return None
        model = None
        if self._plan is not None:
            for sp in self._plan.stages:
                if sp.name == stage.name and sp.selected is not None:
                    model = sp.selected.offer.gpu
        for n in self._all_nodes():
            if n.gres is not None and n.gres.model is not None and n.gres.model == model:
                return f"gpu:{n.gres.type}:{req.gpu_count}"
        raise NotRunnable(
            f"stage {stage.name!r}: no node has GRES of the model {model or req.gpu}",
            hint="`nodus nodes --target slurm` shows each node's GPU model",
        )

    def _time_limit(self, price: float) -> int | None:
        """Minutes the budget buys at ``price`` (None: no budget or no price)."""
        if self._budget is None or price <= 0:
            return None
        return max(1, math.ceil(self._budget / price * 60))

    def _sbatch(self, task: Task, run_dir: Path, work_dir: Path) -> str:
        stage = task.stage
        key = task.key.replace("[", "-").replace("]", "")
        script = run_dir / f"{key}.{task.attempt}.sh"
        devices = run_dir / f"{key}.{task.attempt}.devices"
        script.write_text(batch_script(task, str(work_dir), str(devices)))
        args = [
            "sbatch",
            "--parsable",
            f"--job-name=nodus-{task.run_id}-{key}",
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={max(1, math.ceil(stage.requirements.cpu))}",
            f"--output={run_dir / f'{key}.{task.attempt}.out'}",
            f"--chdir={run_dir}",
            "--export=ALL",
        ]
        gres = self._gres(stage)
        if gres is not None:
            args.append(f"--gres={gres}")
        if stage.requirements.memory_gb is not None:
            args.append(f"--mem={math.ceil(stage.requirements.memory_gb * 1024)}M")
        price = 0.0
        if self._plan is not None:
            for sp in self._plan.stages:
                if sp.name == stage.name and sp.selected is not None:
                    price = sp.selected.offer.price_per_hour
        minutes = self._time_limit(price)
        if minutes is not None:
            args.append(f"--time={minutes}")
        for option, value in (
            ("partition", self.settings.partition),
            ("account", self.settings.account),
            ("qos", self.settings.qos),
        ):
            if value is not None:
                args.append(f"--{option}={value}")
        args.append(str(script))
        out = slurm(*args, env=environ(task.environment(str(work_dir))))
        return out.strip().split(";")[0]

    def run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        job = _Job()
        with self._lock:
            self._jobs[task.key] = job
        try:
            return self._run(task, ctx, job)
        except SlurmDown as exc:
            return TaskEnd(TaskState.INFRASTRUCTURE, 1, f"the Slurm controller: {exc}")
        except SlurmRefused as exc:
            return TaskEnd(TaskState.CANNOT_START, 1, f"Slurm refused the job: {exc}")
        finally:
            with self._lock:
                self._jobs.pop(task.key, None)

    def _run(self, task: Task, ctx: TaskContext, job: _Job) -> TaskEnd:
        run_dir = self.work_root() / task.run_id
        work_dir = run_dir / "work"
        work_dir.mkdir(parents=True, exist_ok=True)
        job.job_id = self._sbatch(task, run_dir, work_dir)
        if job.stopping:
            self._cancel(job.job_id)
        key = task.key.replace("[", "-").replace("]", "")
        out = run_dir / f"{key}.{task.attempt}.out"
        devices = run_dir / f"{key}.{task.attempt}.devices"
        ctx.submitted(f"submitted as Slurm job {job.job_id}", job_id=job.job_id)
        said = ""
        running = False
        offset = 0
        while True:
            state = self._queued(job.job_id)
            if state is None or state.state not in ("PENDING", "CONFIGURING", "REQUEUED"):
                if not running and state is not None and state.state == "RUNNING":
                    running = True
                    ctx.started(self._started(task, state.nodes, devices))
                offset = _follow(out, offset, ctx)
                if state is None or state.state not in ("RUNNING", "COMPLETING"):
                    break
            else:
                holders = self._holders(task.stage) if state.reason == "Resources" else ""
                words = pending_words(state.reason, holders)
                if not self._queue and state.reason != "None":  # "None": not yet looked at
                    self._cancel(job.job_id)
                    return TaskEnd(
                        TaskState.KILLED,
                        3,
                        f"--no-wait: Slurm could not start job {job.job_id} at once: {words}; "
                        "cancelled it",
                    )
                if words != said:
                    said = words
                    ctx.waiting(
                        Pending(pending_kind(state.reason), f"Slurm job {job.job_id}: {words}")
                    )
            time.sleep(POLL_SECONDS)
        ended = self._ended(job.job_id)
        if not running and ended is not None and ended.node not in ("", "None assigned"):
            # It ran between two looks at the queue: it started all the same.
            ctx.started(self._started(task, ended.node, devices))
        _follow(out, offset, ctx, final=True)
        if job.stopping:
            return TaskEnd(TaskState.STOPPED, 143, "stopped by nodus (scancel)")
        if ended is None:
            return TaskEnd(
                TaskState.INFRASTRUCTURE, 1, f"Slurm job {job.job_id} left no accounting record"
            )
        return task_end(ended)

    def _started(self, task: Task, where: str, devices: Path) -> Started:
        node = next((n for n in self._all_nodes() if n.name == where), None)
        price = self._price(node) if node is not None else 0.0
        if node is not None:  # Slurm shares a node: the job pays its part of the price
            gpus = node.gres.count if node.gres is not None else 0
            price = price_share(price, task.stage.requirements, gpus=gpus, cpus=float(node.cpus))
        held: tuple[str, ...] = ()
        for _ in range(20):  # the script writes it as its first step
            with contextlib.suppress(OSError):
                text = devices.read_text().strip()
                held = tuple(f"gpu:{i}" for i in text.split(",") if i)
                break
            time.sleep(0.1)
        config_doc = self._offer(node)._asdict() if node is not None else None
        return Started(devices=held, node=where, price_per_hour=price, config=config_doc)

    def _holders(self, stage: Stage) -> str:
        """Who holds the nodes of the stage's model now: ``held by job 12 (train) on
        gpu-a, ...`` (empty when Slurm cannot say)."""
        gres = self._gres(stage)
        kind = gres.split(":")[1] if gres else None
        nodes = {
            n.name for n in self._all_nodes() if kind is None or (n.gres and n.gres.type == kind)
        }
        try:
            text = slurm("squeue", "-h", "-t", "RUNNING", "-o", parse.QUEUE_FORMAT)
        except (SlurmDown, SlurmRefused):
            return ""
        held = [
            f"job {j.job_id} ({j.name}) on {j.nodes}"
            for j in parse.queued_jobs(text)
            if j.nodes in nodes
        ]
        return (
            f"held by {', '.join(held[:5])}"
            + (f" and {len(held) - 5} more" if len(held) > 5 else "")
            if held
            else ""
        )

    def _queued(self, job_id: str) -> parse.Queued | None:
        try:
            text = slurm("squeue", "-h", "-j", job_id, "-o", parse.QUEUE_FORMAT)
        except SlurmRefused:
            return None  # "Invalid job id": it left the queue
        found = parse.queued_jobs(text)
        return found[0] if found else None

    def _ended(self, job_id: str) -> parse.Ended | None:
        deadline = time.monotonic() + ACCOUNTING_SECONDS
        while True:
            found = _accounted(job_id)
            if found is not None and found.finished:
                return found
            if time.monotonic() > deadline:
                return found
            time.sleep(POLL_SECONDS)

    def _cancel(self, job_id: str) -> None:
        with contextlib.suppress(SlurmRefused):
            slurm("scancel", job_id)

    def stop_task(self, task: Task) -> None:
        with self._lock:
            job = self._jobs.get(task.key)
        if job is None:
            return
        job.stopping = True
        if job.job_id is not None:
            with contextlib.suppress(SlurmDown):
                self._cancel(job.job_id)

    def cleanup(self, run_id: str) -> Cleanup:
        """Cancel every job of the run still queued or running (``nodus stop``)."""
        try:
            text = slurm("squeue", "-h", "-o", parse.QUEUE_FORMAT)
        except (SlurmDown, SlurmRefused) as exc:
            raise TargetFailure(f"the Slurm controller: {exc}") from None
        removed = []
        for job in parse.queued_jobs(text):
            if job.name.startswith(f"nodus-{run_id}-"):
                self._cancel(job.job_id)
                removed.append(f"Slurm job {job.job_id}")
        return Cleanup(removed)

    # -- a run whose supervisor died ------------------------------------------------------

    def settle(self, record: RunRecord) -> Settled | None:
        stages: dict[int, StageRecord] = {}
        ended_all = True
        last: parse.Ended | None = None
        for index, stage in enumerate(record.stages):
            if stage.job_id is None or not stage.status.active:
                continue
            if self._queued(stage.job_id) is not None:
                ended_all = False
                continue
            found = _accounted(stage.job_id)
            if found is None or not found.finished:
                ended_all = False
                continue
            last = found
            end = task_end(found)
            ok = end.state == TaskState.EXITED and end.exit_code == 0
            stage.status = StageStatus.SUCCEEDED if ok else StageStatus.FAILED
            stage.exit_code = end.exit_code
            stage.runtime_seconds = float(found.elapsed_seconds)
            stage.cost = found.elapsed_seconds / 3600 * record.price_per_hour
            stage.message = None if ok else end.message
            stages[index] = stage
        if not ended_all:
            return None
        later = [s.name for s in record.stages if s.status.active and s.job_id is None]
        who = f"its nodus process ({record.pid})" if record.pid else "its nodus process"
        if last is None:
            return Settled(
                RunStatus.FAILED, None, f"{who} ended before it submitted a Slurm job", stages
            )
        end = task_end(last)
        ok = end.state == TaskState.EXITED and end.exit_code == 0
        how = end.message or (f"exited with {end.exit_code}" if end.exit_code else "completed")
        said = f"{who} ended; Slurm job {last.job_id} went on: {how}"
        if ok and not later:
            return Settled(RunStatus.SUCCEEDED, 0, said, stages)
        if later:
            said += f"; not run: {', '.join(later)} (nodus was not there to submit them)"
        return Settled(RunStatus.FAILED, end.exit_code or 1, said, stages)

    # -- looking -----------------------------------------------------------------------

    def describe(self, record: RunRecord) -> str | None:
        parts = []
        for stage in record.stages:
            if stage.job_id is None or not stage.status.active:
                continue
            try:
                state = self._queued(stage.job_id)
            except SlurmDown as exc:
                return f"Slurm controller not reachable: {exc}"
            if state is None:
                parts.append(f"{stage.name}: Slurm job {stage.job_id} has ended")
            elif state.state == "PENDING":
                parts.append(f"{stage.name}: job {stage.job_id} {pending_words(state.reason)}")
            else:
                parts.append(
                    f"{stage.name}: job {stage.job_id} {state.state.lower()} on {state.nodes}"
                )
        return "; ".join(parts) or None

    def nodes(self) -> list[NodeInfo]:
        found = []
        for n in self._all_nodes():
            gres = n.gres
            total = gres.count if gres else 0
            found.append(
                NodeInfo(
                    id=n.name,
                    hostname=n.name,
                    state=n.words,
                    cpus=float(n.cpus),
                    memory_gb=round(n.memory_mb / 1024, 3),
                    gpu=gres.model if gres else None,
                    gpu_memory_gb=gres.memory_gb if gres else None,
                    gpus=total,
                    free_gpus=max(0, total - n.gpus_used) if n.usable else 0,
                    price_per_hour=self._price(n),
                    details={
                        "partitions": list(n.partitions),
                        "gres_type": gres.type if gres else None,
                        "gpus_used": n.gpus_used,
                        "cpus_used": n.cpus_used,
                        "reason": n.reason,
                    },
                )
            )
        return found


def _accounted(job_id: str) -> parse.Ended | None:
    try:
        text = slurm("sacct", "-n", "-P", "-X", "-j", job_id, "-o", parse.SACCT_FIELDS)
    except SlurmRefused:
        return None
    found = [j for j in parse.ended_jobs(text) if j.job_id == job_id]
    return found[-1] if found else None


def task_end(ended: parse.Ended) -> TaskEnd:
    """How a job's accounting record reads for the driver."""
    kind, words = END_STATES.get(ended.state, (TaskState.INFRASTRUCTURE, ended.state))
    if ended.state in ("COMPLETED", "FAILED"):
        code = ended.exit_code
        if code in (126, 127):
            return TaskEnd(TaskState.CANNOT_START, code, f"the command could not start ({code})")
        if code == 125:
            return TaskEnd(TaskState.INFRASTRUCTURE, code, "docker could not run the image (125)")
        if code == 137 and ended.state == "FAILED":
            return TaskEnd(TaskState.EXITED, code, "killed (exit 137)")
        return TaskEnd(TaskState.EXITED, code)
    code = ended.exit_code or (128 + ended.signal if ended.signal else 1)
    return TaskEnd(kind, code, f"Slurm job {ended.job_id}: {words}")


def _follow(out: Path, offset: int, ctx: TaskContext, final: bool = False) -> int:
    """Emit the whole lines written to ``out`` since ``offset`` (all of it when
    ``final``); the new offset."""
    try:
        with out.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    lines = data.split(b"\n")
    rest = lines.pop()
    for line in lines:
        ctx.emit("stdout", line.decode("utf-8", "replace"))
    if final and rest:
        ctx.emit("stdout", rest.decode("utf-8", "replace"))
        return offset + len(data)
    return offset + len(data) - len(rest)
