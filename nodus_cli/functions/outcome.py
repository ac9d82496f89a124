"""A call's outcome, read back from its folder: the value, the function's own exception, or
why there is neither.

The runtime writes ``outcome.json`` last, so its presence means the rest is complete;
its absence means the process died first (``os._exit``, a crash, a kill, out of memory),
whatever the exit code says. :func:`settle` turns an item's folder into one of three
answers: :class:`Value` (the return value, loaded with one ``pickle.load`` from the open
file: about its own size in memory), :class:`Raised` (the function's exception, rebuilt
as its own type with the remote traceback as its ``__cause__``, as
``concurrent.futures.ProcessPoolExecutor`` does; :class:`RemoteError` when it cannot be
rebuilt here; ``SystemExit`` for ``sys.exit(code)`` with a code other than 0; an
``ImportError`` of a module the image lacks says so) or :class:`Failed` (the words:
another Python, a missing module, a value that cannot be pickled; None when the folder
says nothing, and the run's record knows why). :func:`describe` gives the same words
for the run's records.
"""

from __future__ import annotations

import json
import pickle
from enum import StrEnum
from pathlib import Path
from typing import Any

from nodus_cli.structs import field, struct

__all__ = [
    "Failed",
    "Outcome",
    "Raised",
    "RemoteError",
    "RemoteTraceback",
    "Settled",
    "Status",
    "Value",
    "describe",
    "lacks",
    "read",
    "settle",
]


class Status(StrEnum):
    OK = "ok"
    #: The function raised (its exception, or what is known of it, is in the folder).
    RAISED = "raised"
    #: The function called ``sys.exit(code)`` with a code other than 0 (``exit_code``).
    EXITED = "exited"
    #: The image's Python is another major.minor than the caller's.
    VERSION_MISMATCH = "version_mismatch"
    #: The function or its arguments cannot be read there (a module missing in the image).
    PAYLOAD_ERROR = "payload_error"
    #: The return value cannot be pickled or written (or is over a limit).
    RESULT_ERROR = "result_error"
    #: nodus's runtime itself failed.
    RUNTIME_ERROR = "runtime_error"


class RemoteTraceback(Exception):
    """The traceback of the exception in the container, as its ``__cause__``."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text.rstrip()}\n"""'


class RemoteError(Exception):
    """The function raised an exception that cannot be rebuilt here: its type's name,
    its message and the traceback text (``why``: what stopped the rebuilding)."""

    def __init__(self, type_name: str, message: str, traceback: str, why: str | None = None):
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name = type_name
        self.message = message
        self.traceback = traceback
        self.why = why


@struct(frozen=True)
class Outcome:
    """``outcome.json``, read."""

    status: Status | str
    exit_code: int
    message: str | None
    doc: dict[str, Any] = field(repr=False)

    @property
    def type_name(self) -> str:
        kind = self.doc.get("type") or {}
        module, qualname = kind.get("module"), kind.get("qualname") or "object"
        return qualname if module in (None, "builtins") else f"{module}.{qualname}"


