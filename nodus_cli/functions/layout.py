"""A call's folder: what the container reads and writes, and when it goes away.

One folder per function run, under ``NODUS_HOME/calls``; the runtime
(:mod:`nodus_cli.functions.bootstrap`) reads and writes it inside the container, where it is
mounted at :data:`CALL_IN_CONTAINER`::

    calls/CALL/function.pickle          the header line, then the pickled function
    calls/CALL/items/I/args.pickle      item I's (args, kwargs); a single call is item 0
    calls/CALL/items/I/outcome.json     written by the runtime, always last
    calls/CALL/items/I/result.pickle    the return value, or exception.pickle
    calls/CALL/items/I/stdout, stderr   a warm worker's output of item I
    calls/CALL/workers/W/requests, replies    a warm worker's FIFOs
    calls/warm-PID-N/workers/w/...      a warm worker of single calls (its FIFOs), with
    calls/warm-PID-N/work               its scratch folder, and calls/warm-PID-N/CALL, the
                                        folder of the call it runs, moved there meanwhile

Values pass whole through files, never through pipes: a 1 GiB result is written to disk
once and read back with one ``pickle.load`` (about its own size in memory).

When it is removed (results can be 1 GiB, so never "some day"): an item's files as soon
as the caller has read its outcome (the value then lives in the ``Call``), the whole
folder once the run's outcome is read, and, when the caller died before that (nobody
will read it), by the reconcile that records its run failed.

Folders are writable by any user (0777) so that an image whose user is not root can
write its outcome: ``NODUS_HOME`` above them is private (0700), so no other user of this
machine reaches them, while the container sees only its own mounted folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from nodus_cli.structs import struct

__all__ = [
    "CALLS",
    "CALL_IN_CONTAINER",
    "RUNTIME_IN_CONTAINER",
    "CallFolder",
]

#: The folder of call folders under NODUS_HOME.
CALLS = "calls"
#: Where a call's folder is mounted in its container(s).
CALL_IN_CONTAINER = "/nodus/call"
#: Where the runtime (bootstrap and cloudpickle) is mounted, read-only.
RUNTIME_IN_CONTAINER = "/nodus/runtime"
_OPEN = 0o777


@struct(frozen=True)
class CallFolder:
    """The folder of call ``call`` under ``home`` (``NODUS_HOME``)."""

    home: Path
    call: str

    @property
    def path(self) -> Path:
        return self.home / CALLS / self.call

    @property
    def function(self) -> Path:
        return self.path / "function.pickle"

    def item(self, index: int) -> Path:
        return self.path / "items" / str(index)

    def args(self, index: int) -> Path:
        return self.item(index) / "args.pickle"

    def worker(self, name: str) -> Path:
        return self.path / "workers" / name

    def exists(self) -> bool:
        return self.path.is_dir()

    def create(self) -> None:
        """The folder and its ``items`` folder (each item's is made with its arguments)."""
        calls = self.home / CALLS
        calls.mkdir(mode=0o700, parents=True, exist_ok=True)
        for folder in (self.path, self.path / "items"):
            folder.mkdir(exist_ok=True)
            os.chmod(folder, _OPEN)

    def create_item(self, index: int) -> Path:
        folder = self.item(index)
        folder.mkdir(exist_ok=True)
        os.chmod(folder, _OPEN)
        return folder

    def create_worker(self, name: str) -> Path:
        """A warm worker's folder with its two FIFOs (the caller opens them first)."""
        folder = self.worker(name)
        folder.mkdir(parents=True, exist_ok=True)
        for fifo in ("requests", "replies"):
            path = folder / fifo
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            os.mkfifo(path, 0o666)
            os.chmod(path, 0o666)
        return folder

    def remove_item(self, index: int) -> None:
        shutil.rmtree(self.item(index), ignore_errors=True)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
