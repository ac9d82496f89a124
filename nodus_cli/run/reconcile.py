"""No run stays ``running`` with nobody supervising it, and nothing outlives its record.

A supervisor (the ``nodus run`` process, or the background one of ``--detach`` and the
Python API) can be killed hard (a CI timeout sends SIGKILL) or lose its engine; it then
cannot record its end nor remove its containers, and the GPUs those hold stay taken.
:func:`reconcile`, which every command that reads the records calls first, notices:
a run still pending or running whose supervisor on this host is gone has what it left
stopped and removed on its target (containers, services, volumes; which frees its
GPUs), its work folder kept (when it holds something) or copied as for any failed run,
and is recorded ``failed`` with the reason; a run that only waited in the queue is
recorded ``cancelled`` (nothing had started), its waiting stages with it, their place in
line and holders no longer said. A run that ended while its target could not be reached (the engine
was down) keeps ``cleanup_pending`` until a later command removes what it left.

A target whose jobs belong to a scheduler (``owns_jobs``: Slurm) is the exception: its
jobs outlive nodus by design, so nothing is cancelled; the target is asked how the run
stands (:meth:`~nodus_cli.targets.base.Target.settle`): still running, the record stays
as it is and the next command asks again; ended, its end is recorded as the scheduler
tells it. Only ``nodus stop`` cancels such a job.

:func:`stop` is ``nodus stop``: it asks the supervisor to stop (SIGTERM, and a flag in
the records for a supervisor no signal can reach) and waits for the record to end; a run
whose supervisor is gone is stopped here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from enum import StrEnum
from pathlib import Path
from typing import Any

from nodus_cli import targets
from nodus_cli.errors import NodusError
from nodus_cli.records import RunRecord, RunStatus, RunStore, StoreError, hostname, process_alive
from nodus_cli.structs import struct
from nodus_cli.targets.base import TargetFailure

#: A run recorded this long ago with no supervisor yet was abandoned before it started.
CLAIM_GRACE_SECONDS = 60.0
#: How long ``stop`` waits for a supervisor to record its end.
STOP_WAIT_SECONDS = 60.0


class Stopped(StrEnum):
    STOPPED = "stopped"
    NOT_RUNNING = "not_running"


@struct(frozen=True)
class StopResult:
    """What ``nodus stop`` did to one run."""

    run_id: str
    result: Stopped
    status: RunStatus
    message: str
    #: What could not be recorded (a full disk): the run was stopped all the same.
    unrecorded: str | None = None

    def as_json(self) -> dict[str, Any]:
        """One run's entry of ``nodus stop --json`` (docs/json.md)."""
        return {
            "id": self.run_id,
            "result": str(self.result),
            "status": str(self.status),
            "message": self.message,
            "unrecorded": self.unrecorded,
        }


def supervised(record: RunRecord) -> bool:
    """Whether a live process on this host (or any process elsewhere) still supervises it."""
    if record.host is not None and record.host != hostname():
        return True  # another machine's process: nodus cannot tell from here
    if record.pid is None:
        return _age(record) < CLAIM_GRACE_SECONDS
    return process_alive(record.pid, record.pid_start)


def _in_a_thread(record: RunRecord) -> bool:
    """A Python function call is driven by a thread of the calling program (the Python
    API): a signal would end that program, so the request in the records alone stops it."""
    stages = (record.workload_json or {}).get("stages") or []
    return any(isinstance(s, dict) and s.get("function") for s in stages)


