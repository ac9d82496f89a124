"""The local Docker engine as a target: each task a container on this machine.

Everything that could refuse a run (this machine lacks the GPUs, they are held by another
nodus run, the engine is down, an image cannot be had, a mounted host path does not
exist, a published port is taken) is checked in :meth:`LocalTarget.prepare`, before the
first container starts.

GPUs: a task gets exactly the GPUs chosen (by UUID) among this machine's GPUs of the
planned model, never another model. Which GPUs are held is the engine's truth, for every
user of it: every live container with a device request, nodus's (whatever its NODUS_HOME)
and anyone else's. A task whose GPUs are held waits in the machine-wide queue
(:mod:`.queue`: priority, then first come, first served, no overtaking) unless the run
said not to (``--no-wait``: refused at once, naming the holders); its container, created
with its GPUs, is its reservation. A task that shares its GPU (``share_gpu``) is labelled
with the memory it may use there; a device of D GB hosts shared tasks while their memory
adds up to at most D, and never shares with a whole-GPU task.

How a task ended, as the driver needs it: its own exit; 126/127 when its command cannot
be started (as ``docker run``); out of memory (the kernel's kill at the limit); killed or
removed from outside nodus (an operator's decision: never retried); the engine lost
(worth a retry); stopped by nodus.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from nodus_cli import config
from nodus_cli.errors import InvalidInput, NotRunnable
from nodus_cli.hardware import smi
from nodus_cli.lanes import Lanes
from nodus_cli.structs import replace
from nodus_cli.targets.base import (
    Cleanup,
    NodeInfo,
    Preparation,
    Started,
    Target,
    TargetFailure,
    Task,
    TaskContext,
    TaskEnd,
    TaskState,
    WorkDir,
)
from nodus_cli.targets.cluster.resources import tasks_per_node
from nodus_cli.targets.docker import engine, images
from nodus_cli.targets.docker.containers import (
    LABEL_HOME,
    LABEL_OWNER,
    LABEL_RUN,
    ContainerSpec,
    engine_config,
    spec_for,
)
from nodus_cli.targets.follower import LogFollower
from nodus_cli.targets.local import checks, endings, looking, machine
from nodus_cli.targets.local.claims import Claims, Ended, label, lost
from nodus_cli.targets.local.owner import me

if TYPE_CHECKING:
    from nodus_cli.catalog import Offer
    from nodus_cli.planning.plan import Plan, StagePlan
    from nodus_cli.planning.ranking import RuntimeLookup
    from nodus_cli.records import RunRecord, RunStore
    from nodus_cli.targets.local import workers
    from nodus_cli.targets.local.queue import Request
    from nodus_cli.targets.usage import UsageReport
    from nodus_cli.workload import Stage, Workload

#: How long a retry waits for a restarting engine to answer again.
ENGINE_RETURN_SECONDS = 60.0


#: Whether an image runs as root, by engine and image, and when it said so (monotonic);
#: trusted for this many seconds (as a pinged engine is).
_ROOT_IMAGES: dict[tuple[str, str], tuple[float, bool]] = {}
_ROOT_IMAGES_FOR = 5.0


class LocalTarget(Target):
    name: ClassVar[str] = "local"
    description: ClassVar[str] = "this machine"
    price_hint: ClassVar[str] = (
        "set price_per_hour under [local] in the nodus configuration file, "
        "~/.config/nodus/config.toml or NODUS_CONFIG"
    )

    def __init__(self, store: RunStore, catalog: str | None = None) -> None:
        super().__init__(store, catalog)
        self._engine: engine.Engine | None = None
        self._gpus: list[smi.LocalGpu] | None = None
        self._plan: Plan | None = None
        self._work: dict[str, Path] = {}
        self._containers: dict[str, str] = {}  # task key -> container id
        self._stopping: set[str] = set()
        #: Removals under way (a few lanes, each with its connection: not a thread each).
        self._removals = Lanes("nodus-remove")
        self._lock = threading.Lock()
        #: This machine's GPUs as this target's tasks claim them (the queue, .claims).
        self._claims = Claims(self.docker, partial(self._local_gpus, None), str(store.root))
        #: Python function calls (issue 16): the interpreter found per image (.calls),
        #: and the warm workers of each function-map stage, by (run, stage) (.workers).
        self.interpreters: dict[str, str] = {}
        self._pools: dict[tuple[str, str], workers.Pool] = {}
        #: The runs whose work folder is copied out (``output_dir``): never on a warm
        #: worker of single calls (.warm), whose work folder is its own.
        self._copied: set[str] = set()
        #: The runs this target ran (the others it cleans up after: a dead caller's),
        #: and those of them with a task not on a warm worker (containers of their own).
        self._begun: set[str] = set()
        self._fresh: set[str] = set()

    # -- planning ----------------------------------------------------------------------

    def _local_gpus(self, workload: Workload | None) -> list[smi.LocalGpu]:
        """This machine's GPUs; the driver is asked only when a stage wants one."""
        if self._gpus is None:
            if workload is None:  # to look at them (nodes, who holds what): as they are now
                self._gpus = smi.query_gpus()
            else:  # to plan and run a workload: what a run a moment ago found will do
                self._gpus = machine.recent_gpus() if workload.wants_gpu else []
        return self._gpus

    def offers(self, workload: Workload) -> tuple[Offer, ...]:
        return machine.offers(self._local_gpus(workload))

    def plan(self, workload: Workload, history: RuntimeLookup) -> Plan:
        """The plan, and for a stage whose GPUs are held now, by whom: `nodus run` would
        wait for them (the plan's selected configuration is this machine either way)."""
        plan = super().plan(workload, history)
        if not workload.wants_gpu or not plan.feasible:
            return plan
        self._plan = plan
        picture = self._claims.picture()
        if picture is None:
            return plan
        for sp, stage in zip(plan.stages, workload.stages, strict=True):
            if not stage.requirements.wants_gpu:
                continue
            request = self._request(stage)
            if not self._claims.fits(picture, request, workload.priority):
                sp.notes.append(
                    self._claims.held_note(self._model(stage), request, picture, workload.priority)
                )
        return plan

    def prepare(self, workload: Workload, plan: Plan) -> Preparation:
        self._plan = plan
        found = self._local_gpus(workload)
        for stage_plan in plan.stages:
            if not stage_plan.feasible:
                base = self.offers(workload)[0]
                why = (stage_plan.explanation or "no eligible configuration").replace(
                    " in this inventory", " on this machine"
                )
                gpus = f"{smi.describe(found)}, " if workload.wants_gpu else ""
                # No hint here: the launcher adds one naming the workload's file, which
                # this target never sees (launcher.plan_elsewhere_hint).
                raise NotRunnable(
                    f"this machine cannot run stage {stage_plan.name!r}: {why}.\n"
                    f"This machine has {gpus}{base.vcpus:g} CPUs, "
                    f"{base.memory_gb:g} GB memory, {base.disk_gb or 0:g} GB free disk."
                )
        checks.mounts(workload)
        checks.ports(workload)
        eng = self.docker()
        if workload.wants_gpu and not eng.api_at_least(engine.MIN_GPU_API):
            raise NotRunnable(
                f"the Docker engine at {eng.where} speaks API {eng.api}; GPU device requests "
                "need 1.40 (Docker 19.03) or newer",
                hint="upgrade Docker",
            )
        self._claims.priority, self._claims.queue = workload.priority, workload.queue
        if not workload.queue:
            self._refuse_held(workload)
        for image in dict.fromkeys(s.image for s in workload.stages):
            images.ensure(eng, image, self.pulls)
        return Preparation(price_per_hour=config.local().price_per_hour)

    def docker(self) -> engine.Engine:
        if self._engine is None:  # a burst of runs (function calls) shares one engine
            self._engine = engine.local(fresh_for=_ROOT_IMAGES_FOR)
        return self._engine

    def _refuse_held(self, workload: Workload) -> None:
        """``--no-wait``: refuse now, before anything is recorded, when the GPUs a stage
        needs are held (or others wait for them first). One look at the engine serves
        every stage."""
        stages = [s for s in workload.stages if s.requirements.wants_gpu]
        if not stages:
            return
        try:
            picture = self._claims.ledger().read()
        except engine.EngineUnreachable as exc:
            raise exc.as_nodus_error() from None
        except engine.EngineFailure:
            return  # the run itself will say what is wrong with the engine
        for stage in stages:
            request = self._request(stage)
            if not self._claims.fits(picture, request, workload.priority):
                raise self._claims.refusal(stage.name, self._model(stage), request, picture)

    def capacity(self, stage: Stage, plan: StagePlan) -> int:
        """Tasks of ``stage`` that this machine holds at once: its GPU slots (whatever
        other runs hold now: a task whose GPUs are held waits in the queue), then CPUs and
        memory."""
        req = stage.requirements
        cpus, memory = machine.cpu_count(), machine.memory_gb()
        fits = max(1, int(cpus // req.cpu)) if req.cpu else 1
        if req.memory_gb and memory:
            fits = min(fits, max(1, int(memory // req.memory_gb)))
        if not req.wants_gpu:
            return fits
        return max(1, min(fits, self._slots(stage)))

    # -- GPUs ----------------------------------------------------------------------

    def _offer_for(self, stage: Stage) -> Offer:
        assert self._plan is not None
        for sp in self._plan.stages:
            if sp.name == stage.name and sp.selected is not None:
                return sp.selected.offer
        raise NotRunnable(f"stage {stage.name!r} has no configuration on this machine")

    def _matching(self, stage: Stage) -> list[smi.LocalGpu]:
        """This machine's GPUs that fit the stage's planned model and memory."""
        offer = self._offer_for(stage)
        req = stage.requirements
        return [
            g
            for g in self._local_gpus(None)
            if g.family is not None
            and g.family == offer.gpu
            and (req.peak_memory_gb is None or g.nominal_memory_gb >= req.peak_memory_gb)
        ]

    def _request(self, stage: Stage, prefer: tuple[str, ...] = ()) -> Request:
        """What a task of ``stage`` asks of this machine's GPUs."""
        return Claims.request(self._matching(stage), stage.requirements, prefer)

    def _model(self, stage: Stage) -> str | None:
        return self._offer_for(stage).gpu

    def claim(
        self, task: Task, ctx: TaskContext, create: Callable[[tuple[str, ...]], str]
    ) -> tuple[tuple[str, ...], str]:
        """The GPUs for ``task`` and the container that holds them (``create`` makes it
        with those GPUs): at once when the machine-wide queue allows, else once its turn
        has come (:class:`.claims.Claims`)."""
        request = self._request(task.stage, task.previous_devices)
        model = self._model(task.stage)
        return self._claims.claim(task, ctx, request, model, create, partial(self.stopped, task))

    def withdraw(self, cid: str) -> None:
        """Remove a container that holds GPUs it will not use (before a second try claims
        them again)."""
        self._claims.withdraw(cid)

    # -- running -------------------------------------------------------------------

    def begin(self, record: RunRecord, workload: Workload, plan: Plan) -> None:
        self._plan = plan
        work = self.store.work_dir(record.id)
        work.mkdir(mode=0o700, exist_ok=True)
        if not all(self._runs_as_root(s.image) for s in workload.stages):
            # The image's user is not root: it must be able to write here. The folder's
            # parent is private (0700), so no other user of this machine can reach it.
            work.chmod(0o777)
        self._work[record.id] = work
        self._begun.add(record.id)
        if workload.output_dir:
            self._copied.add(record.id)

    def _runs_as_root(self, image: str) -> bool:
        # Once per image in a few seconds: a burst of function calls is as many runs.
        key = (self.docker().where, image)
        known = _ROOT_IMAGES.get(key)
        if known is not None and time.monotonic() - known[0] < _ROOT_IMAGES_FOR:
            return known[1]
        try:
            user = str(self.docker().image_config(image).get("User") or "")
        except engine.EngineFailure:
            return False
        root = user.split(":")[0] in ("", "root", "0")
        _ROOT_IMAGES[key] = (time.monotonic(), root)
        return root

    def run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        if task.stage.function is None or not task.stage.function.keep_warm:
            self._fresh.add(task.run_id)
        if task.stage.function is None:
            return self._run_task(task, ctx)
        # A Python function call: imported here, so a command's run never loads pickle
        # and the function machinery (start-up is felt in CI).
        from nodus_cli.targets.local import calls, warm, workers

        if warm.eligible(task, task.run_id in self._copied):  # a single call: .warm
            return warm.run(self, task, ctx)
        self._fresh.add(task.run_id)
        if task.item is not None:  # .workers
            key = (task.run_id, task.stage.name)
            with self._lock:
                if key not in self._pools:
                    self._pools[key] = workers.Pool(self, task)
                pool = self._pools[key]
            return pool.run(task, ctx)
        return calls.run(task, ctx, self.store.root, self.interpreters, self._run_task)

    def _run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        eng = self.docker()
        if task.attempt > 1 and not eng.wait_until_alive(ENGINE_RETURN_SECONDS):
            return TaskEnd(
                TaskState.INFRASTRUCTURE,
                1,
                f"the Docker engine did not come back within {ENGINE_RETURN_SECONDS:g} s",
            )
        since = time.time()
        try:
            spec, cid = self._create(task, ctx)
        except Ended as ended:
            self.detach(task)
            return ended.end
        try:
            return self.measured(
                task, ctx, spec.gpu_uuids, partial(self._run_container, task, ctx, cid, spec, since)
            )
        finally:
            self.detach(task)
            self.remove_later(cid)

    def measured(
        self, task: Task, ctx: TaskContext, uuids: tuple[str, ...], body: Callable[[], TaskEnd]
    ) -> TaskEnd:
        """``body()``, the task running on the GPUs ``uuids``, with their use sampled
        meanwhile: what it did with them is said (a single task) and comes with its end."""
        if not uuids:
            return body()
        from nodus_cli.targets.local.gpu_usage import Sampler

        with Sampler(uuids) as sampler:
            end = body()
        report = sampler.report()
        if task.item is None:  # a fan-out stage's driver sums its tasks' use up
            self._report_usage(task, ctx, report, stopped=end.state == TaskState.STOPPED)
        return TaskEnd(end.state, end.exit_code, end.message, gpu_use=report)

    def remove_later(self, cid: str) -> None:
        """Remove an ended container without holding up the next task (as ``docker run
        --rm`` leaves it to the daemon); :meth:`cleanup` waits for these removals."""

        def remove() -> None:
            with contextlib.suppress(engine.EngineFailure):
                self.docker().remove(cid)

        self._removals.run(remove)

    def _create(self, task: Task, ctx: TaskContext) -> tuple[ContainerSpec, str]:
        """Create the task's container: with its GPUs, once the queue gives them."""
        stage = task.stage
        self._offer_for(stage)  # none planned: refused before a container is made
        made: list[ContainerSpec] = []

        def create(uuids: tuple[str, ...]) -> str:
            spec = self.container_spec(task, uuids)
            if stage.function is not None:  # its runtime, its call folder, its Python
                from nodus_cli.targets.local import calls

                python = self.interpreters.get(stage.image, calls.INTERPRETER)
                spec = calls.container(spec, task, self.store.root, python)
            made.append(spec)
            return self.create_container(spec, task)

        if stage.requirements.wants_gpu:
            uuids, cid = self.claim(task, ctx, create)
        else:
            uuids, cid = (), create(())
        spec = made[-1]  # the one kept (a raced creation is withdrawn and made again)
        self.attach(task, cid)
        if task.item is None:
            shown = f" on {', '.join(uuids)}" if uuids else ""
            ctx.say(f"stage {stage.name}: starting {stage.image}{shown}")
        # Recorded once the container exists: from here its GPUs show as taken.
        ctx.submitted()
        ctx.started(self.started_on(stage, uuids))
        return spec, cid

    def container_spec(self, task: Task, uuids: tuple[str, ...]) -> ContainerSpec:
        """The container of ``task`` on the GPUs ``uuids``: its stage's (limits, labels,
        mounts, the run's work folder), labelled with who made it and where it is recorded."""
        work = self._work.get(task.run_id)
        spec = spec_for(task, uuids, str(work) if work is not None else None)
        owned = {**spec.labels, LABEL_OWNER: me().label, LABEL_HOME: str(self.store.root)}
        return replace(spec, labels=owned)

    def started_on(self, stage: Stage, uuids: tuple[str, ...]) -> Started:
        """Where a task of ``stage`` on ``uuids`` runs, as its context is told: this
        machine's planned configuration, its price shared by the tasks it holds at once."""
        offer = self._offer_for(stage)
        return Started(
            devices=uuids,
            node=offer.machine_id,
            price_per_hour=offer.price_per_hour / max(1, self._slots(stage)),
            config=offer.as_json(),
        )

    def attach(self, task: Task, cid: str) -> None:
        """``task`` runs in the container ``cid`` now: :meth:`stop_task` kills it."""
        with self._lock:
            self._containers[task.key] = cid

    def detach(self, task: Task) -> None:
        """``task`` is over here: its container is no longer its, its stop forgotten."""
        with self._lock:
            self._containers.pop(task.key, None)
            self._stopping.discard(task.key)

    def _slots(self, stage: Stage) -> int:
        """How many tasks of a fan-out stage share this machine's price (1 otherwise):
        :func:`~nodus_cli.targets.cluster.resources.tasks_per_node` of the GPUs that fit."""
        if stage.map is None:
            return 1
        req = stage.requirements
        if not req.wants_gpu:
            return max(1, tasks_per_node(req, gpus=0, cpus=machine.cpu_count()))
        return self.gpu_slots(stage)

    def gpu_slots(self, stage: Stage) -> int:
        """How many tasks of ``stage`` (which wants GPUs) this machine's GPUs of its planned
        model hold at once: whole GPUs by its count, shared ones by its memory
        (:func:`~nodus_cli.targets.cluster.resources.tasks_per_node`)."""
        matching = self._matching(stage)
        held = tasks_per_node(
            stage.requirements,
            gpus=len(matching),
            cpus=machine.cpu_count(),
            gpu_memory_gb=[g.nominal_memory_gb for g in matching],
        )
        return max(1, held)

    def create_container(self, spec: ContainerSpec, task: Task) -> str:
        body = engine_config(spec)
        eng = self.docker()
        for attempt in (1, 2):
            try:
                return eng.create(spec.name, body)
            except engine.EngineError as exc:
                if exc.status == 409 and attempt == 1:
                    # A container of this name survived an earlier attempt (engine restart).
                    with contextlib.suppress(engine.EngineFailure):
                        eng.remove(spec.name)
                    continue
                if exc.status < 500:
                    raise InvalidInput(
                        f"the engine refused stage {task.stage.name!r}: {exc.message}"
                    ) from None
                raise Ended(
                    TaskState.INFRASTRUCTURE,
                    1,
                    f"the engine failed to create the container: {exc.message}",
                ) from None
            except (engine.EngineUnreachable, engine.EngineTimeout) as exc:
                raise Ended(TaskState.INFRASTRUCTURE, 1, lost(exc)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _run_container(
        self, task: Task, ctx: TaskContext, cid: str, spec: ContainerSpec, since: float
    ) -> TaskEnd:
        eng = self.docker()
        if self.stopped(task):  # stopped between its creation and now: never start it
            return TaskEnd(TaskState.STOPPED, 143, "stopped by nodus before it started")
        try:
            eng.start(cid)
        except engine.EngineError as exc:
            return endings.start_failed(exc, task, ctx)
        except (engine.EngineUnreachable, engine.EngineTimeout) as exc:
            return TaskEnd(TaskState.INFRASTRUCTURE, 1, lost(exc))
        if self.stopped(task):  # the stop's kill came before the start: kill it now
            with contextlib.suppress(engine.EngineFailure):
                eng.kill(cid)
        self._say_ports(task, ctx)
        follower = LogFollower(partial(eng.logs, cid), ctx.emit)
        follower.start()
        waited = self._wait(task, cid)
        # An exited container's log is complete: show what the live stream missed. Gone
        # (or the engine with it), it cannot be read again.
        follower.finish(complete=not isinstance(waited, TaskEnd))
        if isinstance(waited, TaskEnd):
            return waited
        code = waited
        if self.stopped(task):
            return TaskEnd(TaskState.STOPPED, code, "stopped by nodus")
        if code == 0:
            return TaskEnd(TaskState.EXITED, 0)
        return endings.classify_exit(eng, cid, code, since, spec)

    def _wait(self, task: Task, cid: str) -> int | TaskEnd:
        """The container's exit code, or how the task ended when it cannot be waited for."""
        eng = self.docker()
        while True:
            try:
                return eng.wait(cid, None)
            except engine.EngineTimeout:
                continue
            except engine.EngineUnreachable as exc:
                if self.stopped(task):
                    return TaskEnd(TaskState.STOPPED, 137, "stopped by nodus")
                if not eng.alive():
                    return TaskEnd(
                        TaskState.INFRASTRUCTURE,
                        1,
                        "lost the Docker engine while the task ran (did dockerd restart?) "
                        f"({exc.reason})",
                    )
            except engine.EngineError as exc:
                if self.stopped(task):
                    return TaskEnd(TaskState.STOPPED, 137, "stopped by nodus")
                if exc.status == 404:
                    return TaskEnd(
                        TaskState.KILLED, 137, "its container was removed from outside nodus"
                    )
                return TaskEnd(TaskState.INFRASTRUCTURE, 1, f"the engine failed: {exc.message}")

    def stopped(self, task: Task) -> bool:
        """Whether nodus stopped ``task`` (:meth:`stop_task`)."""
        with self._lock:
            return task.key in self._stopping

    def stop_task(self, task: Task) -> None:
        with self._lock:
            self._stopping.add(task.key)
            cid = self._containers.get(task.key)
        self._claims.poke()  # a task waiting in the queue notices at once
        if cid is not None:
            with contextlib.suppress(engine.EngineFailure):
                self.docker().kill(cid)

    def _say_ports(self, task: Task, ctx: TaskContext) -> None:
        for p in task.stage.ports:
            host = p.host_ip if p.host_ip not in (None, "", "0.0.0.0") else "127.0.0.1"
            also = " (and on this machine's other addresses)" if not p.host_ip else ""
            scheme = "udp" if p.protocol == "udp" else "http"
            ctx.say(
                f"{label(task)}: port {p.container}/{p.protocol} answers at "
                f"{scheme}://{host}:{p.host}{also}"
            )

    def _report_usage(
        self, task: Task, ctx: TaskContext, report: UsageReport, stopped: bool = False
    ) -> None:
        """What the task did with its GPUs; never that they stayed idle when nodus stopped
        it (cancelled, a budget): it had no time to use them."""
        name = label(task)
        if not report.available:
            ctx.say(
                f"{name}: could not check GPU use (no nvidia-smi on PATH): a request is not "
                "proof of use"
            )
            return
        peaks = {g.uuid: g for g in report.gpus}
        if report.used:
            detail = ", ".join(
                f"{u} (peak {peaks[u].max_utilization:g}% util, "
                f"{peaks[u].max_memory_used_mib:g} MiB)"
                for u in report.used
            )
            ctx.say(f"{name}: GPUs used: {detail}")
        if report.idle and not stopped:
            ctx.say(
                f"warning: {name}: {_gpus(report.idle)} stayed idle (no "
                "utilization, no memory allocated): a request is not proof of use; check that "
                "the program sees them (CUDA_VISIBLE_DEVICES, the framework's device)"
            )
        if report.unsampled:
            ctx.say(
                f"{name}: no usable reading for {_gpus(report.unsampled)} (it "
                "ended before the first sample, or the driver reports N/A)"
            )

    # -- after the run -------------------------------------------------------------

    def release(self, record: RunRecord, succeeded: bool, copy_to: Path | None) -> WorkDir:
        work = self._work.pop(record.id, None) or self.store.work_dir(record.id)
        if not work.exists():
            return WorkDir("none")
        if copy_to is not None:
            dest = copy_to / record.id
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copytree(work, dest, symlinks=True, dirs_exist_ok=True)
            except OSError as exc:
                return WorkDir(
                    "kept",
                    str(work),
                    f"could not copy it to {dest}: {exc}; the work directory was kept",
                )
            shutil.rmtree(work, ignore_errors=True)
            return WorkDir("copied", str(dest))
        if succeeded:
            shutil.rmtree(work, ignore_errors=True)
            return WorkDir("removed")
        if _empty(work):  # nothing to look at: kept, it would only pile up
            shutil.rmtree(work, ignore_errors=True)
            return WorkDir("removed", None, "it was empty")
        return WorkDir("kept", str(work))

    def cleanup(self, run_id: str) -> Cleanup:
        """Remove every container of the run (twice: one may be mid-creation)."""
        try:
            return self._cleanup(run_id)
        except engine.EngineFailure as exc:
            raise TargetFailure(f"the Docker engine: {exc}") from None

    def _cleanup(self, run_id: str) -> Cleanup:
        with self._lock:
            pools = [p for (run, _), p in self._pools.items() if run == run_id]
            self._pools = {k: p for k, p in self._pools.items() if k[0] != run_id}
        for pool in pools:  # warm workers (.workers)
            pool.close()
        self._removals.wait(timeout=30)
        if run_id in self._begun and run_id not in self._fresh:
            return Cleanup([], [])  # every task ran on a warm worker: nothing is the run's
        eng = self.docker()
        removed: list[str] = []
        if run_id not in self._begun:  # a dead caller's run (reconcile): its warm workers
            from nodus_cli.targets.local import warm

            removed += warm.sweep(eng, self.store.root)
        remaining: list[str] = []
        for attempt in range(3):
            found = eng.containers({"label": [f"{LABEL_RUN}={run_id}"]})
            if not found and attempt > 0:
                break
            remaining = []
            for c in found:
                name = ",".join(n.lstrip("/") for n in c.get("Names") or []) or str(c["Id"])[:12]
                try:
                    eng.remove(str(c["Id"]))
                    removed.append(f"container {name}")
                except engine.EngineFailure as exc:
                    remaining.append(f"container {name} ({exc})")
            if not found:
                break
            time.sleep(0.1)
        return Cleanup(sorted(set(removed)), remaining)

    # -- looking -------------------------------------------------------------------

    def describe(self, record: RunRecord) -> str | None:
        return looking.describe(self.docker, self._claims, record.id)

    def nodes(self) -> list[NodeInfo]:
        return looking.nodes(self._local_gpus(None), self._claims)

    def end_warm(self) -> None:
        # Imported here: a command's run never loads the function machinery.
        from nodus_cli.targets.local import warm

        warm.close(self.store.root)

    def close(self) -> None:
        self._claims.close()
        self._engine = None


def _gpus(uuids: list[str]) -> str:
    return f"{'GPU' if len(uuids) == 1 else 'GPUs'} {', '.join(uuids)}"


def _empty(folder: Path) -> bool:
    """Whether a work folder holds nothing (False when it cannot be read: kept, to be safe)."""
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:
        return False
