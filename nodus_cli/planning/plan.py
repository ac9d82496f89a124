"""A plan: what planning returns, for the API to hand on and the command line to render.

Contract: a :class:`Plan` holds one :class:`StagePlan` per stage of its workload, in order:
the stage's ranked candidates (best first), how many configurations each requirement
excluded (the keys of :data:`~nodus_cli.planning.filters.CHECKS`), the notes and the
explanation of an empty list; and the :class:`PriceCeiling` it was made under. ``as_json``
gives the documented shape of ``nodus plan --json``. These are plain records: they
compute nothing but what follows from their fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nodus_cli.planning.ranking import Candidate
from nodus_cli.structs import field, struct
from nodus_cli.workload import Requirements, Workload

if TYPE_CHECKING:
    from nodus_cli.planning.inventory import Inventory

__all__ = ["Plan", "PriceCeiling", "StagePlan"]


@struct(frozen=True)
class PriceCeiling:
    """A ``max_price_per_hour`` set outside the workload, which no workload can raise."""

    limit: float
    #: Where it was set, for the plan's words ("[limits] max_price_per_hour in FILE").
    source: str

    def as_json(self) -> dict[str, Any]:
        return {"max_price_per_hour": self.limit, "source": self.source}


@struct
class StagePlan:
    """One stage's ranked candidates, and why the others were left out."""

    name: str
    requirements: Requirements
    basis: str
    candidates: Sequence[Candidate]
    excluded: dict[str, int]
    notes: list[str] = field(default_factory=list)
    #: What the image and arch checks removed, by GPU model: for the plan to say so.
    removed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    emptied_by: str | None = None
    nearest: list[Candidate] = field(default_factory=list)
    explanation: str | None = None
    image: str | None = None
    #: A fan-out stage's economics on the selected configuration (see :func:`fanout`).
    fanout: dict[str, Any] | None = None

    @property
    def selected(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    @property
    def feasible(self) -> bool:
        return bool(self.candidates)

    @property
    def eligible(self) -> int:
        return len(self.candidates)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.image,
            "basis": self.basis,
            "requirements": self.requirements.as_json(),
            "selected": self.selected.as_json() if self.selected else None,
            "candidates": [c.as_json() for c in self.candidates],
            "eligible": len(self.candidates),
            "excluded": {k: v for k, v in self.excluded.items() if v},
            "removed": self.removed,
            "notes": list(self.notes),
            "emptied_by": self.emptied_by,
            "explanation": self.explanation,
            "nearest": [c.as_json() for c in self.nearest],
            "fanout": self.fanout,
        }


@struct
class Plan:
    """A workload's plan on a target: each stage's candidates, notes and price ceiling."""

    workload: Workload
    target: str
    stages: list[StagePlan]
    notes: list[str] = field(default_factory=list)
    ceiling: PriceCeiling | None = None
    #: Things the user should act on (stale prices): printed as warnings.
    warnings: list[str] = field(default_factory=list)
    #: What it was planned against (set by whoever gathered the offers).
    inventory: Inventory | None = None

    @property
    def feasible(self) -> bool:
        return all(s.feasible for s in self.stages)

    def as_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload.name,
            "target": self.target,
            "feasible": self.feasible,
            "budget": self.workload.budget,
            "requirements": self.workload.requirements.as_json(),
            "ranking": (
                "by estimated cost (measured runtime x hourly price) when every eligible "
                "configuration of a stage has a measured runtime, else by hourly price; "
                "not a promise of the lowest total cost or the shortest runtime"
            ),
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "limits": self.ceiling.as_json() if self.ceiling else None,
            "stages": [s.as_json() for s in self.stages],
        }
