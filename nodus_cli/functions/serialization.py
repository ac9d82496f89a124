"""A call, pickled: the function and each item's arguments, written into its folder.

Serialization is cloudpickle's (what Ray, Dask and PySpark use): a function from
``__main__`` (a script, ``python -c``, a notebook) travels by value, with what it refers
to; so does one from a module that is not installed: every loaded module whose file lies
outside the standard library and site-packages (a ``helpers.py`` beside the script, a
project checked out and imported from its folder) is pickled by value while a call is
written. Installed packages travel by reference: the image must have them.

The function is written once per call (``function.pickle``, after a JSON header line that
the runtime checks before unpickling anything: the Python version, the protocols, the
cloudpickle version); each item's ``(args, kwargs)`` beside it. Both are written straight
into their files (protocol 5: large ``bytes`` go to the file without a copy), so a 1 GiB
argument costs no second GiB in the caller.

Something that cannot be pickled is :class:`~nodus_cli.errors.InvalidWorkload` before
anything is submitted, naming where it is (``args[0]``, ``kwargs['model'][2]``, or ``fn``
and the name the function refers to) and why (cloudpickle's own words).
"""

from __future__ import annotations

import inspect
import json
import os
import platform
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from nodus_cli.errors import InvalidWorkload, Problem

__all__ = [
    "FORMAT",
    "PROTOCOL",
    "by_value",
    "function_name",
    "header",
    "not_callable",
    "python_version",
    "write_arguments",
    "write_function",
]

#: The call folder's format (the runtime refuses another).
FORMAT = 1
#: Pickle protocol of payloads and results: 5 writes large buffers without copies.
PROTOCOL = 5
#: Top-level packages never pickled by value, wherever their files are.
_NEVER_BY_VALUE = ("nodus_cli", "cloudpickle")

_lock = threading.RLock()
#: How deep this process is in :func:`by_value` (it registers once, at the outermost).
_depth = 0
#: Module name -> whether it travels by value (decided once per module).
_decided: dict[str, bool] = {}
_installed: tuple[str, ...] | None = None


def python_version() -> str:
    """The caller's ``major.minor``: what the image's Python must be."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def function_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` (what the run's workload is named after)."""
    target: Any = fn
    while hasattr(target, "func") and not hasattr(target, "__qualname__"):  # partial
        target = target.func
    module = getattr(target, "__module__", None) or "__main__"
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}.{qualname}"


def not_callable(fn: object) -> Problem | None:
    if callable(fn):
        return None
    return Problem(
        "fn",
        f"must be a function (or another callable), not {type(fn).__name__} {_short(fn)}: "
        "pass the function itself, fn=train, not what it returns, fn=train()",
    )


def header(fn: Callable[..., Any]) -> dict[str, Any]:
    import cloudpickle

    return {
        "format": FORMAT,
        "python": list(sys.version_info[:2]),
        "python_full": platform.python_version(),
        "protocol": PROTOCOL,
        "result_protocol": PROTOCOL,
        "cloudpickle": cloudpickle.__version__,
        "function": function_name(fn),
    }


def write_function(path: Path, fn: Callable[..., Any], source: str) -> int:
    """The header and the pickled function into ``path``; its size in bytes.

    InvalidWorkload (``fn: ...``) when it cannot be pickled; nothing is left behind.
    """
    import cloudpickle

    line = json.dumps(header(fn)).encode("utf-8") + b"\n"
    try:
        with by_value(), _written(path) as handle:
            handle.write(line)
            cloudpickle.dump(fn, handle, protocol=PROTOCOL)
    except Exception as exc:
        raise InvalidWorkload([Problem("fn", _function_words(fn, exc))], source) from None
    return path.stat().st_size


def write_arguments(
    path: Path, args: Sequence[Any], kwargs: Mapping[str, Any], source: str, where: str = ""
) -> int:
    """``(args, kwargs)`` pickled into ``path``; its size in bytes.

    InvalidWorkload naming each argument that cannot be pickled (``where`` prefixes the
    names, ``items[3]: `` for a map's item).
    """
    import cloudpickle

    value = (tuple(args), dict(kwargs))
    try:
        with by_value(), _written(path) as handle:
            cloudpickle.dump(value, handle, protocol=PROTOCOL)
    except Exception as exc:
        problems = [
            Problem(f"{where}{loc}", message) for loc, message in _diagnose(args, kwargs)
        ] or [Problem(f"{where}args", _why(exc))]
        raise InvalidWorkload(problems, source) from None
    return path.stat().st_size


