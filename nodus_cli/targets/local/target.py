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
import errno
import os
import random
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from nodus_cli import config
from nodus_cli.errors import InvalidInput, NodusError, NotRunnable
from nodus_cli.targets.base import (
    Cleanup,
    NodeInfo,
    Preparation,
    Pulls,
    Started,
    Target,
    TargetFailure,
    Task,
    TaskContext,
    TaskEnd,
    TaskState,
    WorkDir,
    plain_pulls,
)
from nodus_cli.targets.docker import engine, http
from nodus_cli.targets.docker.containers import (
    LABEL_HOME,
    LABEL_ITEM,
    LABEL_NEED,
    LABEL_OWNER,
    LABEL_PRIORITY,
    LABEL_QUEUE,
    LABEL_QUEUED_AT,
    LABEL_RUN,
    LABEL_STAGE,
    LABEL_WANTS,
    LABEL_WORKLOAD,
    ContainerSpec,
    container_name,
    engine_config,
    memory_limit,
    spec_for,
)
from nodus_cli.targets.follower import LogFollower
from nodus_cli.targets.local import calls, machine, workers
from nodus_cli.targets.local.queue import Ledger, Picture, Request, Waiter, holder_words, me
from nodus_cli.text import plural

if TYPE_CHECKING:
    from nodus_cli.catalog import Offer
    from nodus_cli.planning.planner import Plan, RuntimeLookup, StagePlan
    from nodus_cli.records import RunRecord
    from nodus_cli.targets.usage import UsageReport
    from nodus_cli.workload import Stage, Workload

#: How long a retry waits for a restarting engine to answer again.
ENGINE_RETURN_SECONDS = 60.0
_NOT_FOUND_MARKERS = ("executable file not found", "no such file or directory")
#: A run's place in the queue when its workload says nothing (``priority``, 0 to 100).
DEFAULT_PRIORITY = 50
#: How often a queued task looks again when no engine event woke it (seconds).
QUEUE_POLL_SECONDS = 2.0


