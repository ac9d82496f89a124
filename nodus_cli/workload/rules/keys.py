"""Which keys stand where: the top level, ``[requirements]``, a stage, its requirements, a
``[map]``.

Contract: :func:`check` reports every key of one table that does not belong there, with the
fix a user needs: the table it belongs in, the spelling nodus uses, the nodus key for
another tool's name (:mod:`nodus_cli.workload.hints`), or the closest allowed key. It says
nothing about the values; the rule modules beside it do.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, Literal

from nodus_cli.workload.hints import (
    FOREIGN_KEYS,
    MAP_FOREIGN_KEYS,
    MAX_NAME,
    UNSUPPORTED_KEYS,
    foreign_fix,
)
from nodus_cli.workload.lineindex import Key
from nodus_cli.workload.model import (
    MAP_KEYS,
    NESTED_ONLY,
    STAGE_KEYS,
    TOP_LEVEL_KEYS,
    WORKLOAD_ONLY,
)
from nodus_cli.workload.report import ProblemReport

__all__ = ["Where", "check"]

#: The kind of table being checked.
Where = Literal["top", "requirements", "stage", "stage_requirements", "map"]

#: Keys that are tables of their own, never written "above [requirements]".
_TABLES = ("map", "env", "requirements", "stages")
_MAP_MEANING = {
    "items": "the inputs, one task each",
    "over": "a file of inputs, one per line",
    "parallel": "at most this many tasks at once",
}


def check(
    report: ProblemReport,
    table: dict[str, Any],
    prefix: Key,
    allowed: tuple[str, ...],
    where: Where,
) -> None:
    """Report each key of ``table`` (at ``prefix``) that is not in ``allowed``."""
    nested = where in ("requirements", "stage_requirements")
    in_stage = where.startswith("stage") or (where == "map" and prefix[:1] == ("stages",))
    home = "[stages.requirements]" if in_stage else "[requirements]"
    for key in table:
        if key in allowed:
            continue
        if report.full:  # the rest is only counted: skip building the hints
            report.skip()
            continue
        path = (*prefix, key)
        spelled = key.strip().lower().replace("-", "_").replace(" ", "_")
        if where == "map":
            _unknown_map_key(report, path, key, spelled)
        elif not nested and key in NESTED_ONLY:
            report.error(path, f"`{key}` belongs in {home}: move it there")
        elif where == "requirements" and key in TOP_LEVEL_KEYS and key not in allowed:
            move = (
                f"write it as its own [{key}] table"
                if key in _TABLES
                else "move it above [requirements]"
            )
            report.error(
                path,
                f"`{key}` belongs at the top level of the file, not in [requirements]: {move}",
            )
        elif in_stage and key in WORKLOAD_ONLY:
            report.error(
                path,
                f"`{key}` applies to the whole workload: set it at the top level of the "
                "file, not in a stage",
            )
        elif where == "stage_requirements" and key in STAGE_KEYS:
            move = (
                f"write it as [stages.{key}] after this stage's keys"
                if key in _TABLES
                else "move it above [stages.requirements]"
            )
            report.error(
                path,
                f"`{key}` belongs in the [[stages]] table itself, not in "
                f"[stages.requirements]: {move}",
            )
        elif spelled != key and spelled in allowed + (() if nested else NESTED_ONLY):
            where_to = f" in {home}" if spelled not in allowed else ""
            report.error(
                path,
                f"unknown key; did you mean `{spelled}`{where_to}? Keys are lowercase "
                "with underscores",
            )
        elif spelled in UNSUPPORTED_KEYS:
            fix = ""
            if spelled in ("retry", "retries", "max_retries"):
                number = table[key]
                if isinstance(number, int) and not isinstance(number, bool) and number >= 0:
                    fix = f" (here: nodus run --retries {number})" if number < 100 else ""
            report.error(path, f"unknown key: {UNSUPPORTED_KEYS[spelled]}{fix}")
        elif spelled in FOREIGN_KEYS:
            target, why = FOREIGN_KEYS[spelled]
            shown = f"`{target}`"
            where_to = ""
            if target == "requirements":
                shown = home
            elif target == "map":
                shown = "[stages.map]" if in_stage else "[map]"
            elif not nested and target in NESTED_ONLY:
                where_to = f" in {home}"
            elif in_stage and target in WORKLOAD_ONLY:
                where_to = " at the top level of the file"
            fix = foreign_fix(spelled, table[key])
            report.error(path, f"unknown key; did you mean {shown}{where_to}? {why}{fix}")
        else:
            close = _closest(key, spelled, allowed + (() if nested else NESTED_ONLY))
            hint = ""
            if close is not None:
                where_to = f" in {home}" if close not in allowed else ""
                hint = f"; did you mean `{close}`{where_to}?"
            valid = ", ".join(allowed)
            report.error(path, f"unknown key{hint} (allowed here: {valid})")


def _unknown_map_key(report: ProblemReport, path: Key, key: str, spelled: str) -> None:
    if spelled in MAP_KEYS:
        report.error(
            path, f"unknown key; did you mean `{spelled}`? Keys are lowercase with underscores"
        )
        return
    if spelled in UNSUPPORTED_KEYS:
        report.error(path, f"unknown key: {UNSUPPORTED_KEYS[spelled]}")
        return
    target = MAP_FOREIGN_KEYS.get(spelled) or _closest(key, spelled, MAP_KEYS)
    hint = f"; did you mean `{target}` ({_MAP_MEANING[target]})?" if target else ""
    report.error(path, f"unknown key{hint} (allowed here: {', '.join(MAP_KEYS)})")


def _closest(key: str, spelled: str, pool: Sequence[str]) -> str | None:
    """The allowed key closest to ``spelled`` (``key`` as written), if one is close."""
    if len(key) > MAX_NAME:  # no one misspells a key this long
        return None
    close = difflib.get_close_matches(spelled, pool, n=1, cutoff=0.6)
    return close[0] if close else None
