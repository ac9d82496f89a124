"""A task's output followed from a file its node writes (``cluster.logfiles``): whole
lines as they come, a line still open held back until its end or the last read, and a
file not there yet read as no output yet."""

from __future__ import annotations

from pathlib import Path

from test_cluster_following import Recorder

from nodus_cli.targets.cluster.logfiles import follow_file


def test_whole_lines_as_they_come_and_an_open_line_only_at_the_end(tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    ctx = Recorder()
    assert follow_file(out, 0, ctx) == 0  # not written yet: nothing, no error
    out.write_bytes(b"one\ntw")
    offset = follow_file(out, 0, ctx)
    assert (offset, ctx.said) == (4, [("stdout", "one")])
    with out.open("ab") as f:
        f.write(b"o\nthr\xffee")
    offset = follow_file(out, offset, ctx)
    assert ctx.said[1:] == [("stdout", "two")]
    offset = follow_file(out, offset, ctx, final=True)
    assert ctx.said[2:] == [("stdout", "thr\ufffdee")]
    assert offset == out.stat().st_size
