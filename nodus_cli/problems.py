"""Problems found in user input, carried as data so every command reports them alike.

A problem names the file, the dotted key path (``loc``) and, where it can, the line,
so both humans (``file:line: error: key: message``) and machines (``--json``,
GitHub annotations) can point at the exact spot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nodus_cli.errors import NodusError

__all__ = ["NodusError", "Problem", "Severity"]

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Problem:
    loc: str
    message: str
    severity: Severity = "error"
    line: int | None = None

    def as_json(self) -> dict[str, object]:
        return {"loc": self.loc, "line": self.line, "message": self.message}

    def render(self, path: str) -> str:
        where = f"{path}:{self.line}" if self.line is not None else path
        key = f"{self.loc}: " if self.loc else ""
        return f"{where}: {self.severity}: {key}{self.message}"
