"""``nodus run`` and ``nodus rerun``: options in, a run out, through the Python API.

The command parses what the Python API does not (``--env``, ``--output``), asks the
:class:`~nodus_cli.api.client.Client` to check, record and run the workload, and renders what
happened. The run itself (here, or in the background with ``--detach``) is
:mod:`nodus_cli.run.launcher`'s and the driver's.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from nodus_cli.api.client import Client, Prepared
from nodus_cli.cli.output import PullDisplay, emit_json, use_colour
from nodus_cli.errors import UsageError
from nodus_cli.structs import replace, struct
from nodus_cli.text import bounded, cost_text, safe
from nodus_cli.workload import Workload
from nodus_cli.workload.duration import DURATION_HINT, parse_duration

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@struct(frozen=True)
class Waiting:
    """``--priority``, ``--no-wait`` and ``--wait-timeout``: how the run waits for GPUs."""

    priority: int | None = None
    queue: bool = True
    timeout: str | None = None


def run(
    file: str,
    target: str,
    catalog_path: str | None,
    detach: bool,
    retries: int,
    as_json: bool,
    env: list[str] | None = None,
    output: str | None = None,
    waiting: Waiting | None = None,
) -> int:
    client = Client(target=target, catalog=catalog_path)
    checked = client.check(file)
    for problem in checked.warnings:
        _line(safe(problem.render(file)))
    assert checked.workload is not None
    workload = with_overrides(checked.workload, env, output, waiting or Waiting())
    return _start(client, workload, file, detach, retries, as_json)


def rerun(run_id: str, detach: bool, retries: int, as_json: bool) -> int:
    from nodus_cli.workload.environment import MissingEnvironment

    record, workload = Client().rerun(run_id)
    client = Client(target=record.target)
    try:
        prepared = _prepare(client, workload, record.file, as_json)
    except MissingEnvironment as exc:
        raise exc.recorded(record.id) from None  # no file to give a default in
    _status(f"re-running {record.id} ({safe(record.workload)}) on {record.target}")
    return _go(client, prepared, detach, retries, as_json)


def with_overrides(
    workload: Workload,
    env: list[str] | None,
    output: str | None,
    waiting: Waiting | None = None,
) -> Workload:
    """``--env NAME`` (the host's value, resolved when the run starts, never stored),
    ``--env NAME=VALUE`` (a literal), ``--output DIR`` and how it waits for GPUs applied
    to the workload."""
    extra: dict[str, str] = {}
    for given in env or []:
        name, sep, value = given.partition("=")
        if not _ENV_NAME.match(name):
            raise UsageError(
                f"--env {given}: {name!r} is not an environment variable name",
                hint="--env NAME passes the value NAME has here; --env NAME=VALUE a literal",
            )
        extra[name] = value.replace("$", "$$") if sep else f"${{{name}}}"
    if extra:
        workload = replace(
            workload,
            env={**workload.env, **extra},
            stages=[replace(s, env={**s.env, **extra}) for s in workload.stages],
        )
    if output is not None:
        workload = replace(workload, output_dir=str(Path(output).expanduser().resolve()))
    if waiting is not None:
        if waiting.priority is not None:
            workload = replace(workload, priority=waiting.priority)
        if not waiting.queue:
            workload = replace(workload, queue=False)
        if waiting.timeout is not None:
            try:
                seconds = parse_duration(waiting.timeout)
            except ValueError as exc:
                raise UsageError(
                    f"--wait-timeout {waiting.timeout}: {exc}", hint=DURATION_HINT
                ) from None
            workload = replace(workload, wait_timeout=seconds)
    return workload


def _start(
    client: Client,
    workload: Workload,
    file: str | None,
    detach: bool,
    retries: int,
    as_json: bool,
) -> int:
    prepared = _prepare(client, workload, file, as_json)
    return _go(client, prepared, detach, retries, as_json)


def _prepare(client: Client, workload: Workload, file: str | None, as_json: bool) -> Prepared:
    """Every check that can refuse the run, before anything is said or recorded."""
    return client.prepare(workload, file=file, pulls=None if as_json else PullDisplay)


def _go(client: Client, prepared: Prepared, detach: bool, retries: int, as_json: bool) -> int:
    """Say what the checks found, then run it here or hand it to the background."""
    for note in prepared.notes:
        _status(f"note: {note}")
    for warning in prepared.warnings:
        _status(f"warning: {warning}")
    if detach:
        return _detach(client, prepared, retries, as_json)
    from nodus_cli.cli.display import TerminalSink

    done = client.execute(prepared, retries=retries, sink=TerminalSink(json_mode=as_json))
    outcome = done.outcome
    if as_json:
        try:
            doc = client.get(done.run_id).result(tasks=True).as_json(tasks=True)
        except UsageError:
            doc = done.result.as_json()
        if outcome.unrecorded:
            doc.update(
                status=str(outcome.status),
                exit_code=outcome.exit_code,
                unrecorded=outcome.unrecorded,
            )
        emit_json({"version": 1, **doc})
    else:
        text = f"run {done.run_id}: {outcome.status}"
        colour = "32" if outcome.status == "succeeded" else "31"
        if use_colour() and sys.stderr.isatty():
            text = f"\x1b[1;{colour}m{text}\x1b[0m"
        cost = cost_text(outcome.cost, _cost_known(client, done.run_id))
        _line(f"{text} (exit {outcome.exit_code}, cost {cost})")
    return int(outcome.exit_code)


def _cost_known(client: Client, run_id: str) -> bool:
    """Whether every stage ran where a price was set, as the records say (the stages'
    configurations are the targets'); True when the records cannot say."""
    try:
        return client.get(run_id).result().cost_known
    except UsageError:
        return True


def _detach(client: Client, prepared: Prepared, retries: int, as_json: bool) -> int:
    """Hand the run to a background supervisor; return once its first task holds its
    place (so the GPUs it holds are visible to the next run) or it ended early."""
    run = client.submit(prepared, retries=retries, handshake=True)
    final = run.result()
    first = final.stages[0] if final.stages else None
    never_started = not final.status.active and (first is None or first.started_at is None)
    if as_json:
        emit_json(
            {
                "version": 1,
                "id": run.id,
                "status": str(final.status),
                "pid": final.pid,
                "exit_code": final.exit_code,
                "message": final.message,
            }
        )
    else:
        print(run.id, flush=True)
        if never_started:
            _status(f"run {run.id} did not start: {safe(final.message or final.status)}")
        elif not final.status.active:
            _status(f"run {run.id} already ended: {final.status} (exit {final.exit_code})")
        else:
            _status(
                f"started in the background; follow it with `nodus logs -f {run.id}`, "
                f"stop it with `nodus stop {run.id}`"
            )
    if never_started:
        return int(final.exit_code or 1)
    return 0


def execute_recorded(run_id: str, retries: int, catalog_path: str | None) -> int:
    """The background half of ``--detach`` and of the Python API's ``client.run()``."""
    return Client(catalog=catalog_path).supervise(run_id, retries)


def _status(message: str) -> None:
    print(f"nodus: {bounded(message)}", file=sys.stderr, flush=True)


def _line(message: str) -> None:
    print(bounded(message), file=sys.stderr, flush=True)
