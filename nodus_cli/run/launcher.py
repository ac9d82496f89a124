"""Starting a run: check it, record it, then run it here or hand it to a background process.

:func:`prepare` does every check that can refuse a run before anything is recorded or
started: the host environment has every ``${NAME}`` the workload takes, the target can
run every stage (planned against what it holds now), the spending limits allow it.
:func:`execute` records the run and drives it in this process (``nodus run``);
:func:`submit` records it and starts a background supervisor (``nodus run --detach``,
``client.run()``), which :func:`supervise` is. A background supervisor prepares again
before it starts: what was free when the run was submitted may be taken by then.

A supervisor claims its run (its pid, host and process start time go into the record),
so a run whose supervisor died is noticed (:mod:`nodus_cli.run.reconcile`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from nodus_cli import targets
from nodus_cli.errors import (
    EXIT_BUDGET,
    EXIT_NOT_RUNNABLE,
    InvalidInput,
    NodusError,
    NotRunnable,
    OverBudget,
)
from nodus_cli.records import (
    RunRecord,
    RunStatus,
    RunStore,
    StageStatus,
    fingerprint,
    runtime_lookup,
)
from nodus_cli.run import limits
from nodus_cli.run.budget import Allowance
from nodus_cli.run.driver import RunEnd, Runner
from nodus_cli.run.sink import Sink
from nodus_cli.structs import field, struct
from nodus_cli.targets.base import TargetFailure
from nodus_cli.workload import Workload, from_json
from nodus_cli.workload.environment import (
    MissingEnvironment,
    MissingVariables,
    names,
    resolve,
)

if TYPE_CHECKING:
    import subprocess

    from nodus_cli.planning.plan import Plan
    from nodus_cli.targets.base import Preparation, Pulls, Target

#: How long a submission waits for its background supervisor to place the first task.
HANDSHAKE_SECONDS = 60.0


@struct
class Launch:
    """A workload checked against a target, ready to be recorded and run."""

    workload: Workload
    target: Target
    plan: Plan
    preparation: Preparation
    #: Each stage's environment with ``${NAME}`` resolved (held in memory only).
    env: dict[str, dict[str, str]]
    file: str | None = None
    warnings: list[str] = field(default_factory=list)
    allowance: Allowance | None = None
    #: Values taken from the host, and the template each stands for (masked in logs).
    masks: dict[str, str] = field(default_factory=dict)


#: Host values shorter than this are not masked in logs: "1" or "eu" would garble every
#: line, and secrets are longer.
MASK_MIN_LENGTH = 6


def host_values(workload: Workload, host: Mapping[str, str]) -> dict[str, str]:
    """Every value a ``${NAME}`` of the workload takes from ``host``: value -> ``${NAME}``."""
    found: dict[str, str] = {}
    for stage in workload.stages:
        for value in stage.env.values():
            for name in names(value):
                taken = host.get(name)
                if taken is not None and len(taken) >= MASK_MIN_LENGTH:
                    found.setdefault(taken, f"${{{name}}}")
    return found


def resolved_env(workload: Workload, host: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Each stage's env with templates resolved; every missing variable in one error."""
    found: dict[str, dict[str, str]] = {}
    missing: list[tuple[str, str]] = []
    for stage in workload.stages:
        try:
            found[stage.name] = resolve(stage.env, host)
        except MissingVariables as exc:
            missing.extend(exc.missing)
    if missing:
        raise MissingEnvironment(missing)
    return found


