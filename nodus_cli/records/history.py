"""Runtime measurements from the run records: how long this workload took on each
configuration.

A stage that succeeded on a configuration tells how long this workload takes there; the
planner ranks by estimated cost (runtime x price) once every eligible configuration has
such a measurement (:func:`runtime_lookup`). The planner never opens the records: it is
handed the lookup this module makes from the store's measurements
(:meth:`~nodus_cli.records.store.RunStore.runtime_samples`), keyed as
:mod:`~nodus_cli.records.keys` says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodus_cli.records.keys import config_key, machine_key

if TYPE_CHECKING:
    from nodus_cli.catalog import Offer
    from nodus_cli.planning.ranking import RuntimeLookup
    from nodus_cli.records.store import RunStore

__all__ = ["runtime_lookup"]


def runtime_lookup(store: RunStore, workload_fingerprint: str) -> RuntimeLookup:
    """Median measured runtime per (stage, configuration) of succeeded stages."""
    samples: dict[tuple[str, str], list[float]] = {}
    for name, key, seconds in store.runtime_samples(workload_fingerprint):
        samples.setdefault((name, key), []).append(seconds)
    medians = {k: _median(v) for k, v in samples.items()}

    def lookup(stage: str, offer: Offer) -> float | None:
        found = medians.get((stage, config_key(offer)))
        if found is None and offer.gpu_count:
            found = medians.get((stage, machine_key(offer)))
        return found

    return lookup


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
