"""What a catalog is: its offers (machine configurations with hourly prices) and where it
came from.

Plain values only: nothing here reads a file or knows which catalog is in use
(:mod:`nodus_cli.catalog.selection` does), so every other module of the package can
import this one.

GPU memory is the nominal memory of the model variant (an 80 GB A100 is 80, an AWS A10G
reported as 22.4 GB is 24), never a supplier's under-reported figure. An offer without a
GPU (``gpu`` None, ``gpu_count`` 0) is a CPU-only machine. Its vCPU and memory figures
are either the machine's size or a lower bound (:attr:`Offer.size_is_minimum`): such an
offer meets a requirement at or below the figure, and its real size above it is unknown.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

from nodus_cli.errors import NodusError
from nodus_cli.structs import struct

__all__ = [
    "EMBEDDED",
    "HOST_SIZE_EXACT",
    "HOST_SIZE_MINIMUM_VALUE",
    "UPDATED",
    "USER_FILE",
    "Catalog",
    "CatalogError",
    "CatalogKind",
    "Offer",
    "Origin",
    "whole",
]

#: Values of the ``host_size`` column: the vCPU and memory figures are the machine's size,
#: or only a minimum.
HOST_SIZE_EXACT = "exact"
HOST_SIZE_MINIMUM_VALUE = "minimum"


class CatalogError(NodusError):
    """A catalog that cannot be read or used (the root of the catalog's own errors)."""


# Stays a NamedTuple, not a struct: a hot path (a catalog builds thousands at every plan).
class Offer(NamedTuple):
    """One machine configuration: everything the planner compares.

    A named tuple, not a struct: a catalog builds thousands of them at every plan, and a
    tuple is built in one step where a frozen class sets its 13 fields one by one
    (benchmarks/README.md, "Figures behind choices in the code").
    """

    supplier: str
    machine_id: str
    region: str
    gpu: str | None
    gpu_count: int
    gpu_memory_gb: float
    vcpus: float
    memory_gb: float
    disk_gb: float | None
    arch: str
    price_per_hour: float
    spot_price_per_hour: float | None = None
    #: True when ``vcpus`` and ``memory_gb`` are a lower bound (the real size is unknown).
    size_is_minimum: bool = False

    @property
    def price_per_gpu_hour(self) -> float | None:
        return self.price_per_hour / self.gpu_count if self.gpu_count else None

    def as_json(self) -> dict[str, Any]:
        return {
            "supplier": self.supplier,
            "machine_id": self.machine_id,
            "region": self.region,
            "gpu": self.gpu,
            "gpu_count": self.gpu_count,
            "gpu_memory_gb": self.gpu_memory_gb,
            "vcpus": whole(self.vcpus),
            "memory_gb": self.memory_gb,
            "disk_gb": self.disk_gb,
            "arch": self.arch,
            "price_per_hour": self.price_per_hour,
            "price_per_gpu_hour": (
                round(self.price_per_hour / self.gpu_count, 6) if self.gpu_count else None
            ),
            "spot_price_per_hour": self.spot_price_per_hour,
            "host_size": HOST_SIZE_MINIMUM_VALUE if self.size_is_minimum else HOST_SIZE_EXACT,
        }


def whole(value: float) -> float | int:
    """192.0 -> 192 (vCPU counts read better as integers); 0.5 stays 0.5."""
    return int(value) if float(value).is_integer() else value


class CatalogKind(StrEnum):
    """What kind of catalog is in use (``Catalog.kind``)."""

    EMBEDDED = "embedded"
    #: ``--catalog FILE.csv`` or ``NODUS_CATALOG``.
    USER_FILE = "file"
    #: Stored by ``nodus catalog update``.
    UPDATED = "updated"


EMBEDDED = CatalogKind.EMBEDDED
USER_FILE = CatalogKind.USER_FILE
UPDATED = CatalogKind.UPDATED


@struct(frozen=True)
class Origin:
    """Where one supplier's offers in a catalog come from."""

    supplier: str
    rows: int
    #: The source's name (``nodus catalog update``), ``embedded`` or the file's name.
    source: str
    #: The source's URL or file, the embedded data's ``repo@commit path``, or a file's path.
    where: str

    def as_json(self) -> dict[str, Any]:
        return {
            "supplier": self.supplier,
            "rows": self.rows,
            "source": self.source,
            "where": self.where,
        }


@struct(frozen=True)
class Catalog:
    """The offers in use, where they come from and what chose them."""

    offers: tuple[Offer, ...]
    path: str
    meta: dict[str, Any]
    kind: CatalogKind = CatalogKind.EMBEDDED
    #: What chose it: ``--catalog``, ``NODUS_CATALOG``, ``nodus catalog update`` or ``default``.
    chosen_by: str = "default"
    #: Per supplier (in name order), where its offers come from.
    origins: tuple[Origin, ...] = ()

    @property
    def as_of(self) -> date | None:
        """The date the prices are as of (for a file: the day it was last modified)."""
        text = self.meta.get("prices_as_of")
        if not isinstance(text, str):
            return None
        try:
            return date.fromisoformat(text[:10])
        except ValueError:
            return None

    @property
    def checked_at(self) -> datetime | None:
        """When the prices were last known current: the oldest check of an updated catalog's
        sources; for the others the start of their as-of day (UTC)."""
        text = self.meta.get("checked_at")
        if isinstance(text, str):
            try:
                moment = datetime.fromisoformat(text)
            except ValueError:
                moment = None
            if moment is not None:
                return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        day = self.as_of
        return datetime(day.year, day.month, day.day, tzinfo=UTC) if day else None

    def age_days(self, now: datetime | None = None) -> float | None:
        moment = self.checked_at
        if moment is None:
            return None
        return ((now or datetime.now(UTC)) - moment).total_seconds() / 86400.0

    @property
    def label(self) -> str:
        """A short description for plan headers: what it is and the date of its prices."""
        day = self.meta.get("prices_as_of") or "an unknown date"
        if self.kind == CatalogKind.EMBEDDED:
            return f"embedded catalog (prices as of {day})"
        if self.kind == CatalogKind.UPDATED:
            n = len(self.meta.get("sources") or [])
            return (
                f"updated catalog, {n} source{'' if n == 1 else 's'} "
                f"(prices fetched {str(self.meta.get('checked_at') or day)[:10]})"
            )
        return f"user catalog {Path(self.path).name} (file of {day})"

    @property
    def name(self) -> str:
        """The catalog's short display name."""
        return str(self.meta.get("name") or Path(self.path).name)
