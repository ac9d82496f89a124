"""What a function call carries on Swarm, without a cluster: the outcome's frames, as the
runtime prints them, come back whole into the call's folder and never reach the output;
a call over the limit is refused before the run, naming the limit."""

from __future__ import annotations

import importlib.util
import io
import os
import sys
from pathlib import Path

import pytest

from nodus_cli.errors import InvalidInput
from nodus_cli.functions import runtime
from nodus_cli.functions.layout import CallFolder
from nodus_cli.targets import calls as shared_calls
from nodus_cli.targets.base import Pending, Started
from nodus_cli.targets.swarm import calls
from nodus_cli.workload import FunctionCall, MapSpec, Requirements, Stage, Workload


def _bootstrap():  # type: ignore[no-untyped-def]
    path = Path(runtime.__file__).parent / "bootstrap.py"
    spec = importlib.util.spec_from_file_location("nodus_bootstrap_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recorder:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def say(self, message: str) -> None: ...

    def submitted(self, note: str | None = None, job_id: str | None = None) -> None: ...

    def waiting(self, pending: Pending) -> None: ...

    def started(self, info: Started) -> None: ...

    def emit(self, stream: str, text: str) -> None:
        self.lines.append((stream, text))


def test_the_outcome_frames_come_back_whole_and_stay_out_of_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    boot = _bootstrap()
    sent = tmp_path / "sent"
    sent.mkdir()
    payload = os.urandom(100_000)
    (sent / "result.pickle").write_bytes(payload)
    (sent / "outcome.json").write_text('{"status": "ok"}\n')
    printed = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", printed)
    for name in ("result.pickle", "outcome.json"):
        boot._frame(str(sent / name), name)
    monkeypatch.undo()
    # split on newlines only: \x1e, the frame marker, is a line boundary to str.splitlines
    lines = printed.buffer.getvalue().decode().split("\n")[:-1]  # type: ignore[attr-defined]
    assert all(len(line) < 16 * 1024 for line in lines)  # engines split longer log lines
    ctx = Recorder()
    framed = shared_calls.Framed(ctx, tmp_path / "back")  # type: ignore[arg-type]
    framed.emit("stdout", "the function's own line")
    for line in lines:
        framed.emit("stdout", line)
    framed.emit("stderr", "and its stderr")
    assert (tmp_path / "back" / "result.pickle").read_bytes() == payload
    assert (tmp_path / "back" / "outcome.json").read_text() == '{"status": "ok"}\n'
    assert ctx.lines == [("stdout", "the function's own line"), ("stderr", "and its stderr")]


def _workload(call: str, items: int | None) -> Workload:
    stage = Stage(
        "main",
        "py:1",
        None,
        {},
        Requirements(),
        map=MapSpec(tuple(str(i) for i in range(items))) if items else None,
        function=FunctionCall("m.f", call, "3.11"),
    )
    return Workload("m.f", "py:1", None, {}, None, None, Requirements(), [stage])


def test_a_call_over_the_limit_is_refused_naming_it(tmp_path: Path) -> None:
    folder = CallFolder(tmp_path, "c")
    folder.create()
    folder.function.write_bytes(b"f" * 1000)
    for i, size in enumerate((10, calls.VALUE_LIMIT)):
        folder.create_item(i)
        folder.args(i).write_bytes(b"a" * size)
    calls.check(_workload("c", None), tmp_path)  # item 0 alone: fits
    with pytest.raises(InvalidInput) as caught:
        calls.check(_workload("c", 2), tmp_path)
    assert caught.value.message == (
        "m.f: the function and its arguments (item 1) pickle to 17.0 MiB, over the 17 MiB a "
        "call may carry to a Swarm service"
    )
    assert caught.value.hint is not None and "local target" in caught.value.hint
