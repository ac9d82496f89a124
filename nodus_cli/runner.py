"""Running a workload on the local Docker engine, stage by stage, and recording it.

Everything that could refuse the run (this machine lacks the GPUs, the image cannot be
had, the engine is down) is checked before the first container starts. While a stage
runs, its output streams live with the stage name; a failure stops later stages; Ctrl-C
or SIGTERM removes every container the run started; the budget stops the run when its
cost reaches it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from nodus_cli import config, engine, localhost
from nodus_cli.catalog import Offer
from nodus_cli.containers import LABEL_RUN, ContainerSpec, spec_for
from nodus_cli.gpu_usage import Sampler, UsageReport
from nodus_cli.planner import Plan, RuntimeLookup, no_history, plan_workload
from nodus_cli.problems import NodusError
from nodus_cli.records import RunRecord, RunStore, StageRecord, fingerprint, now_iso
from nodus_cli.workload import Stage, Workload

EXIT_NOT_RUNNABLE = 3
EXIT_BUDGET = 4
EXIT_CANCELLED = 130
INFRA_EXIT_CODES = (137,)  # SIGKILL from outside the workload: the engine or an operator


class Cancelled(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class InfrastructureFailure(Exception):
    """The engine failed the stage (not the workload's own exit): worth a retry."""


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


def prepare(workload: Workload, history: RuntimeLookup | None = None) -> Prepared:
    """Plan against this machine; refuse before anything starts when it cannot run a stage."""
    wants_gpu = any(s.requirements.wants_gpu for s in workload.stages)
    found = localhost.query_gpus() if wants_gpu else []
    offers = localhost.offers(found)
    plan = plan_workload(workload, offers, target="local", history=history or no_history)
    for stage_plan in plan.stages:
        if not stage_plan.feasible:
            raise NodusError(
                f"this machine cannot run stage {stage_plan.name!r}: "
                f"{stage_plan.explanation or 'no eligible configuration'}.\n"
                f"This machine has {localhost.describe(found)}, {offers[0].vcpus:g} CPUs, "
                f"{offers[0].memory_gb:g} GB memory, {offers[0].disk_gb or 0:g} GB free disk.",
                exit_code=EXIT_NOT_RUNNABLE,
                hint="`nodus plan FILE` shows the configurations elsewhere that could run it",
            )
    return Prepared(workload, plan, found, config.local().price_per_hour)


class LocalRunner:
    """Runs one prepared workload; ``out`` receives the live, stage-prefixed output."""

    def __init__(
        self,
        prepared: Prepared,
        store: RunStore,
        client: Any,
        record: RunRecord,
        out: IO[str],
        status: Callable[[str], None],
        retries: int = 0,
    ) -> None:
        self.p = prepared
        self.store = store
        self.client = client
        self.record = record
        self.out = out
        self.status = status
        self.retries = retries
        self.cost = 0.0
        self.work_dir = store.root / "work" / record.id
        self._stop_reason: str | None = None
        self._log = store.log_path(record.id).open("a", encoding="utf-8")

    # -- the run -------------------------------------------------------------------

    def execute(self) -> Outcome:
        previous = _install_signal_handlers()
        outcome = Outcome("failed", 1, 0.0)
        current: int | None = None
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            self.work_dir.chmod(0o777)  # the image's user may not be root
            stages = self.p.workload.stages
            exit_code = 0
            status = "succeeded"
            message = None
            for idx, stage in enumerate(stages):
                current = idx
                code, stage_status, report = self._run_stage(idx, stage)
                if report is not None:
                    outcome.usage.append(report)
                if stage_status != "succeeded":
                    exit_code = EXIT_BUDGET if stage_status == "budget_exhausted" else code
                    status = stage_status
                    message = f"stage {stage.name!r} " + (
                        "reached the budget"
                        if stage_status == "budget_exhausted"
                        else f"exited with {code}"
                    )
                    for later in range(idx + 1, len(stages)):
                        self.store.save_stage(
                            self.record.id,
                            later,
                            StageRecord(
                                stages[later].name,
                                "skipped",
                                None,
                                message=f"not started: {message}",
                            ),
                        )
                    break
            current = None
            outcome = Outcome(status, exit_code, self.cost, message, outcome.usage)
        except Cancelled as exc:
            self._remove_run_containers()
            if current is not None:
                self._mark_cancelled(current)
            outcome = Outcome(
                "cancelled", 128 + exc.signum, self.cost, f"cancelled by {exc}", outcome.usage
            )
        finally:
            _restore_signal_handlers(previous)
            self.store.finish_run(
                self.record.id, outcome.status, outcome.exit_code, self.cost, outcome.message
            )
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self._log.close()
        return outcome

    def _mark_cancelled(self, idx: int) -> None:
        stage = self.p.workload.stages[idx]
        self.store.save_stage(
            self.record.id,
            idx,
            StageRecord(
                stage.name,
                "cancelled",
                None,
                ended_at=now_iso(),
                message="cancelled; its container was removed",
            ),
        )

    def _run_stage(self, idx: int, stage: Stage) -> tuple[int, str, UsageReport | None]:
        offer = self._offer_for(stage)
        attempts = 0
        while True:
            attempts += 1
            with self._gpu_lock():
                uuids = self._choose_gpus(stage)
                started = now_iso()
                self.store.save_stage(
                    self.record.id,
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
            spec = spec_for(stage, self.record.id, self.p.workload.name, uuids, str(self.work_dir))
            shown = f" on {', '.join(uuids)}" if uuids else ""
            self.status(f"stage {stage.name}: starting {stage.image}{shown}")
            t0 = time.monotonic()
            try:
                with Sampler(uuids) as sampler:
                    code, stage_status = self._run_container(spec, stage)
                report = sampler.report() if uuids else None
            except InfrastructureFailure as exc:
                runtime = time.monotonic() - t0
                self.cost += runtime / 3600 * self.p.price_per_hour
                if attempts <= self.retries:
                    self.status(
                        f"stage {stage.name}: {exc}; retrying with the same "
                        f"{stage.requirements.gpu_count or 'no'} GPU(s) "
                        f"({attempts}/{self.retries})"
                    )
                    continue
                code, stage_status, report = 1, "failed", None
                self.store.save_stage(
                    self.record.id,
                    idx,
                    StageRecord(
                        stage.name,
                        "failed",
                        None,
                        started_at=started,
                        ended_at=now_iso(),
                        runtime_seconds=runtime,
                        cost=runtime / 3600 * self.p.price_per_hour,
                        config=offer.as_json(),
                        gpu_uuids=list(uuids),
                        attempts=attempts,
                        message=str(exc),
                    ),
                )
                self.status(f"stage {stage.name}: {exc}")
                return code, stage_status, report
            runtime = time.monotonic() - t0
            stage_cost = runtime / 3600 * self.p.price_per_hour
            self.cost += stage_cost
            self.store.save_stage(
                self.record.id,
                idx,
                StageRecord(
                    stage.name,
                    stage_status,
                    code,
                    started_at=started,
                    ended_at=now_iso(),
                    runtime_seconds=runtime,
                    cost=stage_cost,
                    config=offer.as_json(),
                    gpu_uuids=list(uuids),
                    attempts=attempts,
                    gpu_report=report.as_json() if report else None,
                    message=self._stop_reason,
                ),
            )
            self.status(f"stage {stage.name}: {stage_status} (exit {code}) in {runtime:.1f}s")
            if report is not None:
                self._report_usage(stage, report)
            return code, stage_status, report

    def _offer_for(self, stage: Stage) -> Offer:
        for stage_plan in self.p.plan.stages:
            if stage_plan.name == stage.name and stage_plan.selected is not None:
                return stage_plan.selected.offer
        raise NodusError(f"stage {stage.name!r} has no configuration on this machine")

    @contextlib.contextmanager
    def _gpu_lock(self) -> Iterator[None]:
        """Serialize GPU hand-out across nodus processes on this machine."""
        lock_path = self.store.root / "gpus.lock"
        with lock_path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _choose_gpus(self, stage: Stage) -> tuple[str, ...]:
        req = stage.requirements
        if not req.wants_gpu:
            return ()
        offer = self._offer_for(stage)
        matching = [
            g
            for g in self.p.local_gpus
            if g.family == offer.gpu
            and (req.peak_memory_gb is None or g.nominal_memory_gb >= req.peak_memory_gb)
        ]
        busy = self.store.busy_gpus()
        free = [g for g in matching if g.uuid not in busy]
        if len(free) < req.gpu_count:
            holders = sorted({busy[g.uuid] for g in matching if g.uuid in busy})
            raise NodusError(
                f"stage {stage.name!r} needs {req.gpu_count}× {offer.gpu}; this machine has "
                f"{len(matching)}, {len(matching) - len(free)} of them held by "
                f"{', '.join(holders)}",
                exit_code=EXIT_NOT_RUNNABLE,
                hint="wait for that run to finish, or cancel it",
            )
        return tuple(g.uuid for g in free[: req.gpu_count])

    def _run_container(self, spec: ContainerSpec, stage: Stage) -> tuple[int, str]:
        from docker.errors import APIError, NotFound
        from requests.exceptions import ConnectionError as RequestsConnectionError
        from requests.exceptions import ReadTimeout

        self._stop_reason = None
        try:
            container = self.client.containers.create(**docker_create_args(spec))
        except APIError as exc:
            if exc.status_code is not None and exc.status_code < 500:
                raise NodusError(
                    f"the engine refused stage {stage.name!r}: {exc.explanation or exc}"
                ) from None
            raise InfrastructureFailure(
                f"the engine failed to create the container: {exc}"
            ) from None
        streamer: threading.Thread | None = None
        try:
            try:
                container.start()
            except APIError as exc:
                raise InfrastructureFailure(
                    f"the engine failed to start the container: {exc.explanation or exc}"
                ) from None
            streamer = threading.Thread(
                target=self._stream, args=(container, stage.name), daemon=True
            )
            streamer.start()
            deadline = self._budget_deadline()
            while True:
                wait_for = (
                    30.0 if deadline is None else max(0.05, min(30.0, deadline - time.time()))
                )
                try:
                    result = container.wait(timeout=wait_for)
                    break
                except (ReadTimeout, RequestsConnectionError) as exc:
                    if deadline is not None and time.time() >= deadline:
                        self._stop_reason = "stopped at the budget"
                        self.status(
                            f"stage {stage.name}: the run's cost reached its budget "
                            f"(${self.p.workload.budget:,.2f}); stopping"
                        )
                        with contextlib.suppress(APIError):
                            container.kill()
                        container.wait(timeout=30)
                        if streamer is not None:
                            streamer.join(timeout=5)
                        return 137, "budget_exhausted"
                    if isinstance(exc, RequestsConnectionError) and not _engine_alive(self.client):
                        raise InfrastructureFailure("lost the Docker engine") from None
                except NotFound:
                    raise InfrastructureFailure("the container disappeared") from None
            if streamer is not None:
                streamer.join(timeout=10)
            code = int(result.get("StatusCode", 1))
            if code in INFRA_EXIT_CODES:
                state = _state(container)
                if not state.get("OOMKilled", False):
                    raise InfrastructureFailure(
                        f"the container was killed from outside (exit {code})"
                    )
            return code, "succeeded" if code == 0 else "failed"
        finally:
            with contextlib.suppress(Exception):
                container.remove(force=True)

    def _budget_deadline(self) -> float | None:
        budget = self.p.workload.budget
        price = self.p.price_per_hour
        if budget is None or price <= 0:
            return None
        remaining = max(0.0, budget - self.cost)
        return time.time() + remaining / price * 3600

    def _stream(self, container: Any, stage: str) -> None:
        prefix = f"{stage} | "
        pending = b""
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._emit(prefix + line.decode("utf-8", "replace"))
            if pending:
                self._emit(prefix + pending.decode("utf-8", "replace"))
        except Exception as exc:  # the container went away mid-stream: say so, keep running
            self._emit(f"{prefix}[nodus: output stream ended: {type(exc).__name__}]")

    def _emit(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()
        self._log.write(line + "\n")
        self._log.flush()

    def _remove_run_containers(self) -> None:
        with contextlib.suppress(Exception):
            for c in self.client.containers.list(
                all=True, filters={"label": f"{LABEL_RUN}={self.record.id}"}
            ):
                with contextlib.suppress(Exception):
                    c.remove(force=True)

    def _report_usage(self, stage: Stage, report: UsageReport) -> None:
        if not report.available:
            return
        used = [g.uuid for g in report.gpus if g.used]
        if used:
            self.status(f"stage {stage.name}: GPUs used: {', '.join(used)}")
        if report.idle:
            self.status(
                f"warning: stage {stage.name}: GPU(s) {', '.join(report.idle)} stayed idle "
                "(0% utilization): a request is not proof of use; check that the program "
                "sees them (CUDA_VISIBLE_DEVICES, the framework's device)"
            )


def docker_create_args(spec: ContainerSpec) -> dict[str, Any]:
    """Arguments for ``containers.create``: the whole local container contract in one place."""
    from docker.types import DeviceRequest, Mount

    args: dict[str, Any] = {
        "image": spec.image,
        "command": spec.command,
        "name": spec.name,
        "environment": spec.env,
        "labels": spec.labels,
        "nano_cpus": spec.nano_cpus,
        "mem_limit": spec.memory_bytes,
        "memswap_limit": spec.memory_bytes,
        "shm_size": spec.shm_bytes,
        "privileged": False,
        "security_opt": ["no-new-privileges"],
        "detach": True,
    }
    if spec.gpu_uuids:
        args["device_requests"] = [
            DeviceRequest(driver="nvidia", device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]])
        ]
    if spec.work_dir_host is not None:
        from nodus_cli.containers import WORK_DIR_IN_CONTAINER

        args["mounts"] = [Mount(WORK_DIR_IN_CONTAINER, spec.work_dir_host, type="bind")]
    return args


def _state(container: Any) -> dict[str, Any]:
    try:
        container.reload()
        state: dict[str, Any] = container.attrs.get("State", {})
        return state
    except Exception:
        return {}


def _engine_alive(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def _raise_cancelled(signum: int, frame: object) -> None:
    raise Cancelled(signum)


def _install_signal_handlers() -> dict[int, Any]:
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, _raise_cancelled)
    return previous


def _restore_signal_handlers(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def run_local(
    workload: Workload,
    file: str | None,
    retries: int,
    out: IO[str] | None = None,
    status: Callable[[str], None] | None = None,
    record: RunRecord | None = None,
) -> tuple[RunRecord, Outcome]:
    """Plan on this machine, then run every stage; returns the record and the outcome."""
    from nodus_cli import records

    store = records.open_store()
    assert store is not None
    prepared = prepare(workload, store.runtime_lookup(fingerprint(workload)))
    client = engine.connect()
    for image in dict.fromkeys(s.image for s in workload.stages):
        engine.ensure_image(client, image)
    if record is None:
        record = store.start_run(workload, "local", prepared.price_per_hour, file, pid=os.getpid())
    else:
        store.set_pid(record.id, os.getpid())
    runner = LocalRunner(
        prepared,
        store,
        client,
        record,
        out or sys.stdout,
        status or (lambda m: print(f"nodus: {m}", file=sys.stderr, flush=True)),
        retries,
    )
    return record, runner.execute()


def work_root() -> Path:
    return config.home() / "work"
