"""Reading a SkyPilot ``vms.csv``: its rows in groups, one per machine and region (or
zone), each with its on-demand price and lowest spot price.

Columns are found by name (:class:`Layout`). A file lists a region's zones one after the
other, and those rows differ only in their zone and prices. So each line is split once,
from the right, at its first price cell (``str.rsplit``, in a C loop over the lines), and
``itertools.groupby`` collects the rows of one group: no Python code runs per row, only
per group, and a group keeps only what it needs (not its rows); the text before the prices
(the head) is split into cells once per distinct head. That reads a 100,000-row file in a
small fraction of a second (``benchmarks/catalog_update.py``). A file whose quoting this
cannot follow (a quote after the head, a cell over two lines) is read by the csv module
instead, and grouped the same way (:func:`read`). The rows of one group seen twice (rows
out of order, zones priced differently, or AWS's p4de listed with two GpuInfo spellings)
are combined.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import compress, groupby, islice
from operator import add, eq, itemgetter, methodcaller, ne
from typing import Any

from nodus_cli.catalog.formats import FormatError
from nodus_cli.catalog.formats.skypilot.machines import MACHINE_COLUMNS, number
from nodus_cli.structs import field, struct

__all__ = [
    "KEY",
    "Layout",
    "Offers",
    "getter",
    "highest",
    "lowest",
    "read",
    "region_price",
    "region_spot",
]

#: The columns that identify one machine in one region (its zones collapse).
KEY = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Region")


def highest(texts: Iterable[str]) -> str:
    """The highest number among cells (empty ones aside), as its text; a cell that is not a
    number is given back instead, for the row rules to refuse; "" when all are empty."""
    best_text, best = "", -math.inf
    for text in texts:
        text = text.strip()
        if text:
            value = number(text)
            if value is None or value != value:
                return text
            if value > best:
                best_text, best = text, value
    return best_text


def lowest(texts: Iterable[str]) -> str:
    """The lowest number among cells, as :func:`highest` finds the highest."""
    best_text, best = "", math.inf
    for text in texts:
        text = text.strip()
        if text:
            value = number(text)
            if value is None or value != value:
                return text
            if value < best or not best_text:
                best_text, best = text, value
    return best_text


def region_price(texts: list[str]) -> str:
    """A region's on-demand price from its zones' cells: the highest (they are the same in
    every zone); 0 is no price; a cell that is not a number is kept for the row rules."""
    return highest(t for t in texts if number(t) != 0)


def region_spot(texts: list[str]) -> str:
    """A region's spot price: the lowest above 0 over the zones that have one (0 is no
    spot price; a cell that is not a number is kept for the row rules)."""
    return lowest(t for t in texts if _not_zero_or_less(t))


def _not_zero_or_less(text: str) -> bool:
    value = number(text)
    return value is None or value > 0


def _split(line: str) -> list[str]:
    """One record's cells (the csv module only when the quoting is more than one quoted
    cell)."""
    if '"' not in line:
        return line.split(",")
    parts = line.split('"')
    if (
        len(parts) == 3
        and (not parts[0] or parts[0][-1] == ",")
        and (not parts[2] or parts[2][0] == ",")
    ):
        before = parts[0].split(",")[:-1] if parts[0] else []
        after = parts[2][1:].split(",") if parts[2] else []
        return [*before, parts[1], *after]
    return next(csv.reader((line,)), [])


def getter(indices: list[int]) -> Callable[[Sequence[str]], object]:
    """What identifies a line among the cells at ``indices`` (comparable, nothing more)."""
    if not indices:
        return lambda cells: ()
    return itemgetter(*indices)


@struct(frozen=True)
class Layout:
    """Where a file's columns are, from its header."""

    col: dict[str, int]
    width: int
    #: The first of the cells that differ between the rows of one group (Price, SpotPrice
    #: and, unless each zone is a group of its own, AvailabilityZone): a line is split from
    #: the right there.
    first: int
    #: Where SpotPrice is in a line split from the right (``parts``; the price is in
    #: ``group_key``).
    spot: int
    has_spot: bool
    #: The cells of ``parts`` that identify the group along with the head (Region, ...),
    #: by name (a group's ``key``, in :class:`Offers`), and a getter of the head, those
    #: cells and the price: rows of one region whose prices differ make groups of their
    #: own, which :func:`_merged` combines, so reading a group takes no price work.
    right_key_names: tuple[str, ...]
    group_key: Callable[[Sequence[Any]], tuple[Any, ...]]
    #: The cells of ``parts`` that say what the machine is (GpuInfo when it comes late);
    #: None when the head holds all of them.
    machine_right: Callable[[Sequence[str]], object] | None
    #: The columns that say which group a row is in: KEY, and the zone when each zone
    #: is a group of its own.
    identity: tuple[str, ...] = ()

    @classmethod
    def of(cls, names: list[str], *, by_zone: bool = False) -> Layout:
        col = {n: i for i, n in enumerate(names)}
        width = len(names)
        ip = col["Price"]
        isp = col.get("SpotPrice", ip)
        varying = {ip, isp}
        if "AvailabilityZone" in col and not by_zone:  # a region's zones make one group
            varying.add(col["AvailabilityZone"])
        first = min(varying)
        right = [i for i in range(first, width) if i not in varying]
        machine = [col[c] - first + 1 for c in MACHINE_COLUMNS if col.get(c, -1) >= first]
        return cls(
            col,
            width,
            first,
            isp - first + 1,
            "SpotPrice" in col,
            tuple(names[i] for i in right),
            itemgetter(0, *(i - first + 1 for i in right), ip - first + 1),
            getter(machine) if machine else None,
            (*KEY, "AvailabilityZone") if by_zone and "AvailabilityZone" in col else KEY,
        )


