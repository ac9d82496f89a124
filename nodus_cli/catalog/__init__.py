"""The market catalog: machine configurations with public hourly prices.

Which catalog is in use, first match wins: ``--catalog FILE.csv``, ``NODUS_CATALOG``, the
catalog ``nodus catalog update`` stored under ``NODUS_HOME`` (:mod:`nodus_cli.catalog.store`),
the embedded one.

The embedded catalog (``data/catalog.csv``) is built by ``tools/build_catalog.py`` from the
sourced ``tools/catalog/offers.csv`` of the source repository; ``catalog_meta.json`` records
its sources (repository, path, commit), the date its prices are as of and a short name.
A user catalog has the SPEC section 4 columns and goes through the same :func:`parse_row`,
so supplier GPU spellings are canonicalized on load the way the embedded catalog was built,
and every bad row is reported with its line number.

GPU memory is the nominal memory of the model variant (an 80 GB A100 is 80, an AWS A10G
reported as 22.4 GB is 24), never a supplier's under-reported figure.

Rows without a GPU (``gpu`` empty, ``gpu_count`` 0) are CPU-only machines. A row's vCPU and
memory figures are either the machine's size or, for suppliers whose figures are a search
minimum (``HOST_SIZE_MINIMUM``, kept as data, or an explicit ``host_size = minimum``
column), a lower bound: such an offer meets a requirement at or below the figure, and its
real size above it is unknown (:attr:`Offer.size_is_minimum`).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, date, datetime
from functools import cache, lru_cache
from operator import attrgetter
from pathlib import Path
from typing import Any

from nodus_cli import data
from nodus_cli.errors import NodusError
from nodus_cli.hardware import gpus
from nodus_cli.text import plural

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
#: Columns of the embedded catalog file (the SPEC columns plus ``disk_gb`` and ``host_size``).
EMBEDDED_COLUMNS = (*REQUIRED_COLUMNS[:7], "disk_gb", *REQUIRED_COLUMNS[7:], "host_size")
#: Values of the optional ``host_size`` column: the vCPU and memory figures are the
#: machine's size, or only a minimum (empty: the supplier's rule below, else exact).
HOST_SIZE_EXACT = "exact"
HOST_SIZE_MINIMUM_VALUE = "minimum"
#: Suppliers whose vCPU and memory figures are a lower bound, not the machine's size, and
#: why. vast: every row of its catalog says 32 vCPU / 64 GB, the marketplace search
#: minimum SkyPilot queries with (the ``-32-65536`` in its machine IDs).
HOST_SIZE_MINIMUM: dict[str, str] = {
    "vast": "vast lists every machine at 32 vCPU / 64 GB, the minimum of its marketplace "
    "search, not the machine's size",
}

_DATA = data.FOLDER
_ARCH = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "x64": "x86_64",
    "arm64": "arm64",
    "aarch64": "arm64",
}
# vast merges variants in its accelerator name (RTX4070 is also the 4070 Ti SUPER); its
# machine_id carries the exact model: "2x-RTX_4070S_Ti-32-65536".
_VAST_MACHINE = re.compile(r"\d+x-(.+)-\d+-\d+")
# Per-GPU memory a machine ID states when the supplier's GPU column does not.
_MACHINE_MEMORY: tuple[tuple[str, re.Pattern[str], float | None], ...] = (
    # Azure NC*ads_H100_v5 carry the H100 NVL, 94 GB (Azure documentation).
    ("azure", re.compile(r"^Standard_NC\d+ad[a-z]*_H100_v5$"), 94.0),
    # primeintellect: "crusoecloud__8xA100_80GB__96__960".
    ("primeintellect", re.compile(r"x[A-Za-z0-9]+_(\d+)GB__"), None),
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


#: What kind of catalog is in use (``Catalog.kind``).
EMBEDDED = "embedded"
USER_FILE = "file"
UPDATED = "updated"


@dataclass(frozen=True, slots=True)
class Catalog:
    offers: tuple[Offer, ...]
    path: str
    meta: dict[str, Any]
    #: ``embedded``, ``file`` (``--catalog`` or ``NODUS_CATALOG``) or ``updated``
    #: (stored by ``nodus catalog update``).
    kind: str = EMBEDDED
    #: What chose it: ``--catalog``, ``NODUS_CATALOG``, ``nodus catalog update`` or ``default``.
    chosen_by: str = "default"

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
        if self.kind == EMBEDDED:
            return f"embedded catalog (prices as of {day})"
        if self.kind == UPDATED:
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


class CatalogError(NodusError):
    pass


# -- the embedded catalog ------------------------------------------------------------


def embedded_path() -> Path:
    return _DATA / "catalog.csv"


@cache
def embedded() -> Catalog:
    """The catalog that ships with nodus, read once per process."""
    path = embedded_path()
    try:
        offers = read_canonical(path)
        meta = json.loads((_DATA / "catalog_meta.json").read_text("utf-8"))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise CatalogError(
            f"the embedded catalog {path} cannot be read: {exc}",
            hint="reinstall nodus, or pass --catalog FILE.csv",
        ) from None
    return Catalog(offers, str(path), meta)


def read_canonical(path: Path) -> tuple[Offer, ...]:
    """A plain positional reader for files nodus wrote itself (the embedded catalog, an
    updated one): already canonical, so this skips the checks of :func:`parse_row`
    (start-up cost matters: `nodus plan` is interactive). Raises ValueError, KeyError,
    IndexError or OSError on a file it did not write."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = csv.reader(handle)
        header = next(rows)
        col = [header.index(c) for c in EMBEDDED_COLUMNS]
        s, m, g, n, gm, v, mem, d, r, p, sp, a, h = col
        return tuple(
            Offer(
                row[s],
                row[m],
                row[r],
                row[g] or None,
                int(row[n] or 0),
                float(row[gm] or 0),
                float(row[v] or 0),
                float(row[mem] or 0),
                float(row[d]) if row[d] else None,
                row[a] or "x86_64",
                float(row[p]),
                float(row[sp]) if row[sp] else None,
                row[h] == HOST_SIZE_MINIMUM_VALUE,
            )
            for row in rows
            if row
        )