def _age(record: RunRecord) -> float:
    try:
        started = time.mktime(time.strptime(record.started_at[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return 0.0
    return time.mktime(time.gmtime()) - started


def reconcile(store: RunStore, catalog: str | None = None) -> list[str]:
    """Record runs whose supervisor died, and finish pending clean-ups; what was done."""
    if store.read_only:
        if store.why is not None:  # a full disk: say so where the records are read
            return [
                f"warning: {store.why.message}: what is recorded is shown, but nothing "
                "new can be recorded until there is space"
            ]
        return []
    try:
        active = store.active()
    except StoreError:
        return []  # `runs` and `logs` still read what they can
    said: list[str] = []
    for record in active:
        if record.status.active:
            if supervised(record):
                continue
            if _owns_jobs(record.target):
                note = _settle(store, record, catalog)
                if note:
                    said.append(note)
                continue
            said.append(_abandoned(store, record, catalog))
        elif record.cleanup_pending:
            note = _clean(store, record, catalog)
            if note:
                said.append(note)
    return said


def _owns_jobs(name: str) -> bool:
    try:
        return targets.owns_jobs(name)
    except ImportError:
        return False


def _settle(store: RunStore, record: RunRecord, catalog: str | None) -> str | None:
    """A run of a target that owns its jobs, whose supervisor died: record how it ended
    when the scheduler says it has (None while it still runs, or when the scheduler
    cannot be asked now: a later command asks again)."""
    try:
        target = targets.get(record.target, store, catalog)
        try:
            settled = target.settle(record)
        finally:
            target.close()
    except (TargetFailure, NodusError):
        return None
    if settled is None:
        return None
    for index, stage in settled.stages.items():
        store.save_stage(record.id, index, stage)
    for index, tasks in settled.tasks.items():
        store.save_tasks(record.id, index, tasks)
    _call_folders(store, record)  # a function run's caller is gone: nobody reads its outcome
    cost = sum(s.cost for s in settled.stages.values()) or record.cost
    store.finish_run(record.id, settled.status, settled.exit_code, cost, settled.message)
    return f"run {record.id}: {settled.message}"


def _abandoned(store: RunStore, record: RunRecord, catalog: str | None) -> str:
    who = f"its nodus process ({record.pid})" if record.pid else "its nodus process"
    removed, pending = _remove(store, record, catalog)
    removed += _call_folders(store, record)
    work = _release(store, record, catalog)
    reason = f"{who} ended without recording an outcome (killed, or it crashed)"
    # A run that only waited in the queue never started anything: it is cancelled, not
    # failed (its queue entries are removed with the rest).
    status = RunStatus.CANCELLED if record.status == RunStatus.QUEUED else RunStatus.FAILED
    if status == RunStatus.CANCELLED:
        reason += " while it waited in the queue for GPUs; nothing had started"
    if removed:
        reason += f"; removed what it left: {', '.join(removed)}"
    if pending:
        reason += f"; not yet removed: {pending} (a later nodus command retries)"
    cost = sum(s.cost for s in record.stages) or record.cost
    store.finish_run(record.id, status, None, cost, reason, output=work)
    store.set_cleanup_pending(record.id, bool(pending))
    return f"run {record.id}: {reason}"


def _clean(store: RunStore, record: RunRecord, catalog: str | None) -> str | None:
    removed, pending = _remove(store, record, catalog)
    if pending:
        return None
    store.set_cleanup_pending(record.id, False)
    return f"run {record.id}: removed what it left: {', '.join(removed)}" if removed else None


def _remove(store: RunStore, record: RunRecord, catalog: str | None) -> tuple[list[str], str]:
    """Stop and remove what the run left on its target: (what was removed, what remains)."""
    try:
        target = targets.get(record.target, store, catalog)
        try:
            left = target.cleanup(record.id)
        finally:
            target.close()
    except (TargetFailure, NodusError) as exc:
        message = exc.message if isinstance(exc, NodusError) else str(exc)
        return [], message
    return left.removed, "; ".join(left.remaining)


def _call_folders(store: RunStore, record: RunRecord) -> list[str]:
    """Remove the folders of a function run whose caller is gone (nobody will read its
    outcome): what was removed."""
    from nodus_cli.functions.layout import CallFolder

    removed = []
    for stage in (record.workload_json or {}).get("stages") or []:
        call = (stage.get("function") or {}).get("call") if isinstance(stage, dict) else None
        folder = CallFolder(store.root, str(call)) if call else None
        if folder is not None and folder.exists():
            folder.remove()
            removed.append(f"call folder {folder.path}")
    return removed


def _release(store: RunStore, record: RunRecord, catalog: str | None) -> dict[str, object] | None:
    output = (record.workload_json or {}).get("output_dir")
    try:
        target = targets.get(record.target, store, catalog)
        work = target.release(record, False, Path(output) if output else None)
    except (TargetFailure, NodusError, OSError):
        return None
    return work.as_json() if work.kind != "none" else None


def stop(store: RunStore, run_id: str, catalog: str | None = None) -> StopResult:
    """Stop a run (``nodus stop``): STOPPED when it was running, NOT_RUNNING otherwise.

    The run is stopped first and recorded afterwards: when the records cannot be written
    (a full disk), its supervisor is signalled all the same, what it left is removed, and
    the result says what could not be recorded. An unknown id raises
    :class:`~nodus_cli.errors.UsageError`.
    """
    record = store.get(run_id)
    if not record.status.active:
        return StopResult(
            record.id,
            Stopped.NOT_RUNNING,
            record.status,
            f"run {record.id} is not running: it ended {record.status}",
        )
    unrecorded: StoreError | None = None
    try:
        store.request_stop(record.id)
    except StoreError as exc:
        unrecorded = exc  # a supervisor no signal reaches is stopped from here below
    here = record.host in (None, hostname())
    if supervised(record) and record.pid is not None and here and not _in_a_thread(record):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(record.pid, signal.SIGTERM)
    if supervised(record) and (unrecorded is None or here):
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while time.monotonic() < deadline:
            current = store.get(record.id)
            if not current.status.active:
                return StopResult(
                    record.id,
                    Stopped.STOPPED,
                    current.status,
                    f"run {record.id} stopped: {current.message or current.status}",
                )
            if not supervised(current):
                break
            time.sleep(0.1)
    # Nobody (left) to stop it, or its supervisor could not record its end: stop it here.
    removed, pending = _remove(store, record, catalog)
    removed += _call_folders(store, record)
    work = _release(store, record, catalog)
    message = "stopped by `nodus stop`"
    if removed:
        message += f"; removed {', '.join(removed)}"
    if pending:
        message += f"; not yet removed: {pending} (a later nodus command retries)"
    cost = sum(s.cost for s in record.stages) or record.cost
    try:
        store.finish_run(record.id, RunStatus.CANCELLED, 143, cost, message, output=work)
        store.set_cleanup_pending(record.id, bool(pending))
    except StoreError as exc:
        unrecorded = exc
    else:
        unrecorded = None
    text = f"run {record.id} {message}"
    if unrecorded is None:
        return StopResult(record.id, Stopped.STOPPED, RunStatus.CANCELLED, text)
    said = f"{unrecorded.message} ({unrecorded.hint})" if unrecorded.hint else unrecorded.message
    return StopResult(
        record.id,
        Stopped.STOPPED,
        RunStatus.CANCELLED,
        text,
        unrecorded=f"it was stopped, but that could not be recorded: {said}; the records say "
        f"{record.status} until there is space, then the next nodus command records it failed",
    )
