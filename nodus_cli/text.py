"""Pure text for whatever nodus prints: counts with their nouns, money, terminal widths.

The domain (the catalog, the planner, the targets) words its own messages with these;
nothing here touches a terminal, so any layer may use it. What is shown on a terminal
(colour, tables fitted to its width, rich) lives in :mod:`nodus_cli.cli.output`.

Widths are what the eye sees, not what Python counts: colour codes take no column, a wide
(CJK) character two, a combining mark none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "ANSI",
    "ELLIPSIS",
    "MAX_ECHO",
    "MAX_LINE",
    "RESET",
    "bounded",
    "clipped",
    "cost_text",
    "display_width",
    "gpu_text",
    "middle",
    "money",
    "ordinal",
    "plural",
    "safe",
    "take",
    "unpriced_runs_text",
    "wrap",
]

RESET = "\x1b[0m"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ELLIPSIS = "…"

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def safe(text: str, newlines: bool = True) -> str:
    """Text from a workload or the engine, fit for a terminal: control characters (an
    escape sequence in a workload name, say) are shown escaped, never interpreted."""
    if not newlines:
        text = text.replace("\n", "\\n").replace("\t", "\\t")
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


#: The longest run of non-blank characters, and the longest line, that a message echoes
#: whole: a 1 MB key or argument is the user's own, and printing it back buries the words.
MAX_ECHO = 200
MAX_LINE = 2000
_LONG_RUN = re.compile(rf"\S{{{MAX_ECHO + 1},}}")


def middle(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: its start and its end, "…" between (the
    end of a long key or path tells as much as its start)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 3
    return text[:head] + ELLIPSIS + text[len(text) - (limit - 1 - head) :]


def bounded(text: str) -> str:
    """A message with every echoed value bounded: each run of non-blank characters longer
    than :data:`MAX_ECHO`, and each line longer than :data:`MAX_LINE`, clipped in the
    middle. Text of ordinary size is returned as it is."""
    if len(text) <= MAX_ECHO:
        return text
    text = _LONG_RUN.sub(lambda m: middle(m.group(0), MAX_ECHO), text)
    if len(text) <= MAX_LINE:
        return text
    return "\n".join(middle(line, MAX_LINE) for line in text.split("\n"))


def plural(count: int, singular: str, many: str | None = None, *, grouped: bool = False) -> str:
    """``1 offer``, ``2 offers``, ``0 offers``: the count and the noun that agrees with it
    (``many`` for irregular plurals; ``grouped``: ``12,345 rows``, for counts that grow)."""
    shown = f"{count:,}" if grouped else str(count)
    return f"{shown} {singular if count == 1 else (many or singular + 's')}"


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``: a place in line as it reads."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: colour codes take none, a wide (CJK) character
    two, a combining mark none. ASCII, the common case, is simply its length."""
    if "\x1b" in text:
        text = ANSI.sub("", text)
    if text.isascii():
        return len(text)
    return sum(_char_width(c) for c in text)


def _char_width(c: str) -> int:
    import unicodedata

    if unicodedata.combining(c):
        return 0
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def take(text: str, columns: int) -> tuple[str, str]:
    """``text`` split after at most ``columns`` visible columns (colour codes travel with
    the head); the head is never empty unless ``text`` is, so splitting always advances."""
    used = 0
    pos = 0
    while pos < len(text):
        code = ANSI.match(text, pos)
        if code is not None:
            pos = code.end()
            continue
        w = _char_width(text[pos]) if not text[pos].isascii() else 1
        if used + w > columns and used > 0:
            break
        used += w
        pos += 1
    return text[:pos], text[pos:]


def clipped(text: str, columns: int, keep_end: bool = False) -> str:
    """``text`` in at most ``columns`` columns, ending in "…" when shortened (``keep_end``:
    starting with it, the end kept); a painted cell keeps its colour up to the cut and is
    reset after it."""
    if display_width(text) <= columns:
        return text
    if keep_end:
        plain = ANSI.sub("", text)[::-1]  # the end, taken as a head of the reversed text
        tail, _ = take(plain, max(columns - 1, 0))
        return ELLIPSIS + tail[::-1]
    head, _ = take(text, max(columns - 1, 0))
    if "\x1b" in head:
        return head + ELLIPSIS + RESET
    return head + ELLIPSIS


def wrap(text: str, width: int, hang: str = "  ") -> list[str]:
    """One line of prose as lines of at most ``width`` columns, broken between words.

    Continuation lines start with the text's own indent plus ``hang``. A word longer than
    a whole line is cut where the line ends (a terminal would cut it there anyway). A
    colour open at a break is closed at the end of the line and opened again on the next,
    so a pager or a copied line never bleeds colour.
    """
    if display_width(text) <= width:
        return [text]
    body = text.lstrip(" ")
    first = text[: len(text) - len(body)]
    rest = first + hang
    if display_width(rest) > width // 2:  # a deep indent would leave no room for words
        rest = hang
    lines: list[str] = []
    current, used, fresh, active = first, display_width(first), True, ""

    def newline() -> None:
        nonlocal current, used, fresh
        lines.append(current.rstrip(" ") + (RESET if active else ""))
        current, used, fresh = rest + active, display_width(rest), True

    for word in body.split(" "):
        size = display_width(word)
        if not fresh:
            if used + 1 + size > width:
                newline()
            else:
                current += " "
                used += 1
        if fresh and not word:
            continue  # a continuation line starts with its indent, not with spaces
        while used + size > width:  # longer than a whole line: cut where the line ends
            head, word = take(word, width - used)
            current += head
            active = _style_after(active, head)
            newline()
            size = display_width(word)
        current += word
        used += size
        fresh = fresh and not word
        active = _style_after(active, word)
    lines.append(current.rstrip(" "))
    return lines


def _style_after(active: str, text: str) -> str:
    """The colour codes still open after ``text``, given those open before it."""
    for code in ANSI.findall(text):
        active = "" if code == RESET else active + code
    return active


def money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}" if value >= 0.1 or value == 0 else f"${value:,.4f}"


def cost_text(value: float, known: bool = True) -> str:
    """A recorded cost, said "unknown" where a price it needed was not set (the record
    holds 0 for that part): ``$1.20 + unknown`` when the rest cost something."""
    if known:
        return money(value)
    return f"{money(value)} + unknown" if value > 0 else "unknown"


def unpriced_runs_text(month: int, today: int, targets: Sequence[str], config: str) -> str:
    """What the spend says of the runs this month (``today`` of them today) whose cost is
    unknown, on the ``targets`` whose nodes' price is not set, and how to set it (in the
    configuration file ``config``): ``nodus spend`` and the dashboard's spend page."""
    when = f" ({today} today)" if today else ""
    keys = "; ".join(f"[{t}] price_per_hour or [{t}] prices" for t in targets)
    return (
        f"{plural(month, 'run')} this month{when} ran on nodes whose price is not set: their "
        f"cost is not counted, nor held to a limit or budget (set {keys} in {config})"
    )


def gpu_text(gpu: str | None, count: int, memory_gb: float) -> str:
    return f"{count}× {gpu} {memory_gb:g} GB" if gpu else "no GPU"
