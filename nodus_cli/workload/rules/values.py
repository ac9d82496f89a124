"""The rules every key's value shares: a string, an image reference, a quantity.

Contract: each function reads one key of a table, reports what is wrong at that key, and
returns the normalized value, or None when the key is absent or wrong (a wrong value is
never replaced by a guess, so a report shows each mistake once).
"""

from __future__ import annotations

import math
import re
from typing import Any

from nodus_cli.workload.duration import DURATION_HINT, parse_duration
from nodus_cli.workload.hints import unquote_fix
from nodus_cli.workload.lineindex import Key
from nodus_cli.workload.model import DEFAULT_PRIORITY, PRIORITY_RANGE
from nodus_cli.workload.report import ProblemReport, clip, toml

__all__ = [
    "MAX_NUMBER",
    "NUL_CHARACTER",
    "duration",
    "image",
    "number",
    "positive",
    "priority",
    "quantity",
    "string",
]

#: The error for a string with a NUL character (no process argument or path can hold one).
NUL_CHARACTER = "must not contain a NUL character (\\u0000)"
#: Integers from here on are not quantities (TOML's own limit is 2**63 - 1).
MAX_NUMBER = 2**63

_WHITESPACE = re.compile(r"\s")


def string(report: ProblemReport, table: dict[str, Any], key: Key) -> str | None:
    """``key[-1]`` of ``table``: a non-empty string without NUL."""
    name = key[-1]
    if name not in table:
        return None
    raw = table[name]
    if not isinstance(raw, str):
        report.error(key, f'must be a string in quotes, e.g. {name} = "..."')
        return None
    if not raw.strip():
        report.error(key, f"must not be empty; write a value or omit {name}")
        return None
    if "\x00" in raw:
        report.error(key, NUL_CHARACTER)
        return None
    return raw


def image(report: ProblemReport, table: dict[str, Any], key: Key) -> str | None:
    """An image reference: a string without whitespace."""
    value = string(report, table, key)
    if value is not None and _WHITESPACE.search(value):
        report.error(
            key,
            f'"{clip(value)}" is not an image reference: it contains whitespace; '
            'write image = "registry/name:tag"',
        )
        return None
    return value


def number(report: ProblemReport, raw: Any, key: Key, positive: bool, unit: str) -> float | None:
    """A finite quantity of ``unit``, at least 0 (greater than 0 when ``positive``)."""
    name = key[-1]
    if isinstance(raw, bool):
        report.error(key, f"must be a number ({unit}), not {toml(raw)}")
        return None
    if isinstance(raw, str):
        report.error(key, f"must be a number ({unit}) without quotes{unquote_fix(raw, key)}")
        return None
    if not isinstance(raw, int | float):
        report.error(key, f"must be a number ({unit}), e.g. {name} = 8")
        return None
    if isinstance(raw, int) and abs(raw) >= MAX_NUMBER:
        report.error(key, f"is too large to be a quantity ({unit})")
        return None
    value = float(raw)
    if not math.isfinite(value):
        report.error(key, f"must be a finite number ({unit}), not {raw}")
        return None
    if value < 0:
        report.error(key, f"cannot be negative ({unit}), got {value:g}")
        return None
    if positive and value == 0:
        limit = "omit it to set no limit" if name != "peak_memory_gb" else "omit it"
        report.error(key, f"must be greater than 0 ({unit}); {limit}")
        return None
    return value


def quantity(report: ProblemReport, item: tuple[Any, Key] | None, unit: str) -> float | None:
    """A value and its key, where 0 is allowed (it means "not set")."""
    if item is None:
        return None
    return number(report, item[0], item[1], positive=False, unit=unit)


def positive(report: ProblemReport, table: dict[str, Any], key: Key, unit: str) -> float | None:
    """``key[-1]`` of ``table``, if present: a quantity greater than 0."""
    if key[-1] not in table:
        return None
    return number(report, table[key[-1]], key, positive=True, unit=unit)


def priority(report: ProblemReport, table: dict[str, Any], key: Key) -> int | None:
    """``priority``: a whole number from 0 to 100 (higher first in the queue)."""
    if key[-1] not in table:
        return None
    raw = table[key[-1]]
    low, high = PRIORITY_RANGE
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        shown = f", not {toml(raw)}" if not isinstance(raw, dict | list) else ""
        report.error(
            key,
            f"must be a whole number from {low} to {high} (higher runs first when runs wait "
            f"for GPUs; default {DEFAULT_PRIORITY}){shown}",
        )
        return None
    return raw


def duration(report: ProblemReport, table: dict[str, Any], key: Key) -> float | None:
    """A duration (``wait_timeout = "30m"``): seconds, more than 0."""
    if key[-1] not in table:
        return None
    raw = table[key[-1]]
    try:
        return parse_duration(raw)
    except ValueError as exc:
        report.error(key, f"{clip(str(exc))}: {DURATION_HINT}")
        return None
