"""How a stage's eligible configurations are ordered, and the candidates of that order.

Contract (SPEC section 4): by estimated cost (measured runtime x hourly price) when every
eligible configuration has a measured runtime of this workload, otherwise by hourly
price. Ties fall back to the offer's own fields (machine, supplier, region, GPU count,
vCPUs, memory), so the order never depends on the order of the inventory. The ranking
orders what the inventory lists; it makes no claim about the lowest total cost or
shortest runtime.

A :class:`Ranking` makes its :class:`Candidate` objects on demand: a plan shows a few
configurations of what may be a very large inventory, and builds only those.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, overload

from nodus_cli.structs import struct

if TYPE_CHECKING:
    from nodus_cli.catalog import Offer

__all__ = [
    "BASIS_PRICE",
    "BASIS_RUNTIME",
    "PRICE_ORDER",
    "Candidate",
    "Ranking",
    "RuntimeLookup",
    "by_estimated_cost",
    "by_price",
    "measured_runtimes",
    "no_history",
    "over_budget",
]

BASIS_PRICE = "hourly_price"
BASIS_RUNTIME = "runtime_estimate"

#: Measured runtime in seconds of (stage name, configuration), or None when never measured.
#: ``records.RunStore.runtime_lookup`` builds one from the run records of a workload.
RuntimeLookup = Callable[[str, "Offer"], float | None]


def no_history(stage: str, offer: Offer) -> float | None:
    return None


#: Ties of hourly price are broken by the offer's own fields, never by inventory order
#: (machine ID first: it usually differs, which keeps comparisons cheap).
_TIE_FIELDS = (
    "machine_id",
    "supplier",
    "region",
    "gpu_count",
    "vcpus",
    "memory_gb",
    "gpu_memory_gb",
    "arch",
)
PRICE_ORDER = attrgetter("price_per_hour", *_TIE_FIELDS)


@struct
class Candidate:
    """An offer that can run a stage, with its estimated runtime."""

    offer: Offer
    runtime_seconds: float | None = None

    @property
    def estimated_cost(self) -> float | None:
        if self.runtime_seconds is None:
            return None
        return self.runtime_seconds / 3600.0 * self.offer.price_per_hour

    def as_json(self) -> dict[str, Any]:
        cost = self.estimated_cost
        return {
            **self.offer.as_json(),
            "runtime_seconds": self.runtime_seconds,
            "estimated_cost": round(cost, 6) if cost is not None else None,
        }


class Ranking(Sequence[Candidate]):
    """A stage's eligible configurations, best first, as candidates made on demand: a
    plan of a million configurations does not build a million objects to show five."""

    __slots__ = ("offers", "runtimes")

    def __init__(self, offers: list[Offer], runtimes: list[float | None] | None = None) -> None:
        self.offers = offers
        self.runtimes = runtimes

    def __len__(self) -> int:
        return len(self.offers)

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> list[Candidate]: ...

    def __getitem__(self, index: int | slice) -> Candidate | list[Candidate]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self.offers)))]
        offer = self.offers[index]
        return Candidate(offer, self.runtimes[index] if self.runtimes is not None else None)

    def __iter__(self) -> Iterator[Candidate]:
        if self.runtimes is None:
            return (Candidate(o) for o in self.offers)
        return (Candidate(o, r) for o, r in zip(self.offers, self.runtimes, strict=True))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ranking | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Ranking({len(self.offers)} configurations)"


def by_estimated_cost(pair: tuple[Offer, float | None]) -> tuple[Any, ...]:
    offer, runtime = pair
    return (offer.price_per_hour * (runtime or 0.0), PRICE_ORDER(offer))


def by_price(pair: tuple[Offer, float | None]) -> tuple[Any, ...]:
    return PRICE_ORDER(pair[0])


def measured_runtimes(
    stage: str, offers: list[Offer], history: RuntimeLookup
) -> list[float | None] | None:
    """Measured runtimes of ``offers`` (None when nothing could have been measured)."""
    if history is no_history or not offers:
        return None
    found = [history(stage, o) for o in offers]
    return found if any(r is not None for r in found) else None


def over_budget(offer: Offer, runtime: float | None, budget: float) -> bool:
    return runtime is not None and runtime / 3600.0 * offer.price_per_hour > budget
