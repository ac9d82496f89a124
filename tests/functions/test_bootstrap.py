"""The runtime inside a container, run here by real interpreters (no Docker): it checks the
Python version before unpickling anything, calls the function, and writes an outcome that
the caller settles into the value, the function's own exception, or why neither."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from functions_support import SYSTEM_PYTHON, local_call, other_pythons

from nodus_cli.functions import bootstrap, outcome, runtime, serialization
from nodus_cli.functions.layout import CallFolder

pytestmark = pytest.mark.skipif(
    not Path(SYSTEM_PYTHON).exists(), reason=f"{SYSTEM_PYTHON} (the test image's Python)"
)


def square(x: int) -> int:
    return x * x


class Point:
    def __init__(self, x: int) -> None:
        self.x = x


class MyError(Exception):
    pass


class TwoArgumentError(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")


def raises_value_error(x: int) -> None:
    def inner() -> None:
        raise ValueError(f"bad value {x!r}")

    inner()


def test_a_value_comes_back(tmp_path: Path) -> None:
    done = local_call(tmp_path, square, 7)
    assert done.code == 0
    assert done.settled == outcome.Value(49)


def test_an_instance_of_the_callers_class_comes_back_as_that_class(tmp_path: Path) -> None:
    done = local_call(tmp_path, Point, 3)
    assert isinstance(done.settled, outcome.Value)
    assert isinstance(done.settled.value, Point) and done.settled.value.x == 3


def test_the_functions_exception_is_its_own_type_with_the_remote_traceback(
    tmp_path: Path,
) -> None:
    done = local_call(tmp_path, raises_value_error, 3)
    assert done.code == 101
    assert isinstance(done.settled, outcome.Raised)
    error = done.settled.error
    assert type(error) is ValueError and str(error) == "bad value 3"
    cause = error.__cause__
    assert isinstance(cause, outcome.RemoteTraceback)
    assert "in inner" in cause.text and "ValueError: bad value 3" in cause.text
    assert "bootstrap.py" not in cause.text.splitlines()[1]  # the runtime's frame is cut


def test_a_class_of_the_callers_module_is_caught_as_itself(tmp_path: Path) -> None:
    def raises() -> None:
        raise MyError("custom", 42)

    done = local_call(tmp_path, raises)
    assert isinstance(done.settled, outcome.Raised)
    assert isinstance(done.settled.error, MyError) and done.settled.error.args == ("custom", 42)


def test_an_exception_that_cannot_be_rebuilt_is_a_remote_error(tmp_path: Path) -> None:
    def raises() -> None:
        raise TwoArgumentError(7, "detail")

    done = local_call(tmp_path, raises)
    assert isinstance(done.settled, outcome.Raised)
    error = done.settled.error
    assert isinstance(error, outcome.RemoteError)
    assert error.type_name.endswith("TwoArgumentError") and error.message == "7: detail"
    assert "missing 1 required positional argument" in (error.why or "")
    assert "TwoArgumentError: 7: detail" in error.traceback


def test_sys_exit_with_a_code_is_the_calls_exit_code_and_system_exit_at_the_caller(
    tmp_path: Path,
) -> None:
    done = local_call(tmp_path, sys.exit, 3)
    assert done.code == 3
    assert done.outcome is not None and done.outcome.status == outcome.Status.EXITED
    assert done.outcome.exit_code == 3
    assert outcome.describe(done.outcome, 3, "img", "3.11") == (
        "it called sys.exit(3): exit code 3"
    )
    assert isinstance(done.settled, outcome.Raised)
    error = done.settled.error
    assert type(error) is SystemExit and error.code == 3
    assert isinstance(error.__cause__, outcome.RemoteTraceback)


def test_sys_exit_with_a_message_exits_1_and_prints_it(tmp_path: Path) -> None:
    done = local_call(tmp_path, sys.exit, "cannot go on")
    assert done.code == 1 and done.stderr == "cannot go on\n"
    assert done.outcome is not None and done.outcome.exit_code == 1
    assert outcome.describe(done.outcome, 1, "img", "3.11") == (
        "it called sys.exit('cannot go on'): exit code 1"
    )
    assert isinstance(done.settled, outcome.Raised)
    assert type(done.settled.error) is SystemExit
    assert done.settled.error.code == "cannot go on"


@pytest.mark.parametrize("args", [(), (0,), (None,)])
def test_sys_exit_0_is_a_success_whose_value_is_none(tmp_path: Path, args: tuple[()]) -> None:
    done = local_call(tmp_path, sys.exit, *args)
    assert done.code == 0
    assert done.outcome is not None and done.outcome.status == outcome.Status.OK
    assert done.settled == outcome.Value(None)


def test_a_function_that_kills_its_own_process_leaves_no_outcome(tmp_path: Path) -> None:
    def hard_exit() -> None:
        print("about to exit", flush=True)
        os._exit(3)

    done = local_call(tmp_path, hard_exit)
    assert done.code == 3 and done.outcome is None
    assert done.settled == outcome.Failed(None)
    assert outcome.describe(None, 3, "img", "3.11") == (
        "the function's process exited with code 3 without reporting an outcome: it called "
        "os._exit(), or it crashed or was killed"
    )


def test_an_unpicklable_return_value_is_a_failure_with_words(tmp_path: Path) -> None:
    def generator() -> object:
        return (i for i in range(3))

    done = local_call(tmp_path, generator)
    assert done.code == 104
    assert done.settled == outcome.Failed(
        "the return value cannot be pickled: TypeError: cannot pickle 'generator' object"
    )


def test_a_module_the_image_lacks_is_named(tmp_path: Path) -> None:
    import tomli_w  # installed here, not in the interpreter that runs the call

    def uses_installed() -> str:
        return tomli_w.dumps({"a": 1})

    done = local_call(tmp_path, uses_installed)
    assert done.code == 103
    assert isinstance(done.settled, outcome.Failed)
    assert done.settled.message is not None
    assert "No module named 'tomli_w'" in done.settled.message
    assert "the image the-image lacks module 'tomli_w'; install it in the image" in (
        done.settled.message
    )


def test_a_module_the_image_lacks_imported_inside_the_function_is_named(
    tmp_path: Path,
) -> None:
    def imports_inside() -> str:
        import tomli_w  # installed here, not in the interpreter that runs the call

        return str(tomli_w.dumps({"a": 1}))

    done = local_call(tmp_path, imports_inside)
    assert done.code == 101
    assert isinstance(done.settled, outcome.Raised)
    error = done.settled.error
    assert type(error) is ModuleNotFoundError and error.name == "tomli_w"
    lacks = (
        "the image the-image lacks module 'tomli_w'; install it in the image (modules that "
        "are not installed travel with the function, but not what an import statement "
        "inside the function loads)"
    )
    assert str(error) == f"No module named 'tomli_w': {lacks}"
    assert outcome.describe(done.outcome, 101, "the-image", "3.11") == (
        f"raised ModuleNotFoundError: No module named 'tomli_w': {lacks}"
    )


def test_a_name_missing_from_a_module_the_image_has_is_no_missing_module(
    tmp_path: Path,
) -> None:
    def imports_a_missing_name() -> None:
        from json import no_such_name  # type: ignore[attr-defined]  # noqa: F401

    done = local_call(tmp_path, imports_a_missing_name)
    assert isinstance(done.settled, outcome.Raised)
    error = done.settled.error
    assert type(error) is ImportError and "lacks module" not in str(error)
    assert str(error).startswith("cannot import name 'no_such_name' from 'json'")


def test_a_module_beside_the_script_travels_by_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "helpers_for_nodus.py").write_text(
        "SUFFIX = '!'\ndef shout(text):\n    return text.upper() + SUFFIX\n"
    )
    monkeypatch.syspath_prepend(str(project))
    import helpers_for_nodus  # type: ignore[import-not-found]

    def uses_helpers(name: str) -> str:
        return str(helpers_for_nodus.shout(name))

    done = local_call(tmp_path / "home", uses_helpers, "hi")
    assert done.settled == outcome.Value("HI!")
    sys.modules.pop("helpers_for_nodus", None)


@pytest.mark.parametrize("python", other_pythons(), ids=lambda p: p.parent.parent.name)
def test_another_python_is_named_before_anything_is_unpickled(tmp_path: Path, python: Path) -> None:
    done = local_call(tmp_path, square, 2, python=str(python))
    assert done.code == 102
    found = python.parent.parent.name  # pyenv's folder: the full version
    assert isinstance(done.settled, outcome.Failed)
    assert done.settled.message == (
        f"the image the-image runs Python {found} ({python}), and the function needs "
        f"Python 3.11 (it was pickled by Python {sys.version.split()[0]}): use an image with "
        "Python 3.11, e.g. python:3.11-slim"
    )
    assert "Traceback" not in done.stderr


def test_the_bootstrap_parses_under_every_python_here() -> None:
    source = (Path(runtime.__file__).parent / "bootstrap.py").read_text()
    for python in [Path(SYSTEM_PYTHON), *other_pythons()]:
        subprocess.run(
            [str(python), "-c", "import sys; compile(sys.stdin.read(), 'bootstrap.py', 'exec')"],
            input=source,
            text=True,
            check=True,
        )


def test_output_is_live_through_a_pipe(tmp_path: Path) -> None:
    go = tmp_path / "go"

    def chatty() -> str:
        print("tick 0")
        while not go.exists():  # it runs on until the test has read its first line
            time.sleep(0.05)
        print("tick 1")
        return "done"

    folder = CallFolder(tmp_path, "live")
    folder.create()
    serialization.write_function(folder.function, chatty, "test")
    folder.create_item(0)
    serialization.write_arguments(folder.args(0), (), {}, "test")
    rt = runtime.ensure(tmp_path)
    proc = subprocess.Popen(
        [SYSTEM_PYTHON, str(rt / "bootstrap.py"), str(folder.path), "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        # the line comes while the function still runs, not when it ends
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no line while the function ran"
        first = proc.stdout.readline()
    finally:
        go.touch()
    rest, _ = proc.communicate(timeout=30)
    assert first == "tick 0\n" and rest.startswith("tick 1\n")


def test_a_warm_worker_runs_calls_one_after_another(tmp_path: Path) -> None:
    def work(n: int) -> int:
        print(f"out {n} {os.environ.get('NODUS_ITEM_INDEX')}")
        print(f"err {n}", file=sys.stderr)
        if n == 2:
            raise KeyError(n)
        return n * 10

    folder = CallFolder(tmp_path, "warm")
    folder.create()
    serialization.write_function(folder.function, work, "test")
    for i in range(3):
        folder.create_item(i)
        serialization.write_arguments(folder.args(i), (i,), {}, "test")
    wdir = folder.create_worker("w0")
    requests = os.open(wdir / "requests", os.O_RDWR)
    replies = os.open(wdir / "replies", os.O_RDWR)
    rt = runtime.ensure(tmp_path)
    proc = subprocess.Popen(
        [SYSTEM_PYTHON, str(rt / "bootstrap.py"), "--worker", str(folder.path), "w0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # First the runtime says which protocol it speaks (the caller refuses another).
        assert json.loads(_line(replies)) == {"kind": "hello", "protocol": bootstrap.PROTOCOL}
        answers = []
        for i in range(3):
            call = {"kind": "call", "item": str(i), "env": {"NODUS_ITEM_INDEX": str(i)}}
            os.write(requests, (json.dumps(call) + "\n").encode())
            answers.append(json.loads(_line(replies)))
        assert answers == [
            {"kind": "done", "item": "0", "code": 0},
            {"kind": "done", "item": "1", "code": 0},
            {"kind": "done", "item": "2", "code": 101},
        ]
        assert [outcome.settle(folder.item(i), "img", "3.11") for i in (0, 1)] == [
            outcome.Value(0),
            outcome.Value(10),
        ]
        raised = outcome.settle(folder.item(2), "img", "3.11")
        assert isinstance(raised, outcome.Raised) and isinstance(raised.error, KeyError)
        assert (folder.item(1) / "stdout").read_text() == "out 1 1\n"
        assert (folder.item(1) / "stderr").read_text() == "err 1\n"
    finally:
        os.close(requests)  # the worker reads the end of its requests and exits
        code = proc.wait(timeout=30)
        os.close(replies)
    assert code == 0
    assert proc.stdout is not None and proc.stdout.read() == b""  # nothing outside items


def _line(fd: int, timeout: float = 30) -> str:
    got = b""
    result: list[bytes] = []

    def read() -> None:
        nonlocal got
        while not got.endswith(b"\n"):
            got += os.read(fd, 1)
        result.append(got)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert result, f"no reply within {timeout} s"
    return result[0].decode().strip()


def test_a_pod_of_an_indexed_job_without_its_index_says_so_and_calls_nothing(
    tmp_path: Path,
) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "NODUS_ITEM_INDEX"}
    done = subprocess.run(
        [sys.executable, bootstrap.__file__, "--unpack", str(parts), str(tmp_path / "c"), "-", "0"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == bootstrap.EXIT_RUNTIME
    assert "NODUS_ITEM_INDEX is not set: no item to call" in done.stderr
    assert not (tmp_path / "c").exists()
