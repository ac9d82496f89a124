"""The documentation tells the truth: every Python example in docs/python-api.md runs as
written against the real engine (with the test image in place of ``busybox:1.36``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docker_support import _HOMES, FAKE_BIN, IMAGE, docker_client, engine_clean  # noqa: F401
from paths import DOCS

pytestmark = pytest.mark.docker

BLOCKS = re.findall(r"```python\n(.*?)```", (DOCS / "python-api.md").read_text("utf-8"), re.S)


def test_the_api_page_has_examples() -> None:
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize("code", BLOCKS, ids=[f"example-{i}" for i in range(len(BLOCKS))])
def test_every_api_example_runs(code: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _HOMES.append(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_")}
    env.update(
        NODUS_HOME=str(home),
        NODUS_CONFIG=str(tmp_path / "config.toml"),
        PATH=f"{FAKE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    done = subprocess.run(
        [sys.executable, "-c", code.replace("busybox:1.36", IMAGE)],
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
