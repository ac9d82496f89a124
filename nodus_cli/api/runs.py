"""Runs as the Python API shows them: :class:`Run` (a handle on one recorded run) and the
results it gives (:class:`RunResult`, :class:`StageResult`, :class:`ItemResult`).

A result is a snapshot of the records, made when asked for; ``as_json()`` gives the
documented shapes of ``nodus runs --json`` (docs/json.md). The command line renders these
very objects, so what ``nodus runs`` shows and what a program reads are one thing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from nodus_cli.records.model import RunStatus, StageStatus
from nodus_cli.structs import field, struct

if TYPE_CHECKING:
    from nodus_cli.api.session import Session
    from nodus_cli.records import GpuSample, LogLine, RunRecord, StageRecord, TaskRecord

__all__ = ["ItemResult", "LogView", "Run", "RunResult", "StageResult"]

#: How often ``Run.wait`` looks at the records, at most.
_POLL_MAX = 0.5
#: How often a follower of a run's log looks for new lines.
_FOLLOW_EVERY = 0.2
#: How often waiting and following notice a supervisor that died.
_RECONCILE_EVERY = 2.0


@struct(frozen=True)
class ItemResult:
    """One task of a fan-out stage."""

    index: int
    item: str
    status: StageStatus
    exit_code: int | None
    devices: list[str]
    node: str | None
    runtime_seconds: float | None
    message: str | None

    @property
    def ok(self) -> bool:
        return self.status == StageStatus.SUCCEEDED

    @classmethod
    def of(cls, t: TaskRecord) -> ItemResult:
        return cls(
            t.index, t.item, t.status, t.exit_code, t.devices, t.node, t.runtime_seconds, t.message
        )


@struct(frozen=True)
class StageResult:
    """One stage of a finished run, as the API gives it."""

    name: str
    status: StageStatus
    exit_code: int | None
    cost: float
    started_at: str | None
    ended_at: str | None
    message: str | None
    #: A fan-out stage's tasks per status ({"succeeded": 198, "failed": 2}).
    items: dict[str, int] = field(default_factory=dict)
    #: Where it ran: the node (Swarm), the GPUs it held, how long it took.
    node: str | None = None
    gpus: list[str] = field(default_factory=list)
    runtime_seconds: float | None = None
    #: Every task of a fan-out stage, when the result was asked for with them.
    tasks: list[ItemResult] = field(default_factory=list)
    #: False: it ran on a node whose price is not set, so ``cost`` (0) is not what it cost.
    cost_known: bool = True

    @classmethod
    def of(cls, s: StageRecord) -> StageResult:
        return cls(
            s.name,
            s.status,
            s.exit_code,
            s.cost,
            s.started_at,
            s.ended_at,
            s.message,
            dict(s.task_counts),
            s.node,
            list(s.gpu_uuids),
            s.runtime_seconds,
            [ItemResult.of(t) for t in s.tasks],
            s.cost_known,
        )


@struct(frozen=True)
class RunResult:
    """A finished run, as the API gives it: status, exit code, cost and stages."""

    id: str
    workload: str
    target: str
    status: RunStatus
    exit_code: int | None
    cost: float
    started_at: str
    ended_at: str | None
    message: str | None
    stages: list[StageResult]
    #: Where the work folder's contents went ({"kind": "copied", "path": ...}), if anywhere.
    output: dict[str, Any] | None = None
    #: What the target says about the run now, while it is active (``nodus runs``).
    now: str | None = None
    #: The workload file it was started from, and the process that supervises it.
    file: str | None = None
    pid: int | None = None
    _record: RunRecord | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == RunStatus.SUCCEEDED

    @property
    def cost_known(self) -> bool:
        """False when a stage ran on a node whose price is not set: ``cost`` leaves it out."""
        return all(s.cost_known for s in self.stages)

    @classmethod
    def of(cls, record: RunRecord, now: str | None = None) -> RunResult:
        return cls(
            id=record.id,
            workload=record.workload,
            target=record.target,
            status=record.status,
            exit_code=record.exit_code,
            cost=record.cost,
            started_at=record.started_at,
            ended_at=record.ended_at,
            message=record.message,
            stages=[StageResult.of(s) for s in record.stages],
            output=record.output,
            now=now,
            file=record.file,
            pid=record.pid,
            _record=record,
        )

    def as_json(self, tasks: bool = False) -> dict[str, Any]:
        """The documented ``nodus runs --json`` shape (``tasks``: every fan-out task too)."""
        assert self._record is not None
        doc = self._record.as_json(tasks=tasks)
        if self.now is not None:
            doc["cluster"] = self.now
        return doc


@struct(frozen=True)
class LogView:
    """A run's log as read now: its lines, and how to follow it.

    ``warning`` says why it was read without the records (a damaged database): the log
    file alone is shown then, and ``stages`` is empty.
    """

    run_id: str
    stages: list[str]
    lines: list[LogLine]
    offset: int
    warning: str | None = None
    #: What the reconcile before reading found (runs whose supervisor died), a line each.
    found: list[str] = field(default_factory=list)
    _run: Run | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(
        cls, run: Run, stages: list[str], lines: list[LogLine], offset: int, found: list[str]
    ) -> LogView:
        """The log of ``run`` read up to ``offset``, to follow from there."""
        return cls(run.id, stages, lines, offset, found=found, _run=run)

    def follow(self) -> Iterator[list[LogLine]]:
        """New lines as they come, until the run ends (nothing without the records)."""
        if self._run is not None:
            yield from self._run.follow(self.offset)


class Run:
    """A handle on one recorded run."""

    def __init__(self, session: Session, run_id: str) -> None:
        self._session = session
        self.id = run_id

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.status}>"

    def record(self) -> RunRecord:
        return self._session.store.get(self.id)

    def result(self, tasks: bool = False) -> RunResult:
        """The run as recorded now (``tasks``: with every task of its fan-out stages)."""
        record = self._session.store.get(self.id, tasks=tasks)
        return RunResult.of(record, self._session.describe(record))

    @property
    def status(self) -> RunStatus:
        return self.record().status

    def wait(self, timeout: float | None = None) -> RunResult:
        """Block until the run ends; TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.05
        checked = time.monotonic()
        while True:
            record = self.record()
            if not record.status.active:
                return RunResult.of(record)
            if time.monotonic() - checked > _RECONCILE_EVERY:
                checked = time.monotonic()
                self._session.reconcile()  # a supervisor that died is noticed here too
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.id} is still {record.status} after {timeout:g} s")
            time.sleep(
                delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
            )
            delay = min(delay * 1.5, _POLL_MAX)

    def read_log(self, offset: int = 0) -> tuple[list[LogLine], int]:
        """The log's lines from ``offset`` on, and the offset to read from next."""
        return self._session.store.read_log(self.id, offset)

    def follow(self, offset: int = 0) -> Iterator[list[LogLine]]:
        """Batches of new log lines from ``offset`` on, until the run has ended and its
        last lines are read (a supervisor that died is noticed meanwhile)."""
        store = self._session.store
        checked = time.monotonic()
        while True:
            fresh, offset = store.read_log(self.id, offset)
            if fresh:
                yield fresh
            if not store.get(self.id).status.active:
                fresh, offset = store.read_log(self.id, offset)
                if fresh:
                    yield fresh
                return
            if time.monotonic() - checked > _RECONCILE_EVERY:
                checked = time.monotonic()
                self._session.reconcile()
            time.sleep(_FOLLOW_EVERY)

    def log_lines(self, stage: str | None = None, item: int | None = None) -> list[LogLine]:
        """Every line of the run's log so far (output and nodus's status lines)."""
        lines, _ = self.read_log()
        return [
            line
            for line in lines
            if (stage is None or line.stage == stage) and (item is None or line.item == item)
        ]

    def logs(self, stage: str | None = None, item: int | None = None) -> str:
        """The workload's own output so far (stdout and stderr), one line each."""
        return "".join(
            line.text + "\n" for line in self.log_lines(stage, item) if line.stream != "nodus"
        )

    def gpu_samples(self) -> list[GpuSample]:
        """The GPU-use samples of the run's tasks, in time order: one per GPU a task held
        per reading (empty when nothing was sampled: no GPU, no ``nvidia-smi``, or another
        target). At most ``MAX_GPU_SAMPLES`` per GPU, thinned evenly over a long run."""
        return self._session.store.gpu_samples(self.id)

    def stop(self) -> bool:
        """Stop the run; False when it was not running."""
        from nodus_cli.run.reconcile import Stopped

        return self._session.stop_run(self.id).result == Stopped.STOPPED

    def results(self, wait: bool = True) -> list[ItemResult]:
        """Per-item outcomes of the run's fan-out stage(s), in item order."""
        if wait:
            self.wait()
        store = self._session.store
        record = store.get(self.id)
        found: list[ItemResult] = []
        for idx, stage in enumerate(record.stages):
            if stage.task_counts:
                found.extend(ItemResult.of(t) for t in store.tasks(record.id, idx))
        return found
