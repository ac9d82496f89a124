"""The cyclic garbage collector, paused while nodus builds large structures without cycles.

Parsing a big workload file, planning against a large inventory or converting a 100,000-row
price file allocate many small, long-lived objects; every collection would rescan all of
them, which multiplies the time such work takes (benchmarks/README.md). Reference counting
still frees memory while the collector is paused.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """Pause the cyclic collector within the block (nesting is fine)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
