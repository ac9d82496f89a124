"""The failures a user can act on, and the problems found in what the user wrote.

:class:`NodusError` is the one root: a message, a hint and the exit code it ends with.
Every layer below the commands raises these (or its own root, translated at its boundary:
the engine's :class:`~nodus_cli.targets.docker.engine.EngineFailure`, the store's
``StoreError``), and only ``__main__`` prints them: the message, then the hint, never a
traceback. The exit codes are the command line's contract:

====  =====================================================================
1     invalid input, or a failure nodus explains (:class:`InvalidInput`)
2     wrong invocation (:class:`UsageError`)
3     nothing can run it: no eligible configuration, GPUs taken (:class:`NotRunnable`)
4     a budget or a spending limit stops or refuses it (:class:`OverBudget`)
====  =====================================================================

The Python API raises the same classes; :class:`InvalidWorkload` is also a ``ValueError``
and carries every problem of the workload, not only the first.

A :class:`Problem` is one thing wrong (or worth a warning) in user input, carried as data
so every command reports it alike: it names the dotted key path (``loc``) and, where it
can, the line, so both humans (``file:line: error: key: message``) and machines
(``--json``, GitHub annotations) can point at the exact spot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from nodus_cli.structs import struct

__all__ = [
    "CallFailed",
    "InvalidInput",
    "InvalidWorkload",
    "NodusError",
    "NotRunnable",
    "OverBudget",
    "Problem",
    "Severity",
    "UsageError",
]

Severity = Literal["error", "warning"]


@struct(frozen=True)
class Problem:
    """One problem in user input: where (``loc``, ``line``) and what to change."""

    loc: str
    message: str
    severity: Severity = "error"
    line: int | None = None
    #: How many problems this one stands for: the closing "4,000 more errors not shown"
    #: of a report cut short stands for the 4,000, so counts agree with it.
    count: int = 1

    def as_json(self) -> dict[str, object]:
        return {"loc": self.loc, "line": self.line, "message": self.message}

    def render(self, path: str) -> str:
        where = f"{path}:{self.line}" if self.line is not None else path
        key = f"{self.loc}: " if self.loc else ""
        return f"{where}: {self.severity}: {key}{self.message}"


EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNABLE = 3
EXIT_BUDGET = 4


class NodusError(Exception):
    """An error the user can act on: a message, a hint, and the exit code it ends with."""

    default_exit_code: ClassVar[int] = EXIT_INVALID

    def __init__(self, message: str, exit_code: int | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = self.default_exit_code if exit_code is None else exit_code
        self.hint = hint


class InvalidInput(NodusError):
    """What the user gave cannot be used (exit 1)."""


class UsageError(NodusError):
    """The command was called wrongly: an unknown id, a missing file (exit 2)."""

    default_exit_code = EXIT_USAGE


class NotRunnable(NodusError):
    """Nothing can run it now: no eligible configuration, GPUs held by others (exit 3)."""

    default_exit_code = EXIT_NOT_RUNNABLE


class OverBudget(NodusError):
    """A budget or a spending limit refuses or stopped the run (exit 4)."""

    default_exit_code = EXIT_BUDGET


class CallFailed(NodusError):
    """A Python function call ended without a value or an exception of its own: out of
    memory, stopped, over budget, an image without (the right) Python, a failed
    dependency (exit 1). ``run_id`` names its run (None when it was never recorded) and
    ``call`` the function (``module.qualname``)."""

    def __init__(
        self,
        message: str,
        *,
        call: str,
        run_id: str | None = None,
        hint: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message, exit_code=exit_code, hint=hint)
        self.call = call
        self.run_id = run_id


class InvalidWorkload(InvalidInput, ValueError):
    """A workload (file or keyword arguments) breaks the rules; ``problems`` lists them all.

    Raised before anything is submitted. ``str()`` gives every error, one per line.
    """

    def __init__(self, problems: Sequence[Problem], source: str = "the workload") -> None:
        self.problems = list(problems)
        errors = [p for p in self.problems if p.severity == "error"]
        lines = "\n".join(p.render(source) for p in errors)
        count = sum(p.count for p in errors)
        super().__init__(
            f"{source} is not a valid workload ({count:,} problem{'s' if count != 1 else ''}):\n"
            f"{lines}",
            hint="each line names the key and what to write instead",
        )

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]