def prepare(
    workload: Workload,
    target_name: str,
    store: RunStore,
    *,
    catalog: str | None = None,
    file: str | None = None,
    pulls: Pulls | None = None,
    host_env: Mapping[str, str] | None = None,
    run_id: str | None = None,
) -> Launch:
    """Every check that can refuse the run, before anything is recorded or started
    (``run_id``: the run is recorded already, a background supervisor checking again)."""
    host = os.environ if host_env is None else host_env
    env = resolved_env(workload, host)
    target = targets.get(target_name, store, catalog, pulls)
    history = runtime_lookup(store, fingerprint(workload))
    plan = target.plan(workload, history)
    try:
        preparation = target.prepare(workload, plan)
    except NotRunnable as exc:
        # A target sees the workload, never the file it came from; the launcher knows the
        # file, so it adds the hint that names the real path rather than a placeholder.
        if exc.hint is None and not plan.feasible:
            exc.hint = plan_elsewhere_hint(file)
        raise
    warnings = [*preparation.warnings, *plan.warnings]
    allowance = limits.check(store, workload, plan, preparation.price_per_hour, run_id)
    masks = host_values(workload, host)
    return Launch(workload, target, plan, preparation, env, file, warnings, allowance, masks)


def plan_elsewhere_hint(file: str | None) -> str:
    """Where to look when the target cannot run a stage at all: the plan against the
    catalog, by the file's own path (quoted for a shell) when it is still there."""
    what = "shows the configurations elsewhere that could run it"
    if file is None or not Path(file).is_file():
        return f"`nodus plan` on the workload file {what}"
    return f"`nodus plan {shlex.quote(file)}` {what}"


def execute(
    launch: Launch,
    store: RunStore,
    *,
    retries: int = 0,
    sink: Sink | None = None,
    record: RunRecord | None = None,
    item_ended: Callable[[int, StageStatus, str | None], None] | None = None,
    stopped_by: Callable[[], str | None] | None = None,
) -> tuple[RunRecord, RunEnd]:
    """Record the run (unless it is already) and drive it in this process.

    A run refused before its first task ran (its GPUs taken meanwhile, with ``--no-wait``;
    the engine refusing its container) leaves nothing: no container, no work folder, and,
    when it was recorded here, no record; the error says why, once. A background
    supervisor (``record`` given) records the refusal for its submitter instead.

    ``item_ended`` and ``stopped_by`` are for a caller in this process (a Python function
    run): see :class:`~nodus_cli.run.driver.Runner`."""
    made_here = record is None
    if record is None:
        record = store.create_run(
            launch.workload, launch.target.name, launch.preparation.price_per_hour, launch.file
        )
    store.claim(record.id, os.getpid())
    output = launch.workload.output_dir
    runner = Runner(
        launch.target,
        store,
        record,
        launch.workload,
        launch.plan,
        launch.env,
        retries=retries,
        sink=sink,
        allowance=launch.allowance,
        copy_to=Path(output) if output else None,
        masks=launch.masks,
        item_ended=item_ended,
        stopped_by=stopped_by,
    )
    try:
        return record, runner.execute()
    except NodusError:
        if not runner.began:
            _leave_nothing(launch.target, record)
            if made_here:
                with contextlib.suppress(NodusError):
                    store.forget(record.id)
        raise
    finally:
        launch.target.close()


def _leave_nothing(target: Target, record: RunRecord) -> None:
    """Remove what a run refused before its first task ran may have made: a container
    withdrawn half-way, its (empty) work folder."""
    with contextlib.suppress(TargetFailure, NodusError, OSError):
        target.cleanup(record.id)
    with contextlib.suppress(TargetFailure, NodusError, OSError):
        target.release(record, True, None)


def submit(
    launch: Launch,
    store: RunStore,
    *,
    retries: int = 0,
    catalog: str | None = None,
    handshake: bool = False,
) -> RunRecord:
    """Record the run and start its background supervisor; returns at once, or, with
    ``handshake``, once the first task holds its place (or the run ended early)."""
    record = store.create_run(
        launch.workload, launch.target.name, launch.preparation.price_per_hour, launch.file
    )
    launch.target.close()
    args = [sys.executable, "-m", "nodus_cli", "_exec", record.id, "--retries", str(retries)]
    if catalog:
        args += ["--catalog", catalog]
    import subprocess  # here: a foreground run starts no process (start-up is felt in CI)

    with store.stderr_file(record.id) as errors:
        child = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
            env={**os.environ, "NODUS_HOME": str(store.root)},
        )
    store.claim(record.id, child.pid)
    if not handshake:
        return record
    return _handshake(store, record.id, child)