def load(path: str | None = None) -> Catalog:
    """The catalog in use: ``path`` (``--catalog``), else ``NODUS_CATALOG``, else the one
    ``nodus catalog update`` stored under ``NODUS_HOME``, else the embedded one."""
    if path:
        return replace(load_user_catalog(Path(path)), chosen_by="--catalog")
    env = os.environ.get("NODUS_CATALOG")
    if env:
        return replace(load_user_catalog(Path(env)), chosen_by="NODUS_CATALOG")
    from nodus_cli.catalog.store import load_current

    stored = load_current()
    if stored is not None:
        return stored
    return embedded()


# -- user catalogs -------------------------------------------------------------------


def load_user_catalog(path: Path) -> Catalog:
    """A catalog file with the SPEC section 4 columns; every bad row is reported by line.

    Rows with no on-demand price (spot only) are skipped and counted in ``meta["dropped"]``;
    extra columns are ignored.
    """
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise CatalogError(
            f"{path}: cannot read the catalog: {exc.strerror or exc}",
            hint="check the path given to --catalog or NODUS_CATALOG",
        ) from None
    problems: list[str] = []
    offers: list[Offer] = []
    dropped = 0
    with handle:
        try:
            reader = csv.reader(handle)
            header = next(reader, None)
            names = [h.strip().lower() for h in header or []]
            missing = [c for c in REQUIRED_COLUMNS if c not in names]
            if missing:
                what = "is empty" if not names else f"lacks the column(s) {', '.join(missing)}"
                raise CatalogError(
                    f"{path}:1: the catalog {what}",
                    hint="the first line names the columns: " + ",".join(REQUIRED_COLUMNS),
                )
            for cells in reader:
                line = reader.line_num
                if not any(c.strip() for c in cells):
                    continue
                row = dict(zip(names, cells, strict=False))
                try:
                    offer = parse_row(row)
                except ValueError as exc:
                    problems.append(f"{path}:{line}: {exc}")
                    continue
                if offer is None:
                    dropped += 1
                else:
                    offers.append(offer)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise CatalogError(
                f"{path}: not a readable CSV file: {exc}",
                hint="columns: " + ",".join(REQUIRED_COLUMNS),
            ) from None
    if problems:
        shown = "\n".join(problems[:20])
        more = f"\n... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise CatalogError(
            f"the catalog {path} has {plural(len(problems), 'bad row')}:\n{shown}{more}",
            hint="fix or remove these rows (columns: " + ",".join(REQUIRED_COLUMNS) + ")",
        )
    try:
        modified = datetime.fromtimestamp(path.stat().st_mtime, UTC).date().isoformat()
    except OSError:
        modified = None
    meta: dict[str, Any] = {
        "name": path.name,
        "built_from": str(path),
        "built_at": modified,
        "prices_as_of": modified,
        "as_of_note": "the day the file was last modified",
        "rows": len(offers),
        "dropped": {"no on-demand price": dropped} if dropped else {},
        "sources": [],
        "user_catalog": True,
    }
    return Catalog(tuple(offers), str(path), meta, kind=USER_FILE, chosen_by="--catalog")


