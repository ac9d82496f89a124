"""Where a run is shown as it happens: the :class:`Sink` interface the driver writes to,
what it is told (lines, status lines, a fan-out stage's :class:`Progress`), and
:class:`Output`, which sends each line to the run's log and to the sink.

Contract: the driver calls :meth:`Sink.output` and :meth:`Sink.status` under one lock
(task threads send both, never two at once), :meth:`Sink.progress` and
:meth:`Sink.close` from the loop's thread. A sink only shows: the run's log gets every
line whatever the sink does, and a line or progress the sink fails to write (an OSError
or ValueError: a closed terminal) never stops the run. :class:`NullSink` shows nothing.

Why an interface: the same run is shown on a terminal (``nodus_cli.cli.display``), or
not at all (a background run, the Python API), and the driver must not know which.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Protocol

from nodus_cli.records.logs import LogWriter, Stream
from nodus_cli.structs import struct

__all__ = ["NullSink", "Output", "Progress", "Sink"]


@struct(frozen=True)
class Progress:
    """A fan-out stage's tasks so far (for a progress bar)."""

    stage: str
    total: int
    done: int
    running: int
    failed: int
    elapsed: float
    cost: float

    @property
    def left(self) -> int:
        return self.total - self.done - self.failed - self.running


class Sink(Protocol):
    """Where a run's output is shown as it happens (the log gets it regardless)."""

    def output(self, stage: str, item: int | None, stream: Stream, text: str) -> None: ...

    def status(self, text: str) -> None: ...

    def progress(self, progress: Progress) -> None: ...

    def close(self) -> None: ...


class NullSink:
    """Shows nothing: a background run, or the Python API (the log keeps it all)."""

    def output(self, stage: str, item: int | None, stream: Stream, text: str) -> None:
        pass

    def status(self, text: str) -> None:
        pass

    def progress(self, progress: Progress) -> None:
        pass

    def close(self) -> None:
        pass


class Output:
    """A run's lines: each to its log, with the values taken from the host masked, and
    to the sink as it is.

    Thread-safe (task threads write output and status lines); the lock is re-entrant,
    since a signal may land in the middle of a write and its handler's line follow.
    """

    def __init__(self, log: LogWriter, sink: Sink, masks: Mapping[str, str] | None) -> None:
        self.log = log
        self.sink = sink
        # Values taken from the host never reach the log: each shows as its ${NAME}.
        self._masks = sorted((masks or {}).items(), key=lambda m: -len(m[0]))
        self._lock = threading.RLock()

    def emit(self, stage: str, item: int | None, stream: Stream, text: str) -> None:
        """One line of a task's output."""
        with self._lock:
            self.log.write(stage, item, stream, self._masked(text))
            with contextlib.suppress(OSError, ValueError):
                self.sink.output(stage, item, stream, text)

    def say(self, message: str, stage: str | None = None, item: int | None = None) -> None:
        """A status line (stream ``nodus`` in the log)."""
        with self._lock:
            self.log.write(stage, item, "nodus", self._masked(message))
            with contextlib.suppress(OSError, ValueError):
                self.sink.status(message)

    def progress(self, progress: Progress) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.sink.progress(progress)

    def close(self) -> None:
        self.log.close()
        with contextlib.suppress(OSError, ValueError):
            self.sink.close()

    def _masked(self, text: str) -> str:
        for value, template in self._masks:
            if value in text:
                text = text.replace(value, template)
        return text
