"""Running a workload on the local Docker engine, stage by stage, and recording it.

Everything that could refuse the run (this machine lacks the GPUs, they are held by
another nodus run, the engine is down, the image cannot be had) is checked before the
first container starts. While a stage runs, its output streams live with the stage
name (the container's stdout to stdout, its stderr to stderr); a failure stops later
stages; Ctrl-C or SIGTERM removes every container the run started and records the run
``cancelled`` (exit 130 or 143); the budget stops the run when its cost reaches it and
records ``budget_exhausted`` (exit 4).

Exit codes of ``nodus run`` (local target): the failing stage's own exit code (0 when
every stage succeeded); 126/127 when a stage's command cannot be started (as
``docker run``); 1 when nodus could not run it (engine lost, image missing); 3 when this
machine cannot run a stage; 4 when the budget stopped the run; 128 + signal when it
was cancelled.

GPUs: a stage gets exactly the GPUs chosen (by UUID) among this machine's GPUs of the
planned model, never another model. Which GPUs are taken is read from the engine
(running containers labelled ``nodus.gpus``), under a machine-wide lock held from the
choice until the container exists, so two nodus runs never get the same GPU.

Recovery: ``--retries N`` re-runs a stage whose container was killed from outside the
workload (a ``kill`` event the run did not send: an operator, the engine) or whose
engine went away, with the same GPU model and count (the same GPUs when still free).
A non-zero exit of the workload itself, an out-of-memory kill included, is not retried.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from nodus_cli import config, engine, localhost
from nodus_cli.containers import LABEL_GPUS, LABEL_RUN, ContainerSpec, engine_config, spec_for
from nodus_cli.planner import Plan, RuntimeLookup, no_history, plan_workload
from nodus_cli.problems import NodusError
from nodus_cli.records import RunRecord, RunStore, StageRecord, fingerprint, now_iso

if TYPE_CHECKING:
    from nodus_cli.catalog import Offer
    from nodus_cli.gpu_usage import UsageReport
    from nodus_cli.workload import Stage, Workload

EXIT_NOT_RUNNABLE = 3
EXIT_BUDGET = 4
EXIT_CANCELLED = 130
#: How long a retry waits for a restarting engine to answer again.
ENGINE_RETURN_SECONDS = 60.0
_NOT_FOUND_MARKERS = ("executable file not found", "no such file or directory")


class Cancelled(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException, so no ``except Exception`` eats it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class InfrastructureFailure(Exception):
    """The engine failed the stage (not the workload's own exit): worth a retry."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(slots=True)
class Prepared:
    workload: Workload
    plan: Plan
    local_gpus: list[localhost.LocalGpu]
    price_per_hour: float


@dataclass(slots=True)
class Outcome:
    status: str
    exit_code: int
    cost: float
    message: str | None = None
    usage: list[UsageReport] = field(default_factory=list)


# -- before anything starts ------------------------------------------------------------


def prepare(workload: Workload, history: RuntimeLookup | None = None) -> Prepared:
    """Plan against this machine; refuse before anything starts when it cannot run a stage.

    The driver is asked for GPUs only when a stage requests one.
    """
    wants_gpu = any(s.requirements.wants_gpu for s in workload.stages)
    found = localhost.query_gpus() if wants_gpu else []
    offers = localhost.offers(found)
    plan = plan_workload(workload, offers, target="local", history=history or no_history)
    for stage_plan in plan.stages:
        if not stage_plan.feasible:
            base = offers[0]
            why = (stage_plan.explanation or "no eligible configuration").replace(
                " in this inventory", " on this machine"
            )
            gpus = f"{localhost.describe(found)}, " if wants_gpu else ""
            raise NodusError(
                f"this machine cannot run stage {stage_plan.name!r}: {why}.\n"
                f"This machine has {gpus}{base.vcpus:g} CPUs, "
                f"{base.memory_gb:g} GB memory, {base.disk_gb or 0:g} GB free disk.",
                exit_code=EXIT_NOT_RUNNABLE,
                hint="`nodus plan FILE` shows the configurations elsewhere that could run it",
            )
    return Prepared(workload, plan, found, config.local().price_per_hour)


def gpus_in_use(eng: engine.Engine) -> dict[str, str]:
    """GPU UUIDs held by nodus containers on this engine (any NODUS_HOME), -> run id."""
    held: dict[str, str] = {}
    containers = eng.containers(
        {"label": [LABEL_GPUS], "status": ["created", "running", "restarting", "paused"]}
    )
    for c in containers:
        labels = c.get("Labels") or {}
        for uuid in (labels.get(LABEL_GPUS) or "").split(","):
            if uuid:
                held[uuid] = labels.get(LABEL_RUN, "another container")
    return held


def _candidates(prepared: Prepared, stage: Stage) -> tuple[Offer, list[localhost.LocalGpu]]:
    """The planned offer of a GPU stage and this machine's GPUs that fit it."""
    offer = _offer_for(prepared.plan, stage)
    req = stage.requirements
    matching = [
        g
        for g in prepared.local_gpus
        if g.family is not None
        and g.family == offer.gpu
        and (req.peak_memory_gb is None or g.nominal_memory_gb >= req.peak_memory_gb)
    ]
    return offer, matching


def check_gpus_free(prepared: Prepared, eng: engine.Engine) -> None:
    """Refuse now, before recording or starting anything, when another run holds the GPUs."""
    gpu_stages = [s for s in prepared.workload.stages if s.requirements.wants_gpu]
    if not gpu_stages:
        return
    try:
        busy = gpus_in_use(eng)
    except engine.EngineUnreachable as exc:
        raise exc.as_nodus_error() from None
    except (engine.EngineError, engine.EngineTimeout):
        return  # the run itself will say what is wrong with the engine
    for stage in gpu_stages:
        offer, matching = _candidates(prepared, stage)
        _pick(stage, offer, matching, busy, ())


def _pick(
    stage: Stage,
    offer: Offer,
    matching: list[localhost.LocalGpu],
    busy: dict[str, str],
    prefer: tuple[str, ...],
) -> tuple[str, ...]:
    need = stage.requirements.gpu_count
    free = [g for g in matching if g.uuid not in busy]
    if len(free) < need:
        holders = sorted({busy[g.uuid] for g in matching if g.uuid in busy})
        held = len(matching) - len(free)
        raise NodusError(
            f"stage {stage.name!r} needs {need}× {offer.gpu}; this machine has "
            f"{len(matching)} that fit, {held} of them in use by nodus run(s) "
            f"{', '.join(holders)}; {len(free)} free",
            exit_code=EXIT_NOT_RUNNABLE,
            hint="wait for that run to finish (`nodus runs`), or stop it",
        )
    free_ids = {g.uuid for g in free}
    if prefer and len(prefer) == need and all(u in free_ids for u in prefer):
        return prefer  # a retry keeps its GPUs when they are still free
    return tuple(g.uuid for g in sorted(free, key=lambda g: g.index)[:need])


def _offer_for(plan: Plan, stage: Stage) -> Offer:
    for stage_plan in plan.stages:
        if stage_plan.name == stage.name and stage_plan.selected is not None:
            return stage_plan.selected.offer
    raise NodusError(f"stage {stage.name!r} has no configuration on this machine")


@contextlib.contextmanager
def gpu_lock() -> Iterator[None]:
    """Serialize GPU hand-out across every nodus process on this machine."""
    import fcntl

    path = Path(os.environ.get("TMPDIR") or "/tmp") / "nodus-gpus.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # other users' nodus must be able to take it too
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


# -- the run ---------------------------------------------------------------------------


class LocalRunner:
    """Runs one prepared workload; ``out``/``err`` receive the live, stage-prefixed output."""

    def __init__(
        self,
        prepared: Prepared,
        store: RunStore,
        eng: engine.Engine,
        record: RunRecord,
        out: IO[str],
        status: Callable[[str], None],
        retries: int = 0,
        err: IO[str] | None = None,
    ) -> None:
        self.p = prepared
        self.store = store
        self.engine = eng
        self.record = record
        self.out = out
        self.err = err if err is not None else out
        self.status = status
        self.retries = retries
        self.cost = 0.0
        self.usage: list[UsageReport] = []
        self.work_dir = store.root / "work" / record.id
        self._stop_reason: str | None = None
        self._stopping = False
        self._current: tuple[int, StageRecord] | None = None
        self._attempt_t0: float | None = None  # monotonic start of the attempt under way
        self._write = threading.RLock()  # re-entrant: a signal may land mid-write
        self._log = store.log_path(record.id).open("a", encoding="utf-8")

    def execute(self) -> Outcome:
        previous = install_signal_handlers()
        try:
            try:
                outcome = self._run_stages()
                _defer_signals()
            except Cancelled as exc:
                _defer_signals()  # a second Ctrl-C must not interrupt the cleanup
                self._stopping = True
                self._remove_run_containers()
                self._close_current("cancelled", "cancelled; its container was removed")
                name = signal.Signals(exc.signum).name
                outcome = Outcome(
                    "cancelled",
                    128 + exc.signum,
                    self.cost,
                    f"cancelled by {name}; the run's containers were removed",
                    self.usage,
                )
                self._say(f"cancelled by {name}: removed the run's containers")
            except BaseException as exc:
                _defer_signals()
                self._stopping = True
                self._remove_run_containers()
                message = exc.message if isinstance(exc, NodusError) else f"internal error: {exc}"
                code = exc.exit_code if isinstance(exc, NodusError) else 1
                self._close_current("failed", message)
                self._finish(Outcome("failed", code, self.cost, message, self.usage))
                raise
            self._finish(outcome)
            return outcome
        finally:
            restore_signal_handlers(previous)
            self._log.close()

    def _finish(self, outcome: Outcome) -> None:
        self.store.finish_run(
            self.record.id, outcome.status, outcome.exit_code, self.cost, outcome.message
        )
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def _run_stages(self) -> Outcome:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir.chmod(0o777)  # the image's user may not be root
        budget = self.p.workload.budget
        for idx, stage in enumerate(self.p.workload.stages):
            if self._budget_spent():
                message = (
                    f"the run's cost ${self.cost:,.4f} reached its budget ${budget:,.2f} "
                    f"before stage {stage.name!r}"
                )
                self._say(message)
                return Outcome("budget_exhausted", EXIT_BUDGET, self.cost, message, self.usage)
            code, status = self._run_stage(idx, stage)
            if status == "budget_exhausted":
                message = (
                    f"stage {stage.name!r} stopped: the run's cost reached its budget "
                    f"${budget or 0:,.2f}"
                )
                return Outcome(status, EXIT_BUDGET, self.cost, message, self.usage)
            if status != "succeeded":
                message = f"stage {stage.name!r} failed with exit code {code}"
                if self._stop_reason:
                    message += f": {self._stop_reason}"
                return Outcome(status, code or 1, self.cost, message, self.usage)
        return Outcome("succeeded", 0, self.cost, None, self.usage)

    def _budget_spent(self) -> bool:
        budget = self.p.workload.budget
        return budget is not None and self.p.price_per_hour > 0 and self.cost >= budget

    # -- one stage -----------------------------------------------------------------

    def _run_stage(self, idx: int, stage: Stage) -> tuple[int, str]:
        offer = _offer_for(self.p.plan, stage)
        price = self.p.price_per_hour
        attempts = 0
        uuids: tuple[str, ...] = ()
        stage_cost = 0.0
        while True:
            attempts += 1
            started = now_iso()
            t0 = time.monotonic()
            self._attempt_t0 = t0
            since = time.time()
            spec: ContainerSpec | None = None
            report: UsageReport | None = None
            try:
                spec, cid = self._create(idx, stage, offer, attempts, started, uuids)
                uuids = spec.gpu_uuids
                if uuids:
                    from nodus_cli.gpu_usage import Sampler

                    with Sampler(uuids) as sampler:
                        code, status = self._run_container(cid, spec, stage, t0, since)
                    report = sampler.report()
                else:
                    code, status = self._run_container(cid, spec, stage, t0, since)
                message = self._stop_reason
            except InfrastructureFailure as exc:
                if attempts <= self.retries:
                    runtime = time.monotonic() - t0
                    self._attempt_t0 = None
                    stage_cost += runtime / 3600 * price
                    self.cost += runtime / 3600 * price
                    count = stage.requirements.gpu_count
                    same = f"the same {count}× {offer.gpu} GPU(s)" if count else "no GPU"
                    self._say(
                        f"stage {stage.name}: {exc}; retrying with {same} "
                        f"(attempt {attempts + 1} of {self.retries + 1})"
                    )
                    self._recover(spec)
                    continue
                code = exc.exit_code if exc.exit_code else 1
                status, message = "failed", str(exc)
                self._say(f"stage {stage.name}: {exc}")
            runtime = time.monotonic() - t0
            self._attempt_t0 = None
            stage_cost += runtime / 3600 * price
            self.cost += runtime / 3600 * price
            if report is not None:
                self.usage.append(report)
            self._save(
                idx,
                StageRecord(
                    stage.name,
                    status,
                    code,
                    started_at=started,
                    ended_at=now_iso(),
                    runtime_seconds=runtime,
                    cost=stage_cost,
                    config=offer.as_json(),
                    gpu_uuids=list(uuids),
                    attempts=attempts,
                    gpu_report=report.as_json() if report else None,
                    message=message,
                ),
            )
            self._current = None
            self._say(f"stage {stage.name}: {status} (exit {code}) in {runtime:.1f}s")
            if report is not None:
                self._report_usage(stage, report)
            return code, status

    def _create(
        self,
        idx: int,
        stage: Stage,
        offer: Offer,
        attempts: int,
        started: str,
        previous: tuple[str, ...],
    ) -> tuple[ContainerSpec, str]:
        """Choose the GPUs and create the container, under the machine-wide GPU lock."""
        req = stage.requirements
        lock = gpu_lock() if req.wants_gpu else contextlib.nullcontext()
        with lock:
            uuids: tuple[str, ...] = ()
            if req.wants_gpu:
                _, matching = _candidates(self.p, stage)
                try:
                    busy = gpus_in_use(self.engine)
                except (engine.EngineUnreachable, engine.EngineTimeout):
                    raise InfrastructureFailure("lost the Docker engine") from None
                except engine.EngineError as exc:
                    raise InfrastructureFailure(f"the engine failed: {exc}") from None
                uuids = _pick(stage, offer, matching, busy, previous)
            spec = spec_for(stage, self.record.id, self.p.workload.name, uuids, str(self.work_dir))
            shown = f" on {', '.join(uuids)}" if uuids else ""
            self._say(f"stage {stage.name}: starting {stage.image}{shown}")
            cid = self._create_container(spec, stage)
            # Recorded once the container exists: from here its GPUs show as taken, and
            # `run --detach` (which waits for this) returns with the stage under way.
            self._save(
                idx,
                StageRecord(
                    stage.name,
                    "running",
                    None,
                    started_at=started,
                    config=offer.as_json(),
                    gpu_uuids=list(uuids),
                    attempts=attempts,
                ),
            )
        return spec, cid

    def _create_container(self, spec: ContainerSpec, stage: Stage) -> str:
        body = engine_config(spec)
        for attempt in (1, 2):
            try:
                return self.engine.create(spec.name, body)
            except engine.EngineError as exc:
                if exc.status == 409 and attempt == 1:
                    # A container of this name survived an earlier attempt (engine restart).
                    with contextlib.suppress(Exception):
                        self.engine.remove(spec.name)
                    continue
                if exc.status < 500:
                    raise NodusError(
                        f"the engine refused stage {stage.name!r}: {exc.message}"
                    ) from None
                raise InfrastructureFailure(
                    f"the engine failed to create the container: {exc.message}"
                ) from None
            except (engine.EngineUnreachable, engine.EngineTimeout):
                raise InfrastructureFailure("lost the Docker engine") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _run_container(
        self, cid: str, spec: ContainerSpec, stage: Stage, t0: float, since: float
    ) -> tuple[int, str]:
        self._stop_reason = None
        try:
            try:
                self.engine.start(cid)
            except engine.EngineError as exc:
                return self._start_failed(exc, stage)
            except (engine.EngineUnreachable, engine.EngineTimeout):
                raise InfrastructureFailure("lost the Docker engine") from None
            streamer = threading.Thread(
                target=self._stream, args=(cid, stage.name), name="nodus-stream", daemon=True
            )
            streamer.start()
            code = self._wait(cid, stage, t0)
            streamer.join(timeout=10)
            if code is None:
                return 137, "budget_exhausted"
            if code != 0:
                self._classify_exit(cid, code, since, spec)
            return code, "succeeded" if code == 0 else "failed"
        finally:
            with contextlib.suppress(Exception):
                self.engine.remove(cid)

    def _start_failed(self, exc: engine.EngineError, stage: Stage) -> tuple[int, str]:
        text = exc.message
        lowered = text.lower()
        if "could not select device driver" in lowered:
            raise NodusError(
                f"the engine cannot hand GPUs to containers: {text}",
                hint="install the NVIDIA Container Toolkit (nvidia-container-toolkit) and "
                "restart dockerd",
            )
        missing = any(m in lowered for m in _NOT_FOUND_MARKERS)
        denied = "permission denied" in lowered
        if exc.status >= 500 and not (missing or denied):
            raise InfrastructureFailure(f"the engine failed to start the container: {text}")
        # The workload's command cannot be started: its failure, exit codes as `docker run`.
        self._stop_reason = f"its command could not be started: {text}"
        self._say(f"stage {stage.name}: cannot start its command: {text}")
        return (127 if missing else 126), "failed"

    def _wait(self, cid: str, stage: Stage, t0: float) -> int | None:
        """The container's exit code, or None when the budget stopped it."""
        deadline = self._budget_deadline(t0)
        while True:
            timeout = None if deadline is None else max(0.05, deadline - time.monotonic())
            try:
                return self.engine.wait(cid, timeout)
            except engine.EngineTimeout:
                if deadline is not None and time.monotonic() >= deadline - 0.01:
                    return self._budget_stop(cid, stage)
            except engine.EngineUnreachable:
                if not self.engine.alive():
                    raise InfrastructureFailure(
                        "lost the Docker engine while the stage ran (did dockerd restart?)"
                    ) from None
            except engine.EngineError as exc:
                if exc.status == 404:
                    raise InfrastructureFailure(
                        "the container disappeared (removed from outside nodus)"
                    ) from None
                raise InfrastructureFailure(f"the engine failed: {exc.message}") from None

    def _budget_deadline(self, t0: float) -> float | None:
        budget = self.p.workload.budget
        price = self.p.price_per_hour
        if budget is None or price <= 0:
            return None
        remaining = max(0.0, budget - self.cost)
        return t0 + remaining / price * 3600

    def _budget_stop(self, cid: str, stage: Stage) -> int | None:
        budget = self.p.workload.budget or 0.0
        self._stopping = True
        self._say(
            f"stage {stage.name}: the run's cost reached its budget ${budget:,.2f} "
            f"(at ${self.p.price_per_hour:,.2f}/h); stopping it"
        )
        with contextlib.suppress(Exception):
            self.engine.kill(cid)
        try:
            code = self.engine.wait(cid, 30)
        except Exception:
            code = 137
        self._stopping = False
        if code != 137:
            return code  # it ended by itself just as the budget ran out
        self._stop_reason = f"stopped: the run's cost reached its budget ${budget:,.2f}"
        return None

    def _classify_exit(self, cid: str, code: int, since: float, spec: ContainerSpec) -> None:
        """A non-zero exit: the workload's own, out of memory, or killed from outside."""
        try:
            events = self.engine.events(
                since - 1.0,
                time.time(),
                {"container": [cid], "event": ["kill", "oom"]},
            )
        except (engine.EngineError, engine.EngineUnreachable, engine.EngineTimeout):
            events = []
        actions = [str(e.get("Action") or e.get("status") or "") for e in events]
        if "oom" in actions:
            gib = spec.memory_bytes / 1024**3
            self._stop_reason = (
                f"out of memory: it reached its {gib:g} GiB memory limit (which includes "
                "/dev/shm); set memory_gb"
            )
            return
        kills = [e for e in events if (e.get("Action") or e.get("status")) == "kill"]
        if kills:
            attrs = (kills[0].get("Actor") or {}).get("Attributes") or {}
            sig = attrs.get("signal", "?")
            raise InfrastructureFailure(
                f"the container was killed from outside the workload (signal {sig}, exit {code})",
                exit_code=code,
            )

    def _recover(self, spec: ContainerSpec | None) -> None:
        """Before a retry: the engine answers again, and the old container is gone."""
        if not self.engine.wait_until_alive(ENGINE_RETURN_SECONDS):
            raise NodusError(
                f"the Docker engine did not come back within {ENGINE_RETURN_SECONDS:g} s",
                hint="check dockerd (`docker info`, its log)",
            )
        if spec is not None:
            with contextlib.suppress(Exception):
                self.engine.remove(spec.name)

    # -- output ----------------------------------------------------------------------

    def _stream(self, cid: str, stage: str) -> None:
        prefix = f"{stage} | "
        pending: dict[int, bytes] = {}
        try:
            for kind, data in self.engine.logs(cid):
                buffer = pending.get(kind, b"") + data
                *lines, pending[kind] = buffer.split(b"\n")
                for line in lines:
                    self._emit(kind, prefix + line.decode("utf-8", "replace"))
        except Exception as exc:  # the container went away mid-stream
            if not self._stopping:
                self._emit(2, f"{prefix}[nodus: output stream ended: {type(exc).__name__}]")
        finally:
            for kind, rest in pending.items():
                if rest:
                    self._emit(kind, prefix + rest.decode("utf-8", "replace"))

    def _emit(self, kind: int, line: str) -> None:
        stream = self.err if kind == 2 else self.out
        with self._write:
            with contextlib.suppress(OSError, ValueError):
                stream.write(line + "\n")
                stream.flush()
            with contextlib.suppress(OSError, ValueError):
                self._log.write(line + "\n")
                self._log.flush()

    def _say(self, message: str) -> None:
        self.status(message)
        with self._write, contextlib.suppress(OSError, ValueError):
            self._log.write(f"nodus: {message}\n")
            self._log.flush()

    def _report_usage(self, stage: Stage, report: UsageReport) -> None:
        if not report.available:
            self._say(
                f"stage {stage.name}: could not check GPU use (no nvidia-smi on PATH): "
                "a request is not proof of use"
            )
            return
        peaks = {g.uuid: g for g in report.gpus}
        if report.used:
            detail = ", ".join(
                f"{u} (peak {peaks[u].max_utilization:g}% util, "
                f"{peaks[u].max_memory_used_mib:g} MiB)"
                for u in report.used
            )
            self._say(f"stage {stage.name}: GPUs used: {detail}")
        if report.idle:
            self._say(
                f"warning: stage {stage.name}: GPU(s) {', '.join(report.idle)} stayed idle "
                "(no utilization, no memory allocated): a request is not proof of use; check "
                "that the program sees them (CUDA_VISIBLE_DEVICES, the framework's device)"
            )
        if report.unsampled:
            self._say(
                f"stage {stage.name}: no usable reading for GPU(s) "
                f"{', '.join(report.unsampled)} (the stage ended before the first sample, "
                "or the driver reports N/A)"
            )

    # -- bookkeeping -----------------------------------------------------------------

    def _save(self, idx: int, stage: StageRecord) -> None:
        self.store.save_stage(self.record.id, idx, stage)
        self._current = (idx, stage) if stage.status == "running" else None

    def _close_current(self, status: str, message: str) -> None:
        """End the stage under way (cancelled, or failed by an error): its time is paid."""
        spent = 0.0
        if self._attempt_t0 is not None:
            spent = time.monotonic() - self._attempt_t0
            self.cost += spent / 3600 * self.p.price_per_hour
            self._attempt_t0 = None
        if self._current is None:
            return
        idx, stage = self._current
        stage.status = status
        stage.ended_at = now_iso()
        stage.message = message
        stage.runtime_seconds = spent
        stage.cost += spent / 3600 * self.p.price_per_hour
        with contextlib.suppress(Exception):
            self.store.save_stage(self.record.id, idx, stage)
        self._current = None

    def _remove_run_containers(self) -> None:
        """Remove every container of this run (twice: one may be mid-creation)."""
        for attempt in range(3):
            try:
                found = self.engine.containers({"label": [f"{LABEL_RUN}={self.record.id}"]})
            except Exception:
                return
            if not found and attempt > 0:
                return
            for c in found:
                with contextlib.suppress(Exception):
                    self.engine.remove(str(c["Id"]))
            time.sleep(0.1)


# -- signals ---------------------------------------------------------------------------

_deferred: list[int] = []


def _raise_cancelled(signum: int, frame: object) -> None:
    raise Cancelled(signum)


def _remember(signum: int, frame: object) -> None:
    _deferred.append(signum)


def install_signal_handlers() -> dict[int, Any]:
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, _raise_cancelled)
    return previous