@struct
class Offers:
    """The groups of one head (usually one machine): a group is the rows of one region
    (their zones), with the region's on-demand price and lowest spot price."""

    #: The first row, split as the reader splits it (``parts[0]`` is the head).
    parts: list[Any]
    #: While the file is read: each group's first line (or, from the csv module, its
    #: lines), its number of rows, its key cells and price (``group_key`` without the
    #: head), and its lowest spot price.
    groups: list[tuple[Any, int, tuple[Any, ...], str]] = field(default_factory=list)
    lines: list[Sequence[int]] = field(default_factory=list)
    #: Each group's key: its key cells (Region, ...) after the head, as a tuple.
    keys: list[tuple[Any, ...]] = field(default_factory=list)
    #: Each group's on-demand price ("": none) and lowest spot price above 0 ("": none).
    prices: list[str] = field(default_factory=list)
    spots: list[str] = field(default_factory=list)


def _gather(
    rows: Iterable[list[Any]], layout: Layout, numbered: bool, *, zero_is_none: bool = True
) -> tuple[dict[Any, Offers], set[Any]]:
    """The rows of a file, one group per run of rows with one key (head, key cells and
    price), each head's groups together.

    ``rows`` come split (``parts``): from the fast reader (``str.rsplit``), line after line,
    or, ``numbered``, from the csv module, each with its line number last. The grouping is
    ``itertools.groupby`` on the key cells, so the rows of a region's zones, which a file
    lists one after the other, cost no Python code of their own: only each group does, and
    as little as it can. What a group keeps is small (its first line, size, key and spot
    price; not its rows): keeping every row alive doubles the time to read a big file. A
    key seen again later in the file, or a region whose zones' prices differ, makes a
    second group, merged by :func:`_merged` (the second value: the heads that have one).
    Unless ``zero_is_none`` is False, a price or spot price of 0 is none (:func:`_checked`).
    """
    sp = layout.spot
    spot_of = itemgetter(sp)
    line_of = itemgetter(-1)
    machine_right = layout.machine_right
    has_spot = layout.has_spot
    by_head: dict[Any, Offers] = {}
    get = by_head.get
    number = 2  # the first data row's line (the header is line 1)
    for key, group in groupby(rows, key=layout.group_key):
        found = list(group)
        head = key[0] if machine_right is None else (key[0], machine_right(found[0]))
        offers = get(head)
        if offers is None:
            offers = by_head[head] = Offers(found[0])
        n = len(found)
        first: Any = list(map(line_of, found)) if numbered else number
        number += n
        if not has_spot:
            spot = ""
        else:
            try:  # the usual group: its spot prices all numbers, the lowest above 0
                spot = min(filter(None, map(spot_of, found)), key=float, default="")
                if zero_is_none and spot and not float(spot) > 0:
                    raise ValueError(spot)
            except ValueError:  # (a NaN is not above 0)
                spot = (
                    found[0][sp]
                    if n == 1
                    else _lowest_spot(list(map(spot_of, found)), zero_is_none)
                )
        offers.groups.append((first, n, key[1:], spot))
    repeated = set()
    for head, offers in by_head.items():
        _checked(offers, numbered, zero_is_none)
        if len(set(offers.keys)) != len(offers.keys):
            repeated.add(head)
    return by_head, repeated