def _amount(text: str, column: str) -> float:
    """A non-empty cell as a finite number >= 0; ValueError naming the column otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column} is not a number: {text!r}") from None
    if not 0.0 <= value < math.inf:  # also false for nan
        raise ValueError(f"{column} must be a finite number >= 0, not {text!r}")
    return value


def _optional(text: str, column: str) -> float | None:
    text = text.strip()
    return _amount(text, column) if text else None


def canonical_gpu(
    supplier: str, machine_id: str, spelled: str, reported_gb: float | None
) -> tuple[gpus.GpuFamily, float] | None:
    """A supplier's GPU spelling as (family, nominal memory per GPU), or None if unknown.

    The memory is the variant the spelling or machine ID names (``A100-80GB``), else the
    variant nearest the supplier's figure (AWS's 22.4 GB A10G is the 24 GB model), else
    the smallest variant: never more than the machine is known to have.
    """
    table = gpus.table()
    hit = None
    if supplier == "vast":
        m = _VAST_MACHINE.fullmatch(machine_id)
        if m:
            hit = table.resolve_supplier_spelling(m.group(1))
    hit = hit or table.resolve_supplier_spelling(spelled)
    if hit is None:
        return None
    family, implied = hit
    if implied is not None:
        return family, family.nominal_memory(implied)
    figure = reported_gb or _machine_memory(supplier, machine_id)
    return family, family.nominal_memory(figure)


def _machine_memory(supplier: str, machine_id: str) -> float | None:
    for name, pattern, memory in _MACHINE_MEMORY:
        if supplier == name:
            m = pattern.search(machine_id)
            if m:
                return memory if memory is not None else float(m.group(1))
    return None


#: The values :func:`row_values` returns, in this order: the fields of :class:`Offer`.
OfferValues = tuple[
    str,
    str,
    str,
    str | None,
    int,
    float,
    float,
    float,
    float | None,
    str,
    float,
    float | None,
    bool,
]


_OFFER_VALUES = attrgetter(*(f.name for f in fields(Offer)))


def offer_values(offer: Offer) -> OfferValues:
    """An offer's fields, in order (``Offer(*offer_values(o)) == o``)."""
    values: OfferValues = _OFFER_VALUES(offer)
    return values


def parse_row(row: Mapping[str, str | None]) -> Offer | None:
    """One catalog row (column name -> cell) as an offer; None for a row with only a spot
    price. Raises ValueError with a message that names the column at fault."""
    values = mapping_values(row)
    return None if values is None else Offer(*values)


def mapping_values(row: Mapping[str, str | None]) -> OfferValues | None:
    """:func:`row_values` of a row given as column name -> cell."""
    return row_values(*row_arguments(row))


#: The parameters of :func:`row_values` and :func:`row_cells`, in order.
ROW_ARGUMENTS = (
    "supplier",
    "machine_id",
    "region",
    "gpu",
    "gpu_count",
    "gpu_memory_gb",
    "vcpus",
    "memory_gb",
    "price_per_hour",
    "spot_price_per_hour",
    "arch",
    "disk_gb",
    "host_size",
)


def row_arguments(row: Mapping[str, str | None]) -> list[str]:
    """A row given as column name -> cell, as the arguments of :func:`row_values` (a
    missing or empty column is "")."""
    g = row.get
    return [g(name) or "" for name in ROW_ARGUMENTS]


def row_values(
    supplier: str,
    machine_id: str,
    region: str,
    gpu: str,
    gpu_count: str,
    gpu_memory_gb: str,
    vcpus: str,
    memory_gb: str,
    price_per_hour: str,
    spot_price_per_hour: str,
    arch: str = "",
    disk_gb: str = "",
    host_size: str = "",
) -> OfferValues | None:
    """Every rule of a catalog row, on its cells (strings): the :class:`Offer` field values,
    or None for a row with only a spot price. ValueError names the column at fault.

    The rules that depend only on the machine (GPU spelling, counts, sizes, arch) are
    checked once per distinct machine description (:func:`_machine_values`, cached), so
    a catalog that lists one machine in many regions is validated at the cost of its prices.
    """
    supplier = supplier.strip()
    machine = machine_id.strip()
    if not supplier or not machine:
        raise ValueError("supplier and machine_id must not be empty")
    family, count, memory, cpus, host, disk, arch_name, minimum = _machine_values(
        supplier, machine, gpu, gpu_count, gpu_memory_gb, vcpus, memory_gb, disk_gb, arch, host_size
    )
    spot = _optional(spot_price_per_hour, "spot_price_per_hour")
    price_text = price_per_hour.strip()
    if not price_text:
        if spot is None:
            raise ValueError("price_per_hour is empty")
        return None  # spot only: nothing to rank by on-demand price
    price = _amount(price_text, "price_per_hour")
    return (
        supplier,
        machine,
        _region(region),
        family,
        count,
        memory,
        cpus,
        host,
        disk,
        arch_name,
        price,
        spot,
        minimum,
    )