def _defer_signals() -> None:
    """From here on a signal is noted, not raised: cleanup and records must complete."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _remember)


def restore_signal_handlers(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


# -- entry point -----------------------------------------------------------------------


def run_local(
    workload: Workload,
    file: str | None,
    retries: int,
    out: IO[str] | None = None,
    status: Callable[[str], None] | None = None,
    record: RunRecord | None = None,
    err: IO[str] | None = None,
    progress: bool = True,
) -> tuple[RunRecord, Outcome]:
    """Plan on this machine, then run every stage; returns the record and the outcome."""
    from nodus_cli import records

    store = records.open_store()
    assert store is not None
    prepared = prepare(workload, store.runtime_lookup(fingerprint(workload)))
    eng = connect_for(prepared)
    check_gpus_free(prepared, eng)
    for image in dict.fromkeys(s.image for s in workload.stages):
        ensure_image(eng, image, progress=progress)
    if record is None:
        record = store.start_run(workload, "local", prepared.price_per_hour, file, pid=os.getpid())
    else:
        store.set_pid(record.id, os.getpid())
    runner = LocalRunner(
        prepared,
        store,
        eng,
        record,
        out or sys.stdout,
        status or (lambda m: print(f"nodus: {m}", file=sys.stderr, flush=True)),
        retries,
        err=err or sys.stderr,
    )
    return record, runner.execute()


def connect_for(prepared: Prepared) -> engine.Engine:
    """The local engine, checked: reachable, and new enough for GPU device requests."""
    eng = engine.local()
    wants_gpu = any(s.requirements.wants_gpu for s in prepared.workload.stages)
    if wants_gpu and not eng.api_at_least(engine.MIN_GPU_API):
        raise NodusError(
            f"the Docker engine at {eng.where} speaks API {eng.api}; GPU device requests "
            "need 1.40 (Docker 19.03) or newer",
            hint="upgrade Docker",
        )
    return eng


def ensure_image(eng: engine.Engine, image: str, progress: bool = True) -> None:
    """Pull ``image`` when the engine does not have it, showing progress on a terminal.

    A pull that fails, or that makes no progress for ``NODUS_PULL_TIMEOUT`` seconds
    (default 120), is one clear error: nothing has started yet.
    """
    try:
        if eng.image_present(image):
            return
    except engine.EngineUnreachable as exc:
        raise exc.as_nodus_error() from None
    except engine.EngineError as exc:
        raise NodusError(f"cannot inspect image {image}: {exc}") from None
    idle = _pull_timeout()
    try:
        from nodus_cli.output import PullDisplay

        with PullDisplay(image, progress) as display:
            eng.pull(image, display.event, idle_timeout=idle)
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
