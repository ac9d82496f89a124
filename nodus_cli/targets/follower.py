"""A task's output: streamed live while it runs, completed from the engine's log once it
ends.

Neither engine's ``follow`` stream can be trusted to say when the output is complete.
Swarm's stream of service logs never ends, not even when the job completes or the
service is removed. The local engine's stream of a container's log does end when the
container exits, but Docker 20.10 (Debian's) can end it early when the container wrote
much just before it exited: on a loaded machine tens of thousands of lines never arrive.
So both targets follow live for what the user sees while the task runs, and once the
task has ended (its log is then complete) read the log again from a little before the
newest frame shown, showing only what the live stream missed.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter, deque
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from nodus_cli.lanes import Lanes
from nodus_cli.targets.base import OutputLines, OutputStream

#: ``open_log(follow, since)``: the task's log as multiplexed ``(1 stdout | 2 stderr,
#: b"TIMESTAMP text")`` frames (the engine's ``timestamps=1``), from ``since`` (UNIX
#: seconds with nine decimals, or None for all of it; a log that starts earlier, as a
#: server that counts in whole seconds gives, loses nothing: the frames before it are
#: dropped); ``close()`` cuts it from any thread.
LogOpener = Callable[[bool, "str | None"], Any]


#: The threads that follow live streams (a fan-out's followers share a few).
_LANES = Lanes("nodus-logs")


class LogFollower:
    """A task's output, streamed while it runs and completed from the log once it ends.

    Frames are streamed live on a lane (:mod:`nodus_cli.lanes`); :meth:`finish` (once the
    task is terminal, so its log is complete) closes that stream, reads the log again
    from :attr:`OVERLAP` seconds before the newest frame shown, and shows what the live
    stream had not delivered: none lost, none shown twice. The two reads need not agree
    on the order of stdout and stderr lines written within a few milliseconds of each
    other, so the frames are matched by content (each carries its nanosecond timestamp),
    not by position; and lines are cut per stream (:class:`OutputLines`).
    """

    #: Seconds before the newest frame shown live from which the final read starts.
    OVERLAP = 2.0

    def __init__(self, open_log: LogOpener, emit: Callable[[OutputStream, str], None]) -> None:
        self.open_log = open_log
        self.emit = emit
        self.lock = threading.Lock()
        self.closed = False
        self.lines = OutputLines(emit)
        self.newest: int | None = None  # nanoseconds since the epoch
        self.recent: deque[tuple[int, tuple[int, bytes]]] = deque()
        self.stream: Any = None  # the follow stream, once open
        self.followed = threading.Event()  # the live stream is over

    def start(self) -> None:
        _LANES.run(self._follow)

    def poll(self) -> None:
        """Nothing to do at a look: the live stream is followed on its own lane."""

    def _follow(self) -> None:
        try:
            stream = self.open_log(True, None)
            with self.lock:
                if self.closed:  # finished while the request was under way
                    stream.close()
                    return
                self.stream = stream
            for kind, frame in stream:
                with self.lock:
                    if self.closed:
                        return
                    self._remember(kind, frame)
                    self._take(kind, frame)
        except Exception:  # closed under it, or refused: finish() completes the output
            return
        finally:
            self.followed.set()

    def _remember(self, kind: int, frame: bytes) -> None:
        stamp = _nanoseconds(frame.partition(b" ")[0])
        if stamp is None:
            return
        if self.newest is None or stamp > self.newest:
            self.newest = stamp
        self.recent.append((stamp, (kind, frame)))
        horizon = self.newest - int(self.OVERLAP * 1e9)
        while self.recent and self.recent[0][0] < horizon:
            self.recent.popleft()

    def _take(self, kind: int, frame: bytes) -> None:
        # "2024-05-01T10:00:00.123456789Z text": drop the timestamp, keep partial lines.
        _stamp, sep, text = frame.partition(b" ")
        self.lines.feed(kind, text if sep else frame)

    def finish(self, complete: bool = True) -> None:
        """Stop following; with ``complete``, show what the live stream had not shown."""
        with self.lock:
            self.closed = True  # from here the live thread shows nothing more
            stream = self.stream
        if stream is not None:  # open: cut it, and the thread ends at once
            with contextlib.suppress(Exception):
                stream.close()
            self.followed.wait(timeout=2)
        # Else the follow request is still unanswered: its thread closes the stream
        # itself when the answer comes; nothing is left to wait for.
        if complete:
            since, start = None, 0
            if self.newest is not None:
                start = self.newest - int(self.OVERLAP * 1e9)
                since = f"{start // 1_000_000_000}.{start % 1_000_000_000:09d}"
            shown = Counter(framed for _, framed in self.recent)
            try:
                final = self.open_log(False, since)
                try:
                    for kind, frame in final:
                        stamp = _nanoseconds(frame.partition(b" ")[0])
                        if stamp is not None and stamp < start:
                            continue  # a log that starts earlier than asked (whole seconds)
                        if shown[(kind, frame)] > 0:
                            shown[(kind, frame)] -= 1
                        else:
                            self._take(kind, frame)
                finally:
                    with contextlib.suppress(Exception):
                        final.close()
            except Exception as exc:
                self.emit("stderr", f"[nodus: the rest of the output is not available: {exc}]")
        self.lines.flush()


def frame_stamp(frame: bytes) -> int | None:
    """A frame's timestamp (``b"2024-05-01T10:00:00.123456789Z text"``) in nanoseconds since
    the epoch; None when it carries none."""
    return _nanoseconds(frame.partition(b" ")[0])


def _nanoseconds(stamp: bytes) -> int | None:
    """``2024-05-01T10:00:00.123456789Z`` (RFC 3339, UTC) in nanoseconds since the epoch."""
    text = stamp.decode("ascii", "replace")
    if not text.endswith("Z") or len(text) < 20:
        return None
    whole, _, fraction = text[:-1].partition(".")
    seconds = _epoch_seconds(whole)
    if seconds is None or not (fraction.isdigit() or fraction == ""):
        return None
    return seconds * 1_000_000_000 + int((fraction + "000000000")[:9])


@lru_cache(maxsize=64)
def _epoch_seconds(whole: str) -> int | None:
    """``2024-05-01T10:00:00`` (UTC) in seconds since the epoch."""
    from datetime import UTC, datetime

    try:
        return int(datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp())
    except ValueError:
        return None
