"""Making a Python function call: its workload, its folder, its arguments' Calls, and
the thread that drives its run and settles its :class:`~nodus_cli.api.calls.Call`.

How a call goes, and why:

1. In the caller's thread, before anything is submitted: the workload is checked with the
   file's rules (``fn`` excludes ``command``; ``image`` is required), and the function and
   its arguments are pickled into the call's folder (:mod:`nodus_cli.functions`), so
   what cannot travel is :class:`~nodus_cli.errors.InvalidWorkload` naming it.
2. In a thread of this process (the call's driver): the Calls among the arguments (a
   pipeline) are waited for and replaced by their values, then the run is prepared (the
   image, the plan, the spending limits), recorded and driven to its end by the same run
   loop as any run. The caller's process is its supervisor: the result comes back to it,
   and when it is killed, the next nodus command that reads the records reconciles the
   run like any other (its containers removed, recorded failed, its folder removed).
3. The outcome settles the future: the value, the function's own exception (with the
   remote traceback), or :class:`~nodus_cli.errors.CallFailed` with the run's words (in
   the caller's terms: ``memory_gb=``, not ``[requirements]``). An item of a map settles
   as it ends (the run loop tells it), so ``as_completed`` and a step fed by one item do
   not wait for the slowest; the last item, and a single call, once the run has ended,
   so that when every Call is done the run's record is complete. Done-callbacks run in
   the run loop's thread (as a Future's run in the thread that settles it): keep them
   short.

``Client.close()`` (the end of ``with Client() as client:``) waits for the client's calls
still in flight, as ``Executor.shutdown()`` does; leaving the block with an exception stops
them first.

Imports stand inside the methods that need them: the package docstring says why.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from nodus_cli.api.arguments import workload_of
from nodus_cli.api.calls import Call, Calls
from nodus_cli.errors import CallFailed, InvalidWorkload, NodusError, Problem
from nodus_cli.records.model import RunStatus, StageStatus
from nodus_cli.structs import replace, struct
from nodus_cli.workload.hints import in_python

if TYPE_CHECKING:
    from nodus_cli.api.session import Session
    from nodus_cli.functions.layout import CallFolder
    from nodus_cli.workload import Workload

__all__ = ["InFlight", "function_workload", "submit", "submit_map"]

T = TypeVar("T")

#: A Call nested deeper than this, or in a container longer than this, is not looked for.
_DEPTH = 8
_WIDTH = 10_000
#: A call reconciles the records unless its client's calls did within this many seconds.
_RECONCILE_EVERY = 1.0

_NOT_WITH_FN = {
    "command": (
        "fn and command exclude each other: a call runs the function (fn=...), a command "
        "runs a program (command=...); pass one of them"
    ),
    "entrypoint": (
        "a function call runs nodus's runtime with the image's Python: entrypoint does not "
        "apply; leave it out"
    ),
    "stages": (
        "a function call is one step: make each step its own call (a Call passed as an "
        "argument runs after it)"
    ),
    "map": "a map of a function takes its inputs as items: client.map(fn=..., items=[...])",
}


# -- the workload of a call ---------------------------------------------------------------


def function_workload(
    fn: Any,
    arguments: Mapping[str, Any],
    call_id: str = "",
    items: Sequence[str] | None = None,
    parallel: int | None = None,
    source: str = "client.run()",
) -> Workload:
    """The workload that calls ``fn`` (once, or once per item): the file's rules for every
    other keyword, and the function's own (``fn`` callable, no ``command``, an image)."""
    from nodus_cli.functions import serialization
    from nodus_cli.workload import NESTED_ONLY, FunctionCall

    problems: list[Problem] = []
    wrong = serialization.not_callable(fn)
    if fn is None:
        wrong = Problem(
            "fn",
            "missing: args and kwargs are the arguments of a function call; pass the "
            "function too, fn=train (a command takes its arguments in command)",
        )
    if wrong is not None:
        problems.append(wrong)
    skip = ("args", "kwargs", "fn", "queue", "keep_warm")
    doc = {k: v for k, v in arguments.items() if k not in skip}
    queue = bool(arguments.get("queue", True))  # whether it may wait for GPUs (not a key)
    warm = _keep_warm(arguments.get("keep_warm"), problems)
    for key, why in _NOT_WITH_FN.items():
        if doc.pop(key, None) is not None:
            problems.append(Problem(key, why))
    # A function's requirements may be given flat (@function(cpu=2)): into requirements,
    # where an explicit key of the mapping wins.
    flat = {k: doc.pop(k) for k in NESTED_ONLY if doc.get(k) is not None}
    if flat:
        given: Any = doc.get("requirements")
        mapping = given.as_dict() if hasattr(given, "as_dict") else dict(given or {})
        doc["requirements"] = {**flat, **mapping}
    name = serialization.function_name(fn) if wrong is None else "function"
    doc["name"] = doc.get("name") or name
    if items is not None:
        doc["map"] = {"items": list(items)} | ({"parallel": parallel} if parallel else {})
    needed = serialization.python_version()
    if doc.get("image") is None:
        problems.append(
            Problem(
                "image",
                f"required: the image the function runs in, with Python {needed} (this "
                f"program's version), e.g. image='python:{needed}-slim'",
            )
        )
    workload: Workload | None = None
    try:
        workload = workload_of(doc)
    except InvalidWorkload as exc:
        problems.extend(
            p for p in exc.problems if not (p.loc == "image" and doc.get("image") is None)
        )
    if problems or workload is None:
        raise InvalidWorkload(problems, source)
    call = FunctionCall(str(doc["name"]), call_id, needed, warm)
    stage = replace(workload.stages[0], function=call)
    return replace(workload, stages=[stage], queue=queue and workload.queue)


