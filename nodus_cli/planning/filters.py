"""A stage's requirements as filters over a list of offers, applied in a fixed order.

Contract: the filters run in ``CHECKS`` order, each one pass over what the previous ones
kept, so a configuration is counted under the first requirement it fails: the counts add
up to the inventory's size, and the requirement that emptied the list is the last one
that excluded anything. Only the requirements a stage sets get a filter; the budget is
applied apart (it needs the measured runtimes). The first, most selective filters (GPU
model and count) keep the later passes short, so planning stays linear in the size of
the inventory.

Offers whose vCPU and memory figures are a minimum (``Offer.size_is_minimum``) meet a
requirement at or below the figure; above it their size is unknown and they are
excluded like any smaller machine. The price limit applied is the lower of the
workload's and the :class:`~nodus_cli.planning.plan.PriceCeiling`, which no workload can
raise.
"""

from __future__ import annotations

from collections.abc import Callable

from nodus_cli.catalog import Offer
from nodus_cli.hardware import cuda, gpus, locations
from nodus_cli.planning.plan import PriceCeiling
from nodus_cli.workload import Stage

__all__ = ["CHECKS", "Filter", "Filters"]

#: The order in which requirements are checked (and the keys of ``excluded``).
CHECKS = (
    "gpu",
    "gpu_count",
    "peak_memory_gb",
    "cpu",
    "memory_gb",
    "disk_gb",
    "location",
    "arch",
    "image",
    "max_price_per_hour",
    "budget",
)

Filter = Callable[[list[Offer]], list[Offer]]


class Filters:
    """One stage's requirements compiled into list filters, in ``CHECKS`` order.

    Each filter takes what the previous ones kept and returns what it keeps; only
    requirements the stage sets get a filter. Budget is applied apart because it needs
    the measured runtimes.
    """

    def __init__(self, stage: Stage, ceiling: PriceCeiling | None = None) -> None:
        req = stage.requirements
        self.req = req
        self.ceiling = ceiling
        #: The price limit applied: the lower of the workload's and the ceiling.
        self.price_limit = req.max_price_per_hour
        #: True when the ceiling, not the workload, set ``price_limit``.
        self.ceiling_decides = False
        if ceiling is not None and (self.price_limit is None or ceiling.limit < self.price_limit):
            self.price_limit = ceiling.limit
            self.ceiling_decides = True
        self.image = stage.image
        self.cuda = cuda.declared_cuda(stage.image) if req.wants_gpu else None
        self._image_verdict: dict[str, str | None] = {}
        self.steps: dict[str, Filter] = {}
        if req.wants_gpu:
            wanted = req.gpu
            if wanted is not None:
                self.steps["gpu"] = lambda xs: [o for o in xs if o.gpu == wanted]
            else:
                self.steps["gpu"] = lambda xs: [o for o in xs if o.gpu is not None]
            count = req.gpu_count
            self.steps["gpu_count"] = lambda xs: [o for o in xs if o.gpu_count >= count]
            memory = req.peak_memory_gb
            if memory is not None:
                self.steps["peak_memory_gb"] = lambda xs: [
                    o for o in xs if o.gpu_memory_gb >= memory
                ]
        cpu = req.cpu
        if cpu:
            self.steps["cpu"] = lambda xs: [o for o in xs if o.vcpus >= cpu]
        host = req.memory_gb
        if host:
            self.steps["memory_gb"] = lambda xs: [o for o in xs if o.memory_gb >= host]
        disk = req.disk_gb
        if disk:
            # An offer that lists no disk size is kept: disk can be attached.
            self.steps["disk_gb"] = lambda xs: [
                o for o in xs if o.disk_gb is None or o.disk_gb >= disk
            ]
        if req.location is not None:
            self.steps["location"] = self._location
        arch = req.arch
        if arch is not None:
            self.steps["arch"] = lambda xs: [o for o in xs if o.arch == arch]
        if self.cuda is not None:
            self.steps["image"] = self._image
        limit = self.price_limit
        if limit is not None:
            self.steps["max_price_per_hour"] = lambda xs: [
                o for o in xs if o.price_per_hour <= limit
            ]

    def prefer_cpu_only(self) -> None:
        """Exclude the machines with GPUs (a stage that requests none, when a CPU-only
        configuration fits)."""
        self.steps["gpu"] = lambda xs: [o for o in xs if o.gpu is None]

    def _location(self, offers: list[Offer]) -> list[Offer]:
        where = self.req.location or ""
        inside = {r for r in {o.region for o in offers} if locations.matches(where, r)}
        return [o for o in offers if o.region in inside]

    def image_problem(self, gpu: str | None) -> str | None:
        """Why this stage's image cannot drive ``gpu`` (None when it can, or can't tell)."""
        if self.cuda is None or gpu is None:
            return None
        if gpu not in self._image_verdict:
            family = gpus.table().lookup(gpu)
            self._image_verdict[gpu] = (
                cuda.incompatibility(family, self.cuda) if family is not None else None
            )
        return self._image_verdict[gpu]

    def _image(self, offers: list[Offer]) -> list[Offer]:
        blocked = {g for g in {o.gpu for o in offers} if self.image_problem(g)}
        if not blocked:
            return offers
        return [o for o in offers if o.gpu not in blocked]

    def run(
        self,
        offers: list[Offer],
        skip: str | None = None,
        stop: str | None = None,
        skip_also: str | None = None,
    ) -> tuple[list[Offer], dict[str, int]]:
        """Apply the filters in order (all but ``skip`` and ``skip_also``; up to, not
        including, ``stop``)."""
        excluded = dict.fromkeys(CHECKS, 0)
        remaining = offers
        for name in CHECKS:
            if name == stop:
                break
            step = self.steps.get(name)
            if step is None or name in (skip, skip_also):
                continue
            kept = step(remaining)
            excluded[name] = len(remaining) - len(kept)
            remaining = kept
            if not remaining:
                break
        return remaining, excluded
