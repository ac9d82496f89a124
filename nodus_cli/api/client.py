"""nodus as a Python library: :class:`Client`, the one door to everything nodus does.

```python
from nodus_cli import Client, Requirements

with Client() as client:                       # target "local" (default), "swarm" or "slurm"
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
(it survives the calling program; ``run.stop()`` or ``nodus stop`` ends it).

The command line is a client of this class and nothing else: each command parses its
options, calls one of these methods and renders what it returns. ``nodus run`` uses
:meth:`Client.prepare` then :meth:`Client.execute` to run in the foreground with its
output on the terminal; ``nodus plan`` plans on ``Client(target="catalog")``, the market
of quotes, which plans but never runs.

Imports stand inside the methods that need them: the package docstring says why.
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from nodus_cli.api.arguments import Requirements, workload_of
from nodus_cli.api.catalogs import CatalogDoors
from nodus_cli.api.session import Prepared, Session
from nodus_cli.api.targets import CATALOG, target_names
from nodus_cli.errors import InvalidWorkload, NodusError, UsageError
from nodus_cli.structs import replace, struct

if TYPE_CHECKING:
    from nodus_cli.api.calling import InFlight
    from nodus_cli.api.calls import Call, Calls
    from nodus_cli.api.runs import LogView, Run, RunResult
    from nodus_cli.planning.plan import Plan
    from nodus_cli.run.driver import RunEnd
    from nodus_cli.run.reconcile import StopResult
    from nodus_cli.run.sink import Sink
    from nodus_cli.run.spending import Report
    from nodus_cli.targets.base import NodeInfo, Pulls
    from nodus_cli.targets.swarm.setup import NodeSetup
    from nodus_cli.workload import Result, Workload

__all__ = [
    "CATALOG",
    "Client",
    "Executed",
    "Prepared",
    "Requirements",
    "target_names",
]

T = TypeVar("T")


@struct(frozen=True)
class Executed:
    """A run driven to its end in this process: how it ended, and the run as this process
    recorded it (what a later read of the records gives, unless they could not be written)."""

    run_id: str
    outcome: RunEnd
    result: RunResult


class Client(CatalogDoors):
    """Run workloads on a target; see the module docstring."""

    def __init__(
        self,
        target: str = "local",
        catalog: str | Path | None = None,
        home: str | Path | None = None,
    ) -> None:
        self._session = Session(target, catalog, home)
        self._inflight_: InFlight | None = None  # Python function calls not yet ended

    @property
    def target(self) -> str:
        """Where it plans and runs: a target's name, or ``"catalog"`` (plans only)."""
        return self._session.target

    @property
    def catalog(self) -> str | None:
        """The catalog file it plans with (None: the catalog in use)."""
        return self._session.catalog

    @property
    def home(self) -> Path | None:
        """The state folder it was given (None: ``NODUS_HOME``)."""
        return self._session.home

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is not None and self._inflight_ is not None:
            # leaving with an error: stop the calls, saying why in the caller's words
            name = getattr(kind, "__name__", "an exception")
            why = f"the end of the `with Client()` block ({name} left it)"
            self._inflight_.close(stop=True, why=why)
        self.close()

    def close(self) -> None:
        """Wait for this client's function calls still in flight, end their warm workers,
        then let go of the records."""
        if self._inflight_ is not None:
            self._inflight_.close()
            self._session.end_warm()
        self._session.close()

    @property
    def home_folder(self) -> Path:
        """Where this client's run records live (``NODUS_HOME`` unless ``home`` was given)."""
        return self._session.home_folder

    @property
    def _inflight(self) -> InFlight:
        if self._inflight_ is None:
            from nodus_cli.api.calling import InFlight

            self._inflight_ = InFlight(self._session)
        return self._inflight_

    def reconcile(self) -> list[str]:
        """Notice runs whose supervisor died: stop and remove what they left, record them
        ``failed`` (every command that reads the records does this first). Returns what
        was found, one line each."""
        return self._session.reconcile()

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
        try:
            mode = p.stat().st_mode
        except FileNotFoundError:
            raise UsageError(f"{path}: no such file") from None
        except OSError as exc:  # a folder on the way that this user may not enter
            raise UsageError(
                f"{path}: cannot read it: {exc.strerror}",
                hint="check the path and its permissions",
            ) from None
        if stat.S_ISDIR(mode):
            raise UsageError(
                f"{path} is a folder: name one workload file",
                hint=f"nodus validate {path} checks every file in it",
            )
        if not stat.S_ISREG(mode):
            # A pipe or a device could block or never end: workload files are plain files.
            raise UsageError(
                f"{path} is not a regular file ({_kind(mode)}): name a workload file (*.toml)"
            )
        result = load_file(p, str(path))
        if result.workload is None:
            raise InvalidWorkload(result.problems, str(path))
        return result

    def workload(self, **arguments: Any) -> Workload:
        """The workload that :meth:`run` would submit for these arguments (``fn=...``: the
        workload of a Python function call)."""
        if "fn" in arguments:
            from nodus_cli.api.calling import function_workload

            return function_workload(arguments["fn"], arguments)
        return workload_of(arguments)

    # -- running ---------------------------------------------------------------------

    @overload
    def run(
        self,
        *,
        fn: Callable[..., T],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        retries: int = 0,
        **arguments: Any,
    ) -> Call[T]: ...

    @overload
    def run(
        self,
        *,
        fn: None = None,
        image: str | None = None,
        command: str | Sequence[str] | None = None,
        retries: int = 0,
        **arguments: Any,
    ) -> Run: ...

    def run(
        self,
        *,
        fn: Callable[..., Any] | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
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
        priority: int | None = None,
        wait_timeout: str | float | None = None,
        queue: bool = True,
        retries: int = 0,
        **other: Any,
    ) -> Run | Call[Any]:
        """Submit a workload given as the workload file's keys; returns at once.

        Keys nodus does not know (``gpu_type``, ``num_gpus``, ``memory_bytes`` ...) are
        reported in :class:`InvalidWorkload` with the nodus key to use. When its GPUs are
        held by other runs it waits in line (``run.status == "queued"``), by ``priority``
        and for at most ``wait_timeout``; ``queue=False`` refuses it at once instead
        (:class:`~nodus_cli.errors.NotRunnable`).

        ``fn=`` (with ``args`` and ``kwargs``) calls a Python function in ``image``
        instead of a command, and returns its :class:`~nodus_cli.api.calls.Call`, a
        future of its value (see nodus_cli.api.calls).
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
            "priority": priority,
            "wait_timeout": wait_timeout,
            **other,
        }
        if fn is not None or "args" in other or kwargs is not None:
            from nodus_cli.api.calling import submit

            called = {**arguments, "queue": queue}
            return submit(self._inflight, fn, args, kwargs, called, retries)  # type: ignore[arg-type]
        workload = self.workload(**arguments)
        if not queue:
            workload = replace(workload, queue=False)
        return self.submit(workload, retries=retries)

    @overload
    def map(
        self,
        items: Iterable[Any],
        *,
        fn: Callable[..., T],
        parallel: int | None = None,
        retries: int = 0,
        **arguments: Any,
    ) -> Calls[T]: ...

    @overload
    def map(
        self,
        items: Iterable[str | int],
        *,
        fn: None = None,
        parallel: int | None = None,
        **arguments: Any,
    ) -> Run: ...

    def map(
        self,
        items: Iterable[Any],
        *,
        fn: Callable[..., Any] | None = None,
        parallel: int | None = None,
        **arguments: Any,
    ) -> Run | Calls[Any]:
        """Run the command once per item (``NODUS_ITEM`` in its environment), each task
        with its own allocation of the requirements; ``.results()`` gives them in order.

        ``fn=``: call the function once per item, ``fn(item)``; returns its
        :class:`~nodus_cli.api.calls.Calls`, one future per item."""
        if fn is not None:
            from nodus_cli.api.calling import submit_map

            retries = int(arguments.pop("retries", 0) or 0)
            return submit_map(self._inflight, fn, items, arguments, parallel, retries)
        spec: dict[str, Any] = {"items": list(items)}
        if parallel is not None:
            spec["parallel"] = parallel
        return self.run(fn=None, map=spec, **arguments)

    def run_file(self, path: str | Path, *, retries: int = 0) -> Run:
        """Submit a workload file; returns at once."""
        return self.submit(self.load(path), file=str(path), retries=retries)

    def prepare(
        self,
        workload: Workload,
        *,
        file: str | None = None,
        pulls: Pulls | None = None,
    ) -> Prepared:
        """Every check that can refuse the run, before anything is recorded (``pulls``:
        how an image pull is shown; by default a line on stderr)."""
        return self._session.prepare(workload, file=file, pulls=pulls)

    def submit(
        self,
        workload: Workload | Prepared,
        *,
        file: str | None = None,
        retries: int = 0,
        handshake: bool = False,
    ) -> Run:
        """Check (unless ``workload`` is already :class:`Prepared`), record and start it in a
        background supervisor; returns at once, or with ``handshake`` once its first task
        holds its place (or it ended early)."""
        prepared = workload if isinstance(workload, Prepared) else self.prepare(workload, file=file)
        record = self._session.submit(prepared, retries=retries, handshake=handshake)
        from nodus_cli.api.runs import Run

        return Run(self._session, record.id)

    def execute(
        self,
        workload: Workload | Prepared,
        *,
        file: str | None = None,
        retries: int = 0,
        sink: Sink | None = None,
    ) -> Executed:
        """Check (unless already :class:`Prepared`), record and run it in this process (the
        foreground); its output goes to ``sink`` as it comes, and SIGINT/SIGTERM stop it."""
        prepared = workload if isinstance(workload, Prepared) else self.prepare(workload, file=file)
        record, outcome = self._session.execute(prepared, retries=retries, sink=sink)
        from nodus_cli.api.runs import RunResult

        return Executed(record.id, outcome, RunResult.of(record))

    def supervise(self, run_id: str, retries: int = 0) -> int:
        """Drive a recorded run to its end here: the background half of :meth:`submit`."""
        from nodus_cli.run.launcher import supervise

        return supervise(run_id, retries, self.catalog)

    def rerun(self, run_id: str) -> tuple[RunResult, Workload]:
        """A recorded run and its workload, to run again (``${NAME}`` is resolved anew)."""
        from nodus_cli.workload import from_json

        record = self._session.store.get(run_id)
        from nodus_cli.api.runs import RunResult

        return RunResult.of(record), from_json(record.workload_json)

    # -- looking ---------------------------------------------------------------------

    def plan(
        self, path: str | Path | None = None, *, dry_run: bool = False, **arguments: Any
    ) -> Plan:
        """Price the workload (a file, or :meth:`run`'s arguments) on this client's target:
        the catalog's offers, or what the target holds now.

        The plan carries what it was made against (``plan.inventory``), the file's own
        warnings, and the spending limits that apply. ``dry_run``: the plan ``nodus run``
        would act on (on the catalog, the same as without it).
        """
        if path is not None:
            return self._plan_checked(self.check(path), str(path))
        return self._plan(self.workload(**arguments), [])

    def plan_text(self, text: str, name: str = "workload.toml") -> Plan:
        """Price a workload file's text (``name``: how its messages name it; its default
        workload name too), as :meth:`plan` prices a file; nothing is read or written.
        Relative paths in it (``mounts``, ``map.over``) are taken from the current
        folder."""
        from nodus_cli.workload import load_text

        stem = Path(name).stem.removesuffix(".nodus") or "workload"
        checked = load_text(text, name, default_name=stem)
        if checked.workload is None:
            raise InvalidWorkload(checked.problems, name)
        return self._plan_checked(checked, name)

    def _plan_checked(self, checked: Result, shown: str) -> Plan:
        workload = checked.workload
        assert workload is not None
        warnings = [
            f"{shown}:{p.line}: {p.loc}: {p.message}"
            if p.line
            else f"{shown}: {p.loc}: {p.message}"
            for p in checked.warnings
        ]
        return self._plan(workload, warnings)

    def _plan(self, workload: Workload, warnings: list[str]) -> Plan:
        from nodus_cli.planning.inventory import Inventory

        history = self._session.history(workload)
        if self.target == CATALOG:
            from nodus_cli import catalog
            from nodus_cli.planning.planner import plan_workload

            cat = catalog.load(self.catalog)
            plan = plan_workload(workload, cat.offers, target=CATALOG, history=history)
            plan.inventory = Inventory(CATALOG, cat.offers, cat.label, cat)
            stale = plan.inventory.stale_warning()
            if stale:
                plan.warnings.append(stale)
        else:
            target = self._session.place(reading=True)
            try:
                offers = target.offers(workload)
                plan = target.plan(workload, history)
            finally:
                target.close()
            plan.inventory = Inventory(self.target, offers, target.description)
        # What validate warns about (a top-level GPU no stage receives, a literal secret) is
        # said where the plan is read too.
        plan.warnings[:0] = warnings
        from nodus_cli.run import limits

        spending = limits.note()
        if spending is not None:
            plan.notes.append(spending)
        return plan

    def list_nodes(self) -> list[NodeInfo]:
        """What the target holds now: per machine CPUs, memory, GPU model, count and free."""
        self._session.runnable()
        target = self._session.place(reading=True)
        try:
            return target.nodes()
        finally:
            target.close()

    def runs(
        self,
        limit: int = 20,
        *,
        offset: int = 0,
        status: str | None = None,
        target: str | None = None,
        workload: str | None = None,
    ) -> list[RunResult]:
        """Recorded runs, newest first (an active run with what its target says now):
        ``limit`` of them from ``offset`` on, only those of the ``status``, ``target`` and
        ``workload`` given (exact names). A page costs the same over any history."""
        return list(
            self.iter_runs(limit, offset=offset, status=status, target=target, workload=workload)
        )

    def iter_runs(
        self,
        limit: int | None = None,
        *,
        offset: int = 0,
        status: str | None = None,
        target: str | None = None,
        workload: str | None = None,
    ) -> Iterator[RunResult]:
        """The recorded runs newest first, ``limit`` of them (None: every one), filtered
        as :meth:`runs`, read as they are iterated: memory stays bounded however long the
        history (what ``nodus runs --top N`` prints from). The records are reconciled at
        the call."""
        self.reconcile()
        from nodus_cli.api.runs import RunResult

        session = self._session
        found = session.store.iter_runs(
            limit, offset, status=status, target=target, workload=workload
        )
        return (RunResult.of(r, session.describe(r)) for r in found)

    def get(self, run_id: str) -> Run:
        """A handle on a recorded run (a unique prefix of its id is enough)."""
        from nodus_cli.api.runs import Run

        return Run(self._session, self._session.store.get(run_id).id)

    def newest(self) -> Run:
        """A handle on the newest recorded run."""
        from nodus_cli.api.runs import Run

        return Run(self._session, self._session.store.newest().id)

    def logs(self, run_id: str | None = None) -> LogView:
        """A run's log as it is now (default: the newest run's), to read and follow.

        When the records cannot be read (a damaged database), the run's log file is
        still read, and the view says why in ``warning``.
        """
        from nodus_cli.records import StoreError

        try:
            found = self.reconcile()
            run = self.get(run_id) if run_id else self.newest()
            record = run.record()
        except StoreError as exc:
            return self._log_file(exc, run_id)
        lines, offset = run.read_log()
        stages = [s.name for s in record.stages]
        from nodus_cli.api.runs import LogView

        return LogView.of(run, stages, lines, offset, found)

    def _log_file(self, error: NodusError, run_id: str | None) -> LogView:
        """The log file of a run whose records cannot be read (a damaged database)."""
        from nodus_cli.records import RunStore

        store = RunStore(self.home_folder, read_only=True)  # log files only
        chosen = [i for i in store.log_ids() if run_id is None or i.startswith(run_id)]
        if not chosen:
            raise error
        lines, offset = store.read_log(chosen[0])
        from nodus_cli.api.runs import LogView

        return LogView(
            chosen[0], [], lines, offset, warning=f"{error.message}; showing the log file alone"
        )

    def stop(self, run_id: str) -> bool:
        """Stop a run; False when it was not running (UsageError for an unknown id)."""
        return self.get(run_id).stop()

    def stop_run(self, run_id: str) -> StopResult:
        """Stop a run and say what happened (UsageError for an unknown id): its containers
        or services removed, its GPUs freed, recorded ``cancelled``."""
        return self._session.stop_run(run_id)

    def spend(self) -> Report:
        """Today's and this month's spend (UTC), per workload and per target, against the
        spending limits (``[limits]`` in config.toml); :meth:`reconcile` first, so that a run
        counted as running is one that is."""
        from nodus_cli.run.spending import report

        self.reconcile()
        return report(self._session.store)

    def spend_by_day(self, days: int = 30) -> list[tuple[str, float]]:
        """(UTC day ``YYYY-MM-DD``, recorded cost) of each of the last ``days`` days,
        oldest first, today included; a day without runs costs 0."""
        from datetime import UTC, datetime, timedelta

        today = datetime.now(UTC).date()
        first = today - timedelta(days=max(days, 1) - 1)
        found = dict(self._session.reader().daily_spend(first.isoformat()))
        every = (first + timedelta(days=n) for n in range((today - first).days + 1))
        return [(d.isoformat(), found.get(d.isoformat(), 0.0)) for d in every]

    def init_node(
        self,
        *,
        price: float | None = None,
        machine_id: str | None = None,
        apply: bool = False,
        daemon_json: str | Path = "/etc/docker/daemon.json",
    ) -> NodeSetup:
        """What makes this machine a GPU node of a Swarm cluster for nodus (daemon settings,
        the NVIDIA runtime's setting, node labels); ``apply`` writes and sets them."""
        from nodus_cli.targets.swarm import setup

        return setup.init_node(price, machine_id, apply, Path(daemon_json))


def _kind(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a plain file"
