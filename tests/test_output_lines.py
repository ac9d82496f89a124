"""targets.base.OutputLines: how a task's output frames become lines, and how long the
end of a task waits for the rest of its output."""

from __future__ import annotations

import threading
import time

from nodus_cli.targets.base import OutputLines


def collect() -> tuple[OutputLines, list[tuple[str, str]]]:
    shown: list[tuple[str, str]] = []
    return OutputLines(lambda stream, text: shown.append((stream, text))), shown


def test_frames_are_cut_into_lines_per_stream() -> None:
    lines, shown = collect()
    lines.feed(1, b"one\ntw")
    lines.feed(2, b"err-a\n")  # stderr between the halves of a stdout line
    lines.feed(1, b"o\nthree")
    lines.feed(2, b"err-\xff")
    assert shown == [("stdout", "one"), ("stderr", "err-a"), ("stdout", "two")]
    lines.flush()
    # The unterminated rest of each stream, undecodable bytes replaced, not dropped.
    assert shown[3:] == [("stdout", "three"), ("stderr", "err-\ufffd")]
    lines.flush()
    assert len(shown) == 5  # flushed once


def test_drain_waits_for_a_backlog_longer_than_the_stall_while_it_moves() -> None:
    lines, shown = collect()

    def slow_reader() -> None:  # 30 frames, 0.02 s apart: 0.6 s, well past the stall
        for i in range(30):
            lines.feed(1, f"line-{i}\n".encode())
            time.sleep(0.02)

    reader = threading.Thread(target=slow_reader, daemon=True)
    reader.start()
    lines.drain(reader, stall=0.1)
    assert not reader.is_alive()
    assert shown[-1] == ("stdout", "line-29") and len(shown) == 30


def test_drain_leaves_a_stream_that_stopped_moving() -> None:
    lines, shown = collect()
    release = threading.Event()

    def stuck_reader() -> None:  # one frame, then an engine that never closes the stream
        lines.feed(1, b"only\n")
        release.wait(10)

    reader = threading.Thread(target=stuck_reader, daemon=True)
    reader.start()
    started = time.monotonic()
    lines.drain(reader, stall=0.2)
    took = time.monotonic() - started
    assert reader.is_alive() and shown == [("stdout", "only")]
    assert took < 2, took  # gave up after a stall or two, not after the reader's 10 s
    release.set()
    reader.join()
