"""Following a task's output from a file that the cluster's nodes write to a shared file
system (Slurm's ``--output``; any scheduler whose jobs write their output to a file).

Contract: :func:`follow_file` emits, as the task's ``stdout`` lines, what was written to
the file since ``offset`` and returns the new offset; a line still open waits for its end
(the writer may be mid-line) unless ``final``, when whatever is left is emitted. A file
not there yet (the node has not opened it, or the shared file system has not shown it
here yet) is no output yet, never an error: the caller decides from the job's state
when waiting has gone on too long.

Why here: every cluster target whose jobs write to files follows them the same way, for
a single job and for each item of an array.
"""

from __future__ import annotations

from pathlib import Path

from nodus_cli.targets.base import TaskContext

__all__ = ["follow_file"]


def follow_file(path: Path, offset: int, ctx: TaskContext, final: bool = False) -> int:
    """Emit the whole lines written to ``path`` since ``offset`` (all of it when
    ``final``); the new offset."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    lines = data.split(b"\n")
    rest = lines.pop()
    for line in lines:
        ctx.emit("stdout", line.decode("utf-8", "replace"))
    if final and rest:
        ctx.emit("stdout", rest.decode("utf-8", "replace"))
        return offset + len(data)
    return offset + len(data) - len(rest)
