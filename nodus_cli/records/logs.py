"""A run's output, one JSON object per line: ``time``, ``stage``, ``item``, ``stream``, ``text``.

``stream`` is ``stdout`` or ``stderr`` (the workload's) or ``nodus`` (nodus's own status
lines). One line of output is one object, so ``nodus logs --json | jq`` can split them,
and ``--follow`` can read a log while the run writes it (a partly written last line is
left for the next read).

Writing never fails the run: a full disk or a vanished folder ends the log with a note of
why (``complete`` turns False and ``problem`` says what happened); the workload's own
output keeps reaching the terminal. The writer also stops while the disk holding the log
has less than :data:`RESERVE_BYTES` free, so the run's outcome can still be recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal

from nodus_cli.structs import struct

Stream = Literal["stdout", "stderr", "nodus"]
#: Free space the log leaves for the run records on the same disk.
RESERVE_BYTES = 1024 * 1024
_CHECK_EVERY = 64  # lines between two free-space checks


def now_precise() -> str:
    """Now, UTC, ISO 8601 to the millisecond."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


@struct(frozen=True)
class LogLine:
    """One line of a run's output, as the log file stores it."""

    time: str
    stage: str | None
    item: int | None
    stream: Stream
    text: str

    def as_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "stage": self.stage,
            "item": self.item,
            "stream": self.stream,
            "text": self.text,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> LogLine:
        stream = doc.get("stream")
        return cls(
            str(doc.get("time") or ""),
            doc.get("stage"),
            doc.get("item"),
            stream if stream in ("stdout", "stderr", "nodus") else "stdout",
            str(doc.get("text") or ""),
        )


class LogWriter:
    """Appends lines to one run's log file; thread-safe; never raises for I/O."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.complete = True
        self.problem: str | None = None
        self._lock = threading.Lock()
        self._count = 0
        self._handle: IO[str] | None = None
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            self._handle = os.fdopen(fd, "a", encoding="utf-8")
        except OSError as exc:
            self._lost(exc)

    def write(self, stage: str | None, item: int | None, stream: Stream, text: str) -> None:
        line = LogLine(now_precise(), stage, item, stream, text)
        data = json.dumps(line.as_json(), ensure_ascii=False) + "\n"
        with self._lock:
            if self._handle is None:
                return
            self._count += 1
            try:
                if self._count % _CHECK_EVERY == 1 and _free_bytes(self.path) < RESERVE_BYTES:
                    self._stop("the disk holding it is (nearly) full")
                    return
                self._handle.write(data)
                self._handle.flush()
            except (OSError, ValueError) as exc:
                self._lost(exc)

    def _stop(self, why: str) -> None:
        note = LogLine(now_precise(), None, None, "nodus", f"[the log ends here: {why}]")
        with contextlib.suppress(OSError, ValueError):
            assert self._handle is not None
            self._handle.write(json.dumps(note.as_json()) + "\n")
            self._handle.flush()
        self._close(why)

    def _lost(self, exc: BaseException) -> None:
        self._close(str(exc) if not isinstance(exc, OSError) else (exc.strerror or str(exc)))

    def _close(self, why: str) -> None:
        self.complete = False
        self.problem = f"{self.path}: {why}"
        self._release()

    def _release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            with contextlib.suppress(OSError):
                handle.close()

    def close(self) -> None:
        with self._lock:
            self._release()


def _free_bytes(path: Path) -> int:
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return RESERVE_BYTES  # cannot tell: keep writing
    return st.f_bavail * st.f_frsize


#: The most of a damaged line shown in the warning that replaces it.
DAMAGED_SHOWN = 120


def read(path: Path, offset: int = 0, plain: bool = False) -> tuple[list[LogLine], int]:
    """Complete lines from byte ``offset`` on, and the offset after the last complete one.

    ``plain``: a log of an older nodus, plain text, each line kept as output. In a JSON-lines
    log a line that is not a JSON object is damaged (a crash or a full disk mid-write): it
    becomes a ``nodus`` line that says so, with the start of what it holds, never output.
    """
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    lines: list[LogLine] = []
    for raw in data[:end].splitlines():
        if not raw.strip():
            continue
        text = raw.decode("utf-8", "replace")
        if plain:
            lines.append(LogLine("", None, None, "stdout", text))
            continue
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and "text" in doc:
            lines.append(LogLine.from_json(doc))
        else:
            shown = text if len(text) <= DAMAGED_SHOWN else text[: DAMAGED_SHOWN - 1] + "…"
            lines.append(
                LogLine(
                    "",
                    None,
                    None,
                    "nodus",
                    f"warning: a damaged line of the log {path.name} (not a log entry), "
                    f"left out of the output: {shown!r}",
                )
            )
    return lines, offset + end


def iterate(path: Path) -> Iterator[LogLine]:
    found, _ = read(path)
    yield from found