def _handshake(store: RunStore, run_id: str, child: subprocess.Popen[bytes]) -> RunRecord:
    """Wait until the first task holds its place, the run ended, or the child died.

    When the supervisor's own checks refused the run (what was free at submission is
    taken now), the refusal is raised here, with its words, hint and exit code, as a
    foreground run gives it, and the run leaves no record."""
    import subprocess  # lazy, for start-up: as in submit

    deadline = time.monotonic() + HANDSHAKE_SECONDS
    delay = 0.02
    while True:
        current = store.get(run_id)
        first = current.stages[0] if current.stages else None
        # Holding its place: a container made, or a place in line (queued for GPUs).
        placed = first is not None and (
            first.started_at is not None
            or not first.status.active
            or current.status == RunStatus.QUEUED
        )
        if not current.status.active or placed:
            refusal = _refusal(store, current)
            if refusal is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=10)  # it has recorded all it will
                with contextlib.suppress(NodusError):
                    store.forget(run_id)
                raise refusal
            return current
        if child.poll() is not None:
            time.sleep(0.05)
            current = store.get(run_id)
            if current.status.active:  # it died without recording an outcome (a crash)
                store.finish_run(
                    run_id,
                    RunStatus.FAILED,
                    child.returncode or 1,
                    0.0,
                    f"the background process exited ({child.returncode}) before starting; "
                    f"see {store.stderr_path(run_id)}",
                )
                current = store.get(run_id)
            return current
        if time.monotonic() >= deadline:
            return current
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)


#: How a background supervisor's refusal is written in the run's log, for its submitter.
_ERROR, _HINT = "error: ", "hint: "
_REFUSALS: dict[int, type[NodusError]] = {
    EXIT_NOT_RUNNABLE: NotRunnable,
    EXIT_BUDGET: OverBudget,
}


def _refusal(store: RunStore, record: RunRecord) -> NodusError | None:
    """The refusal a background supervisor recorded for a run that never started (its
    message and exit code in the record, the same words and the hint in its log), or
    None when the run started, or ended otherwise."""
    if record.status.active or not record.message or record.exit_code is None:
        return None
    if any(s.started_at is not None for s in record.stages):
        return None
    try:
        lines, _ = store.read_log(record.id)
    except OSError:
        return None
    said = [line.text for line in lines if line.stream == "nodus"]
    if _ERROR + record.message not in said:
        return None
    after = said[said.index(_ERROR + record.message) + 1 :]
    hint = after[0][len(_HINT) :] if after and after[0].startswith(_HINT) else None
    kind = _REFUSALS.get(record.exit_code, InvalidInput)
    return kind(record.message, exit_code=record.exit_code, hint=hint)


def supervise(run_id: str, retries: int, catalog: str | None) -> int:
    """The background half of a submission: prepare again, then run to completion."""
    store = RunStore.open()
    record = store.get(run_id)
    store.claim(run_id, os.getpid())
    workload = from_json(record.workload_json)
    try:
        launch = prepare(
            workload, record.target, store, catalog=catalog, file=record.file, run_id=run_id
        )
        for warning in launch.warnings:
            store.log_writer(run_id).write(None, None, "nodus", f"warning: {warning}")
        _, outcome = execute(launch, store, retries=retries, record=record)
    except NodusError as exc:
        # Refused before the first task (GPUs taken meanwhile, an image gone, a spending
        # limit reached): record it.
        current = store.get(run_id)
        if current.status.active:
            log = store.log_writer(run_id)
            log.write(None, None, "nodus", _ERROR + exc.message)
            if exc.hint:
                log.write(None, None, "nodus", _HINT + exc.hint)
            log.close()
            status = RunStatus.BUDGET_EXHAUSTED if isinstance(exc, OverBudget) else RunStatus.FAILED
            store.finish_run(run_id, status, exc.exit_code, current.cost, exc.message)
        return exc.exit_code
    return outcome.exit_code