def _keep_warm(given: Any, problems: list[Problem]) -> float:
    """``keep_warm``: seconds >= 0; not given, the configuration's (``[functions]``)."""
    from nodus_cli import config

    if given is None:
        return config.functions().keep_warm
    number = isinstance(given, int | float) and not isinstance(given, bool)
    if number and math.isfinite(given) and given >= 0:
        return float(given)
    problems.append(
        Problem(
            "keep_warm",
            f"must be a number of seconds >= 0, not {given!r}: how long a call's warm "
            "worker waits for the next call of its kind (0: a new container for every call)",
        )
    )
    return 0.0


# -- submitting ---------------------------------------------------------------------------


def submit(
    inflight: InFlight,
    fn: Callable[..., T],
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    arguments: Mapping[str, Any],
    retries: int = 0,
) -> Call[T]:
    """``client.run(fn=...)``: check, pickle, and start driving one call; returns at once."""
    from nodus_cli.records import new_run_id

    run_id = new_run_id()
    workload = function_workload(fn, arguments, run_id)
    kwargs = dict(kwargs or {})
    if not isinstance(args, list | tuple):
        raise InvalidWorkload(
            [Problem("args", f"must be a tuple or a list, not {type(args).__name__}")],
            "client.run()",
        )
    inputs = [_Input(tuple(args), kwargs, "")]
    call: Call[T] = Call(inflight.session, workload.name, run_id)
    _start(inflight, fn, workload, inputs, [call], retries, "client.run()")
    return call


def submit_map(
    inflight: InFlight,
    fn: Callable[..., T],
    items: Iterable[Any],
    arguments: Mapping[str, Any],
    parallel: int | None = None,
    retries: int = 0,
) -> Calls[T]:
    """``client.map(fn=..., items=...)``: one call of ``fn(item)`` per item, in one run."""
    from nodus_cli.records import new_run_id

    values = list(items)
    run_id = new_run_id()
    labels = [_label(v) for v in values]
    workload = function_workload(fn, arguments, run_id, labels, parallel, source="client.map()")
    inputs = [_Input((v,), {}, f"items[{i}]: ") for i, v in enumerate(values)]
    session = inflight.session
    calls: list[Call[T]] = [
        Call(session, workload.name, run_id, item=i) for i in range(len(values))
    ]
    _start(inflight, fn, workload, inputs, calls, retries, "client.map()")
    return Calls(session, workload.name, run_id, calls, values)


