"""Python functions as workloads: a call pickled into a folder, the runtime that runs it in
a container, and its outcome read back.

A function call is a run like any other (the workload names the function,
``module.qualname``, and its stage carries a :class:`~nodus_cli.workload.FunctionCall`);
what is particular to it is here, below the records and the targets, which both use it:

- :mod:`.serialization`: the function and each item's arguments, pickled with cloudpickle
  into the call's folder (by value for ``__main__`` and modules that are not installed),
  and what cannot be pickled, named before anything is submitted;
- :mod:`.layout`: the call's folder (what the container reads and writes) and when it
  is removed;
- :mod:`.runtime`: what nodus brings into the container (:mod:`.bootstrap`, run by the
  image's Python, and the caller's own cloudpickle);
- :mod:`.outcome`: the value, the function's own exception (or :class:`RemoteError`), or
  why there is neither.

Importing this package imports none of them (nor cloudpickle).
"""
