"""Locations: a workload's ``location`` matched against supplier regions.

A location matches a region in three ways (``data/locations.json`` holds the tables):

- the exact region id, case-insensitively (``us-east-1``, ``FIN-01``);
- a prefix of the id that ends at a boundary: ``us-east`` matches ``us-east-1`` and
  GCP's ``us-east1``, ``europe-west1`` matches ``europe-west1-b`` but not
  ``europe-west10``;
- an area (``us``, ``ca``, ``na``, ``sa``, ``eu``, ``asia``, ``me``, ``oceania``, ``af``,
  or an alias such as ``europe``): suppliers spell regions too differently
  (``eu-west-1``, ``westeurope``, ``FINLAND``, ``Texas, US, NA``) for prefixes alone, so
  every region the catalog uses is listed with its areas. A region missing from the
  table (a user catalog) gets its areas from the start of its id (``europe-``, ``ap-``
  ...) or from a ``Place, CC, CONTINENT`` spelling.
"""

from __future__ import annotations

import json
import re
from functools import cache, lru_cache

from nodus_cli import data
from nodus_cli.structs import struct

_DATA = data.path("locations.json")
_CONTINENT_SUFFIX = re.compile(r",\s*([A-Za-z]{2})\s*,\s*([A-Za-z]{2})\s*$")


@struct(frozen=True)
class _Table:
    """The location names (areas, aliases, countries, regions), loaded once."""

    areas: dict[str, str]
    aliases: dict[str, str]
    prefixes: tuple[tuple[str, frozenset[str]], ...]
    continents: dict[str, frozenset[str]]
    countries: dict[str, frozenset[str]]
    regions: dict[str, frozenset[str]]


@cache
def _table() -> _Table:
    raw = json.loads(_DATA.read_text("utf-8"))
    suffixes = raw.get("suffixes", {})
    return _Table(
        areas={k.lower(): v for k, v in raw["areas"].items()},
        aliases={k.lower(): v.lower() for k, v in raw.get("aliases", {}).items()},
        # Longest prefix first, so "europe-" wins over "eu".
        prefixes=tuple(
            sorted(
                ((k.lower(), frozenset(a.lower() for a in v)) for k, v in raw["prefixes"].items()),
                key=lambda kv: -len(kv[0]),
            )
        ),
        continents={
            k.upper(): frozenset(a.lower() for a in v)
            for k, v in suffixes.get("continents", {}).items()
        },
        countries={
            k.upper(): frozenset(a.lower() for a in v)
            for k, v in suffixes.get("countries", {}).items()
        },
        regions={k.lower(): frozenset(a.lower() for a in v) for k, v in raw["regions"].items()},
    )


def areas() -> dict[str, str]:
    """Area code -> description (``eu`` -> ``Europe``)."""
    return dict(_table().areas)


def area(location: str) -> str | None:
    """The area code a location names (``EU``, ``europe`` -> ``eu``), or None."""
    wanted = location.strip().lower()
    table = _table()
    if wanted in table.areas:
        return wanted
    return table.aliases.get(wanted)


@lru_cache(maxsize=8192)
def areas_of(region: str) -> frozenset[str]:
    """The areas a region lies in: from the table, else from how its id is spelled."""
    table = _table()
    have = region.strip().lower()
    known = table.regions.get(have)
    if known is not None:
        return known
    found: set[str] = set()
    m = _CONTINENT_SUFFIX.search(region)
    if m:
        found |= table.continents.get(m.group(2).upper(), frozenset())
        found |= table.countries.get(m.group(1).upper(), frozenset())
    for prefix, where in table.prefixes:
        if have.startswith(prefix):
            found |= where
            break
    return frozenset(found)


def _prefix_of(wanted: str, have: str) -> bool:
    """``wanted`` is a prefix of ``have`` that ends at a boundary (no ``us-east-1`` in
    ``us-east-10``, no ``eu`` in ``euro``; ``us-east`` in ``us-east1`` is fine)."""
    if not have.startswith(wanted) or len(have) == len(wanted):
        return len(have) == len(wanted) and have == wanted
    last, nxt = wanted[-1], have[len(wanted)]
    if not last.isalnum() or not nxt.isalnum():
        return True
    return last.isdigit() != nxt.isdigit()


@lru_cache(maxsize=8192)
def matches(location: str, region: str) -> bool:
    """Whether ``region`` lies in ``location`` (a region id, a prefix of one, or an area)."""
    wanted = location.strip().lower()
    have = region.strip().lower()
    if not wanted:
        return False
    if have == wanted or _prefix_of(wanted, have):
        return True
    code = area(wanted)
    return code is not None and code in areas_of(region)


def is_known(location: str, regions: set[str] | None = None) -> bool:
    """Whether a location can match anything: an area, or a region (or prefix) we know."""
    if area(location) is not None:
        return True
    pool = regions if regions is not None else set(_table().regions)
    return any(matches(location, r) for r in pool)
