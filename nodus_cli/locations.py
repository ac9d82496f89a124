"""Locations: a workload's ``location`` matched against supplier regions.

A location matches a region by exact id, by prefix (``us-east`` matches ``us-east-1``,
``europe`` matches ``europe-west4``), or by area (``us``, ``eu``, ``asia`` ...), using
the region table in ``data/locations.json``: suppliers spell regions too differently
(``eu-west-1``, ``europe-west4``, ``FINLAND``) for prefixes alone.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def _table() -> dict[str, Any]:
    text = resources.files("nodus_cli").joinpath("data/locations.json").read_text("utf-8")
    raw: dict[str, Any] = json.loads(text)
    raw["_lower"] = {k.lower(): [a.lower() for a in v] for k, v in raw["regions"].items()}
    return raw


def areas() -> dict[str, str]:
    return dict(_table()["areas"])


def matches(location: str, region: str) -> bool:
    wanted = location.lower()
    have = region.lower()
    if have == wanted:
        return True
    if have.startswith(wanted) and (
        len(have) == len(wanted) or not have[len(wanted)].isalpha() or wanted.endswith("-")
    ):
        return True
    return wanted in _table()["_lower"].get(have, ())


def is_known(location: str, regions: set[str] | None = None) -> bool:
    """Whether a location can match anything: an area, or a region (or prefix) we know."""
    wanted = location.lower()
    table = _table()
    if wanted in {a.lower() for a in table["areas"]}:
        return True
    pool = regions if regions is not None else set(table["regions"])
    return any(matches(location, r) for r in pool)
