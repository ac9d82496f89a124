"""Real SkyPilot catalog rows (tests/catalog/skypilot/*.csv), as files nodus would fetch.

Each fixture copies rows verbatim from skypilot-org/skypilot-catalog; its first lines,
starting with ``#``, say the repository, path and commit they come from. :func:`read`
gives the file as SkyPilot has it (those lines dropped), so line numbers are the
fixture's own: the header is line 1.
"""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "catalog" / "skypilot"


def read(name: str) -> str:
    """The fixture ``name`` (e.g. ``gcp_v8.csv``) without its provenance lines."""
    text = (FOLDER / name).read_text(encoding="utf-8")
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def line_of(name: str, *words: str) -> int:
    """The line (header = 1) of the only row of ``name`` that holds every one of ``words``."""
    found = [
        number
        for number, line in enumerate(read(name).splitlines(), start=1)
        if all(w in line for w in words)
    ]
    assert len(found) == 1, (name, words, found)
    return found[0]


def provenance(name: str) -> dict[str, str]:
    """The repository, path and commit the fixture's rows come from."""
    found = {}
    for line in (FOLDER / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("# ") and ": " in line:
            key, _, value = line[2:].partition(": ")
            found[key] = value
    return found
