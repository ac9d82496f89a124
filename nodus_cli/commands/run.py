"""``nodus run`` and ``nodus rerun``: run a workload locally or on a Swarm cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from nodus_cli import records
from nodus_cli.commands.plan import load_valid
from nodus_cli.output import emit_json, error_console
from nodus_cli.problems import NodusError
from nodus_cli.workload import Workload


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
    out = sys.stderr if as_json else sys.stdout
    if target == "swarm":
        from nodus_cli import swarm

        record, outcome = swarm.run_swarm(
            workload, file, retries, catalog_path, out=out, status=_status
        )
    else:
        from nodus_cli import runner

        record, outcome = runner.run_local(workload, file, retries, out=out, status=_status)
    _finish(record.id, outcome.status, outcome.exit_code, outcome.cost, as_json)
    return outcome.exit_code


def _finish(run_id: str, status: str, exit_code: int, cost: float, as_json: bool) -> None:
    store = records.open_store()
    assert store is not None
    final = store.get(run_id)
    if as_json:
        emit_json(final.as_json())
        return
    colour = "green" if status == "succeeded" else "red"
    error_console().print(
        f"[bold {colour}]run {final.id}: {status}[/] (exit {exit_code}, cost ${cost:,.4f})"
    )


def _detach(
    workload: Workload,
    file: str | None,
    target: str,
    catalog_path: str | None,
    retries: int,
    as_json: bool,
) -> int:
    """Check what can be checked now, record the run, and hand it to a background process."""
    store = records.open_store()
    assert store is not None
    if target == "local":
        from nodus_cli import engine, runner

        prepared = runner.prepare(workload)
        client = engine.connect()
        for image in dict.fromkeys(s.image for s in workload.stages):
            engine.ensure_image(client, image, progress=not as_json)
        price = prepared.price_per_hour
    else:
        price = 0.0
    record = store.start_run(workload, target, price, file)
    log = store.log_path(record.id).open("a", encoding="utf-8")
    args = [sys.executable, "-m", "nodus_cli", "_exec", record.id, "--retries", str(retries)]
    if catalog_path:
        args += ["--catalog", catalog_path]
    child = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        env={**os.environ, "NODUS_DETACHED": "1"},
    )
    store.set_pid(record.id, child.pid)
    if as_json:
        emit_json({"id": record.id, "status": "running", "pid": child.pid})
    else:
        print(record.id)
        _status(f"started in the background; follow it with `nodus logs {record.id}`")
    return 0


def execute_recorded(run_id: str, retries: int, catalog_path: str | None) -> int:
    """The background half of ``--detach``: run a recorded run to completion."""
    store = records.open_store()
    assert store is not None
    record = store.get(run_id)
    workload = records.workload_from_json(record.workload_json)
    outcome: Any
    if record.target == "swarm":
        from nodus_cli import swarm

        _, outcome = swarm.run_swarm(
            workload,
            record.file,
            retries,
            catalog_path,
            out=sys.stdout,
            status=_status,
            record=record,
        )
    else:
        from nodus_cli import runner

        _, outcome = runner.run_local(
            workload, record.file, retries, out=sys.stdout, status=_status, record=record
        )
    return int(outcome.exit_code)


def _status(message: str) -> None:
    print(f"nodus: {message}", file=sys.stderr, flush=True)