@struct
class _Input:
    """One call's arguments (a single call's, or one item's), until they are written."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: How its problems are named (``items[3]: `` for an item of a map).
    where: str


def _start(
    inflight: InFlight,
    fn: Callable[..., Any],
    workload: Workload,
    inputs: list[_Input],
    calls: list[Call[Any]],
    retries: int,
    source: str,
) -> None:
    from nodus_cli.functions import runtime, serialization
    from nodus_cli.functions.layout import CallFolder

    session = inflight.session
    waits = [_dependencies(session, i, source) for i in inputs]
    folder = CallFolder(session.home_folder, calls[0].id)
    folder.create()
    runtime.ensure(session.home_folder)  # once, before any container needs it
    try:
        serialization.write_function(folder.function, fn, source)
        problems: list[Problem] = []
        with serialization.by_value():
            for index, (given, deps) in enumerate(zip(inputs, waits, strict=True)):
                folder.create_item(index)
                if deps:  # written once the calls it takes have their values
                    args, kwargs = _substituted(given, lambda c: _Pending(c.name))
                    found = serialization.check_arguments(args, kwargs)
                    problems.extend(replace(p, loc=f"{given.where}{p.loc}") for p in found)
                    continue
                try:
                    serialization.write_arguments(
                        folder.args(index), given.args, given.kwargs, source, given.where
                    )
                except InvalidWorkload as exc:
                    problems.extend(exc.problems)
        if problems:
            raise InvalidWorkload(problems, source)
    except BaseException:
        folder.remove()
        raise
    driver = _Driver(session, workload, folder, inputs, waits, calls, retries, source)
    thread = threading.Thread(target=driver.drive, name=f"nodus-call-{calls[0].id}")
    inflight.add(calls, thread)
    thread.start()


class _Pending:
    """Stands for a Call's value while the arguments are checked before it has one."""

    def __init__(self, name: str) -> None:
        self.name = name


def _label(value: Any) -> str:
    """An item as the records show it."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    text = text.replace("\n", " ")
    return text if len(text) <= 120 else text[:119] + "…"


# -- pipelines: Calls among the arguments ---------------------------------------------------


def _dependencies(session: Session, given: _Input, source: str) -> list[tuple[str, Call[Any]]]:
    """The Calls among the arguments (and where), each of this client."""
    found: list[tuple[str, Call[Any]]] = []
    for i, value in enumerate(given.args):
        found.extend(_calls_in(value, f"args[{i}]", 0))
    for key, value in given.kwargs.items():
        found.extend(_calls_in(value, f"kwargs[{key!r}]", 0))
    foreign = [
        Problem(
            f"{given.where}{loc}",
            f"is a Call of another Client ({call.name}, run {call.id}): a call's value passes "
            "on to calls of the same client; make both calls with one client, or pass "
            "call.result()",
        )
        for loc, call in found
        if call.session is not session
    ]
    if foreign:
        raise InvalidWorkload(foreign, source)
    return found


def _calls_in(value: Any, loc: str, depth: int) -> Iterator[tuple[str, Call[Any]]]:
    if isinstance(value, Call):
        yield loc, value
    elif depth >= _DEPTH:
        return
    elif isinstance(value, list | tuple) and len(value) <= _WIDTH:
        for i, inner in enumerate(value):
            yield from _calls_in(inner, f"{loc}[{i}]", depth + 1)
    elif isinstance(value, dict) and len(value) <= _WIDTH:
        for key, inner in value.items():
            yield from _calls_in(inner, f"{loc}[{key!r}]", depth + 1)


def _substituted(
    given: _Input, value_of: Callable[[Call[Any]], Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments with every Call replaced by ``value_of(call)``."""
    args = tuple(_replaced(v, value_of, 0) for v in given.args)
    kwargs = {k: _replaced(v, value_of, 0) for k, v in given.kwargs.items()}
    return args, kwargs


def _replaced(value: Any, value_of: Callable[[Call[Any]], Any], depth: int) -> Any:
    if isinstance(value, Call):
        return value_of(value)
    if depth >= _DEPTH or not any(True for _ in _calls_in(value, "", depth)):
        return value
    if isinstance(value, list):
        return [_replaced(v, value_of, depth + 1) for v in value]
    if isinstance(value, tuple):
        inner = [_replaced(v, value_of, depth + 1) for v in value]
        return type(value)(*inner) if hasattr(value, "_fields") else tuple(inner)
    if isinstance(value, dict):
        return {k: _replaced(v, value_of, depth + 1) for k, v in value.items()}
    return value


# -- driving -----------------------------------------------------------------------------