#: The columns of a row as :func:`row_cells` gives it: the fields of :class:`Offer`, in
#: order (``host_size`` for ``size_is_minimum``). A catalog file in this order is read by
#: :func:`read_canonical` (which finds its columns by name).
CELL_COLUMNS = (
    "supplier",
    "machine_id",
    "region",
    "gpu",
    "gpu_count",
    "gpu_memory_gb",
    "vcpus",
    "memory_gb",
    "disk_gb",
    "arch",
    "price_per_hour",
    "spot_price_per_hour",
    "host_size",
)
#: A row as text, in ``CELL_COLUMNS`` order.
Cells = tuple[str, str, str, str, str, str, str, str, str, str, str, str, str]


def row_cells(
    supplier: str,
    machine_id: str,
    region: str,
    gpu: str,
    gpu_count: str,
    gpu_memory_gb: str,
    vcpus: str,
    memory_gb: str,
    price_per_hour: str,
    spot_price_per_hour: str,
    arch: str = "",
    disk_gb: str = "",
    host_size: str = "",
) -> Cells | None:
    """:func:`row_values`, the same rules, with the row given back as canonical text (GPU
    family, nominal memory, arch, host size) for a catalog file: what ``nodus catalog
    update`` stores, without making an :class:`Offer` of every row."""
    supplier = supplier.strip()
    machine = machine_id.strip()
    if not supplier or not machine:
        raise ValueError("supplier and machine_id must not be empty")
    m = _machine_cells(
        supplier, machine, gpu, gpu_count, gpu_memory_gb, vcpus, memory_gb, disk_gb, arch, host_size
    )
    spot = spot_price_per_hour.strip()
    if spot:
        _amount(spot, "spot_price_per_hour")
    price = price_per_hour.strip()
    if not price:
        if not spot:
            raise ValueError("price_per_hour is empty")
        return None  # spot only: nothing to rank by on-demand price
    _amount(price, "price_per_hour")
    return (
        supplier,
        machine,
        _region(region),
        m[0],
        m[1],
        m[2],
        m[3],
        m[4],
        m[5],
        m[6],
        price,
        spot,
        m[7],
    )


def _region(text: str) -> str:
    """A region without empty parts: vast.ai's without a state is ", US, NA" in SkyPilot's."""
    return ", ".join(part.strip() for part in text.split(",") if part.strip())


def offer_from_cells(cells: Sequence[str]) -> Offer:
    """The offer of a row :func:`row_cells` gave (no checks: it was checked then)."""
    s, m, r, g, n, gm, v, mem, d, a, p, sp, h = cells
    return Offer(
        s,
        m,
        r,
        g or None,
        int(n or 0),
        float(gm or 0),
        float(v or 0),
        float(mem or 0),
        float(d) if d else None,
        a,
        float(p),
        float(sp) if sp else None,
        h == HOST_SIZE_MINIMUM_VALUE,
    )


@lru_cache(maxsize=65536)
def _machine_cells(
    supplier: str,
    machine: str,
    gpu: str,
    gpu_count: str,
    gpu_memory_gb: str,
    vcpus: str,
    memory_gb: str,
    disk_gb: str,
    arch: str,
    host_size: str,
) -> tuple[str, str, str, str, str, str, str, str]:
    family, count, memory, cpus, host, disk, arch_name, minimum = _machine_values(
        supplier, machine, gpu, gpu_count, gpu_memory_gb, vcpus, memory_gb, disk_gb, arch, host_size
    )
    return (
        family or "",
        str(count),
        _text(memory),
        _text(cpus),
        _text(host),
        "" if disk is None else _text(disk),
        arch_name,
        HOST_SIZE_MINIMUM_VALUE if minimum else "",
    )


def _text(x: float) -> str:
    return str(int(x)) if x.is_integer() else repr(x)


