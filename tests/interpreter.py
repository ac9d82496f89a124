"""A snippet of Python in a fresh interpreter: what the tests of start-up (which modules a
command loads) and of another process's view need, where this test process's own imports
would hide the answer."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def python(
    code: str,
    env: Mapping[str, str] | None = None,
    *,
    cwd: str | os.PathLike[str] | Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` with this interpreter (``env``: the whole environment, else this
    process's), its output as text; a failing snippet is the caller's to assert on."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
