# ruff: noqa: F811 - the fixtures imported from the support modules are test parameters here
"""The documentation tells the truth: every Python example in docs/python-api.md runs as
written against the real engine (with the test images in place of ``busybox:1.36`` and
``python:3.11-slim``, and the stand-in L4 of tests/fakes for the GPU example), and so does
examples/functions.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from calls_support import PY_IMAGE, python_images  # noqa: F401
from docker_support import _HOMES, FAKE_BIN, IMAGE, docker_client, engine_clean  # noqa: F401
from paths import DOCS, REPO

pytestmark = pytest.mark.docker

#: The image the function examples name: one with the Python of the interpreter running them.
SLIM = "python:3.11-slim"
BLOCKS = re.findall(r"```python\n(.*?)```", (DOCS / "python-api.md").read_text("utf-8"), re.S)


def test_the_api_page_has_examples() -> None:
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize("code", BLOCKS, ids=[f"example-{i}" for i in range(len(BLOCKS))])
def test_every_api_example_runs(code: str, tmp_path: Path, python_images: None) -> None:
    env = _environment(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", code.replace("busybox:1.36", IMAGE).replace(SLIM, PY_IMAGE)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, f"{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    shown = printed(code)
    if shown:  # an example that ends with what it prints says it in order
        lines = done.stdout.splitlines()
        assert len(lines) == len(shown), (shown, lines)
        for want, got in zip(shown, lines, strict=True):
            assert said(want, got), (want, got)


def printed(code: str) -> list[str]:
    """The ``# ...`` lines that end an example: what it prints, one line each."""
    tail: list[str] = []
    for line in reversed(code.rstrip("\n").split("\n")):
        if not line.startswith("# "):
            break
        tail.insert(0, line[2:])
    return tail


def said(want: str, got: str) -> bool:
    """Whether ``got`` holds the pieces of ``want`` in order ("..." stands for the rest)."""
    at = 0
    for piece in (p.strip() for p in want.split("...")):
        found = got.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    return True


def _environment(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    _HOMES.append(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_")}
    env.update(
        NODUS_HOME=str(home),
        NODUS_CONFIG=str(tmp_path / "config.toml"),
        NODUS_FAKE_GPUS="l4x1",  # the GPU example asks for an L4
        PATH=f"{FAKE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return env


def test_the_functions_example_runs(tmp_path: Path, python_images: None) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "functions.py"), "--image", PY_IMAGE],
        capture_output=True,
        text=True,
        env=_environment(tmp_path),
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("14 values, total 426, on ['GPU-"), done.stdout
