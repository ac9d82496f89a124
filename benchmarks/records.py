"""Record types: what defining them costs as ``@struct``, NamedTuple and frozen slotted
dataclass, and what building an instance costs once defined.

Why: a short command (``nodus validate``, ``plan``, ``run``) defines dozens of record types
at every start and builds few of them, so the cost to define is the one that counts; this
is the measurement behind ``nodus_cli.structs`` (see the README's section on records).
Each round defines 41 six-field types each way, in turn, in this one process (the imports
already paid); medians of the rounds, and ratios to ``@struct``.

Run: python benchmarks/records.py [--rounds 21]
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from nodus_cli.structs import struct

TYPES = 41
FIELDS = {f"f{i}": int for i in range(6)}


def _body(n: int) -> dict[str, Any]:
    return {"__annotations__": dict(FIELDS), "__module__": __name__, "__qualname__": f"T{n}"}


def _dataclass(n: int) -> type:
    made: type = dataclass(frozen=True, slots=True)(type(f"T{n}", (), _body(n)))
    return made


def _namedtuple(n: int) -> type:
    return NamedTuple(f"T{n}", list(FIELDS.items()))


def _struct(n: int) -> type:
    made: type = struct(frozen=True)(type(f"T{n}", (), _body(n)))
    return made


KINDS: dict[str, Callable[[int], type]] = {
    "frozen slotted dataclass": _dataclass,
    "NamedTuple": _namedtuple,
    "@struct(frozen=True)": _struct,
}


def _define_all(make: Callable[[int], type]) -> float:
    start = time.perf_counter()
    for n in range(TYPES):
        make(n)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=21)
    rounds = parser.parse_args().rounds
    samples: dict[str, list[float]] = {name: [] for name in KINDS}
    for _ in range(rounds):
        for name, make in KINDS.items():
            samples[name].append(_define_all(make))
    base = statistics.median(samples["@struct(frozen=True)"])
    print(f"defining {TYPES} types of {len(FIELDS)} fields (median of {rounds} rounds):")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"  {name:26s} {median * 1000:7.2f} ms  {median / base:5.1f}x")
    print("building one instance, once the type is defined (best of 5):")
    for name, make in KINDS.items():
        cls = make(0)
        cls(1, 2, 3, 4, 5, 6)  # a struct writes out its __init__ at its first instance
        best = min(timeit.repeat(lambda c=cls: c(1, 2, 3, 4, 5, 6), number=100_000, repeat=5))
        print(f"  {name:26s} {best * 10:7.2f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
