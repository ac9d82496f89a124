"""Fixtures for Python function calls against the real engine: the real-Python test images
(``tests/harness/engine.sh up`` builds them without a registry) and a client of its own.

    from calls_support import PY_IMAGE, PY_OTHER_IMAGE, client, python_images  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_support import _unreachable, own_client

from nodus_cli import Client

#: Debian's own Python 3.11, the same minor version as the interpreter running the tests.
PY_IMAGE = "nodus-test/python:3.11"
#: A real CPython of another minor version (3.10 where pyenv has it).
PY_OTHER_IMAGE = "nodus-test/python:other"


@pytest.fixture(scope="session")
def python_images(docker_client: Any) -> None:
    missing = []
    for image in (PY_IMAGE, PY_OTHER_IMAGE):
        try:
            docker_client.images.get(image)
        except Exception:
            missing.append(image)
    if missing:
        _unreachable(f"the test image(s) {', '.join(missing)} are missing")


@pytest.fixture
def client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, python_images: None
) -> Iterator[Client]:
    with own_client(tmp_path, monkeypatch, NODUS_GPU_SAMPLE_SECONDS="0.2") as c:
        yield c
