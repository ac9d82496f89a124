"""Python function calls as the Python API shows them: :class:`Call` (one call, a
``concurrent.futures.Future`` of its value and a handle on its run), :class:`Calls` (a map
of a function: one Call per item) and :class:`CallResult` (an item's value or error).

```python
call = client.run(fn=train, args=(data,), image="python:3.11-slim", gpu="H100")
print(call.result())              # train's value; train's exception is raised here
calls = client.map(fn=score, items=shards, image="python:3.11-slim")
values = [r.value for r in calls.results()]       # item order; r.error when it failed
```

A handle is made when the call is submitted and settled by the thread that drives its
run (:mod:`nodus_cli.api.calling`, which says how a call goes): the value, the
function's own exception, or :class:`~nodus_cli.errors.CallFailed`.

Imports stand inside the methods that need them: the package docstring says why.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from nodus_cli.errors import UsageError
from nodus_cli.records.model import RunStatus
from nodus_cli.structs import struct

if TYPE_CHECKING:
    from nodus_cli.api.session import Session

__all__ = ["Call", "CallResult", "Calls"]

T = TypeVar("T")


class Call(Future[T]):
    """One call of a Python function: a :class:`concurrent.futures.Future` of its value
    (``result(timeout)``, ``exception()``, ``done()``, ``add_done_callback``; it works with
    ``concurrent.futures.wait``/``as_completed`` and ``asyncio.wrap_future``) and a handle
    on its run (``id``, ``status``, ``logs()``, ``stop()``; ``cancel()`` stops it).

    An item of a map is a Call too (``calls[3]``): its run is the map's, its ``logs()``
    the item's own; it cannot be cancelled alone (``cancel()`` returns False: cancel the
    map with :meth:`Calls.cancel`).
    """

    def __init__(
        self,
        session: Session,
        name: str,
        run_id: str,
        item: int | None = None,
    ) -> None:
        super().__init__()
        self._session = session
        #: The function, ``module.qualname`` (the run's workload is named so).
        self.name = name
        #: The run's id (``nodus runs``, ``nodus logs``); recorded once the call starts.
        self.id = run_id
        self._item = item
        self._recorded = threading.Event()
        #: Who in this program stopped the call, as its record says it (``call.cancel()``).
        self._stopped_by: str | None = None

    def __repr__(self) -> str:
        where = f" item {self._item}" if self._item is not None else ""
        state = "done" if self.done() else str(self.status)
        return f"<Call {self.name}{where} {self.id} {state}>"

    @property
    def status(self) -> RunStatus:
        """The run's status (``pending`` while it waits for the calls it takes)."""
        if not self._recorded.is_set():
            return RunStatus.CANCELLED if self.cancelled() else RunStatus.PENDING
        try:
            return self._session.store.get(self.id).status
        except UsageError:
            return RunStatus.PENDING

    def running(self) -> bool:
        return self.status == RunStatus.RUNNING and not self.done()

    def logs(self) -> str:
        """The function's output so far (stdout and stderr; an item's own for a map's)."""
        if not self._recorded.is_set():
            return ""
        from nodus_cli.api.runs import Run

        return Run(self._session, self.id).logs(item=self._item)

    def stop(self) -> bool:
        """Stop the run (a map's: all of it); False when it was not running. The call then
        fails with :class:`~nodus_cli.errors.CallFailed` (``cancelled by call.stop()``)."""
        if not self._recorded.is_set():
            return self.cancel()
        from nodus_cli.run.reconcile import Stopped

        self.note_stopped_by("call.stop()")
        return self._session.stop_run(self.id).result == Stopped.STOPPED

    @property
    def stopped_by(self) -> str | None:
        """Who in this program stopped the call (``call.cancel()``), for its record."""
        return self._stopped_by

    def note_stopped_by(self, words: str) -> None:
        """Say who stops the call, unless it was said already (the first stands)."""
        self._stopped_by = self._stopped_by or words

    def cancel(self) -> bool:
        """Stop the call and cancel the future (``result()`` then raises CancelledError;
        the run is recorded ``cancelled by call.cancel()``); False when it has ended
        already, or for an item of a map."""
        if self._item is not None or self.done():
            return False
        self.note_stopped_by("call.cancel()")
        if not super().cancel():
            return False
        if self._recorded.is_set():  # the run loop sees the request within a second
            self._session.store.request_stop(self.id)
        return True

    @property
    def item(self) -> int | None:
        """Its index in a map (None: a call of its own)."""
        return self._item

    @property
    def recorded(self) -> bool:
        """Whether its run is recorded (it has started; ``id`` names it in the records)."""
        return self._recorded.is_set()

    @property
    def session(self) -> Session:
        """What the client that made it holds (internal: its calls pass values only to
        calls of the same client)."""
        return self._session

    # For the thread that drives the call (nodus_cli.api.calling), as set_result is for an
    # executor.

    def set_recorded(self) -> None:
        """Its run is recorded: ``status``, ``logs()`` and ``stop()`` read it from now on."""
        self._recorded.set()

    def settle(self, value: Any = None, error: BaseException | None = None) -> None:
        """Its value, or the error it ends with (nothing when it was cancelled meanwhile)."""
        try:
            if error is not None:
                self.set_exception(error)
            else:
                self.set_result(value)
        except InvalidStateError:  # cancelled meanwhile
            pass