def _lowest_spot(spots: list[str], zero_is_none: bool) -> str:
    """The lowest spot price of a region's zones (the cells as the file gives them): the
    lowest number, above 0 unless ``zero_is_none`` is False; a cell that is not a number
    is given back for the row rules to refuse (:func:`region_spot`)."""
    try:
        if "" in spots:
            spot = min(filter(None, spots), key=float, default="")
        else:
            spot = min(spots, key=float)
        if not zero_is_none or not spot or float(spot) > 0:
            return spot
    except ValueError:
        pass
    return region_spot(spots) if zero_is_none else lowest(spots)


def _checked(offers: Offers, numbered: bool, zero_is_none: bool = True) -> None:
    """The groups as columns (lines, keys, prices, spots), each group's price and spot
    price as :func:`region_price` and :func:`region_spot` give them (0 is no price): the
    usual case, every one a number above 0, checked column by column; the others one by
    one."""
    firsts, counts, tails, spots = zip(*offers.groups, strict=True)
    offers.groups = []
    if numbered:
        offers.lines = list(firsts)
    else:
        offers.lines = list(map(range, firsts, map(add, firsts, counts)))
    offers.keys = list(map(_BUT_LAST, tails))
    offers.prices = list(map(_LAST, tails))
    offers.spots = list(spots)
    if not zero_is_none:
        return
    try:  # ("" is no price: the same after region_price)
        values = list(map(float, filter(None, offers.prices)))
        found = list(map(float, filter(None, offers.spots)))
    except ValueError:
        values = found = []
    else:
        # Above 0 and finite (a NaN anywhere makes the sum NaN, which is not < inf).
        if (not values or (min(values) > 0 and sum(values) < math.inf)) and (
            not found or (min(found) > 0 and sum(found) < math.inf)
        ):
            return
    offers.prices = [region_price([p]) for p in offers.prices]
    offers.spots = [region_spot([p]) for p in offers.spots]


_BUT_LAST = itemgetter(slice(None, -1))
_LAST = itemgetter(-1)


def _fast_rows(lines: list[str], layout: Layout) -> Iterator[list[Any]]:
    """Every data line split from the right at ``layout.first`` (C loops only)."""
    end = len(lines) - 1 if lines[-1] == "" else len(lines)
    return map(methodcaller("rsplit", ",", layout.width - layout.first), islice(lines, 1, end))


def _slow_rows(text: str, layout: Layout) -> Iterator[list[Any]]:
    """Every record, read by the csv module, split like :func:`_fast_rows` (its head the
    tuple of its first cells) with the line it starts on last."""
    width, first = layout.width, layout.first
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        next(reader, None)
        start = reader.line_num + 1
        for cells in reader:
            if any(c.strip() for c in cells):
                if len(cells) != width:
                    cells = (cells + [""] * width)[:width]
                yield [tuple(cells[:first]), *cells[first:], start]
            start = reader.line_num + 1
    except csv.Error as exc:
        line = reader.line_num
        raise FormatError(f"not a readable CSV file at line {line}: {exc}", line=line) from None


def read(
    text: str, lines: list[str], layout: Layout, *, zero_is_none: bool = True
) -> tuple[dict[Any, Offers], dict[Any, list[str]]]:
    """The file's groups by head, and each head's cells: by the fast reader when every
    line is one record with no quote after its head (every quote of the file is in a
    head, and each head splits into ``layout.first`` cells), else by the csv module."""
    heads: dict[Any, list[str]] = {}
    try:
        by_head, repeated = _gather(
            _fast_rows(lines, layout), layout, False, zero_is_none=zero_is_none
        )
        quoted = 0  # the quote characters in the heads, over every row
        for head, offers in by_head.items():
            text_head = head if layout.machine_right is None else head[0]
            cells = _head_cells(text_head, layout.first)
            if cells is None:
                raise _Slow
            heads[text_head] = cells
            quoted += text_head.count('"') * sum(map(len, offers.lines))
        if quoted != text.count('"') - lines[0].count('"'):
            raise _Slow  # a quote after a head: its cells are not what rsplit gave
    except (_Slow, IndexError):  # IndexError: a line shorter than the header
        by_head, repeated = _gather(
            _slow_rows(text, layout), layout, True, zero_is_none=zero_is_none
        )
        heads = {}
        for head in by_head:
            text_head = head if layout.machine_right is None else head[0]
            heads[text_head] = list(text_head)
    return _merged(by_head, heads, layout, repeated, zero_is_none), heads


