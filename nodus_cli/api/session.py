"""What a :class:`~nodus_cli.api.client.Client` holds, and what the handles it gives out
(:class:`~nodus_cli.api.runs.Run`, :class:`~nodus_cli.api.calls.Call`) use: the place it
plans and runs on, the catalog, and the run records.

Why apart from the client: a handle needs the records and the targets, not the client's
doors (loading files, submitting, planning). With them here, the API's modules import in
one direction (the client above its handles, the handles above this), and no handle
reaches into the client. A :class:`Session` is internal: a program holds a ``Client``.

Imports stand inside the methods that need them: the package docstring says why.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nodus_cli import targets
from nodus_cli.api.targets import CATALOG, target_names
from nodus_cli.errors import NodusError, UsageError
from nodus_cli.structs import field, struct

if TYPE_CHECKING:
    from nodus_cli.planning.ranking import RuntimeLookup
    from nodus_cli.records import RunRecord, RunStore, StageStatus
    from nodus_cli.run.driver import RunEnd
    from nodus_cli.run.launcher import Launch
    from nodus_cli.run.reconcile import StopResult
    from nodus_cli.run.sink import Sink
    from nodus_cli.targets.base import Pulls, Target
    from nodus_cli.workload import Workload

__all__ = ["Prepared", "Session"]


@struct(frozen=True)
class Prepared:
    """A workload checked against the client's target, ready to be recorded and run
    (:meth:`Client.execute`, :meth:`Client.submit`): what the checks found to say."""

    workload: Workload
    file: str | None
    #: What the target says before it starts (a Swarm limit, a shared work folder).
    notes: tuple[str, ...]
    #: What the user should act on (a budget that cannot be enforced, a literal secret).
    warnings: tuple[str, ...]
    _launch: Launch = field(repr=False, compare=False)


class Session:
    """A client's place (``target``), catalog and records (opened when first needed)."""

    def __init__(
        self,
        target: str = "local",
        catalog: str | Path | None = None,
        home: str | Path | None = None,
    ) -> None:
        names = target_names()
        if target != CATALOG and target not in names:
            raise UsageError(
                f"unknown target {target!r}: nodus runs on {', '.join(names)}",
                hint=f"{targets.choices()}; plans also take --target catalog",
            )
        self.target = target
        self.catalog = str(catalog) if catalog is not None else None
        self.home = Path(home) if home is not None else None
        self._store: RunStore | None = None
        #: When :meth:`prepare` last reconciled the records (monotonic seconds).
        self._reconciled = -math.inf
        self._reconciling = threading.Lock()

    def end_warm(self) -> None:
        """End the warm workers of this session's place and records (its calls' workers)."""
        if self.target == CATALOG or self._store is None:
            return
        target = self.place()
        try:
            target.end_warm()
        finally:
            target.close()

    def close(self) -> None:
        """Let go of the records."""
        if self._store is not None:
            self._store.close()
            self._store = None

    @property
    def home_folder(self) -> Path:
        """Where the run records live (``NODUS_HOME`` unless ``home`` was given)."""
        from nodus_cli import config

        return self.home or config.home()

    @property
    def store(self) -> RunStore:
        """The run records, opened (and created) when first needed."""
        if self._store is None:
            from nodus_cli.records import RunStore

            self._store = RunStore.open(self.home)
        return self._store

    def reader(self) -> RunStore:
        """The store to read, never creating it: where no run was ever recorded, an empty
        read-only one (a plan must not make the state folder)."""
        if self._store is not None:
            return self._store
        from nodus_cli.records import RunStore

        return RunStore.open(self.home, create=False)

    def place(
        self, name: str | None = None, pulls: Pulls | None = None, reading: bool = False
    ) -> Target:
        """The target called ``name`` (default: the session's); ``reading``: to look only,
        so the state folder is not created for it."""
        store = self.reader() if reading else self.store
        return targets.get(name or self.target, store, self.catalog, pulls)

    def runnable(self) -> None:
        """Refuse the catalog as a place to run."""
        if self.target == CATALOG:
            raise UsageError(
                "the catalog is a market of quotes, not a place to run",
                hint=f"run with {targets.choices()}; `nodus plan` prices the catalog",
            )

    def reconcile(self) -> list[str]:
        """Notice runs whose supervisor died: stop and remove what they left, record them
        ``failed``. Returns what was found, one line each."""
        from nodus_cli.run.reconcile import reconcile

        return reconcile(self.store, self.catalog)

    def history(self, workload: Workload) -> RuntimeLookup:
        """This workload's measured runtimes from the records: none when there are no
        records yet or they cannot be read (a plan is never refused for that)."""
        from nodus_cli.planning.ranking import no_history

        if self._store is None and not (self.home_folder / "runs.sqlite3").is_file():
            return no_history
        import sqlite3

        from nodus_cli.records import fingerprint, runtime_lookup

        try:
            return runtime_lookup(self.reader(), fingerprint(workload))
        except (NodusError, sqlite3.Error, OSError):
            return no_history

    def describe(self, record: RunRecord) -> str | None:
        """What the run's target says about an active run now (None: nothing to add)."""
        if not record.status.active:
            return None
        try:
            target = self.place(record.target, reading=True)
            try:
                return target.describe(record)
            finally:
                target.close()
        except NodusError:
            return None

    def stop_run(self, run_id: str) -> StopResult:
        """Stop a run and say what happened (UsageError for an unknown id)."""
        from nodus_cli.run.reconcile import stop

        return stop(self.store, run_id, self.catalog)

    # -- a run's way: prepared, recorded, run -------------------------------------------

    def prepare(
        self,
        workload: Workload,
        *,
        file: str | None = None,
        pulls: Pulls | None = None,
        reconciled_within: float = 0.0,
    ) -> Prepared:
        """Every check that can refuse the run, before anything is recorded; the records
        reconciled first, unless this session did so less than ``reconciled_within``
        seconds ago (a burst of function calls reconciles once, not once per call: each
        reconcile reads every active run)."""
        from nodus_cli.run import launcher

        self.runnable()
        with self._reconciling:
            due = time.monotonic() - self._reconciled >= reconciled_within
            if due:
                self._reconciled = time.monotonic()
        if due:
            self.reconcile()
        launch = launcher.prepare(
            workload, self.target, self.store, catalog=self.catalog, file=file, pulls=pulls
        )
        return Prepared(workload, file, launch.preparation.notes, tuple(launch.warnings), launch)

    def submit(self, prepared: Prepared, *, retries: int, handshake: bool) -> RunRecord:
        """Record ``prepared`` and start it in a background supervisor."""
        from nodus_cli.run import launcher

        return launcher.submit(
            prepared._launch,
            self.store,
            retries=retries,
            catalog=self.catalog,
            handshake=handshake,
        )

    def record(self, prepared: Prepared, run_id: str) -> RunRecord:
        """Record ``prepared`` as run ``run_id``, to be run here (:meth:`execute`)."""
        launch = prepared._launch
        return self.store.create_run(
            launch.workload,
            launch.target.name,
            launch.preparation.price_per_hour,
            None,
            run_id=run_id,
        )

    def execute(
        self,
        prepared: Prepared,
        *,
        retries: int,
        sink: Sink | None = None,
        record: RunRecord | None = None,
        item_ended: Callable[[int, StageStatus, str | None], None] | None = None,
        stopped_by: Callable[[], str | None] | None = None,
    ) -> tuple[RunRecord, RunEnd]:
        """Run ``prepared`` in this process (recorded first, unless ``record`` is given);
        ``item_ended`` hears each item of a map end, ``stopped_by`` says who in this
        program stopped the run (launcher.execute)."""
        from nodus_cli.run import launcher

        return launcher.execute(
            prepared._launch,
            self.store,
            retries=retries,
            sink=sink,
            record=record,
            item_ended=item_ended,
            stopped_by=stopped_by,
        )