def check_arguments(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Problem]:
    """Every argument that cannot be pickled, without writing anything."""
    return [Problem(loc, message) for loc, message in _diagnose(args, kwargs)]


@contextmanager
def by_value() -> Iterator[None]:
    """Within: every loaded module that is not installed is pickled by value (one thread
    at a time; the calls inside may nest, as writing the items of a map does)."""
    import cloudpickle

    global _depth
    with _lock:
        if _depth:
            _depth += 1
            try:
                yield
            finally:
                _depth -= 1
            return
        added = []
        for name in _local_modules():
            module = sys.modules.get(name)
            if module is None or _registered(cloudpickle, name):
                continue
            try:
                cloudpickle.register_pickle_by_value(module)
            except ValueError:
                continue
            added.append(module)
        _depth = 1
        try:
            yield
        finally:
            _depth = 0
            for module in added:
                cloudpickle.unregister_pickle_by_value(module)


def _registered(cloudpickle: Any, name: str) -> bool:
    found: set[str] = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", set())
    return name in found


def _local_modules() -> list[str]:
    """Loaded modules whose file lies outside the standard library and site-packages."""
    global _installed
    if _installed is None:
        _installed = _installed_prefixes()
    found = []
    for name, module in list(sys.modules.items()):
        decided = _decided.get(name)
        if decided is None:
            decided = _decided[name] = _is_local(name, module, _installed)
        if decided:
            found.append(name)
    return found


def _is_local(name: str, module: Any, installed: tuple[str, ...]) -> bool:
    if name == "__main__" or name.split(".")[0] in _NEVER_BY_VALUE:
        return False  # __main__ is by value anyway
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not file.endswith(".py"):
        return False  # built in, an extension module, a namespace package
    real = os.path.realpath(file)
    return not real.startswith(installed)


def _installed_prefixes() -> tuple[str, ...]:
    import site
    import sysconfig

    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages())
    user = site.getusersitepackages()
    if user:
        paths.add(user)
    return tuple(sorted({os.path.realpath(p).rstrip(os.sep) + os.sep for p in paths if p}))


@contextmanager
def _written(path: Path) -> Iterator[BinaryIO]:
    """A file being written at ``path``, removed again when writing fails."""
    try:
        with open(path, "wb") as handle:
            yield handle
    except BaseException:
        path.unlink(missing_ok=True)
        raise


class _Discard:
    """A file that keeps nothing: pickling into it only says whether it can be done."""

    def write(self, data: bytes) -> int:
        return len(data)


def _fails(value: Any) -> BaseException | None:
    import cloudpickle

    try:
        with by_value():
            cloudpickle.dump(value, _Discard(), protocol=PROTOCOL)
    except Exception as exc:
        return exc
    return None


def _diagnose(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = []
    for i, value in enumerate(args):
        found.extend(_deepest(f"args[{i}]", value))
    for key, value in kwargs.items():
        found.extend(_deepest(f"kwargs[{key!r}]", value))
    return found


def _deepest(loc: str, value: Any, depth: int = 0) -> list[tuple[str, str]]:
    """Where in ``value`` pickling fails: the innermost list, tuple or dict entry."""
    error = _fails(value)
    if error is None:
        return []
    if depth < 8:
        parts: Iterator[tuple[str, Any]] | None = None
        if isinstance(value, list | tuple):
            parts = ((f"{loc}[{i}]", v) for i, v in enumerate(value))
        elif isinstance(value, dict):
            parts = ((f"{loc}[{k!r}]", v) for k, v in value.items())
        if parts is not None:
            inner = [found for part, v in parts for found in _deepest(part, v, depth + 1)]
            if inner:
                return inner
    return [(loc, _why(error))]


def _function_words(fn: Callable[..., Any], exc: BaseException) -> str:
    why = _why(exc)
    culprit = _culprit(fn)
    if culprit:
        return (
            f"{why}: the function refers to {culprit}, which cannot travel to a container; "
            "create it inside the function instead"
        )
    return f"the function cannot be pickled: {why}"


def _culprit(fn: Callable[..., Any]) -> str | None:
    """The name (a closure variable, a global, a default) that cannot be pickled."""
    try:
        found = inspect.getclosurevars(fn)
    except (TypeError, ValueError):
        return None
    places = (
        ("a closure variable", found.nonlocals),
        ("a global", found.globals),
    )
    for kind, names in places:
        for name, value in names.items():
            if not inspect.ismodule(value) and _fails(value) is not None:
                return f"`{name}` ({kind})"
    for name, value in (getattr(fn, "__kwdefaults__", None) or {}).items():
        if _fails(value) is not None:
            return f"`{name}` (a default)"
    return None


def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"
