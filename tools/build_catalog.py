#!/usr/bin/env python3
"""Build the embedded offer catalog from the transcribed supplier catalog.

    python3 tools/build_catalog.py [OFFERS_CSV]      (default: ../shared/catalog/offers.csv)

Reads OFFERS_CSV (see shared/catalog/SOURCES.md), canonicalises GPU spellings with
nodus_cli/data/gpus.json, and writes nodus_cli/data/catalog.csv and
nodus_cli/data/catalog_meta.json. Stdlib only. Exits 1, listing them, when a GPU
spelling does not resolve to exactly one family.
"""
import csv
import datetime
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "nodus_cli" / "data"
COLUMNS = ["supplier", "machine_id", "gpu", "gpu_count", "gpu_memory_gb", "vcpus", "memory_gb",
           "disk_gb", "region", "price_per_hour", "spot_price_per_hour", "arch"]
SNAPSHOT_NOTE = ("prices transcribed from skypilot-org/skypilot-catalog at the commits listed; "
                 "the files carry no date")
# Per-GPU memory implied by a machine type when the supplier gives no figure (Azure docs:
# NC*ads_H100_v5 carry H100 NVL 94 GB).
MACHINE_MEMORY = [("azure", re.compile(r"^Standard_NC\d+ad[a-z]*_H100_v5$"), 94.0)]


def normalize(name):
    s = re.sub(r"[\s_\-]", "", str(name).lower())
    return s[len("nvidia"):] if s.startswith("nvidia") else s


def load_lookup(path):
    """normalized spelling -> (family, memory_gb or None); duplicates across families fail."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    table, clashes = {}, []

    def add(spelling, family, memory):
        key = normalize(spelling)
        old = table.get(key)
        if old and old[0] != family:
            clashes.append(f"{spelling!r}: {old[0]} vs {family}")
        elif not old or (old[1] is None and memory is not None):
            table[key] = (family, memory)

    families = {}
    for fam in doc["families"]:
        families[fam["name"]] = [float(m) for m in fam["memory_gb"]]
        for s in [fam["name"], *fam["aliases"]]:
            add(s, fam["name"], None)
        for v in fam["variant_spellings"]:
            add(v["spelling"], fam["name"], v["memory_gb"])
    for s, target in doc["catalog_spellings"].items():
        add(s, target["family"], target.get("memory_gb"))
    if clashes:
        sys.exit("gpus.json: spellings that name two families:\n  " + "\n  ".join(clashes))
    return table, families


def hint_spelling(row):
    """Vast merges variants in its accelerator name (RTX4070 is a 4070 Ti SUPER, RTX4060 a
    4060 Ti, RTX3060 includes the 3060 Ti); its machine_id carries the exact model."""
    if row["supplier"] == "vast":
        m = re.fullmatch(r"\d+x-(.+)-\d+-\d+", row["machine_id"])
        if m:
            return m.group(1)
    return None


def hinted_memory(row):
    if row["supplier"] == "primeintellect":
        m = re.search(r"x[A-Za-z0-9]+_(\d+)GB__", row["machine_id"])
        if m:
            return float(m.group(1))
    for supplier, pattern, memory in MACHINE_MEMORY:
        if row["supplier"] == supplier and pattern.match(row["machine_id"]):
            return memory
    return None


def nominal_memory(variants, spelled, figure):
    if spelled is not None:
        return float(spelled)
    if figure:
        return min(variants, key=lambda v: (abs(v - figure), v))
    return min(variants)  # no figure: never over-claim


def fmt(x):
    return str(int(x)) if float(x).is_integer() else str(x)


def main(argv):
    src = Path(argv[1]) if len(argv) > 1 else REPO.parent / "shared" / "catalog" / "offers.csv"
    table, families = load_lookup(DATA / "gpus.json")
    with open(src, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))

    out, unresolved, notes, dropped = [], Counter(), [], Counter()
    suppliers, sources = Counter(), {}
    for line, row in enumerate(rows, start=2):
        hit = table.get(normalize(row["gpu"]))
        hint = hint_spelling(row)
        if hint is not None:
            hit = table.get(normalize(hint)) or hit
        if hit is None:
            unresolved[f"{row['supplier']}: {row['gpu']!r}"] += 1
            continue
        repo_commit, _, path = row["source"].partition(":")
        repo, _, commit = repo_commit.partition("@")
        sources.setdefault(row["supplier"], {"supplier": row["supplier"], "repo": repo,
                                             "path": path, "commit": commit})
        if not row["price_per_hour"].strip():
            dropped["no on-demand price"] += 1
            continue
        family, spelled = hit
        figure = float(row["gpu_memory_gb"] or 0) or hinted_memory(row)
        memory = nominal_memory(families[family], spelled, figure)
        if figure and abs(memory - figure) > 0.15 * memory:
            notes.append(f"line {line}: {row['supplier']} {row['machine_id']} {row['gpu']}: "
                         f"supplier says {figure} GB, nominal {memory} GB")
        suppliers[row["supplier"]] += 1
        out.append({**{k: row[k] for k in COLUMNS if k in row}, "gpu": family,
                    "gpu_count": int(float(row["gpu_count"])), "gpu_memory_gb": fmt(memory),
                    "disk_gb": ""})
    if unresolved:
        print("GPU spellings that resolve to no family (add them to gpus.json):", file=sys.stderr)
        for k, n in sorted(unresolved.items()):
            print(f"  {k} ({n} rows)", file=sys.stderr)
        return 1

    with open(DATA / "catalog.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(out)
    meta = {
        "built_from": "shared/catalog/offers.csv",
        "rows": len(out),
        "suppliers": dict(sorted(suppliers.items(), key=lambda kv: (-kv[1], kv[0]))),
        "dropped": dict(dropped),
        "sources": [sources[s] for s in sorted(sources)],
        "snapshot_note": SNAPSHOT_NOTE,
        "built_at": datetime.date.today().isoformat(),
    }
    (DATA / "catalog_meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    for n in notes:
        print("note:", n, file=sys.stderr)
    print(f"wrote {len(out)} rows from {len(rows)} ({dict(dropped)} dropped) to "
          f"{(DATA / 'catalog.csv').relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
