"""``nodus run`` and ``nodus rerun``: run a workload locally or on a Swarm cluster.

The local path is kept lean (no rich; the Docker SDK only once the engine is reached):
``nodus run`` of a one-stage echo is measured against ``docker run --rm``
(benchmarks/run_overhead.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import IO, Any

from nodus_cli import records
from nodus_cli.commands.plan import load_valid
from nodus_cli.output import emit_json
from nodus_cli.problems import NodusError
from nodus_cli.workload import Workload

#: How long ``--detach`` waits for the background process to start the first stage.
DETACH_HANDSHAKE_SECONDS = 60.0


def run(
    file: str, target: str, catalog_path: str | None, detach: bool, retries: int, as_json: bool
) -> int:
    workload = load_valid(file)
    return _start(workload, file, target, catalog_path, detach, retries, as_json)


def rerun(run_id: str, detach: bool, retries: int, as_json: bool) -> int:
    store = records.open_store()
    assert store is not None
    previous = store.get(run_id)
    workload = records.workload_from_json(previous.workload_json)
    _status(f"re-running {previous.id} ({previous.workload}) on {previous.target}")
    return _start(workload, previous.file, previous.target, None, detach, retries, as_json)


def _start(
    workload: Workload,
    file: str | None,
    target: str,
    catalog_path: str | None,
    detach: bool,
    retries: int,
    as_json: bool,
) -> int:
    if target == "catalog":
        raise NodusError(
            "the catalog is a market of quotes, not a place to run: use --target local or "
            "--target swarm (nodus plan prices the catalog)",
            exit_code=2,
        )
    if detach:
        return _detach(workload, file, target, catalog_path, retries, as_json)
    # With --json, stdout carries only the final document: the stages' output goes to stderr.
    out = sys.stderr if as_json else sys.stdout
    if target == "swarm":
        from nodus_cli import swarm

        record, outcome = swarm.run_swarm(
            workload, file, retries, catalog_path, out=out, status=_status
        )
    else:
        from nodus_cli import runner

        record, outcome = runner.run_local(
            workload,
            file,
            retries,
            out=out,
            status=_status,
            err=sys.stderr,
            progress=not as_json,
        )
    _finish(record.id, outcome.status, outcome.exit_code, outcome.cost, as_json)
    return int(outcome.exit_code)


def _finish(run_id: str, status: str, exit_code: int, cost: float, as_json: bool) -> None:
    if as_json:
        store = records.open_store()
        assert store is not None
        emit_json(store.get(run_id).as_json())
        return
    text = f"run {run_id}: {status}"
    colour = "green" if status == "succeeded" else "red"
    _status_line(f"{_colour(text, colour)} (exit {exit_code}, cost {_money(cost)})")


def _detach(
    workload: Workload,
    file: str | None,
    target: str,
    catalog_path: str | None,
    retries: int,
    as_json: bool,
) -> int:
    """Check what can be checked now, record the run, and hand it to a background process.

    Returns once the background process has started the first stage (or given up), so
    the GPUs it holds are visible to the next ``nodus run`` and a refusal is reported
    here, with its exit code.
    """
    store = records.open_store()
    assert store is not None
    if target == "local":
        from nodus_cli import runner

        prepared = runner.prepare(workload, store.runtime_lookup(records.fingerprint(workload)))
        eng = runner.connect_for(prepared)
        runner.check_gpus_free(prepared, eng)
        for image in dict.fromkeys(s.image for s in workload.stages):
            runner.ensure_image(eng, image, progress=not as_json)
        price = prepared.price_per_hour
    else:
        price = 0.0
    record = store.start_run(workload, target, price, file)
    args = [sys.executable, "-m", "nodus_cli", "_exec", record.id, "--retries", str(retries)]
    if catalog_path:
        args += ["--catalog", catalog_path]
    with store.log_path(record.id).open("a", encoding="utf-8") as log:
        child = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env={**os.environ, "NODUS_DETACHED": "1"},
        )
    store.set_pid(record.id, child.pid)
    final = _handshake(store, record.id, child)
    first = final.stages[0] if final.stages else None
    never_started = final.status != "running" and (first is None or first.started_at is None)
    if as_json:
        emit_json(
            {
                "id": record.id,
                "status": final.status,
                "pid": child.pid,
                "exit_code": final.exit_code,
                "message": final.message,
            }
        )
    else:
        print(record.id, flush=True)
        if never_started:
            _status(f"run {record.id} did not start: {final.message or final.status}")
        elif final.status != "running":
            _status(f"run {record.id} already ended: {final.status} (exit {final.exit_code})")
        else:
            _status(f"started in the background; follow it with `nodus logs {record.id}`")
    if never_started:
        return int(final.exit_code or 1)
    return 0


def _handshake(store: records.RunStore, run_id: str, child: subprocess.Popen[Any]) -> Any:
    """Wait until the background run has started its first stage, ended, or died."""
    deadline = time.monotonic() + DETACH_HANDSHAKE_SECONDS
    delay = 0.02
    while True:
        current = store.get(run_id)
        first = current.stages[0] if current.stages else None
        if current.status != "running" or first is None or first.status != "pending":
            return current
        if child.poll() is not None:
            # It died without recording an outcome (a crash): record it now.
            time.sleep(0.05)
            current = store.get(run_id)
            if current.status == "running":
                store.finish_run(
                    run_id,
                    "failed",
                    child.returncode or 1,
                    0.0,
                    f"the background process exited ({child.returncode}) before starting; "
                    f"see `nodus logs {run_id}`",
                )
                current = store.get(run_id)
            return current
        if time.monotonic() >= deadline:
            return current
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)


def execute_recorded(run_id: str, retries: int, catalog_path: str | None) -> int:
    """The background half of ``--detach``: run a recorded run to completion.

    Its stdout and stderr are the run's log file; the runners write the stages' output
    and their status lines to that log themselves.
    """
    store = records.open_store()
    assert store is not None
    record = store.get(run_id)
    workload = records.workload_from_json(record.workload_json)
    sink = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    outcome: Any
    try:
        if record.target == "swarm":
            from nodus_cli import swarm

            _, outcome = swarm.run_swarm(
                workload,
                record.file,
                retries,
                catalog_path,
                out=sink,
                status=_status,
                record=record,
            )
        else:
            from nodus_cli import runner

            _, outcome = runner.run_local(
                workload,
                record.file,
                retries,
                out=sink,
                status=lambda message: None,  # the runner writes it to the log itself
                record=record,
                err=sink,
                progress=False,
            )
    except BaseException as exc:
        # Refused before the first stage (GPUs taken meanwhile, image gone): record it.
        current = store.get(run_id)
        if current.status == "running":
            message = exc.message if isinstance(exc, NodusError) else f"{type(exc).__name__}"
            code = exc.exit_code if isinstance(exc, NodusError) else 1
            store.finish_run(run_id, "failed", code, current.cost, message)
        raise
    finally:
        sink.close()
    return int(outcome.exit_code)


def _status(message: str) -> None:
    print(f"nodus: {message}", file=sys.stderr, flush=True)


def _status_line(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _colour(text: str, colour: str, stream: IO[str] | None = None) -> str:
    stream = stream or sys.stderr
    if os.environ.get("NO_COLOR") or not stream.isatty():
        return text
    code = {"green": "32", "red": "31"}[colour]
    return f"\x1b[1;{code}m{text}\x1b[0m"


def _money(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.1 else f"${value:,.4f}"