@struct(frozen=True)
class CallResult(Generic[T]):
    """One item of a map: its index, the item itself, and its value or the error its call
    raised."""

    index: int
    #: The item itself, as it was given to ``map`` (the records show its ``repr``).
    item: Any
    value: T | None
    error: BaseException | None

    @property
    def ok(self) -> bool:
        return self.error is None


class Calls(Sequence[Call[T]]):
    """A map of a Python function: one :class:`Call` per item (``calls[3]``, iteration,
    ``len``), all in one run (``id``, ``status``, ``logs(item=N)``, ``stop()``,
    ``cancel()``); :meth:`results` gives each item's value or error, in item order."""

    def __init__(
        self, session: Session, name: str, run_id: str, calls: list[Call[T]], items: list[Any]
    ) -> None:
        self._session = session
        self.name = name
        self.id = run_id
        self._calls = calls
        self._items = items
        self._cancelled = False

    def __repr__(self) -> str:
        return f"<Calls {self.name} {self.id} {len(self)} items {self.status}>"

    @overload
    def __getitem__(self, index: int) -> Call[T]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Call[T]]: ...

    def __getitem__(self, index: int | slice) -> Call[T] | Sequence[Call[T]]:
        return self._calls[index]

    def __len__(self) -> int:
        return len(self._calls)

    def __iter__(self) -> Iterator[Call[T]]:
        return iter(self._calls)

    @property
    def status(self) -> RunStatus:
        return self._calls[0].status if self._calls else RunStatus.SUCCEEDED

    def done(self) -> bool:
        return all(c.done() for c in self._calls)

    def results(self, timeout: float | None = None) -> list[CallResult[T]]:
        """Every item's value or error, in item order, once all have ended
        (TimeoutError after ``timeout`` seconds; the map goes on)."""
        _, pending = futures.wait(self._calls, timeout)
        if pending:
            raise TimeoutError(
                f"{len(pending)} of {len(self)} items of run {self.id} are still running "
                f"after {timeout:g} s"
            )
        found = []
        for i, call in enumerate(self._calls):
            if call.cancelled():
                error: BaseException | None = futures.CancelledError()
                value = None
            else:
                error = call.exception()
                value = None if error is not None else call.result()
            found.append(CallResult(i, self._items[i], value, error))
        return found

    def logs(self, item: int | None = None) -> str:
        if not self._calls or not self._calls[0].recorded:
            return ""
        from nodus_cli.api.runs import Run

        return Run(self._session, self.id).logs(item=item)

    def stop(self) -> bool:
        """Stop the map (every item still running or waiting fails); False when it was not
        running."""
        if not self._calls:
            return False
        if not self._calls[0].recorded:
            return self.cancel()
        from nodus_cli.run.reconcile import Stopped

        self.note_stopped_by("calls.stop()")
        return self._session.stop_run(self.id).result == Stopped.STOPPED

    def cancel(self) -> bool:
        """Stop the map and cancel the items that have not ended (the run is recorded
        ``cancelled by calls.cancel()``)."""
        if self.done():
            return False
        self._cancelled = True
        self.note_stopped_by("calls.cancel()")
        if self._calls and self._calls[0].recorded:
            self._session.store.request_stop(self.id)
        for call in self._calls:
            Future.cancel(call)
        return True

    def note_stopped_by(self, words: str) -> None:
        """Say who stops every item's call, unless it was said already (as
        :meth:`Call.note_stopped_by`)."""
        for call in self._calls:
            call.note_stopped_by(words)