def read(item: Path) -> Outcome | None:
    """The outcome in ``item`` (a call's item folder); None when there is none (yet)."""
    try:
        doc = json.loads((item / "outcome.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    status = str(doc.get("status", ""))
    known = status in Status.__members__.values()
    return Outcome(
        Status(status) if known else status,
        int(doc.get("exit_code") or 0),
        doc.get("message") if isinstance(doc.get("message"), str) else None,
        doc,
    )


def describe(outcome: Outcome | None, exit_code: int, image: str, needed: str) -> str:
    """Why the call has no value, in a user's words (for the run's records)."""
    if outcome is None:
        return (
            f"the function's process exited with code {exit_code} without reporting an "
            "outcome: it called os._exit(), or it crashed or was killed"
        )
    doc = outcome.doc
    if outcome.status == Status.OK:
        return "returned"
    if outcome.status == Status.RAISED:
        said = f"raised {outcome.type_name}: {outcome.message or ''}".rstrip(": ")
        module = doc.get("missing_module")
        return f"{said}: {lacks(image, module)}" if module else said
    if outcome.status == Status.EXITED:
        return f"it called sys.exit({_code(doc)}): exit code {outcome.exit_code}"
    if outcome.status == Status.VERSION_MISMATCH:
        found = doc.get("python_full", "?")
        where = f" ({doc['executable']})" if doc.get("executable") else ""
        return (
            f"the image {image} runs Python {found}{where}, and the function needs Python "
            f"{needed} (it was pickled by Python {doc.get('caller_python', needed)}): "
            f"use an image with Python {needed}, e.g. python:{needed}-slim"
        )
    if outcome.status == Status.PAYLOAD_ERROR and doc.get("missing_module"):
        return f"{outcome.message}: {lacks(image, doc['missing_module'])}"
    if outcome.status == Status.RUNTIME_ERROR:
        return f"nodus's runtime failed in the container: {outcome.message}"
    return outcome.message or str(outcome.status)


def lacks(image: str, module: str) -> str:
    """That the image lacks ``module``, and what to do."""
    return (
        f"the image {image} lacks module {module!r}; install it in the image (modules that "
        "are not installed travel with the function, but not what an import statement "
        "inside the function loads)"
    )


def _code(doc: dict[str, Any]) -> str:
    code = doc.get("code")
    return repr(code) if isinstance(code, str) else str(code)


@struct(frozen=True)
class Value:
    value: Any


@struct(frozen=True)
class Raised:
    error: BaseException


@struct(frozen=True)
class Failed:
    #: What went wrong, in a user's words; None when the folder says nothing.
    message: str | None


Settled = Value | Raised | Failed


def settle(item: Path, image: str, needed: str) -> Settled:
    """What the call in ``item`` gave: its value, its exception, or why neither."""
    outcome = read(item)
    if outcome is None:
        return Failed(None)
    if outcome.status == Status.OK:
        try:
            with open(item / str(outcome.doc.get("result") or "result.pickle"), "rb") as f:
                return Value(pickle.load(f))
        except Exception as exc:
            return Failed(
                f"the return value ({outcome.type_name}) cannot be unpickled here: "
                f"{type(exc).__name__}: {exc}"
            )
    if outcome.status == Status.RAISED:
        error = _rebuilt(item, outcome)
        module = outcome.doc.get("missing_module")
        if module and isinstance(error, ImportError):
            # Its own type still (``except ImportError`` works), saying what the image lacks.
            said = error.msg or f"No module named {module!r}"
            error.msg = f"{said}: {lacks(image, str(module))}"
            error.args = (error.msg,)
        return Raised(error)
    if outcome.status == Status.EXITED:
        # As concurrent.futures.ProcessPoolExecutor does: SystemExit at the caller.
        code = outcome.doc.get("code")
        error = SystemExit(code if isinstance(code, int | str) else outcome.exit_code)
        error.__cause__ = RemoteTraceback(str(outcome.doc.get("traceback") or ""))
        return Raised(error)
    return Failed(describe(outcome, outcome.exit_code, image, needed))


def _rebuilt(item: Path, outcome: Outcome) -> BaseException:
    """The function's exception as its own type, or a RemoteError; with the remote
    traceback as its cause."""
    text = str(outcome.doc.get("traceback") or "")
    why = outcome.doc.get("exception_pickle_error")
    error: BaseException | None = None
    name = outcome.doc.get("exception_pickle")
    if name:
        try:
            with open(item / str(name), "rb") as f:
                error = pickle.load(f)
        except Exception as exc:  # its module, say, is missing here
            why = f"{type(exc).__name__}: {exc}"
    if isinstance(error, BaseException) and not isinstance(error, Exception):
        why = f"{type(error).__name__} is not raised again here: it would end this program"
        error = None
    if not isinstance(error, BaseException):
        error = RemoteError(outcome.type_name, outcome.message or "", text, why)
    error.__cause__ = RemoteTraceback(text)
    return error
