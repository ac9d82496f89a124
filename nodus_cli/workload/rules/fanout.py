"""Fanning a stage out over inputs: ``[map]`` (``[stages.map]`` in a stage).

Contract: :func:`map_spec` returns the :class:`~nodus_cli.workload.model.MapSpec` of one
table: its inputs, from exactly one of ``items`` (a list of strings or integers) or
``over`` (a UTF-8 file, one input per line, read now: at most :data:`MAX_OVER_BYTES` and
:data:`~nodus_cli.workload.model.MAX_MAP_ITEMS` inputs), and ``parallel``, the most tasks at
once. Reading ``over`` here is deliberate: the number of tasks is part of the plan.
"""

from __future__ import annotations

import math
import os
import stat
from typing import Any

from nodus_cli.workload.lineindex import Key
from nodus_cli.workload.model import MAP_KEYS, MAX_MAP_ITEMS, MapSpec
from nodus_cli.workload.report import MAX_QUOTED, ProblemReport, clip, toml
from nodus_cli.workload.rules import keys
from nodus_cli.workload.rules.paths import host_path
from nodus_cli.workload.rules.values import MAX_NUMBER

__all__ = ["MAX_OVER_BYTES", "map_spec"]

#: A ``[map] over`` file is read when the workload is validated: at most this many bytes.
MAX_OVER_BYTES = 16 * 1024 * 1024

_SPLIT = "split the inputs over several workloads or runs"


def map_spec(report: ProblemReport, raw: Any, key: Key) -> MapSpec | None:
    table = "[stages.map]" if key[0] == "stages" else "[map]"
    if not isinstance(raw, dict):
        report.error(
            key,
            f'must be a table: write {table} with items = ["a", "b"] or over = "inputs.txt" '
            "below it",
        )
        return None
    keys.check(report, raw, key, MAP_KEYS, where="map")
    has_items, has_over = "items" in raw, "over" in raw
    if has_items and has_over:
        report.error(
            (*key, "over"),
            f"{table} has both items (line {report.line((*key, 'items'))}) and over: keep "
            "exactly one (items lists the inputs; over names a file of them, one per line)",
        )
    elif not has_items and not has_over:
        report.error(
            key,
            f'{table} needs its inputs: items = ["a", "b"] or over = "inputs.txt" (a file, '
            "one input per line)",
        )
    parallel = _parallel(report, raw["parallel"], (*key, "parallel")) if "parallel" in raw else 0
    items: list[str] | None = None
    over: str | None = None
    if has_items and not has_over:
        items = _map_items(report, raw["items"], (*key, "items"), table)
    elif has_over and not has_items:
        over_raw = raw["over"]
        items = _map_over(report, over_raw, (*key, "over"))
        over = over_raw if isinstance(over_raw, str) else None
    if items is None or parallel is None:
        return None
    return MapSpec(tuple(items), over, parallel or None)


def _map_items(report: ProblemReport, raw: Any, key: Key, table: str) -> list[str] | None:
    if not isinstance(raw, list):
        report.error(key, 'must be a list of strings, e.g. items = ["shard-0", "shard-1"]')
        return None
    if not raw:
        report.error(key, f"is empty: list at least one item, or remove {table}")
        return None
    if len(raw) > MAX_MAP_ITEMS:
        report.error(key, _too_many("has", len(raw)))
        return None
    items: list[str] = []
    ok = True
    for index, item in enumerate(raw):
        if isinstance(item, str):
            if item and "\x00" not in item:
                items.append(item)
                continue
            message = "is empty: remove it" if not item else "must not contain a NUL character"
        elif isinstance(item, int) and not isinstance(item, bool):
            items.append(str(item))
            continue
        elif report.full:  # only counted: skip building the message
            message = ""
        else:
            message = f"every item must be a string or an integer: write {toml(item, True)}"
        ok = False
        report.error((*key, index), message)
    return items if ok else None


def _map_over(report: ProblemReport, raw: Any, key: Key) -> list[str] | None:
    if not isinstance(raw, str) or not raw.strip():
        report.error(
            key,
            'must be a file path in quotes, e.g. over = "inputs.txt" (one input per line, '
            "relative to the workload file)",
        )
        return None
    path = host_path(report, raw, key)
    if path is None:
        return None
    named = f'"{clip(raw)}" ({clip(str(path), MAX_QUOTED)})'
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            report.error(key, f"{named} is not a file: over names a file with one input per line")
            return None
        if info.st_size > MAX_OVER_BYTES:
            report.error(
                key,
                f"{named} is {info.st_size:,} bytes; an over file holds at most 16 MiB: {_SPLIT}",
            )
            return None
        with open(path, "rb") as handle:
            data = handle.read(MAX_OVER_BYTES + 1)
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        report.error(
            key,
            f"cannot read {named}: {reason}; over names a file relative to the workload file",
        )
        return None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        report.error(key, f"{named} is not UTF-8 text (line {line}): save it as UTF-8")
        return None
    items: list[str] = []
    for number, line_text in enumerate(text.split("\n"), start=1):
        item = line_text.strip()
        if not item:
            continue
        if "\x00" in item:
            report.error(key, f"{named} has a NUL character on line {number}")
            return None
        items.append(item)
    if not items:
        report.error(key, f"{named} holds no items: every line is empty; write one input per line")
        return None
    if len(items) > MAX_MAP_ITEMS:
        report.error(key, _too_many(f"{named} holds", len(items)))
        return None
    return items


def _parallel(report: ProblemReport, raw: Any, key: Key) -> int | None:
    """``parallel``: an integer >= 1 (0 stands for "not set" in the return value)."""
    if isinstance(raw, bool):
        report.error(key, f"must be a whole number of tasks, at least 1, not {toml(raw)}")
        return None
    if isinstance(raw, str):
        digits = raw.strip()
        fix = f": write parallel = {digits}" if digits.isdigit() and len(digits) < 10 else ""
        report.error(key, f"must be a number without quotes{fix}")
        return None
    if isinstance(raw, float):
        if math.isfinite(raw) and raw.is_integer() and raw >= 1:
            report.error(key, f"must be an integer: write parallel = {int(raw)}")
        else:
            report.error(key, f"must be a whole number of tasks, at least 1, not {toml(raw)}")
        return None
    if not isinstance(raw, int):
        report.error(key, "must be a whole number of tasks, at least 1, e.g. parallel = 4")
        return None
    if raw < 1:
        report.error(
            key,
            f"must be at least 1, not {raw}: omit parallel to run as many tasks at once as "
            "capacity allows",
        )
        return None
    if raw >= MAX_NUMBER:
        report.error(
            key, "is too large: omit parallel to run as many tasks at once as capacity allows"
        )
        return None
    return raw


def _too_many(subject: str, count: int) -> str:
    """The error for more inputs than a ``[map]`` runs (``subject``: what holds them)."""
    return f"{subject} {count:,} items; a [map] runs at most {MAX_MAP_ITEMS:,}: {_SPLIT}"
