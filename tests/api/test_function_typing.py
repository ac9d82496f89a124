"""``@function`` keeps the decorated signature for type checkers: ``parse("a")`` is a
``Call[list[str]]`` under ``mypy --strict``, and a wrong argument is a type error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from paths import REPO

SNIPPET = """\
from nodus_cli import Client, function

@function(image="python:3.11-slim", cpu=2)
def parse(path: str) -> list[str]:
    return [path]

reveal_type(parse("a"))
reveal_type(parse.options(gpu="L4")("a"))
reveal_type(parse.local("a"))
reveal_type(parse.map(["a"]))
reveal_type(parse.map(["a"]).results()[0].value)
parse(3)
with Client() as client:
    reveal_type(client.run(fn=parse.local, args=("a",), image="x"))
    reveal_type(client.run(image="x", command="true"))
    reveal_type(client.map(["a"], fn=parse.local, image="x"))
"""


def test_mypy_strict_sees_the_return_type_through_the_decorator(tmp_path: Path) -> None:
    (tmp_path / "snippet.py").write_text(SNIPPET)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports", "snippet.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(REPO)},
        timeout=300,
        check=False,
    )
    notes = [
        line.split("Revealed type is ")[1]
        for line in done.stdout.splitlines()
        if "Revealed type" in line and line.startswith("snippet.py")
    ]
    assert notes == [
        '"nodus_cli.api.calls.Call[list[str]]"',
        '"nodus_cli.api.calls.Call[list[str]]"',
        '"list[str]"',
        '"nodus_cli.api.calls.Calls[list[str]]"',
        '"list[str] | None"',
        '"nodus_cli.api.calls.Call[list[str]]"',
        '"nodus_cli.api.runs.Run"',
        '"nodus_cli.api.calls.Calls[list[str]]"',
    ], done.stdout
    assert (
        'snippet.py:12: error: Argument 1 to "__call__" of "Function" has incompatible type '
        '"int"; expected "str"'
    ) in done.stdout