@lru_cache(maxsize=65536)
def _machine_values(
    supplier: str,
    machine: str,
    gpu: str,
    gpu_count: str,
    gpu_memory_gb: str,
    vcpus: str,
    memory_gb: str,
    disk_gb: str,
    arch: str,
    host_size: str,
) -> tuple[str | None, int, float, float, float, float | None, str, bool]:
    """The rules of a row that depend only on the machine, not on its region or price."""
    spelled = gpu.strip()
    count_value = _optional(gpu_count, "gpu_count") or 0.0
    if not count_value.is_integer():
        raise ValueError(f"gpu_count must be a whole number, not {gpu_count!r}")
    count = int(count_value)
    reported = _optional(gpu_memory_gb, "gpu_memory_gb")
    family_name: str | None = None
    memory = 0.0
    if spelled:
        resolved = canonical_gpu(supplier, machine, spelled, reported)
        if resolved is None:
            close = gpus.table().suggestions(spelled)
            hint = f" (closest: {', '.join(close)})" if close else ""
            raise ValueError(f"unknown GPU {spelled!r}{hint}")
        family, memory = resolved
        family_name = family.name
        if count <= 0:
            raise ValueError(f"gpu_count must be at least 1 for GPU {spelled!r}")
    elif count > 0:
        raise ValueError(f"gpu_count is {count} but the gpu column is empty")
    arch_text = arch.strip()
    arch_name = _ARCH.get(arch_text.lower() or "x86_64")
    if arch_name is None:
        raise ValueError(f'arch must be "x86_64" or "arm64", not {arch_text!r}')
    size_text = host_size.strip().lower()
    if not size_text:
        minimum = supplier in HOST_SIZE_MINIMUM
    elif size_text in (HOST_SIZE_EXACT, HOST_SIZE_MINIMUM_VALUE):
        minimum = size_text == HOST_SIZE_MINIMUM_VALUE
    else:
        raise ValueError(
            f'host_size must be "{HOST_SIZE_EXACT}", "{HOST_SIZE_MINIMUM_VALUE}" or empty, '
            f"not {host_size!r}"
        )
    return (
        family_name,
        count,
        memory,
        _optional(vcpus, "vcpus") or 0.0,
        _optional(memory_gb, "memory_gb") or 0.0,
        _optional(disk_gb, "disk_gb"),
        arch_name,
        minimum,
    )


# -- machine IDs ---------------------------------------------------------------------


@cache
def _machines() -> dict[str, tuple[Offer, ...]]:
    """Embedded catalog offers by lower-case machine ID, one per distinct GPU set-up."""
    found: dict[str, dict[tuple[Any, ...], Offer]] = {}
    for offer in embedded().offers:
        setups = found.setdefault(offer.machine_id.lower(), {})
        key = (offer.supplier, offer.gpu, offer.gpu_count, offer.gpu_memory_gb)
        setups.setdefault(key, offer)
    return {k: tuple(v.values()) for k, v in found.items()}


def machine_configurations(machine_id: str) -> tuple[Offer, ...]:
    """The GPU set-ups a machine ID has in the embedded catalog (several for GCP's n1
    types, which take different attached GPUs); empty when unknown."""
    return _machines().get(machine_id.strip().lower(), ())


def find_machine(machine_id: str) -> Offer | None:
    """The offer of a machine ID (case-insensitive) when it has one GPU set-up, else None."""
    setups = machine_configurations(machine_id)
    return setups[0] if len(setups) == 1 else None


def describe_machine(machine_id: str) -> str | None:
    """For a machine ID written where a GPU model belongs: what it carries and how to
    write that (None when the catalog does not know the ID)."""
    setups = [o for o in machine_configurations(machine_id) if o.gpu is not None]
    if not setups:
        return None
    first = setups[0]
    if len(setups) == 1:
        family = gpus.table().get(first.gpu or "")
        memory = f", peak_memory_gb = {first.gpu_memory_gb:g}" if len(family.memory_gb) > 1 else ""
        return (
            f'"{machine_id}" is a machine ID ({first.supplier}), not a GPU model; it carries '
            f"{first.gpu_count}× {first.gpu} ({first.gpu_memory_gb:g} GB each): write "
            f'gpu = "{first.gpu}", gpu_count = {first.gpu_count}{memory}'
        )
    carried = ", ".join(
        f"{o.gpu_count}× {o.gpu} ({o.gpu_memory_gb:g} GB)"
        for o in sorted(setups, key=lambda o: (o.gpu or "", o.gpu_count))
    )
    return (
        f'"{machine_id}" is a machine ID ({first.supplier}), not a GPU model; it comes with '
        f'different GPUs attached: {carried}. Write the model and count, e.g. gpu = "{first.gpu}", '
        f"gpu_count = {first.gpu_count}"
    )
