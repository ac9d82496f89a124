"""A call pickled into its folder: what cannot travel is named before anything is
submitted, the function's name, the header the runtime checks first, the runtime folder."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nodus_cli.errors import InvalidWorkload
from nodus_cli.functions import runtime, serialization
from nodus_cli.functions.layout import CallFolder


def plain(x: int) -> int:
    return x


def test_an_argument_that_cannot_be_pickled_is_named(tmp_path: Path) -> None:
    lock = threading.Lock()
    with pytest.raises(InvalidWorkload) as caught:
        serialization.write_arguments(
            tmp_path / "args.pickle", (1, [2, {"k": lock}]), {"model": lock}, "client.run()"
        )
    problems = [(p.loc, p.message) for p in caught.value.problems]
    assert problems == [
        ("args[1][1]['k']", "cannot pickle '_thread.lock' object"),
        ("kwargs['model']", "cannot pickle '_thread.lock' object"),
    ]
    assert "client.run() is not a valid workload (2 problems)" in str(caught.value)
    assert not (tmp_path / "args.pickle").exists()  # nothing is left behind


def test_a_lambda_capturing_a_lock_names_what_it_refers_to(tmp_path: Path) -> None:
    lock = threading.Lock()
    fn = lambda: lock.locked()  # noqa: E731 - the case itself
    with pytest.raises(InvalidWorkload) as caught:
        serialization.write_function(tmp_path / "function.pickle", fn, "client.run()")
    (problem,) = caught.value.problems
    assert problem.loc == "fn"
    assert problem.message == (
        "cannot pickle '_thread.lock' object: the function refers to `lock` (a closure "
        "variable), which cannot travel to a container; create it inside the function instead"
    )
    assert not (tmp_path / "function.pickle").exists()


def test_something_that_is_not_callable_is_named() -> None:
    problem = serialization.not_callable(plain(3))
    assert problem is not None and problem.loc == "fn"
    assert problem.message == (
        "must be a function (or another callable), not int 3: pass the function itself, "
        "fn=train, not what it returns, fn=train()"
    )
    assert serialization.not_callable(plain) is None


def test_the_function_is_named_module_and_qualname() -> None:
    class Holder:
        def method(self) -> None:
            pass

    assert serialization.function_name(plain) == f"{__name__}.plain"
    assert serialization.function_name(functools.partial(plain, 1)) == f"{__name__}.plain"
    assert serialization.function_name(Holder().method).endswith(
        "test_the_function_is_named_module_and_qualname.<locals>.Holder.method"
    )
    assert serialization.function_name(len) == "builtins.len"


def test_the_header_comes_first_and_says_what_the_runtime_checks(tmp_path: Path) -> None:
    path = tmp_path / "function.pickle"
    serialization.write_function(path, plain, "t")
    first = path.read_bytes().split(b"\n", 1)[0]
    header = json.loads(first)
    assert header["format"] == 1 and header["python"] == list(sys.version_info[:2])
    assert header["protocol"] == header["result_protocol"] == 5
    assert header["function"] == f"{__name__}.plain"


def test_modules_of_this_project_travel_by_value_and_installed_ones_do_not() -> None:
    import cloudpickle
    import tomli_w

    with serialization.by_value():
        registered = cloudpickle.cloudpickle._PICKLE_BY_VALUE_MODULES.copy()
    assert __name__ in registered  # a test module: a file outside site-packages
    assert "tomli_w" not in registered and "json" not in registered
    assert not any(name.startswith("nodus_cli") for name in registered)
    assert __name__ not in cloudpickle.cloudpickle._PICKLE_BY_VALUE_MODULES  # undone after
    assert tomli_w  # imported: a candidate, and still by reference


def test_importing_the_package_loads_no_cloudpickle() -> None:
    code = "import sys, nodus_cli.functions; print('cloudpickle' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_runtime_folder_is_built_once_with_the_callers_cloudpickle(tmp_path: Path) -> None:
    import cloudpickle

    folder = runtime.ensure(tmp_path)
    assert folder == runtime.ensure(tmp_path)
    assert (folder / "bootstrap.py").is_file()
    copied = (folder / "cloudpickle" / "__init__.py").read_text()
    assert copied == (Path(cloudpickle.__file__)).read_text()
    tag = sys.implementation.cache_tag
    assert list((folder / "cloudpickle" / "__pycache__").glob(f"cloudpickle.{tag}.pyc"))
    assert folder.parent.name == "runtime" and len(folder.name) == 16
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no leftover


def test_the_call_folder_layout(tmp_path: Path) -> None:
    folder = CallFolder(tmp_path, "abc")
    folder.create()
    folder.create_item(3)
    worker = folder.create_worker("w1")
    assert folder.args(3) == tmp_path / "calls/abc/items/3/args.pickle"
    assert (worker / "requests").is_fifo() and (worker / "replies").is_fifo()
    assert oct(folder.item(3).stat().st_mode & 0o777) == "0o777"
    assert oct((tmp_path / "calls").stat().st_mode & 0o777) == "0o700"
    folder.remove_item(3)
    assert not folder.item(3).exists() and folder.exists()
    folder.remove()
    assert not folder.exists()


@pytest.mark.parametrize("args", [["--help"], ["validate", "WORKLOAD"]])
def test_the_command_line_loads_no_cloudpickle(args: list[str], tmp_path: Path) -> None:
    workload = tmp_path / "w.toml"
    workload.write_text('image = "busybox:1.36"\ncommand = "true"\n')
    argv = [str(workload) if a == "WORKLOAD" else a for a in args]
    code = (
        "import sys\nfrom nodus_cli.__main__ import main\n"
        f"main({argv!r})\n"
        "print('cloudpickle' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stderr.strip().splitlines()[-1] == "False"
