"""This machine as the local target's tests see it: the stand-in ``nvidia-smi`` first on
PATH (tests/fakes/bin; which GPUs it reports is ``NODUS_FAKE_GPUS``), a configuration
and a NODUS_HOME of the test's own.

    from machine_support import machine  # noqa: F401 - a fixture
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from paths import REPO

FAKE_BIN = REPO / "tests" / "fakes" / "bin"


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """The stand-in nvidia-smi first on PATH, a private configuration; set NODUS_FAKE_GPUS."""
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("NODUS_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("NODUS_HOME", str(tmp_path / "home"))
    for key in ("NODUS_FAKE_GPUS", "NODUS_FAKE_GPU_UTIL", "NODUS_FAKE_GPU_UTIL_FILE"):
        monkeypatch.delenv(key, raising=False)
    yield monkeypatch
