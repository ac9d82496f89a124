"""``nodus runs``, ``nodus logs`` and ``nodus stop``: living with runs.

Each first lets the client reconcile (:meth:`~nodus_cli.api.client.Client.reconcile`):
runs whose supervisor died are noticed, so no run is shown ``running`` with nobody
running it. A damaged or unwritable records database still lets them show what is
readable: ``runs`` opens it read-only, ``logs`` finds a run's log by its id.

The ``runs`` table fits a terminal's width (:class:`~nodus_cli.cli.output.Writer`): without
``--wide`` it shows the start without its year and a long run's stages as a summary, and
when that is still too wide it leaves out the exit code, the target and the start (the
run id begins with it), then clips workload names and stages with "…". The run id is
never shortened: it is what the other commands take. ``--wide`` shows every column in
full, and so do a pipe and a file (no width to fit).

A listing of any length (``--top 100000``) is printed as it is read from the records, in
bounded memory: the table is laid out on its first :data:`LOOK_AHEAD` runs (a later cell
wider than its column is clipped on a terminal where the layout clips, shown in full
elsewhere), a listing longer than that names every run's target, and ``--json`` writes its
one document a run at a time.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from itertools import chain, islice
from typing import TYPE_CHECKING, Any

from nodus_cli.api import Client, RunResult, StageStatus
from nodus_cli.cli.output import Writer, emit_json, emit_json_list, stderr_line
from nodus_cli.errors import UsageError
from nodus_cli.text import cost_text, safe

if TYPE_CHECKING:
    from nodus_cli.api import LogLine

_COLOURS = {
    "succeeded": "green",
    "failed": "red",
    "running": "cyan",
    "pending": "cyan",
    "queued": "cyan",
    "cancelled": "yellow",
    "budget_exhausted": "yellow",
}


def _client() -> Client:
    """A client whose first act is to notice runs whose supervisor died (and say so)."""
    client = Client()
    for found in client.reconcile():
        stderr_line(f"nodus: {safe(found)}")
    return client


# -- nodus runs ----------------------------------------------------------------------------


#: How many runs the table is laid out on (its column widths); a longer listing is
#: printed as it is read, never held whole.
LOOK_AHEAD = 200


def list_runs(limit: int, as_json: bool, run_id: str | None = None, wide: bool = False) -> int:
    client = _client()
    if run_id is not None:
        return _show_run(client.get(run_id).result(tasks=True), as_json, wide)
    found = client.iter_runs(limit)
    if as_json:
        emit_json_list({"version": 1}, "runs", (r.as_json() for r in found))
        return 0
    out = Writer(wide=wide)
    first = list(islice(found, LOOK_AHEAD))
    if not first:
        out.line(f"no runs recorded yet (records in {client.home_folder})")
        out.flush()
        return 0
    # A listing longer than the look-ahead names every run's target: one further down
    # may run elsewhere.
    show_target = wide or len(first) == LOOK_AHEAD or {r.target for r in first} != {"local"}
    headers = ["id", "workload", *(["target"] if show_target else []), "status", "exit"]
    headers += ["started (UTC)", "cost", "stages"]
    waiting: list[str] = []  # what a queued run waits for: its place in line, who holds what

    def rows(runs: Iterator[RunResult]) -> Iterator[list[str]]:
        for r in runs:
            if r.status == "queued" and r.now:
                waiting.append(f"{r.id}: {safe(r.now)}")
            stages = _stages_text(r, wide)
            if r.now is not None and wide:
                stages += f" (now: {safe(r.now)})"
            yield [
                r.id,
                safe(r.workload, newlines=False),
                *([r.target] if show_target else []),
                out.paint(str(r.status), _COLOURS.get(r.status, "bold")),
                "" if r.exit_code is None else str(r.exit_code),
                r.started_at[:16].replace("T", " ")
                if wide
                else r.started_at[5:16].replace("T", " "),
                cost_text(r.cost, r.cost_known),
                stages,
            ]

    exit_column = headers.index("exit")
    out.stream_table(
        headers,
        rows(chain(first, found)),
        right=(exit_column, exit_column + 2),
        look_ahead=LOOK_AHEAD,
        # The run id starts with the date and time it was made: the start goes after the
        # exit code and the target, before a workload name is clipped.
        drop=(exit_column, *([2] if show_target else []), exit_column + 1),
        clip=(1, len(headers) - 1),
    )
    for line in waiting:
        out.line(line)
    if not wide:
        out.line(out.paint("--wide shows every column in full; `nodus runs RUN_ID` one run", "dim"))
    out.flush()
    return 0


def _stages_text(r: RunResult, wide: bool) -> str:
    if wide or len(r.stages) <= 2:
        parts = [f"{s.name}:{s.status}" for s in r.stages]
    else:
        done = sum(1 for s in r.stages if s.status == StageStatus.SUCCEEDED)
        current = next((s for s in r.stages if s.status != StageStatus.SUCCEEDED), None)
        parts = [f"{done}/{len(r.stages)} ok"]
        if current is not None:
            parts.append(f"{current.name}:{current.status}")
    text = " ".join(parts)
    items = [s.items for s in r.stages if s.items]
    if items:
        total = sum(sum(c.values()) for c in items)
        ok = sum(c.get("succeeded", 0) for c in items)
        text += f" ({ok}/{total} items)"
    return text


def _show_run(record: RunResult, as_json: bool, wide: bool = False) -> int:
    if as_json:
        emit_json({"version": 1, **record.as_json(tasks=True)})
        return 0
    out = Writer(wide=wide)
    out.line(
        f"{out.paint(record.id, 'bold')}  {safe(record.workload)} on {record.target}: "
        f"{out.paint(str(record.status), _COLOURS.get(record.status, 'bold'))}"
        + (f" (exit {record.exit_code})" if record.exit_code is not None else "")
        + f", cost {cost_text(record.cost, record.cost_known)}"
    )
    out.line(
        f"started {record.started_at}" + (f", ended {record.ended_at}" if record.ended_at else "")
    )
    if record.message:
        out.line(safe(record.message))
    if record.output:
        path, note = record.output.get("path"), record.output.get("note")
        out.line(
            f"work directory: {record.output.get('kind')}"
            + (f" {safe(path)}" if path else "")
            + (f" ({safe(note)})" if note else "")
        )
    for s in record.stages:
        out.line()
        where = f" on {s.node}" if s.node else ""
        gpus = f", GPUs {', '.join(s.gpus)}" if s.gpus else ""
        took = f", {s.runtime_seconds:.1f}s" if s.runtime_seconds is not None else ""
        code = f" (exit {s.exit_code})" if s.exit_code is not None else ""
        out.line(
            f"stage {out.paint(s.name, 'cyan')}: {s.status}{code}{where}{gpus}{took}, "
            f"{cost_text(s.cost, s.cost_known)}"
        )
        if s.message:
            out.line(f"  {safe(s.message)}")
        if s.tasks:
            rows = [
                [
                    str(t.index),
                    safe(t.item, newlines=False),
                    ",".join(d[-12:] for d in t.devices) or (t.node or "-"),
                    str(t.status),
                    "" if t.exit_code is None else str(t.exit_code),
                    f"{t.runtime_seconds:.1f}s" if t.runtime_seconds is not None else "-",
                ]
                for t in s.tasks
            ]
            out.table(
                ["#", "item", "device", "status", "exit", "time"],
                rows,
                right=(0, 4, 5),
                indent="  ",
                clip=(1, 2),
                keep_end=(1, 2),  # items are paths, devices UUIDs: they differ at the end
            )
    out.flush()
    return 0


# -- nodus logs ------------------------------------------------------------------------


def show_logs(
    run_id: str | None,
    as_json: bool,
    follow: bool = False,
    stage: str | None = None,
    item: int | None = None,
    tail: int | None = None,
) -> int:
    if tail is not None and tail < 0:
        raise UsageError(f"--tail must be 0 or more, not {tail}")
    view = Client().logs(run_id)
    for found in view.found:
        stderr_line(f"nodus: {safe(found)}")
    if view.warning is not None:
        stderr_line(f"nodus: warning: {safe(view.warning)}")
    if stage is not None and view.stages and stage not in view.stages:
        names = ", ".join(view.stages)
        raise UsageError(f"run {view.run_id} has no stage {stage!r} (its stages: {names})")
    shown = _filter(view.lines, stage, item)
    if tail is not None:
        shown = shown[-tail:] if tail else []
    _print(shown, as_json)
    if follow:
        for fresh in view.follow():
            _print(_filter(fresh, stage, item), as_json)
    return 0


def _filter(lines: list[LogLine], stage: str | None, item: int | None) -> list[LogLine]:
    return [
        line
        for line in lines
        if (stage is None or line.stage == stage) and (item is None or line.item == item)
    ]


def _print(lines: list[LogLine], as_json: bool) -> None:
    if not lines:
        return
    if as_json:
        text = "".join(json.dumps(line.as_json(), ensure_ascii=False) + "\n" for line in lines)
    else:
        text = "".join(_human(line) + "\n" for line in lines)
    sys.stdout.write(text)
    sys.stdout.flush()


def _human(line: LogLine) -> str:
    if line.stream == "nodus":
        return f"nodus: {safe(line.text)}"
    if line.stage is None:
        return line.text
    prefix = f"{line.stage}[{line.item}]" if line.item is not None else line.stage
    return f"{prefix} | {line.text}"


# -- nodus stop ------------------------------------------------------------------------


def stop_runs(run_ids: list[str], as_json: bool) -> int:
    from nodus_cli.api import Stopped

    client = Client()
    results: list[dict[str, Any]] = []
    unknown: list[UsageError] = []
    stopped = False
    for run_id in run_ids:
        try:
            result = client.stop_run(run_id)
        except UsageError as exc:
            unknown.append(exc)
            results.append({"id": run_id, "result": "unknown", "message": exc.message})
            continue
        stopped = stopped or result.result == Stopped.STOPPED
        results.append(result.as_json())
        if not as_json:
            stderr_line(f"nodus: {safe(result.message)}")
            if result.unrecorded:
                stderr_line(f"nodus: warning: {safe(result.unrecorded)}")
    if as_json:
        emit_json({"version": 1, "runs": results})
    if unknown and not as_json:
        # Said as every error is, after the runs that were found: message, hint, exit 2.
        raise UsageError("; ".join(exc.message for exc in unknown), hint=unknown[0].hint)
    if unknown:
        return 2
    return 0 if stopped else 1
