"""nodus as a Python library: :class:`Client` and the :class:`Run` handle.

```python
from nodus_cli import Client, Requirements

with Client() as client:                       # target "local" (default) or "swarm"
    run = client.run(
        image="nodus-test/busybox:1",
        command=["echo", "hello"],
        gpu="L4",                              # the workload file's names, as keywords
        requirements=Requirements(cpu=2, memory_gb=4),
        budget=5,
    )
    result = run.wait()                        # status, exit_code, cost, stages
    print(run.logs())
```

Keyword arguments are the workload file's keys, checked by the same rules with the same
messages; :class:`~nodus_cli.errors.InvalidWorkload` (a ``ValueError``) carries every
problem and is raised before anything is submitted. One rule differs from files: a key
of the ``requirements`` mapping wins over the matching flat keyword
(``requirements={"peak_memory_gb": 48}, peak_memory_gb=24`` sends 48), where a file must
not set both. :class:`Requirements` is the typed form of that mapping.

``client.run()`` returns at once: the run goes on in a background supervisor process
(it survives the calling program; ``run.stop()`` or ``nodus stop`` ends it). The command
line is a client of this class: ``nodus run`` uses :meth:`Client.execute` to run in the
foreground with its output on the terminal.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_cli.errors import InvalidWorkload, UsageError
from nodus_cli.records import RunRecord, RunStatus, RunStore, StageStatus, TaskRecord

if TYPE_CHECKING:
    from nodus_cli.planning.planner import Plan
    from nodus_cli.records import LogLine
    from nodus_cli.run.driver import Outcome
    from nodus_cli.run.launcher import Launch
    from nodus_cli.run.sink import Sink
    from nodus_cli.targets.base import NodeInfo
    from nodus_cli.workload import Result, Workload

__all__ = ["Client", "ItemResult", "Requirements", "Run", "RunResult", "StageResult"]

#: How often ``Run.wait`` looks at the records, at most.
_POLL_MAX = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class Requirements:
    """The ``[requirements]`` table, typed. Unset fields (None) are left out."""

    gpu: str | None = None
    gpu_count: int | None = None
    peak_memory_gb: float | None = None
    gpu_interconnect: str | None = None
    optimization: str | None = None
    share_gpu: bool | None = None
    cpu: float | None = None
    memory_gb: float | None = None
    disk_gb: float | None = None
    location: str | None = None
    max_price_per_hour: float | None = None
    arch: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True, slots=True)
class StageResult:
    name: str
    status: StageStatus
    exit_code: int | None
    cost: float
    started_at: str | None
    ended_at: str | None
    message: str | None
    #: A fan-out stage's tasks per status ({"succeeded": 198, "failed": 2}).
    items: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class RunResult:
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

    @property
    def ok(self) -> bool:
        return self.status == RunStatus.SUCCEEDED

    @classmethod
    def of(cls, record: RunRecord) -> RunResult:
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
            stages=[
                StageResult(
                    s.name,
                    s.status,
                    s.exit_code,
                    s.cost,
                    s.started_at,
                    s.ended_at,
                    s.message,
                    dict(s.task_counts),
                )
                for s in record.stages
            ],
            output=record.output,
        )


class Run:
    """A handle on one recorded run."""

    def __init__(self, client: Client, run_id: str) -> None:
        self._client = client
        self.id = run_id

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.status}>"

    def record(self) -> RunRecord:
        return self._client._store.get(self.id)

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
            if time.monotonic() - checked > 2.0:
                checked = time.monotonic()
                self._client._reconcile()  # a supervisor that died is noticed here too
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.id} is still {record.status} after {timeout:g} s")
            time.sleep(
                delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
            )
            delay = min(delay * 1.5, _POLL_MAX)

    def log_lines(self, stage: str | None = None, item: int | None = None) -> list[LogLine]:
        """Every line of the run's log so far (output and nodus's status lines)."""
        lines, _ = self._client._store.read_log(self.id)
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

    def stop(self) -> bool:
        """Stop the run; False when it was not running."""
        from nodus_cli.run.reconcile import Stopped, stop

        return stop(self._client._store, self.id, self._client.catalog).result == Stopped.STOPPED

    def results(self, wait: bool = True) -> list[ItemResult]:
        """Per-item outcomes of the run's fan-out stage(s), in item order."""
        if wait:
            self.wait()
        store = self._client._store
        record = store.get(self.id)
        found: list[ItemResult] = []
        for idx, stage in enumerate(record.stages):
            if stage.task_counts:
                found.extend(_item(t) for t in store.tasks(record.id, idx))
        return found