class _Driver:
    """Drives one function run in a thread of the caller, and settles its Calls."""

    def __init__(
        self,
        session: Session,
        workload: Workload,
        folder: CallFolder,
        inputs: list[_Input],
        waits: list[list[tuple[str, Call[Any]]]],
        calls: list[Call[Any]],
        retries: int,
        source: str,
    ) -> None:
        self.session = session
        self.workload = workload
        self.folder = folder
        self.inputs = inputs
        self.waits = waits
        self.calls = calls
        self.retries = retries
        self.source = source
        self.run_id = calls[0].id
        self.name = workload.name
        self.recorded = False
        #: The run's work folder, when it ended with something in it and was kept.
        self.kept: str | None = None
        #: What each call gave (value, error), until it is delivered: a map's item as it
        #: ends, the last one (and a single call) once the run has ended and the folder
        #: is removed, so that when every Call is done the run's record is complete.
        self.answers: dict[int, tuple[Any, BaseException | None]] = {}
        self.delivered: set[int] = set()

    def drive(self) -> None:
        try:
            if self._arguments() and not self._cancelled():
                self._run()
        except NodusError as exc:
            self._fail_all(self._words(in_python(exc.message)), exc.hint, exc.exit_code)
        except BaseException as exc:  # the thread's boundary: carried to the futures
            self._fail_all(f"nodus failed while running it: {exc!r}", None, 1)
        finally:
            self.folder.remove()
            for index in sorted(self.answers):
                self._deliver(index)

    def _answer(
        self, call: Call[Any], value: Any = None, error: BaseException | None = None
    ) -> None:
        """Keep what ``call`` gave (the first answer stands)."""
        index = call.item or 0
        if index not in self.answers and index not in self.delivered:
            self.answers[index] = (value, error)

    def _deliver(self, index: int) -> None:
        """Settle the Call of ``index`` with its answer."""
        value, error = self.answers.pop(index)
        self.delivered.add(index)
        self.calls[index].settle(value, error)

    def _cancelled(self) -> bool:
        return all(c.cancelled() for c in self.calls)

    def _arguments(self) -> bool:
        """Wait for the Calls among the arguments and write them; False when one failed
        (its dependents then fail, naming it)."""
        from nodus_cli.functions import serialization

        for index, (given, deps) in enumerate(zip(self.inputs, self.waits, strict=True)):
            if not deps:
                continue
            for loc, dep in deps:
                try:
                    dep.result()
                except BaseException as exc:
                    why = "was cancelled" if dep.cancelled() else f"failed: {_reason(exc)}"
                    self._fail(
                        self.calls[index],
                        f"was not started: its argument {given.where}{loc} is the call "
                        f"{dep.name} (run {dep.id}), which {why}",
                        None,
                    )
                    return False
            args, kwargs = _substituted(given, lambda c: c.result())
            try:
                serialization.write_arguments(
                    self.folder.args(index), args, kwargs, self.source, given.where
                )
            except InvalidWorkload as exc:
                lines = "; ".join(f"{p.loc}: {p.message}" for p in exc.problems)
                self._fail(self.calls[index], f"was not started: {lines}", None)
                return False
        return True

    def _run(self) -> None:
        session = self.session
        prepared = session.prepare(self.workload, reconciled_within=_RECONCILE_EVERY)
        record = session.record(prepared, self.run_id)
        self.recorded = True
        for call in self.calls:
            call.set_recorded()
        if self._cancelled():
            session.store.request_stop(self.run_id)
        _, outcome = session.execute(
            prepared,
            retries=self.retries,
            record=record,
            item_ended=self._item_ended,
            stopped_by=self._stopped_by,
        )
        self._settle(outcome.status, outcome.message)

    def _item_ended(self, index: int, ran: StageStatus, why: str | None) -> None:
        """An item of the map ended for good (after its retries): its Call settles now,
        so ``as_completed`` and a pipeline step fed by it need not wait for the slowest
        item; the last one settles with the run."""
        call = self.calls[index]
        if call.done() or index in self.answers or index in self.delivered:
            return
        self._settle_item(index, ran, why, None, None)
        left = len(self.calls) - len(self.delivered) - len(self.answers)
        if left > 0:
            self._deliver(index)

    def _stopped_by(self) -> str | None:
        """Who in this program stopped the run (``call.cancel()``), for its record."""
        return next((c.stopped_by for c in self.calls if c.stopped_by), None)

    def _settle(self, status: RunStatus, message: str | None) -> None:
        store = self.session.store
        record = store.get(self.run_id)
        if record.output and record.output.get("kind") == "kept":
            self.kept = record.output.get("path")
        stage = record.stages[0] if record.stages else None
        if self.workload.stages[0].map is None:
            ran = stage.status if stage is not None else StageStatus.FAILED
            ends = [(ran, (stage.message if stage else None) or message)]
        else:
            tasks = {t.index: t for t in store.tasks(self.run_id, 0)}
            ends = [
                (tasks[i].status, tasks[i].message) if i in tasks else (StageStatus.FAILED, None)
                for i in range(len(self.calls))
            ]
        for index, (call, (ran, why)) in enumerate(zip(self.calls, ends, strict=True)):
            if call.done() or index in self.answers or index in self.delivered:
                continue
            self._settle_item(index, ran, why, status, message)

    def _settle_item(
        self,
        index: int,
        ran: StageStatus,
        why: str | None,
        status: RunStatus | None,
        message: str | None,
    ) -> None:
        """Keep the answer of item ``index`` (it ended ``ran``, for ``why``; the run ended
        ``status``, None while it runs) from its folder, then remove that folder."""
        from nodus_cli.functions import outcome

        image = self.workload.stages[0].image
        needed = self.workload.stages[0].function.python  # type: ignore[union-attr]
        call = self.calls[index]
        settled = outcome.settle(self.folder.item(index), image, needed)
        if ran == StageStatus.SUCCEEDED and isinstance(settled, outcome.Value):
            self._answer(call, settled.value)
        elif isinstance(settled, outcome.Raised):
            self._answer(call, error=settled.error)
        else:
            words = settled.message if isinstance(settled, outcome.Failed) else None
            # The run's words (out of memory: "raise memory_gb ...") as the caller passes it.
            reason = words or in_python(why or message or f"ended {ran}")
            if ran == StageStatus.PENDING and status not in (None, RunStatus.SUCCEEDED):
                reason = f"was not run: {message or status}"
            self._fail(call, reason, None)
        self.folder.remove_item(index)

    def _words(self, message: str) -> str:
        return message if self.recorded else f"could not start: {message}"

    def _fail(self, call: Call[Any], reason: str, hint: str | None, code: int = 1) -> None:
        where = f" item {call.item}" if call.item is not None else ""
        run = f" (run {self.run_id})" if self.recorded else ""
        text = f"{self.name}{where}{run}: {reason}"
        if hint is None and self.recorded:
            hint = f"its output: nodus logs {self.run_id}" + (
                f" --item {call.item}" if call.item is not None else ""
            )
            if self.kept:
                hint += f"; what it left in its work folder is kept in {self.kept}"
        error = CallFailed(
            text,
            call=self.name,
            run_id=self.run_id if self.recorded else None,
            hint=hint,
            exit_code=code,
        )
        self._answer(call, error=error)

    def _fail_all(self, reason: str, hint: str | None, code: int) -> None:
        for call in self.calls:
            self._fail(call, reason, hint, code)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, NodusError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


# -- the calls a client has in flight ---------------------------------------------------------


class InFlight:
    """A client's calls not yet ended, and their driving threads."""

    def __init__(self, session: Session) -> None:
        #: What the client holds: its calls run on its place, with its records.
        self.session = session
        self._lock = threading.Lock()
        self._running: list[tuple[list[Call[Any]], threading.Thread]] = []

    def add(self, calls: list[Call[Any]], thread: threading.Thread) -> None:
        with self._lock:
            self._running = [r for r in self._running if r[1].is_alive()]
            self._running.append((calls, thread))

    def close(self, stop: bool = False, why: str | None = None) -> None:
        """Wait for every call to end (``stop``: stop them first, recorded as stopped by
        ``why``)."""
        with self._lock:
            running, self._running = self._running, []
        if stop:
            for calls, _ in running:
                if why is not None:
                    for call in calls:
                        call.note_stopped_by(why)
                for call in calls:
                    if call.item is None:
                        call.cancel()
                    elif call.recorded and not call.done():
                        self.session.store.request_stop(call.id)
                        break
        for _, thread in running:
            thread.join()
