"""Calls made without Docker: the call folder written by nodus_cli.functions, and the
runtime run by a real interpreter of this machine (Debian's own /usr/bin/python3.11, which
has no cloudpickle, or pyenv's other versions), as a container would run it.

``local_call(fn, *args, python=..., **kwargs)`` returns a :class:`Done`: the exit code, the
outcome as settled, and the folder (kept until the test's tmp_path goes).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodus_cli.functions import outcome, runtime, serialization
from nodus_cli.functions.layout import CallFolder

#: The interpreter the test image (nodus-test/python:3.11) is built from.
SYSTEM_PYTHON = "/usr/bin/python3.11"
PYENV = Path("/root/.pyenv/versions")


@dataclass
class Done:
    code: int
    settled: outcome.Settled
    folder: CallFolder
    stdout: str
    stderr: str

    @property
    def outcome(self) -> outcome.Outcome | None:
        return outcome.read(self.folder.item(0))


def other_pythons() -> list[Path]:
    """pyenv's interpreters of another minor version than 3.11 on this machine."""
    found = []
    for folder in sorted(PYENV.glob("3.*")):
        if not folder.name.startswith("3.11."):
            exe = folder / "bin" / "python3"
            if exe.exists():
                found.append(exe)
    return found


def local_call(
    home: Path,
    fn: Callable[..., Any],
    *args: Any,
    python: str = SYSTEM_PYTHON,
    call: str = "c1",
    **kwargs: Any,
) -> Done:
    folder = CallFolder(home, call)
    folder.create()
    serialization.write_function(folder.function, fn, "test")
    folder.create_item(0)
    serialization.write_arguments(folder.args(0), args, kwargs, "test")
    rt = runtime.ensure(home)
    done = subprocess.run(
        [python, "-u", str(rt / runtime.BOOTSTRAP), str(folder.path), "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    settled = outcome.settle(folder.item(0), "the-image", serialization.python_version())
    return Done(done.returncode, settled, folder, done.stdout, done.stderr)
