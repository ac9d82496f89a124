"""targets.base.OutputLines: how a task's output frames become lines."""

from __future__ import annotations

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
