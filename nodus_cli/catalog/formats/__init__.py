"""Catalog file formats: the files ``nodus catalog update`` reads, behind one small interface.

A format is an object with the :class:`Format` interface, in a module of this package:

- ``name``: a short word (``nodus``, ``skypilot``), stored with each source;
- ``detect(header)``: whether a file whose first line has these cells is of this format;
- ``convert(text, supplier)``: the file as :class:`Converted`. Every data row of the file is
  accounted for: it is part of a configuration the file describes (a :class:`Listing`: a
  machine, and per offer the lines it comes from, its region and prices; text, not yet
  checked) or of a :class:`Refused` (its lines and the reason, a rule about those rows).
  ``supplier`` names the supplier for formats whose rows do not (SkyPilot's). Raises
  :class:`FormatError` when the text turns out not to be of the format after all.

:func:`check` then applies the row rules (:func:`nodus_cli.catalog.rows.check_offers`) to
every configuration: the same rules for every format, and for ``--catalog`` files. What
it gives back adds up: configurations fetched + refused = configurations the file
describes, and rows used + rows refused = the file's data rows.

:data:`MODULES` lists the format modules in the order :func:`detect` tries them. **A new
format** is one module here (``formats/mycloud.py`` with a ``FORMAT`` object) and one line
in :data:`MODULES`; nothing else changes (the update, the store and the reports take any
format).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from functools import cache
from itertools import repeat
from typing import Protocol

from nodus_cli.catalog import rows
from nodus_cli.catalog.rows import Cells
from nodus_cli.structs import field, struct

__all__ = [
    "MODULES",
    "NO_ON_DEMAND_PRICE",
    "Checked",
    "Converted",
    "Format",
    "FormatError",
    "Listing",
    "Refused",
    "check",
    "detect",
    "formats",
]

#: The reason a configuration with only a spot price is left out.
NO_ON_DEMAND_PRICE = "no on-demand price"


class FormatError(ValueError):
    """The text is not of the format after all (a header it cannot use, a broken CSV)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: The line at fault, when one is.
        self.line = line


@struct(frozen=True)
class Refused:
    """One configuration of a file left out, and why."""

    #: The line messages name (the configuration's first row).
    line: int
    reason: str
    #: The rows refused with it (empty when each of them is used by another configuration:
    #: GCP host rows are part of several).
    lines: tuple[int, ...] = ()
    #: True: a row breaks a rule of its cells (a bad row); False: left out by a rule of the
    #: format or the catalog (not a GPU, no on-demand price, ...).
    bad: bool = False


@struct
class Listing:
    """A machine a file describes, and the offers of it (its configurations): the
    columns of their rows, as text, not yet checked."""

    #: The :data:`~nodus_cli.catalog.rows.MACHINE_COLUMNS` cells.
    machine: tuple[str, ...]
    #: Per offer: the file lines it comes from, its region, price and spot price.
    lines: list[Sequence[int]] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)
    prices: list[str] = field(default_factory=list)
    spots: list[str] = field(default_factory=list)

    def add(self, lines: Sequence[int], region: str, price: str, spot: str) -> None:
        self.lines.append(lines)
        self.regions.append(region)
        self.prices.append(price)
        self.spots.append(spot)

    def rows(self) -> Iterator[tuple[Sequence[int], Cells]]:
        """Each offer as the lines it comes from and its 13 cells (rows.COLUMNS order)."""
        s, m, g, n, gm, v, mem, d, a, h = self.machine
        for lines, r, p, sp in zip(self.lines, self.regions, self.prices, self.spots, strict=True):
            yield lines, (s, m, r, g, n, gm, v, mem, d, a, p, sp, h)


@struct
class Converted:
    """A file as a format reads it, before the row rules."""

    format: str
    #: The layout in words, e.g. "skypilot (host and GPU rows priced together)".
    layout: str
    #: Data rows in the file (a record spread over several lines counts once).
    rows_read: int = 0
    listings: list[Listing] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    #: True when one row may be part of several configurations (rows are then counted by
    #: line).
    shared_rows: bool = False

    def add(self, cells: Sequence[str], lines: Sequence[int]) -> None:
        """One configuration, given as 13 cells (rows.COLUMNS order). Configurations of one
        machine given one after the other share a listing; the order is kept."""
        s, m, r, g, n, gm, v, mem, d, a, p, sp, h = cells
        machine = (s, m, g, n, gm, v, mem, d, a, h)
        listings = self.listings
        if not listings or listings[-1].machine != machine:
            listings.append(Listing(machine))
        listings[-1].add(lines, r, p, sp)

    def rows(self) -> Iterator[tuple[Sequence[int], Cells]]:
        """Every configuration as the lines it comes from and its 13 cells."""
        for listing in self.listings:
            yield from listing.rows()


@struct(frozen=True)
class Checked:
    """A file's configurations after the row rules, and everything left out."""

    format: str
    layout: str
    #: The configurations, as canonical text.
    rows: list[Cells]
    #: Every configuration left out: by the format, and by the row rules.
    refused: list[Refused]
    rows_read: int

    @property
    def rows_refused(self) -> int:
        return sum(len(r.lines) for r in self.refused)

    @property
    def rows_used(self) -> int:
        return self.rows_read - self.rows_refused

    @property
    def bad(self) -> list[Refused]:
        return [r for r in self.refused if r.bad]


class Format(Protocol):
    """What a catalog format provides (see the package docstring)."""

    @property
    def name(self) -> str: ...

    def detect(self, header: Sequence[str]) -> bool: ...

    def convert(self, text: str, supplier: str) -> Converted: ...


#: The format modules of this package, in the order :func:`detect` tries them; each has a
#: ``FORMAT``. Named, not imported: a format module imports this one for its types.
MODULES = (
    "nodus",
    "skypilot",
)


@cache
def formats() -> tuple[Format, ...]:
    """The formats of :data:`MODULES`, in that order."""
    found = []
    for name in MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        found.append(module.FORMAT)
    return tuple(found)


def detect(header: Sequence[str]) -> Format | None:
    """The format of a file whose first line has these cells, or None."""
    for candidate in formats():
        if candidate.detect(header):
            return candidate
    return None


def check(converted: Converted) -> Checked:
    """Every configuration of ``converted`` through the row rules: the rows they give, and
    the ones refused (with the line and the rule), added to those the format refused."""
    kept: list[Cells] = []
    failed: list[tuple[Sequence[int], str, bool]] = []
    shared = converted.shared_rows
    used: set[int] = set()
    for listing in converted.listings:
        found = rows.check_offers(listing.machine, listing.regions, listing.prices, listing.spots)
        if None in found or any(map(isinstance, found, repeat(ValueError))):
            for lines, row in zip(listing.lines, found, strict=True):
                if isinstance(row, ValueError):
                    failed.append((lines, str(row), True))
                elif row is None:
                    failed.append((lines, NO_ON_DEMAND_PRICE, False))
                else:
                    kept.append(row)
                    if shared:
                        used.update(lines)
            continue
        kept += found  # type: ignore[arg-type]  # every one a row
        if shared:
            for lines in listing.lines:
                used.update(lines)
    refused = list(converted.refused)
    for lines, reason, bad in failed:
        own = tuple(n for n in lines if n not in used)
        if shared:
            used.update(own)  # a row counts once, with the first rule that refused it
        refused.append(Refused(lines[0] if lines else 0, reason, own, bad))
    return Checked(converted.format, converted.layout, kept, refused, converted.rows_read)
