"""``@function``: a Python function that runs where its requirements are met.

```python
from nodus_cli import function

@function(image="python:3.11-slim", cpu=2)        # client= optional (default: Client())
def parse(path: str) -> list[str]: ...

future = parse("a.jsonl")                          # submits at once: a Call[list[str]]
future = parse.options(gpu="L4")("a.jsonl")        # other requirements for this call only
futures = parse.map(paths)                         # one call per item: Calls[list[str]]
value = parse.local("a.jsonl")                     # runs here, in this process
```

The keywords are ``client.run()``'s (the workload file's names, with their rules, hints
and messages; the requirement keys may also be given flat, ``cpu=2``); they are checked
when the function is called, as ``client.run()`` checks them. :class:`Function` keeps the
decorated signature for type checkers (``ParamSpec``): ``parse("a")`` is a
``Call[list[str]]`` under ``mypy --strict``. A Call passed as an argument (a pipeline) is
resolved to its value before the call starts; type checkers see a ``Call[T]`` where the
parameter says ``T``, so annotate such a parameter ``T | Call[T]`` or ``cast`` it.

Without ``client=``, the calls go through one :class:`~nodus_cli.api.client.Client` of this
process, made on first use (the local target, ``NODUS_HOME``): like every client, its calls
in flight keep the program alive until they end.

A decorated function pickles as the plain function (a container has no nodus to rebuild
more): a function that uses another decorated one calls it directly, ``parse(path)``, and
inside the container that is a plain call.
"""

from __future__ import annotations

import functools
import operator
import threading
import types
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

if TYPE_CHECKING:
    from nodus_cli.api.calls import Call, Calls
    from nodus_cli.api.client import Client

__all__ = ["Function", "function"]

P = ParamSpec("P")
R = TypeVar("R")

_default: Client | None = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The client of this process's decorated functions that name none."""
    global _default
    with _default_lock:
        if _default is None:
            from nodus_cli.api.client import Client

            _default = Client()
        return _default


class Function(Generic[P, R]):
    """A decorated function: calling it submits a call and returns its
    :class:`~nodus_cli.api.calls.Call` at once."""

    def __init__(
        self,
        fn: Callable[P, R],
        requirements: Mapping[str, Any],
        client: Client | None = None,
    ) -> None:
        self.fn = fn
        #: The keywords every call gets (``client.run()``'s).
        self.requirements: dict[str, Any] = dict(requirements)
        self.client = client
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.requirements.items())
        return f"<Function {getattr(self.fn, '__qualname__', self.fn)} ({shown})>"

    def __reduce__(self) -> tuple[Any, ...]:
        # Unpickled with the standard library alone (a container has no nodus): the plain
        # function, attrgetter("fn")(SimpleNamespace(fn=fn)).
        return (operator.attrgetter("fn"), (types.SimpleNamespace(fn=self.fn),))

    def _client(self) -> Client:
        return self.client if self.client is not None else default_client()

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Call[R]:
        """Submit ``fn(*args, **kwargs)`` with this function's requirements."""
        return self._client().run(fn=self.fn, args=args, kwargs=kwargs, **self.requirements)

    def options(self, **requirements: Any) -> Function[P, R]:
        """This function with other requirements (these win; a ``requirements`` mapping
        is merged key by key), for the calls made through what it returns."""
        merged = {**self.requirements, **requirements}
        mine, theirs = self.requirements.get("requirements"), requirements.get("requirements")
        if isinstance(mine, Mapping) and isinstance(theirs, Mapping):
            merged["requirements"] = {**mine, **theirs}
        client = merged.pop("client", self.client)
        return Function(self.fn, merged, client)

    def map(self, items: Iterable[Any], *, parallel: int | None = None) -> Calls[R]:
        """One call per item, ``fn(item)``, in one run: a Call per item, results in order."""
        return self._client().map(items, fn=self.fn, parallel=parallel, **self.requirements)

    def local(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run it here, in this process, as a plain call."""
        return self.fn(*args, **kwargs)


@overload
def function(
    fn: Callable[P, R], /, *, client: Client | None = None, **requirements: Any
) -> Function[P, R]: ...


@overload
def function(
    fn: None = None, /, *, client: Client | None = None, **requirements: Any
) -> Callable[[Callable[P, R]], Function[P, R]]: ...


def function(
    fn: Callable[P, R] | None = None, /, *, client: Client | None = None, **requirements: Any
) -> Function[P, R] | Callable[[Callable[P, R]], Function[P, R]]:
    """``@function(image=..., **requirements)`` or ``function(fn, image=..., ...)``."""
    if fn is not None:
        return Function(fn, requirements, client)

    def decorate(inner: Callable[P, R]) -> Function[P, R]:
        return Function(inner, requirements, client)

    return decorate