class _Slow(Exception):
    """The fast reader cannot read this file."""


def _head_cells(head: str, first: int) -> list[str] | None:
    """A head text split into its cells; None when it is not ``first`` cells (a quoted
    cell that goes on over the next line, or a comma in a quoted cell after the head)."""
    if head.count('"') % 2:
        return None
    try:
        found = _split(head)
    except csv.Error:
        return None
    return found if len(found) == first else None


def _merged(
    by_head: dict[Any, Offers],
    heads: dict[Any, list[str]],
    layout: Layout,
    repeated: set[Any],
    zero_is_none: bool = True,
) -> dict[Any, Offers]:
    """One :class:`Offers` per machine and one group per key: the groups of a key seen
    twice (rows out of order), and of heads that differ only in a cell that does not say
    which machine it is (AWS p4de's two GpuInfo spellings), combined. A combined group's
    price is the highest of its parts', its spot price the lowest: as over all its rows."""
    key_of = getter([layout.col[c] for c in layout.identity if layout.col[c] < layout.first])
    machines: dict[Any, list[tuple[Any, Offers]]] = {}
    for head, offers in by_head.items():
        text_head = head if layout.machine_right is None else head[0]
        machine = (key_of(heads[text_head]), head[1] if layout.machine_right else None)
        machines.setdefault(machine, []).append((head, offers))
    if not repeated and len(machines) == len(by_head):
        return by_head  # the usual case: nothing to combine
    merged: dict[Any, Offers] = {}
    for group in machines.values():
        head, first = group[0]
        if len(group) == 1:  # one head: only its repeated keys to combine, if any
            merged[head] = _combined(first, zero_is_none) if head in repeated else first
            continue
        into = merged[head] = Offers(first.parts)
        at: dict[object, int] = {}
        for _, offers in group:
            for lines, key, price, spot in zip(
                offers.lines, offers.keys, offers.prices, offers.spots, strict=True
            ):
                same = at.get(key)
                if same is None:
                    at[key] = len(into.keys)
                    into.lines.append(lines)
                    into.keys.append(key)
                    into.prices.append(price)
                    into.spots.append(spot)
                    continue
                _combine(into, same, lines, price, spot, zero_is_none)
    return merged


def _combined(offers: Offers, zero_is_none: bool) -> Offers:
    """``offers`` with each key's groups combined into its first (C loops find them: a
    big file may have a few in each of many machines)."""
    keys = offers.keys
    n = len(keys)
    # a key -> its first group
    first_of = dict(zip(reversed(keys), range(n - 1, -1, -1), strict=True))
    firsts = list(map(first_of.__getitem__, keys))
    later = list(compress(range(n), map(ne, firsts, range(n))))
    for i in later:
        _combine(
            offers, firsts[i], offers.lines[i], offers.prices[i], offers.spots[i], zero_is_none
        )
    kept = list(map(eq, firsts, range(n)))
    return Offers(
        offers.parts,
        lines=list(compress(offers.lines, kept)),
        keys=list(compress(keys, kept)),
        prices=list(compress(offers.prices, kept)),
        spots=list(compress(offers.spots, kept)),
    )


def _combine(
    into: Offers, at: int, lines: Sequence[int], price: str, spot: str, zero_is_none: bool
) -> None:
    """Group ``at`` of ``into`` with another group of its key (lines, price, spot)."""
    into.lines[at] = sorted([*into.lines[at], *lines])
    both = [into.prices[at], price]
    into.prices[at] = region_price(both) if zero_is_none else highest(both)
    both = [into.spots[at], spot]
    into.spots[at] = region_spot(both) if zero_is_none else lowest(both)
