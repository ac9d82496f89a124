"""The market catalog: machine configurations with public hourly prices.

The embedded catalog (``data/catalog.csv``) is built by ``tools/build_catalog.py`` from
the shared, sourced ``offers.csv``; GPU spellings are already canonical there. A user
catalog (``--catalog FILE.csv`` or ``NODUS_CATALOG``) has the SPEC section 4 columns and
is canonicalized on load, with every bad row reported by line.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from nodus_cli import gpus
from nodus_cli.problems import NodusError

REQUIRED_COLUMNS = (
    "supplier",
    "machine_id",
    "gpu",
    "gpu_count",
    "gpu_memory_gb",
    "vcpus",
    "memory_gb",
    "region",
    "price_per_hour",
    "spot_price_per_hour",
    "arch",
)


@dataclass(frozen=True, slots=True)
class Offer:
    """One machine configuration: everything the planner compares."""

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
            "vcpus": self.vcpus,
            "memory_gb": self.memory_gb,
            "disk_gb": self.disk_gb,
            "arch": self.arch,
            "price_per_hour": self.price_per_hour,
            "spot_price_per_hour": self.spot_price_per_hour,
        }


@dataclass(frozen=True, slots=True)
class Catalog:
    offers: tuple[Offer, ...]
    path: str
    meta: dict[str, Any]


class CatalogError(NodusError):
    pass


def embedded_path() -> Path:
    return Path(str(resources.files("nodus_cli").joinpath("data/catalog.csv")))


@cache
def embedded() -> Catalog:
    meta_text = resources.files("nodus_cli").joinpath("data/catalog_meta.json").read_text("utf-8")
    path = embedded_path()
    offers = _read_embedded(path)
    return Catalog(offers, str(path), json.loads(meta_text))


def load(path: str | None = None) -> Catalog:
    """The catalog in use: ``path``, else ``NODUS_CATALOG``, else the embedded one."""
    chosen = path or os.environ.get("NODUS_CATALOG") or None
    if chosen is None:
        return embedded()
    return load_user_catalog(Path(chosen))


def _read_embedded(path: Path) -> tuple[Offer, ...]:
    offers = []
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            spot = row["spot_price_per_hour"]
            disk = row.get("disk_gb") or ""
            offers.append(
                Offer(
                    supplier=row["supplier"],
                    machine_id=row["machine_id"],
                    region=row["region"],
                    gpu=row["gpu"] or None,
                    gpu_count=int(row["gpu_count"] or 0),
                    gpu_memory_gb=float(row["gpu_memory_gb"] or 0),
                    vcpus=float(row["vcpus"] or 0),
                    memory_gb=float(row["memory_gb"] or 0),
                    disk_gb=float(disk) if disk else None,
                    arch=row["arch"] or "x86_64",
                    price_per_hour=float(row["price_per_hour"]),
                    spot_price_per_hour=float(spot) if spot else None,
                )
            )
    return tuple(offers)


def load_user_catalog(path: Path) -> Catalog:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise CatalogError(
            f"{path}: cannot read the catalog: {exc.strerror or exc}",
            hint="check the path given to --catalog or NODUS_CATALOG",
        ) from None
    problems: list[str] = []
    offers: list[Offer] = []
    with handle:
        try:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise CatalogError(
                    f"{path}:1: the catalog lacks the column(s) {', '.join(missing)}",
                    hint="columns: " + ",".join(REQUIRED_COLUMNS),
                )
            for row in reader:
                line = reader.line_num
                try:
                    offers.append(_parse_row(row))
                except ValueError as exc:
                    problems.append(f"{path}:{line}: {exc}")
        except (UnicodeDecodeError, csv.Error) as exc:
            raise CatalogError(f"{path}: not a readable CSV file: {exc}") from None
    if problems:
        shown = "\n".join(problems[:20])
        more = f"\n... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise CatalogError(f"the catalog has {len(problems)} bad row(s):\n{shown}{more}")
    meta = {"built_from": str(path), "rows": len(offers), "sources": [], "user_catalog": True}
    return Catalog(tuple(offers), str(path), meta)


def _number(row: dict[str, str], column: str, required: bool = True) -> float | None:
    text = (row.get(column) or "").strip()
    if not text:
        if required:
            raise ValueError(f"{column} is empty")
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column} is not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{column} must be a finite number >= 0, not {text!r}")
    return value


def _parse_row(row: dict[str, str]) -> Offer:
    table = gpus.table()
    supplier = (row.get("supplier") or "").strip()
    machine = (row.get("machine_id") or "").strip()
    region = (row.get("region") or "").strip()
    if not supplier or not machine:
        raise ValueError("supplier and machine_id must not be empty")
    spelled = (row.get("gpu") or "").strip()
    count = int(_number(row, "gpu_count", required=False) or 0)
    family_name: str | None = None
    memory = _number(row, "gpu_memory_gb", required=False)
    if spelled:
        resolved = table.resolve_supplier_spelling(spelled)
        if resolved is None:
            close = table.suggestions(spelled)
            hint = f" (closest: {', '.join(close)})" if close else ""
            raise ValueError(f"unknown GPU {spelled!r}{hint}")
        family, implied = resolved
        family_name = family.name
        memory = family.nominal_memory(implied if implied is not None else memory)
        if count <= 0:
            raise ValueError(f"gpu_count must be at least 1 for GPU {spelled!r}")
    price = _number(row, "price_per_hour")
    assert price is not None
    arch = (row.get("arch") or "x86_64").strip()
    if arch not in ("x86_64", "arm64"):
        raise ValueError(f'arch must be "x86_64" or "arm64", not {arch!r}')
    return Offer(
        supplier=supplier,
        machine_id=machine,
        region=region,
        gpu=family_name,
        gpu_count=count if family_name else 0,
        gpu_memory_gb=memory or 0.0,
        vcpus=_number(row, "vcpus", required=False) or 0.0,
        memory_gb=_number(row, "memory_gb", required=False) or 0.0,
        disk_gb=_number(row, "disk_gb", required=False),
        arch=arch,
        price_per_hour=price,
        spot_price_per_hour=_number(row, "spot_price_per_hour", required=False),
    )


def find_machine(machine_id: str) -> Offer | None:
    """An offer of the embedded catalog by machine ID (case-insensitive), if any."""
    wanted = machine_id.strip().lower()
    for offer in embedded().offers:
        if offer.machine_id.lower() == wanted:
            return offer
    return None