def _item(t: TaskRecord) -> ItemResult:
    return ItemResult(
        t.index, t.item, t.status, t.exit_code, t.devices, t.node, t.runtime_seconds, t.message
    )


class Client:
    """Run workloads on a target; see the module docstring."""

    def __init__(
        self,
        target: str = "local",
        catalog: str | Path | None = None,
        home: str | Path | None = None,
    ) -> None:
        from nodus_cli import targets

        if target not in targets.names():
            raise UsageError(
                f"unknown target {target!r}: nodus runs on {', '.join(targets.names())}"
            )
        self.target = target
        self.catalog = str(catalog) if catalog is not None else None
        self.home = Path(home) if home is not None else None
        self._store_: RunStore | None = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._store_ is not None:
            self._store_.close()
            self._store_ = None

    @property
    def _store(self) -> RunStore:
        if self._store_ is None:
            self._store_ = RunStore.open(self.home)
        return self._store_

    def _reconcile(self) -> list[str]:
        from nodus_cli.run.reconcile import reconcile

        return reconcile(self._store, self.catalog)

    # -- workloads -------------------------------------------------------------------

    def load(self, path: str | Path) -> Workload:
        """A workload file, checked (InvalidWorkload lists every problem)."""
        workload = self.check(path).workload
        assert workload is not None
        return workload

    def check(self, path: str | Path) -> Result:
        """A workload file's workload and warnings (InvalidWorkload lists every error)."""
        from nodus_cli.workload import load_file

        p = Path(path)
        if p.is_dir():
            raise UsageError(
                f"{path} is a folder: name one workload file",
                hint=f"nodus validate {path} checks every file in it",
            )
        if not p.is_file():
            raise UsageError(f"{path}: no such file")
        result = load_file(p, str(path))
        if result.workload is None:
            raise InvalidWorkload(result.problems, str(path))
        return result

    def workload(self, **arguments: Any) -> Workload:
        """The workload that :meth:`run` would submit for these arguments."""
        from nodus_cli.workload import normalize

        doc = _document(arguments)
        image = doc.get("image")
        default = str(image).rsplit("/", 1)[-1].split(":")[0] if isinstance(image, str) else "run"
        result = normalize(
            doc,
            path="client.run()",
            default_name=default or "run",
            mapping_wins=True,
            base_dir=Path.cwd(),
        )
        if result.workload is None:
            raise InvalidWorkload(result.problems, "client.run()")
        return result.workload

    # -- running ---------------------------------------------------------------------

    def run(
        self,
        *,
        image: str | None = None,
        command: str | Sequence[str] | None = None,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        model: str | None = None,
        budget: float | None = None,
        gpu: str | None = None,
        gpu_count: int | None = None,
        peak_memory_gb: float | None = None,
        gpu_interconnect: str | None = None,
        optimization: str | None = None,
        share_gpu: bool | None = None,
        requirements: Requirements | Mapping[str, Any] | None = None,
        entrypoint: Sequence[str] | None = None,
        mounts: Sequence[str] | None = None,
        ports: Sequence[int | str] | None = None,
        output_dir: str | Path | None = None,
        map: Mapping[str, Any] | None = None,
        stages: Sequence[Mapping[str, Any]] | None = None,
        retries: int = 0,
        **other: Any,
    ) -> Run:
        """Submit a workload given as the workload file's keys; returns at once.

        Keys nodus does not know (``gpu_type``, ``num_gpus``, ``memory_bytes`` ...) are
        reported in :class:`InvalidWorkload` with the nodus key to use.
        """
        arguments = {
            "image": image,
            "command": command,
            "name": name,
            "env": env,
            "model": model,
            "budget": budget,
            "gpu": gpu,
            "gpu_count": gpu_count,
            "peak_memory_gb": peak_memory_gb,
            "gpu_interconnect": gpu_interconnect,
            "optimization": optimization,
            "share_gpu": share_gpu,
            "requirements": requirements,
            "entrypoint": entrypoint,
            "mounts": mounts,
            "ports": ports,
            "output_dir": output_dir,
            "map": map,
            "stages": stages,
            **other,
        }
        return self.submit(self.workload(**arguments), retries=retries)

    def map(
        self,
        items: Iterable[str | int],
        *,
        parallel: int | None = None,
        **arguments: Any,
    ) -> Run:
        """Run the command once per item (``NODUS_ITEM`` in its environment), each task
        with its own allocation of the requirements; ``.results()`` gives them in order."""
        spec: dict[str, Any] = {"items": list(items)}
        if parallel is not None:
            spec["parallel"] = parallel
        return self.run(map=spec, **arguments)

    def run_file(self, path: str | Path, *, retries: int = 0) -> Run:
        """Submit a workload file; returns at once."""
        return self.submit(self.load(path), file=str(path), retries=retries)

    def prepare(
        self,
        workload: Workload,
        *,
        file: str | None = None,
        interactive: bool = False,
    ) -> Launch:
        """Every check that can refuse the run, before anything is recorded."""
        from nodus_cli.run import launcher

        self._reconcile()
        return launcher.prepare(
            workload,
            self.target,
            self._store,
            catalog=self.catalog,
            file=file,
            interactive=interactive,
        )

    def submit(
        self,
        workload: Workload,
        *,
        file: str | None = None,
        retries: int = 0,
        handshake: bool = False,
        launch: Launch | None = None,
    ) -> Run:
        """Check, record and start ``workload`` in a background supervisor."""
        from nodus_cli.run import launcher

        launch = launch or self.prepare(workload, file=file)
        record = launcher.submit(
            launch, self._store, retries=retries, catalog=self.catalog, handshake=handshake
        )
        return Run(self, record.id)

    def execute(
        self,
        workload: Workload,
        *,
        file: str | None = None,
        retries: int = 0,
        sink: Sink | None = None,
        launch: Launch | None = None,
    ) -> tuple[RunRecord, Outcome]:
        """Check, record and run ``workload`` in this process (the foreground); its output
        goes to ``sink`` as it comes, and SIGINT/SIGTERM stop it."""
        from nodus_cli.run import launcher

        launch = launch or self.prepare(workload, file=file)
        return launcher.execute(launch, self._store, retries=retries, sink=sink)

    def rerun(self, run_id: str) -> tuple[RunRecord, Workload]:
        """A recorded run and its workload, to run again (``${NAME}`` is resolved anew)."""
        from nodus_cli.workload import from_json

        record = self._store.get(run_id)
        return record, from_json(record.workload_json)

    # -- looking ---------------------------------------------------------------------

    def plan(self, path: str | Path | None = None, **arguments: Any) -> Plan:
        """Price the workload (a file, or :meth:`run`'s arguments) on this client's target."""
        workload = self.load(path) if path is not None else self.workload(**arguments)
        from nodus_cli import targets
        from nodus_cli.records import fingerprint, runtime_lookup

        target = targets.get(self.target, self._store, self.catalog)
        try:
            return target.plan(workload, runtime_lookup(self._store, fingerprint(workload)))
        finally:
            target.close()

    def gpus(self, name: str | None = None) -> list[dict[str, Any]]:
        """The GPU models with their offers and lowest prices in the catalog."""
        from nodus_cli.catalog import market

        return market.gpu_summaries(name, catalog_path=self.catalog)

    def list_nodes(self) -> list[NodeInfo]:
        """What the target holds now: per machine CPUs, memory, GPU model, count and free."""
        from nodus_cli import targets

        target = targets.get(self.target, self._store, self.catalog)
        try:
            return target.nodes()
        finally:
            target.close()

    def runs(self, limit: int = 20) -> list[RunResult]:
        """Recorded runs, newest first."""
        self._reconcile()
        return [RunResult.of(r) for r in self._store.list_runs(limit)]

    def get(self, run_id: str) -> Run:
        """A handle on a recorded run (a unique prefix of its id is enough)."""
        return Run(self, self._store.get(run_id).id)

    def stop(self, run_id: str) -> bool:
        """Stop a run; False when it was not running (UsageError for an unknown id)."""
        return self.get(run_id).stop()


def _document(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments as the document a workload file would parse to."""
    doc: dict[str, Any] = {}
    for key, value in arguments.items():
        if value is None:
            continue
        doc[key] = _plain(value)
    return doc


def _plain(value: Any) -> Any:
    """Typed values (Requirements, paths, tuples) as the TOML types the rules expect."""
    if isinstance(value, Requirements):
        return value.as_dict()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
