"""Shared test helpers: write workload files, run the ``nodus`` command line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def tmp_workload(tmp_path: Path) -> Callable[..., Path]:
    """``tmp_workload(text, name="workload.toml")`` writes a file and returns its path."""

    def write(text: str | bytes, name: str = "workload.toml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def nodus() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``nodus(*args, env=None, cwd=None)`` runs ``python -m nodus_cli`` and captures text.

    ``env`` is added to (and overrides) this process's environment; a value of None
    removes that variable.
    """

    def run(
        *args: str | os.PathLike[str],
        env: dict[str, str | None] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        full = dict(os.environ)
        for key, value in (env or {}).items():
            if value is None:
                full.pop(key, None)
            else:
                full[key] = value
        return subprocess.run(
            [sys.executable, "-m", "nodus_cli", *map(str, args)],
            capture_output=True,
            text=True,
            env=full,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )

    return run
