#!/usr/bin/env python3
"""Build the embedded offer catalog from the transcribed supplier catalog.

    python3 tools/build_catalog.py [OFFERS_CSV] [--out DIR] [--as-of YYYY-MM-DD]
        (default: tools/catalog/offers.csv, written into nodus_cli/data)

Reads OFFERS_CSV (provenance: tools/catalog/SOURCES.md) and writes nodus_cli/data/catalog.csv
and nodus_cli/data/catalog_meta.json (sources, commits, the date the prices are as of, a
short display name, dropped rows). Each row goes
through ``nodus_cli.catalog.check``, the row rules of every catalog nodus reads (a
``--catalog`` file, ``nodus catalog update``), so the embedded catalog and a user catalog
canonicalize GPU spellings identically: family
names from nodus_cli/data/gpus.json, memory from the model variant (never a supplier's
under-reported figure). Exits 1, listing them, when a row does not resolve, or when
gpus.json lets one spelling name two families. Needs only the standard library.
"""

from __future__ import annotations

import csv
import datetime
import json
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nodus_cli import catalog  # noqa: E402
from nodus_cli.catalog import files, rows  # noqa: E402
from nodus_cli.hardware import gpus  # noqa: E402

DATA = REPO / "nodus_cli" / "data"
OFFERS = REPO / "tools" / "catalog" / "offers.csv"
#: The day tools/catalog/offers.csv was transcribed from its sources: what the embedded
#: prices are "as of". Change it together with offers.csv (or pass --as-of).
PRICES_AS_OF = "2026-12-01"
AS_OF_NOTE = (
    "the day these prices were transcribed; the source files carry commits, not dates, "
    "so no earlier date can be given"
)
SNAPSHOT_NOTE = (
    "prices transcribed from skypilot-org/skypilot-catalog at the commits listed; "
    "the files carry no date"
)
PROVENANCE = (
    "tools/catalog/SOURCES.md in the nodus source repository: for each supplier the "
    "repository, path and commit read, what was kept and each source's quirks"
)


def main(argv: list[str]) -> int:
    args = list(argv[1:])
    out_dir = DATA
    as_of = PRICES_AS_OF
    for flag in ("--out", "--as-of"):
        if flag in args:
            at = args.index(flag)
            if at + 1 >= len(args):
                print(f"{flag} needs a value", file=sys.stderr)
                return 2
            if flag == "--out":
                out_dir = Path(args[at + 1])
            else:
                as_of = args[at + 1]
                try:
                    datetime.date.fromisoformat(as_of)
                except ValueError:
                    print(f"--as-of {as_of!r}: write a date as YYYY-MM-DD", file=sys.stderr)
                    return 2
            del args[at : at + 2]
    src = Path(args[0]) if args else OFFERS
    clashes = gpus.table().clashes  # the one name table: imports and `nodus gpus` read it
    if clashes:
        print("gpus.json: spellings that name two families:", *clashes, sep="\n  ", file=sys.stderr)
        return 1
    with open(src, newline="", encoding="utf-8") as f:
        records = list(csv.DictReader(f))

    out: list[catalog.Cells] = []
    problems: list[str] = []
    notes: list[str] = []
    dropped: Counter[str] = Counter()
    suppliers: Counter[str] = Counter()
    sources: dict[str, dict[str, str]] = {}
    for line, row in enumerate(records, start=2):
        repo_commit, _, path = (row.get("source") or "").partition(":")
        repo, _, commit = repo_commit.partition("@")
        sources.setdefault(
            row["supplier"],
            {"supplier": row["supplier"], "repo": repo, "path": path, "commit": commit},
        )
        try:
            cells = catalog.check(rows.cells_of(row))
        except ValueError as exc:
            problems.append(f"line {line}: {row['supplier']} {row['machine_id']}: {exc}")
            continue
        if cells is None:
            dropped["no on-demand price"] += 1
            continue
        offer = catalog.offer(cells)
        figure = float(row["gpu_memory_gb"] or 0)
        if figure and abs(offer.gpu_memory_gb - figure) > 0.15 * offer.gpu_memory_gb:
            notes.append(
                f"line {line}: {row['supplier']} {row['machine_id']} {row['gpu']}: "
                f"supplier says {figure} GB, nominal {offer.gpu_memory_gb:g} GB"
            )
        suppliers[offer.supplier] += 1
        out.append(cells)
    if problems:
        print("rows that do not resolve (fix gpus.json or the source):", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1

    out_dir.mkdir(parents=True, exist_ok=True)
    # The writer of every file nodus reads back (an updated catalog too): one layout.
    (out_dir / "catalog.csv").write_bytes(files.write_rows(out))
    cpu_only = sum(1 for cells in out if not cells[3])
    meta = {
        "name": f"nodus embedded catalog, {len(suppliers)} suppliers",
        "built_from": "tools/catalog/offers.csv",
        "provenance": PROVENANCE,
        "rows": len(out),
        "cpu_only_rows": cpu_only,
        "suppliers": dict(sorted(suppliers.items(), key=lambda kv: (-kv[1], kv[0]))),
        "dropped": dict(dropped),
        "host_size_minimum": {
            s: why for s, why in catalog.HOST_SIZE_MINIMUM.items() if s in suppliers
        },
        "sources": [sources[s] for s in sorted(sources)],
        "snapshot_note": SNAPSHOT_NOTE,
        "prices_as_of": as_of,
        "as_of_note": AS_OF_NOTE,
        "built_at": datetime.date.today().isoformat(),
    }
    (out_dir / "catalog_meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    for n in notes:
        print("note:", n, file=sys.stderr)
    print(
        f"wrote {len(out)} rows from {len(records)} ({dict(dropped)} dropped) to "
        f"{out_dir / 'catalog.csv'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