class LocalTarget(Target):
    name: ClassVar[str] = "local"
    description: ClassVar[str] = "this machine"
    price_hint: ClassVar[str] = (
        "set price_per_hour under [local] in the nodus configuration file, "
        "~/.config/nodus/config.toml or NODUS_CONFIG"
    )

    def __init__(self, store: Any, catalog: str | None = None) -> None:
        super().__init__(store, catalog)
        self._engine: engine.Engine | None = None
        self._gpus: list[machine.LocalGpu] | None = None
        self._plan: Plan | None = None
        self._work: dict[str, Path] = {}
        self._containers: dict[str, str] = {}  # task key -> container id
        self._stopping: set[str] = set()
        self._removals: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._ledger_: Ledger | None = None
        self._nudge = _Nudge()
        #: The run's place in the queue and whether it may wait (from its workload).
        self._priority = DEFAULT_PRIORITY
        self._queue = True
        #: Python function calls (issue 16): the interpreter found per image (.calls),
        #: and the warm workers of each function-map stage, by (run, stage) (.workers).
        self._interpreters: dict[str, str] = {}
        self._pools: dict[tuple[str, str], workers.Pool] = {}

    # -- planning ----------------------------------------------------------------------

    def _local_gpus(self, workload: Workload | None) -> list[machine.LocalGpu]:
        """This machine's GPUs; the driver is asked only when a stage wants one."""
        if self._gpus is None:
            wants = workload is None or workload.wants_gpu
            self._gpus = machine.query_gpus() if wants else []
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
        picture = self._picture()
        if picture is None:
            return plan
        ledger = self._ledger()
        for sp, stage in zip(plan.stages, workload.stages, strict=True):
            if not stage.requirements.wants_gpu:
                continue
            request = self._request(stage)
            if picture.choose(request, ledger.memory_gb, None, workload.priority) is not None:
                continue
            ahead = [
                w
                for w in picture.ahead(None, workload.priority)
                if w.wants & set(request.candidates)
            ]
            line = f", behind {plural(len(ahead), 'waiting task')}" if ahead else ""
            sp.notes.append(
                f"the {self._wants_words(stage, request)} it needs are "
                f"{_holding_words(request, picture, str(self.store.root))}: `nodus run` waits "
                f"for them (queued{line}); --no-wait refuses at once instead"
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
                gpus = f"{machine.describe(found)}, " if workload.wants_gpu else ""
                # No hint here: the launcher adds one naming the workload's file, which
                # this target never sees (launcher.plan_elsewhere_hint).
                raise NotRunnable(
                    f"this machine cannot run stage {stage_plan.name!r}: {why}.\n"
                    f"This machine has {gpus}{base.vcpus:g} CPUs, "
                    f"{base.memory_gb:g} GB memory, {base.disk_gb or 0:g} GB free disk."
                )
        _check_mounts(workload)
        _check_ports(workload)
        eng = self.docker()
        if workload.wants_gpu and not eng.api_at_least(engine.MIN_GPU_API):
            raise NotRunnable(
                f"the Docker engine at {eng.where} speaks API {eng.api}; GPU device requests "
                "need 1.40 (Docker 19.03) or newer",
                hint="upgrade Docker",
            )
        self._priority, self._queue = workload.priority, workload.queue
        if not workload.queue:
            self._refuse_held(workload)
        for image in dict.fromkeys(s.image for s in workload.stages):
            ensure_image(eng, image, self.pulls)
        return Preparation(price_per_hour=config.local().price_per_hour)

    def docker(self) -> engine.Engine:
        if self._engine is None:
            self._engine = engine.local()
        return self._engine

    def _refuse_held(self, workload: Workload) -> None:
        """``--no-wait``: refuse now, before anything is recorded, when the GPUs a stage
        needs are held (or others wait for them first)."""
        for stage in workload.stages:
            if not stage.requirements.wants_gpu:
                continue
            request = self._request(stage)
            try:
                ledger = self._ledger()
                picture = ledger.read()
            except engine.EngineUnreachable as exc:
                raise exc.as_nodus_error() from None
            except engine.EngineFailure:
                return  # the run itself will say what is wrong with the engine
            if picture.choose(request, ledger.memory_gb, None, self._priority) is None:
                raise self._held_error(stage, request, picture)

    def _held_error(self, stage: Stage, request: Request, picture: Picture) -> NotRunnable:
        holders = picture.holders_of(request.candidates)
        ahead = [
            w for w in picture.ahead(None, self._priority) if w.wants & set(request.candidates)
        ]
        waits = f"; {plural(len(ahead), 'task')} of other runs wait for them first" if ahead else ""
        others = [h for h in holders if h.home and h.home != str(self.store.root)]
        stop = "`nodus stop RUN_ID`"
        if others:
            stop = f"`NODUS_HOME={others[0].home} nodus stop {others[0].run}`"
        return NotRunnable(
            f"stage {stage.name!r} needs {self._wants_words(stage, request)}; "
            f"{_holding_words(request, picture, str(self.store.root))}{waits}",
            hint=f"run without --no-wait to wait for them (queued), or stop the run that "
            f"holds them with {stop}",
        )

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

    def _matching(self, stage: Stage) -> list[machine.LocalGpu]:
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
        req = stage.requirements
        candidates = tuple(g.uuid for g in sorted(self._matching(stage), key=lambda g: g.index))
        if req.share_gpu and req.peak_memory_gb:
            return Request(candidates, 1, req.peak_memory_gb, prefer)
        return Request(candidates, req.gpu_count, None, prefer)

    def _ledger(self) -> Ledger:
        if self._ledger_ is None:
            self._ledger_ = Ledger(self.docker(), self._local_gpus(None))
        return self._ledger_

    def _wants_words(self, stage: Stage, request: Request) -> str:
        model = self._offer_for(stage).gpu
        if request.share_gb is not None:
            return f"{request.share_gb:g} GB of one {model} (shared)"
        return f"{request.count}× {model}"

    def _claim(
        self, task: Task, ctx: TaskContext, create: Callable[[tuple[str, ...]], str]
    ) -> tuple[tuple[str, ...], str]:
        """The GPUs for ``task`` and the container that holds them (``create`` makes it with
        those GPUs): at once when the queue allows, else once its turn has come.

        The container is the reservation: created, then checked against what the engine
        shows right after; when another live container holds one of its GPUs (two
        creations raced), it is withdrawn and the choice made again after a random pause.
        """
        stage = task.stage
        request = self._request(stage, task.previous_devices)
        ledger = self._ledger()
        entry: Waiter | None = None
        shown: str | None = None
        clashes = 0
        try:
            while True:
                if self._stopped(task):
                    raise _Ended(TaskState.STOPPED, 143, "stopped by nodus while queued")
                picture = self._read(ledger)
                if entry is not None:
                    entry = next((w for w in picture.waiters if w.id == entry.id), entry)
                key = entry.key if entry is not None else None
                chosen = picture.choose(request, ledger.memory_gb, key, self._priority)
                if chosen is not None:
                    cid = create(chosen)
                    clash = self._read(ledger).conflicts(
                        cid, chosen, request.share_gb, ledger.memory_gb
                    )
                    if not clash:
                        return chosen, cid
                    self._withdraw(cid)
                    clashes += 1
                    time.sleep(random.uniform(0.01, 0.05) * min(clashes, 20))
                    continue
                if not self._queue:
                    raise self._held_error(stage, request, picture)
                if entry is None:
                    entry = self._enqueue(task, request)
                    continue
                words = self._queued_words(task, request, picture, entry)
                if words != shown:
                    ctx.waiting(words)
                    shown = words
                self._nudge.wait(self.docker(), QUEUE_POLL_SECONDS)
        finally:
            if entry is not None:
                self._withdraw(entry.id)

    def _read(self, ledger: Ledger) -> Picture:
        try:
            picture = ledger.read()
        except engine.EngineFailure as exc:
            raise _Ended(TaskState.INFRASTRUCTURE, 1, _lost(exc)) from None
        if picture.orphans:
            ledger.reclaim(picture)  # what dead owners left (from any NODUS_HOME)
        return picture

    def _withdraw(self, cid: str) -> None:
        with contextlib.suppress(engine.EngineFailure):
            self.docker().remove(cid)

    def _enqueue(self, task: Task, request: Request) -> Waiter:
        """The task's queue entry: a container that is created, never started, holds
        nothing, and says to every user of the engine where the task stands in line."""
        name = f"{container_name(task)}-queued"[:63]
        labels = {
            LABEL_RUN: task.run_id,
            LABEL_STAGE: task.stage.name,
            LABEL_WORKLOAD: task.workload[:200],
            LABEL_QUEUE: task.key,
            LABEL_PRIORITY: str(self._priority),
            LABEL_QUEUED_AT: str(time.time_ns()),
            LABEL_WANTS: ",".join(request.candidates),
            LABEL_NEED: request.need,
            LABEL_OWNER: me().label,
            LABEL_HOME: str(self.store.root),
        }
        if task.item is not None:
            labels[LABEL_ITEM] = str(task.item.index)
        body = {
            "Image": task.stage.image,
            "Cmd": ["true"],
            "Entrypoint": [""],
            "Labels": labels,
            "HostConfig": {"NetworkMode": "none"},
        }
        eng = self.docker()
        for attempt in (1, 2):
            try:
                cid = eng.create(name, body)
                break
            except engine.EngineError as exc:
                if exc.status == 409 and attempt == 1:  # an entry an earlier attempt left
                    self._withdraw(name)
                    continue
                raise _Ended(
                    TaskState.INFRASTRUCTURE, 1, f"the engine refused the queue entry: {exc}"
                ) from None
            except engine.EngineFailure as exc:
                raise _Ended(TaskState.INFRASTRUCTURE, 1, _lost(exc)) from None
        return Waiter(
            cid,
            name,
            task.run_id,
            task.key,
            self._priority,
            int(labels[LABEL_QUEUED_AT]),
            frozenset(request.candidates),
            request.need,
            str(self.store.root),
            me(),
        )

    def _queued_words(self, task: Task, request: Request, picture: Picture, entry: Waiter) -> str:
        """The line a queued task shows (and ``nodus runs`` keeps) while it waits."""
        place = picture.place(entry)
        nth = _ordinal(place)
        return (
            f"{_label(task)}: queued, {nth} in line for "
            f"{self._wants_words(task.stage, request)} "
            f"({_holding_words(request, picture, str(self.store.root))})"
        )

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

    def _runs_as_root(self, image: str) -> bool:
        try:
            user = str(self.docker().image_config(image).get("User") or "")
        except engine.EngineFailure:
            return False
        return user.split(":")[0] in ("", "root", "0")

    def run_task(self, task: Task, ctx: TaskContext) -> TaskEnd:
        if task.stage.function is not None and task.item is not None:  # .workers
            key = (task.run_id, task.stage.name)
            with self._lock:
                if key not in self._pools:
                    self._pools[key] = workers.Pool(self, task, _Ended)
                pool = self._pools[key]
            return pool.run(task, ctx)
        if task.stage.function is not None:  # a Python function call (.calls)
            home = self.store.root
            return calls.run(task, ctx, home, self._interpreters, self._run_task)
        return self._run_task(task, ctx)

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
        except _Ended as ended:
            with self._lock:
                self._stopping.discard(task.key)
            return ended.end
        try:
            if not spec.gpu_uuids:
                return self._run_container(task, ctx, cid, spec, since)
            from nodus_cli.targets.local.gpu_usage import Sampler

            with Sampler(spec.gpu_uuids) as sampler:
                end = self._run_container(task, ctx, cid, spec, since)
            report = sampler.report()
            if task.item is None:  # a fan-out stage's driver sums its tasks' use up
                self._report_usage(task, ctx, report, stopped=end.state == TaskState.STOPPED)
            return TaskEnd(end.state, end.exit_code, end.message, gpu_use=report)
        finally:
            with self._lock:
                self._containers.pop(task.key, None)
                self._stopping.discard(task.key)
            self._remove_later(cid)

    def _remove_later(self, cid: str) -> None:
        """Remove an ended container without holding up the next task (as ``docker run
        --rm`` leaves it to the daemon); :meth:`cleanup` waits for these removals."""

        def remove() -> None:
            with contextlib.suppress(engine.EngineFailure):
                self.docker().remove(cid)

        worker = threading.Thread(target=remove, name="nodus-remove", daemon=True)
        worker.start()
        with self._lock:
            self._removals = [t for t in self._removals if t.is_alive()] + [worker]

    def _create(self, task: Task, ctx: TaskContext) -> tuple[ContainerSpec, str]:
        """Create the task's container: with its GPUs, once the queue gives them."""
        stage = task.stage
        offer = self._offer_for(stage)
        work = self._work.get(task.run_id)
        made: list[ContainerSpec] = []

        def create(uuids: tuple[str, ...]) -> str:
            spec = spec_for(task, uuids, str(work) if work is not None else None)
            if stage.function is not None:  # its runtime, its call folder, its Python
                python = self._interpreters.get(stage.image, calls.INTERPRETER)
                spec = calls.container(spec, task, self.store.root, python)
            owned = {**spec.labels, LABEL_OWNER: me().label, LABEL_HOME: str(self.store.root)}
            made.append(replace(spec, labels=owned))
            return self._create_container(made[-1], task)

        if stage.requirements.wants_gpu:
            uuids, cid = self._claim(task, ctx, create)
        else:
            uuids, cid = (), create(())
        spec = made[-1]  # the one kept (a raced creation is withdrawn and made again)
        with self._lock:
            self._containers[task.key] = cid
        if task.item is None:
            shown = f" on {', '.join(uuids)}" if uuids else ""
            ctx.say(f"stage {stage.name}: starting {stage.image}{shown}")
        # Recorded once the container exists: from here its GPUs show as taken.
        ctx.submitted()
        slots = self._slots(stage)
        ctx.started(
            Started(
                devices=uuids,
                node=offer.machine_id,
                price_per_hour=offer.price_per_hour / max(1, slots),
                config=offer.as_json(),
            )
        )
        return spec, cid

    def _slots(self, stage: Stage) -> int:
        """How many tasks of a fan-out stage share this machine's price (1 otherwise)."""
        if stage.map is None:
            return 1
        req = stage.requirements
        if not req.wants_gpu:
            return max(1, int(machine.cpu_count() // req.cpu)) if req.cpu else 1
        matching = self._matching(stage)
        if req.share_gpu and req.peak_memory_gb:
            return max(1, sum(int(g.nominal_memory_gb // req.peak_memory_gb) for g in matching))
        return max(1, len(matching) // req.gpu_count)

    def _create_container(self, spec: ContainerSpec, task: Task) -> str:
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
                raise _Ended(
                    TaskState.INFRASTRUCTURE,
                    1,
                    f"the engine failed to create the container: {exc.message}",
                ) from None
            except (engine.EngineUnreachable, engine.EngineTimeout) as exc:
                raise _Ended(TaskState.INFRASTRUCTURE, 1, _lost(exc)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _run_container(
        self, task: Task, ctx: TaskContext, cid: str, spec: ContainerSpec, since: float
    ) -> TaskEnd:
        eng = self.docker()
        if self._stopped(task):  # stopped between its creation and now: never start it
            return TaskEnd(TaskState.STOPPED, 143, "stopped by nodus before it started")
        try:
            eng.start(cid)
        except engine.EngineError as exc:
            return self._start_failed(exc, task, ctx)
        except (engine.EngineUnreachable, engine.EngineTimeout) as exc:
            return TaskEnd(TaskState.INFRASTRUCTURE, 1, _lost(exc))
        if self._stopped(task):  # the stop's kill came before the start: kill it now
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
        if self._stopped(task):
            return TaskEnd(TaskState.STOPPED, code, "stopped by nodus")
        if code == 0:
            return TaskEnd(TaskState.EXITED, 0)
        return self._classify_exit(cid, code, since, spec)

    def _wait(self, task: Task, cid: str) -> int | TaskEnd:
        """The container's exit code, or how the task ended when it cannot be waited for."""
        eng = self.docker()
        while True:
            try:
                return eng.wait(cid, None)
            except engine.EngineTimeout:
                continue
            except engine.EngineUnreachable as exc:
                if self._stopped(task):
                    return TaskEnd(TaskState.STOPPED, 137, "stopped by nodus")
                if not eng.alive():
                    return TaskEnd(
                        TaskState.INFRASTRUCTURE,
                        1,
                        "lost the Docker engine while the task ran (did dockerd restart?) "
                        f"({exc.reason})",
                    )
            except engine.EngineError as exc:
                if self._stopped(task):
                    return TaskEnd(TaskState.STOPPED, 137, "stopped by nodus")
                if exc.status == 404:
                    return TaskEnd(
                        TaskState.KILLED, 137, "its container was removed from outside nodus"
                    )
                return TaskEnd(TaskState.INFRASTRUCTURE, 1, f"the engine failed: {exc.message}")

    def _stopped(self, task: Task) -> bool:
        with self._lock:
            return task.key in self._stopping

    def stop_task(self, task: Task) -> None:
        with self._lock:
            self._stopping.add(task.key)
            cid = self._containers.get(task.key)
        self._nudge.poke()  # a task waiting in the queue notices at once
        if cid is not None:
            with contextlib.suppress(engine.EngineFailure):
                self.docker().kill(cid)

    def _start_failed(self, exc: engine.EngineError, task: Task, ctx: TaskContext) -> TaskEnd:
        text = exc.message
        lowered = text.lower()
        if "could not select device driver" in lowered:
            raise NotRunnable(
                f"the engine cannot hand GPUs to containers: {text}",
                hint="install the NVIDIA Container Toolkit (nvidia-container-toolkit) and "
                "restart dockerd",
            )
        if "port is already allocated" in lowered or "address already in use" in lowered:
            raise NotRunnable(
                f"stage {task.stage.name!r} cannot publish its ports: {text}",
                hint="free that port, or choose another host port in `ports`",
            )
        missing = any(m in lowered for m in _NOT_FOUND_MARKERS)
        denied = "permission denied" in lowered
        if exc.status >= 500 and not (missing or denied):
            return TaskEnd(
                TaskState.INFRASTRUCTURE, 1, f"the engine failed to start the container: {text}"
            )
        # The workload's command cannot be started: its failure, exit codes as `docker run`.
        ctx.say(f"{_label(task)}: cannot start its command: {text}")
        return TaskEnd(
            TaskState.CANNOT_START,
            127 if missing else 126,
            f"its command could not be started: {text}",
        )

    def _classify_exit(self, cid: str, code: int, since: float, spec: ContainerSpec) -> TaskEnd:
        """A non-zero exit: the workload's own, out of memory, or killed from outside."""
        try:
            events = self.docker().events(
                since - 1.0, time.time(), {"container": [cid], "event": ["kill", "oom"]}
            )
        except engine.EngineFailure:
            events = []
        actions = [str(e.get("Action") or e.get("status") or "") for e in events]
        if "oom" in actions:
            return TaskEnd(
                TaskState.OUT_OF_MEMORY,
                code,
                f"out of memory: it reached {memory_limit(spec.memory_bytes)}; raise memory_gb "
                "in [requirements]",
            )
        kills = [e for e in events if (e.get("Action") or e.get("status")) == "kill"]
        if kills:
            attrs = (kills[0].get("Actor") or {}).get("Attributes") or {}
            sig = attrs.get("signal", "?")
            return TaskEnd(
                TaskState.KILLED,
                code,
                f"killed from outside nodus (signal {sig}); not retried: an outside kill is "
                "a decision, not a failure of the machine",
            )
        return TaskEnd(TaskState.EXITED, code)

    def _say_ports(self, task: Task, ctx: TaskContext) -> None:
        for p in task.stage.ports:
            host = p.host_ip if p.host_ip not in (None, "", "0.0.0.0") else "127.0.0.1"
            also = " (and on this machine's other addresses)" if not p.host_ip else ""
            scheme = "udp" if p.protocol == "udp" else "http"
            ctx.say(
                f"{_label(task)}: port {p.container}/{p.protocol} answers at "
                f"{scheme}://{host}:{p.host}{also}"
            )

    def _report_usage(
        self, task: Task, ctx: TaskContext, report: UsageReport, stopped: bool = False
    ) -> None:
        """What the task did with its GPUs; never that they stayed idle when nodus stopped
        it (cancelled, a budget): it had no time to use them."""
        label = _label(task)
        if not report.available:
            ctx.say(
                f"{label}: could not check GPU use (no nvidia-smi on PATH): a request is not "
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
            ctx.say(f"{label}: GPUs used: {detail}")
        if report.idle and not stopped:
            ctx.say(
                f"warning: {label}: {_gpus(report.idle)} stayed idle (no "
                "utilization, no memory allocated): a request is not proof of use; check that "
                "the program sees them (CUDA_VISIBLE_DEVICES, the framework's device)"
            )
        if report.unsampled:
            ctx.say(
                f"{label}: no usable reading for {_gpus(report.unsampled)} (it "
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
        with self._lock:
            pending, self._removals = self._removals, []
        for worker in pending:
            worker.join(timeout=30)
        eng = self.docker()
        removed: list[str] = []
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
        try:
            found = self.docker().containers({"label": [f"{LABEL_RUN}={record.id}"]})
        except (engine.EngineFailure, NodusError):
            return None
        if not found:
            return None
        queued = [c for c in found if LABEL_QUEUE in (c.get("Labels") or {})]
        picture = self._picture() if queued else None
        parts = []
        for c in found:
            labels = c.get("Labels") or {}
            task = labels.get(LABEL_STAGE, "?")
            if LABEL_ITEM in labels:
                task += f"[{labels[LABEL_ITEM]}]"
            if LABEL_QUEUE not in labels:
                parts.append(f"{task}: {c.get('State', '?')}")
                continue
            entry = (
                next((w for w in picture.waiters if w.id == c.get("Id")), None) if picture else None
            )
            if picture is None or entry is None:
                parts.append(f"{task}: queued")
                continue
            holders = holder_words(picture.holders_of(entry.wants), str(self.store.root))
            parts.append(f"{task}: queued, {_ordinal(picture.place(entry))} in line ({holders})")
        return "; ".join(sorted(parts))

    def _picture(self) -> Picture | None:
        try:
            return Ledger(self.docker(), self._local_gpus(None)).read()
        except (engine.EngineFailure, NodusError):
            return None

    def nodes(self) -> list[NodeInfo]:
        """This machine, one entry per GPU model it has (a machine with 2 L4 and a T4 is
        two entries: a request names one model), with how many are free and how many
        tasks wait for them in the queue."""
        found = self._local_gpus(None)
        picture = self._picture()
        host = socket.gethostname()
        models: dict[str, list[machine.LocalGpu]] = {}
        for g in found:
            models.setdefault(g.family or g.product, []).append(g)

        def node(key: str, model: str | None, gpus: list[machine.LocalGpu]) -> NodeInfo:
            ids = {g.uuid for g in gpus}
            busy = set() if picture is None else {u for u in ids if picture.use(u).holders}
            queued = 0 if picture is None else sum(1 for w in picture.waiters if w.wants & ids)
            return NodeInfo(
                id=key,
                hostname=host,
                state="ready",
                cpus=machine.cpu_count(),
                memory_gb=machine.memory_gb(),
                gpu=model,
                gpu_memory_gb=min((g.nominal_memory_gb for g in gpus), default=None),
                gpus=len(gpus),
                free_gpus=len(ids - busy),
                price_per_hour=config.local().price_per_hour,
                details={"queued": queued} if gpus else {},
            )

        if len(models) <= 1:
            return [node(host, next(iter(models), None), found)]
        return [node(f"{host}/{model}", model, gpus) for model, gpus in models.items()]

    def close(self) -> None:
        self._nudge.close()
        self._engine = None
        self._ledger_ = None


class _Ended(Exception):
    """A task ended before its container ran (carried out of nested helpers)."""

    def __init__(self, state: TaskState, code: int, message: str) -> None:
        super().__init__(message)
        self.end = TaskEnd(state, code, message)


def _label(task: Task) -> str:
    if task.item is None:
        return f"stage {task.stage.name}"
    return f"stage {task.stage.name} item {task.item.index}"


def _lost(exc: BaseException) -> str:
    reason = exc.reason if isinstance(exc, engine.EngineUnreachable) else str(exc)
    return f"lost the Docker engine ({reason})"


def _holding_words(request: Request, picture: Picture, home: str) -> str:
    """``held by run A (since 12:01:02 UTC)``: who holds the GPUs a request can use."""
    return holder_words(picture.holders_of(request.candidates), home)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class _Nudge:
    """Wakes tasks waiting in the queue when the engine says a container ended or went
    away (or one of this process's tasks is stopped); else they look again every few
    seconds. One event stream per target, opened by the first task that waits."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._stream: Any = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def wait(self, eng: engine.Engine, timeout: float) -> None:
        with self._changed:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._watch, args=(eng,), name="nodus-queue-events", daemon=True
                )
                self._thread.start()
            self._changed.wait(timeout)

    def poke(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _watch(self, eng: engine.Engine) -> None:
        try:
            self._stream = eng.watch({"type": ["container"], "event": ["die", "destroy"]})
            for _ in self._stream.documents():
                self.poke()
        except (engine.EngineFailure, http.Failure, OSError, ValueError):
            pass  # the waiting tasks still look every QUEUE_POLL_SECONDS
        finally:
            with self._changed:
                self._thread = None

    def close(self) -> None:
        self._closed = True
        stream, self._stream = self._stream, None
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()
        self.poke()


def _gpus(uuids: list[str]) -> str:
    return f"{'GPU' if len(uuids) == 1 else 'GPUs'} {', '.join(uuids)}"


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _check_mounts(workload: Workload) -> None:
    """Every host path a stage mounts exists (named volumes are created when missing)."""
    missing = []
    for stage in workload.stages:
        for m in stage.mounts:
            if m.type == "bind" and not os.path.exists(m.source):
                where = f"{m.where}: " if m.where else ""
                missing.append(f"{where}{m.written or m.source}: {m.source} does not exist")
    if missing:
        raise InvalidInput(
            "a mounted host path does not exist:\n  " + "\n  ".join(dict.fromkeys(missing)),
            hint="create it, or fix the path (relative paths are relative to the workload file)",
        )


def _check_ports(workload: Workload) -> None:
    """Every host port a stage publishes is free now."""
    for stage in workload.stages:
        for p in stage.ports:
            kind = socket.SOCK_DGRAM if p.protocol == "udp" else socket.SOCK_STREAM
            with socket.socket(socket.AF_INET, kind) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((p.host_ip or "0.0.0.0", p.host))
                except OSError as exc:
                    if exc.errno == errno.EADDRNOTAVAIL:
                        raise InvalidInput(
                            f"stage {stage.name!r}: ports: {p.host_ip} is not an address of "
                            "this machine",
                            hint="publish on 127.0.0.1, 0.0.0.0 or one of its addresses",
                        ) from None
                    raise NotRunnable(
                        f"stage {stage.name!r}: host port {p.host}/{p.protocol} is in use on "
                        f"this machine ({exc.strerror})",
                        hint="stop what uses it, or publish on another host port "
                        f'(ports = ["{p.host + 1}:{p.container}"])',
                    ) from None


# -- images ------------------------------------------------------------------------------


def ensure_image(eng: engine.Engine, image: str, pulls: Pulls = plain_pulls) -> None:
    """Pull ``image`` when the engine does not have it, its progress shown by ``pulls``.

    A pull that fails, or that makes no progress for ``NODUS_PULL_TIMEOUT`` seconds
    (default 120), is one clear error: nothing has started yet.
    """
    try:
        if eng.image_present(image):
            return
    except engine.EngineUnreachable as exc:
        raise exc.as_nodus_error() from None
    except engine.EngineFailure as exc:
        raise NodusError(f"cannot inspect image {image}: {exc}") from None
    idle = _pull_timeout()
    try:
        with pulls(image) as shown:
            eng.pull(image, shown.event, idle_timeout=idle)
        if not eng.image_present(image):
            raise engine.EngineError(404, "the engine reports the pull done but has no such image")
    except engine.EngineTimeout:
        raise NodusError(
            f"cannot get image {image}: the engine made no progress pulling it for {idle:g} s",
            hint="is a registry reachable from the Docker engine? without one, `docker load` "
            "the image first (NODUS_PULL_TIMEOUT sets this limit)",
        ) from None
    except (engine.EngineError, engine.EngineUnreachable) as exc:
        detail = exc.message if isinstance(exc, engine.EngineError) else exc.reason
        raise NodusError(
            f"cannot get image {image}: {detail}",
            hint="check the name and tag; for a private registry run `docker login`; "
            "without a registry, `docker load` the image first",
        ) from None


def _pull_timeout() -> float:
    try:
        value = float(os.environ.get("NODUS_PULL_TIMEOUT", engine.PULL_IDLE_TIMEOUT))
    except ValueError:
        return engine.PULL_IDLE_TIMEOUT
    return value if value > 0 else engine.PULL_IDLE_TIMEOUT
