"""The data tables nodus ships: GPU families (``gpus.json``), CUDA compatibility
(``cuda.json``), locations (``locations.json``) and the embedded catalog
(``catalog.csv`` with ``catalog_meta.json``: its sources and date).

They are data, not code: ``tools/build_catalog.py`` rebuilds the catalog and the GPU
names from the public sources it records. Read a table by its path (:func:`path`):
importing ``importlib.resources`` would be part of every start (benchmarks/README.md).
"""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """Where the shipped table ``name`` (``"gpus.json"``) is."""
    return FOLDER / name
