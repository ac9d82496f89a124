"""Durations as users write them: ``90s``, ``30m``, ``2h``, ``1h30m``, ``1.5h``, or a number
of seconds (``wait_timeout``, ``--wait-timeout``)."""

from __future__ import annotations

import math
import re

__all__ = ["DURATION_HINT", "parse_duration", "shown"]

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|h|days?|d)")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
DURATION_HINT = 'write a duration such as "90s", "30m", "2h" or "1h30m" (or a number of seconds)'


def parse_duration(value: object) -> float:
    """Seconds, > 0; ValueError with the words to show otherwise."""
    if isinstance(value, bool):
        raise ValueError("expected a duration, got a boolean")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if not text:
            raise ValueError("the duration is empty")
        try:
            seconds = float(text)
        except ValueError:
            pos, seconds = 0, 0.0
            for m in _PART.finditer(text):
                if text[pos : m.start()].strip():
                    break
                seconds += float(m.group(1)) * _UNIT[m.group(2)[0]]
                pos = m.end()
            if pos == 0 or text[pos:].strip():
                raise ValueError(f"{value!r} is not a duration") from None
    else:
        raise ValueError(f"expected a duration, got {type(value).__name__}")
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")
    if seconds <= 0:
        raise ValueError("a duration must be more than 0 seconds")
    return seconds


def shown(seconds: float) -> str:
    """``90 s``, ``30 min``, ``2 h``, ``1 h 30 min``: a duration as messages give it."""
    if seconds < 120:
        return f"{seconds:g} s"
    minutes = seconds / 60
    if minutes < 120 and minutes == int(minutes):
        return f"{minutes:g} min"
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours} h {rest // 60} min" if rest // 60 else f"{hours} h"
