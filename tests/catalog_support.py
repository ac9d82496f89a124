"""Catalog files as tests write them: the columns of a ``--catalog`` file (SPEC section 4)
and a file of rows under them.

    from catalog_support import HEADER, OFFERS, load, write_catalog
"""

from __future__ import annotations

from pathlib import Path

from paths import REPO

from nodus_cli import catalog
from nodus_cli.catalog import Offer

__all__ = ["HEADER", "OFFERS", "load", "write_catalog"]

#: The sourced data the embedded catalog is built from (provenance: SOURCES.md beside it).
OFFERS = REPO / "tools" / "catalog" / "offers.csv"
#: The header line of a ``--catalog`` file with every column nodus reads but disk_gb.
HEADER = (
    "supplier,machine_id,gpu,gpu_count,gpu_memory_gb,vcpus,memory_gb,region,"
    "price_per_hour,spot_price_per_hour,arch\n"
)


def write_catalog(tmp_path: Path, rows: str, header: str = HEADER, name: str = "c.csv") -> Path:
    path = tmp_path / name
    path.write_text(header + rows, encoding="utf-8")
    return path


def load(tmp_path: Path, rows: str, header: str = HEADER) -> tuple[Offer, ...]:
    return catalog.load_user_catalog(write_catalog(tmp_path, rows, header)).offers
