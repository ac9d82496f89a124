"""Slurm as a target: nodus on a login node, each task one batch job on one node.

nodus plans against what ``scontrol show node`` says each node holds (its GPU model from
its GRES type, :mod:`.parse`), then submits each task with ``sbatch``: ``--nodes=1``,
``--gres=gpu:TYPE:N`` with the type the nodes of the chosen model carry, CPUs, memory
when the stage sets it, a time limit from the budget and the price when both are known,
its output in the run's folder under ``[slurm] work_root`` (a folder every node sees).
Inside the job the image runs on the node's Docker engine (or podman: ``[slurm]
container``) with the GPUs Slurm allocated (:mod:`.script`). The job is followed with
``squeue`` (pending: ``queued``, with Slurm's reason in words) and its output file; how
it ended comes from ``sacct``.

The jobs are the cluster's (:attr:`owns_jobs`): each task's job id is recorded, a nodus
process that dies leaves them running, and the next nodus command asks ``sacct`` how
they ended (:meth:`SlurmTarget.settle`). Only ``nodus stop`` (or Ctrl-C on the
supervising process) cancels them (``scancel``).

A fan-out stage is one job array, or several past ``MaxArraySize`` (:mod:`.arrays`);
``priority`` is ``--nice`` (:func:`nice_of`).
A Python function call goes through ``work_root`` too (:mod:`.calls`): its files are
placed there, the job's container runs nodus's runtime on them, the outcome is read back.
Not built yet (docs/targets.md says so): container runtimes other than Docker and Podman.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from nodus_cli import config
from nodus_cli.catalog import Offer
from nodus_cli.errors import NotRunnable
from nodus_cli.planning.capabilities import Capabilities
from nodus_cli.planning.ranking import Candidate, RuntimeLookup
from nodus_cli.records import StageRecord, StageStatus, TaskRecord
from nodus_cli.targets.base import (
    Cleanup,
    ItemContext,
    NodeInfo,
    Pending,
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
from nodus_cli.targets.cluster.pricing import (
    NodePrice,
    node_price,
    price_details,
    price_notes,
    priced_config,
    unpriced_notes,
)
from nodus_cli.targets.cluster.refusal import refuse_unplaceable
from nodus_cli.targets.cluster.resources import price_share
from nodus_cli.targets.cluster.settling import end_words, record_end, settled_run
from nodus_cli.targets.slurm import calls, parse, single, waiting
from nodus_cli.targets.slurm.arrays import ArrayRun, array_words, cluster_array_size, settle_items
from nodus_cli.targets.slurm.commands import SlurmDown, SlurmRefused, down_error, environ, slurm
from nodus_cli.targets.slurm.endings import END_STATES, job_end, task_end
from nodus_cli.targets.slurm.script import batch_script
from nodus_cli.workload.model import DEFAULT_PRIORITY

if TYPE_CHECKING:
    from nodus_cli.planning.plan import Plan
    from nodus_cli.records import RunRecord, RunStore
    from nodus_cli.workload import Stage, Workload

__all__ = ["END_STATES", "SlurmTarget", "nice_of", "task_end"]

#: nodus's ``priority`` (0 to 100) at or above which a job keeps Slurm's own priority
#: (``--nice=0``): an ordinary user may only lower a job's priority, never raise it.
NICE_FROM = 50
#: ``--nice`` per point of ``priority`` below :data:`NICE_FROM`.
NICE_STEP = 100


def nice_of(priority: int) -> int:
    """The ``--nice`` of a job of nodus ``priority``: higher priority, lower nice; 0 (no
    change) from :data:`NICE_FROM` up, as an ordinary user may not set a negative one."""
    return max(0, NICE_FROM - priority) * NICE_STEP


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
        self.queue_jobs = True
        self._priority = DEFAULT_PRIORITY
        self._jobs: dict[str, single.Submission] = {}
        #: The job array of each fan-out stage under way, by the stage's name.
        self._arrays: dict[str, ArrayRun] = {}
        self._array_size: int | None = None  # MaxArraySize, read once (array_size)
        self._lock = threading.Lock()
        self._caller = calls.Caller(store.root)  # Python function calls (.calls)

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
                known = sorted({p for n in nodes for p in n.partitions})
                if partition not in known:
                    raise NotRunnable(
                        f"[slurm] partition = {partition!r}: the Slurm cluster has no partition "
                        f"{partition!r} with nodes (its partitions: {', '.join(known) or 'none'})",
                        hint="set [slurm] partition in config.toml to one of them, or remove "
                        "it for the cluster's default (`sinfo -s` lists them)",
                    )
                nodes = [n for n in nodes if partition in n.partitions]
            self._nodes = nodes
        return self._nodes

    def _node_price(self, node: parse.NodeRecord) -> NodePrice:
        """What the configuration declares (a Slurm node names no machine of the catalog),
        else not set."""
        partition = node.partitions[0] if node.partitions else None
        return node_price(*self.settings.price_of(node.name, partition))

    def _price(self, node: parse.NodeRecord) -> float:
        return self._node_price(node).per_hour

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
        usable = [n for n in nodes if n.usable]
        plan.notes.extend(
            price_notes([(n.name, self._node_price(n)) for n in usable], self.price_hint)
        )
        return plan

    def prepare(self, workload: Workload, plan: Plan) -> Preparation:
        self._plan = plan
        self._budget = workload.budget
        self.queue_jobs = workload.queue
        self._priority = workload.priority
        refuse_unplaceable(plan, "the Slurm cluster", "slurm", self._exclusions)
        self._check_work_root()
        self._check_account()
        first = plan.stages[0].selected
        prices = {n.name: self._node_price(n) for n in self._all_nodes()}
        return Preparation(
            price_per_hour=first.offer.price_per_hour if first else 0.0,
            notes=unpriced_notes(plan, prices, self.price_hint),
        )

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

    def _check_account(self) -> None:
        """An ``[slurm] account`` Slurm's accounting does not know is refused before any
        ``sbatch`` (a cluster that does not enforce accounts would take the job)."""
        account = self.settings.account
        if account is None:
            return
        try:
            text = slurm("sacctmgr", "-n", "-P", "show", "account", account, "format=account")
        except (SlurmDown, SlurmRefused, NotRunnable):
            return  # no accounting to ask (or no sacctmgr here): sbatch says what it takes
        if not text.strip():
            raise NotRunnable(
                f"[slurm] account = {account!r}: the Slurm cluster has no account {account!r}",
                hint="set [slurm] account in config.toml to an account you may charge "
                "(`sacctmgr show assoc user=$USER` lists them), or remove it for your default",
            )

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

    def job_options(self, stage: Stage) -> list[str]:
        """The ``sbatch`` options every job of ``stage`` takes: one node, CPUs, the exact
        GRES, memory, the time limit, where it may run, and its ``--nice``."""
        args = [
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={max(1, math.ceil(stage.requirements.cpu))}",
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
        nice = nice_of(self._priority)
        if nice:
            args.append(f"--nice={nice}")
        return args

    def _sbatch(self, task: Task, run_dir: Path, work_dir: Path) -> str:
        key = task.key.replace("[", "-").replace("]", "")
        script = run_dir / f"{key}.{task.attempt}.sh"
        devices = run_dir / f"{key}.{task.attempt}.devices"
        end = run_dir / f"{key}.{task.attempt}.end"
        text = batch_script(task, str(work_dir), str(devices), str(end), self.settings.container)
        script.write_text(text)
        args = [
            "sbatch",
            "--parsable",
            f"--job-name=nodus-{task.run_id}-{key}",
            f"--output={run_dir / f'{key}.{task.attempt}.out'}",
            f"--chdir={run_dir}",
            *self.job_options(task.stage),
            str(script),
        ]
        out = slurm(*args, env=environ(task.environment(str(work_dir))))
        return out.strip().split(";")[0]

    def run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        job = single.Submission()
        with self._lock:
            self._jobs[task.key] = job
        try:
            if task.stage.function is not None:  # a Python function call (.calls)
                run_dir = self.work_root() / task.run_id
                return self._caller.run(task, ctx, run_dir, lambda t, c: self._run(t, c, job))
            return self._run(task, ctx, job)
        except SlurmDown as exc:
            return TaskEnd(TaskState.INFRASTRUCTURE, 1, f"the Slurm controller: {exc}")
        except SlurmRefused as exc:
            return TaskEnd(TaskState.CANNOT_START, 1, f"Slurm refused the job: {exc}")
        finally:
            with self._lock:
                self._jobs.pop(task.key, None)

    def _run(self, task: Task, ctx: TaskContext, job: single.Submission) -> TaskEnd:
        """Submit the task's job, then follow it to its end (:mod:`.single`)."""
        run_dir = self.work_root() / task.run_id
        work_dir = run_dir / "work"
        work_dir.mkdir(parents=True, exist_ok=True)
        job.job_id = self._sbatch(task, run_dir, work_dir)
        if job.stopping:
            single.cancel(job.job_id)
        ctx.submitted(f"submitted as Slurm job {job.job_id}", job_id=job.job_id)
        return single.follow(self, task, ctx, job, run_dir)

    def started_on(self, task: Task, where: str, devices: Path) -> Started:
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
        config_doc = (
            priced_config(self._offer(node), self._node_price(node)) if node is not None else None
        )
        return Started(devices=held, node=where, price_per_hour=price, config=config_doc)

    def pending_of(self, stage: Stage, job_id: str, reason: str) -> Pending:
        """Job ``job_id`` of ``stage`` pending for Slurm's ``reason``: with who holds the
        nodes of the stage's model, or who is ahead of it."""
        gres = self._gres(stage)
        kind = gres.split(":")[1] if gres else None
        nodes = {
            n.name for n in self._all_nodes() if kind is None or (n.gres and n.gres.type == kind)
        }
        return waiting.pending(reason, job_id, nodes)

    # -- a fan-out stage as one job array (:mod:`.arrays`) -------------------------------

    def runs_items(self, stage: Stage) -> bool:
        """Every fan-out stage of commands is job arrays (one, unless it has more items
        than the cluster's ``MaxArraySize``), where the cluster takes arrays at all."""
        return stage.function is None and self.array_size() > 0

    def array_size(self) -> int:
        """How many tasks one job array may have (``MaxArraySize``; 0: no arrays), read
        once."""
        if self._array_size is None:
            self._array_size = cluster_array_size()
        return self._array_size

    def run_items(
        self, tasks: Sequence[Task], contexts: Sequence[ItemContext], parallel: int
    ) -> None:
        run_dir = self.work_root() / tasks[0].run_id
        work_dir = run_dir / "work"
        work_dir.mkdir(parents=True, exist_ok=True)
        array = ArrayRun(self, tasks, contexts)
        with self._lock:
            self._arrays[tasks[0].stage.name] = array
        try:
            array.run(run_dir, work_dir, parallel)
        finally:
            with self._lock:
                self._arrays.pop(tasks[0].stage.name, None)

    def script(
        self, task: Task, work_dir: Path, devices: Path, end: Path, items: Path, offset: int
    ) -> str:
        return batch_script(
            task, str(work_dir), str(devices), str(end), self.settings.container, str(items), offset
        )

    def end_of(self, task: Task, ended: parse.Ended, end_file: Path) -> TaskEnd:
        return job_end(task, ended, end_file)

    def stop_task(self, task: Task) -> None:
        with self._lock:
            job = self._jobs.get(task.key)
            array = self._arrays.get(task.stage.name)
        if job is None and array is not None and task.item is not None:
            array.stop(task.item.index)
            return
        if job is None:
            return
        job.stopping = True
        if job.job_id is not None:
            with contextlib.suppress(SlurmDown):
                single.cancel(job.job_id)

    def cleanup(self, run_id: str) -> Cleanup:
        """Cancel every job of the run still queued or running (``nodus stop``), and
        remove a function's files from ``work_root`` (the driver calls it at every run's
        end)."""
        try:
            text = slurm("squeue", "-h", "-o", parse.QUEUE_FORMAT)
        except (SlurmDown, SlurmRefused) as exc:
            raise TargetFailure(f"the Slurm controller: {exc}") from None
        removed = []
        for job in parse.queued_jobs(text):
            if job.name.startswith(f"nodus-{run_id}-"):
                single.cancel(job.job_id)
                removed.append(f"Slurm job {job.job_id}")
        removed += calls.remove(self.work_root() / run_id)
        return Cleanup(removed)

    # -- a run whose supervisor died ------------------------------------------------------

    def settle(self, record: RunRecord) -> Settled | None:
        stages: dict[int, StageRecord] = {}
        tasks: dict[int, list[TaskRecord]] = {}
        #: How the last stage that settled ended: succeeded, exit code, in words.
        last: tuple[bool, int, str] | None = None
        for index, stage in enumerate(record.stages):
            if not stage.status.active:
                continue
            if stage.job_id is None:
                items = self.store.tasks(record.id, index)
                if not any(t.job_id for t in items):
                    continue  # never submitted: nodus was not there to
                settled = settle_items(stage.name, items, record.price_per_hour, task_end)
                if settled is None:
                    return None
                ok, stage.exit_code, stage.message, words = settled
                stage.status = StageStatus.SUCCEEDED if ok else StageStatus.FAILED
                stage.cost = sum(t.cost for t in items)
                stages[index], tasks[index] = stage, items
                last = (ok, stage.exit_code, words)
                continue
            if single.queued(stage.job_id) is not None:
                return None
            found = single.accounted(stage.job_id)
            if found is None or not found.finished:
                return None
            end = task_end(found)
            ok = record_end(stage, end, found.elapsed_seconds, record.price_per_hour)
            stages[index] = stage
            last = (ok, end.exit_code, f"Slurm job {found.job_id} went on: {end_words(end)}")
        calls.remove(self.work_root() / record.id)  # nobody will read a dead caller's outcome
        return settled_run(record, stages, tasks, last, "submitted a Slurm job", "submit")

    # -- looking -----------------------------------------------------------------------

    def describe(self, record: RunRecord) -> str | None:
        parts = []
        for index, stage in enumerate(record.stages):
            if not stage.status.active:
                continue
            try:
                if stage.job_id is None:
                    said = array_words([t.job_id for t in self.store.tasks(record.id, index)])
                    parts += [f"{stage.name}: {said}"] if said else []
                    continue
                state = single.queued(stage.job_id)
            except SlurmDown as exc:
                return f"Slurm controller not reachable: {exc}"
            if state is None:
                parts.append(f"{stage.name}: Slurm job {stage.job_id} has ended")
            elif state.state == "PENDING":
                said = waiting.pending_words(state.reason)
                parts.append(f"{stage.name}: job {stage.job_id} {said}")
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
            price = self._node_price(n)
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
                    price_per_hour=price.per_hour,
                    details={
                        **price_details(price, self.price_hint),
                        "partitions": list(n.partitions),
                        "gres_type": gres.type if gres else None,
                        "gpus_used": n.gpus_used,
                        "cpus_used": n.cpus_used,
                        "reason": n.reason,
                    },
                )
            )
        return found
