"""``nodus catalog``: which catalog is in use and where its prices come from."""

from __future__ import annotations

import os
from typing import Any

from nodus_cli import catalog
from nodus_cli.output import Writer, emit_json


def run(catalog_path: str | None, as_json: bool) -> int:
    cat = catalog.load(catalog_path)
    suppliers: dict[str, int] = {}
    for o in cat.offers:
        suppliers[o.supplier] = suppliers.get(o.supplier, 0) + 1
    embedded = not cat.meta.get("user_catalog")
    if embedded:
        chosen_by = "default (no --catalog, no NODUS_CATALOG)"
    elif catalog_path:
        chosen_by = "--catalog"
    else:
        chosen_by = "NODUS_CATALOG"
    doc: dict[str, Any] = {
        "path": cat.path,
        "embedded": embedded,
        "chosen_by": chosen_by,
        "rows": len(cat.offers),
        "suppliers": dict(sorted(suppliers.items())),
        "gpus": len({o.gpu for o in cat.offers if o.gpu}),
        "built_from": cat.meta.get("built_from"),
        "built_at": cat.meta.get("built_at"),
        "snapshot_note": cat.meta.get("snapshot_note"),
        "dropped": cat.meta.get("dropped", {}),
        "sources": cat.meta.get("sources", []),
    }
    if as_json:
        emit_json(doc)
        return 0
    out = Writer()
    kind = "embedded catalog" if embedded else "user catalog"
    out.line(f"{out.paint('catalog in use', 'bold')}: {cat.path}")
    out.line(f"  {kind}, in use by {chosen_by}")
    out.line(
        f"  {len(cat.offers)} configurations, {doc['gpus']} GPU models, {len(suppliers)} suppliers"
    )
    if embedded:
        out.line(f"  built from {doc['built_from']} on {doc['built_at'] or '?'}")
    else:
        out.line(f"  file modified on {doc['built_at'] or '?'}")
    for reason, n in doc["dropped"].items():
        out.line(f"  rows left out: {n} ({reason})")
    if doc["snapshot_note"]:
        out.line(f"  {doc['snapshot_note']}")
    if doc["sources"]:
        out.line()
        out.line(out.paint("sources (one per supplier):", "bold"))
        out.table(
            ["supplier", "rows", "repository@commit", "path"],
            [
                [
                    str(s.get("supplier", "?")),
                    str(suppliers.get(str(s.get("supplier", "")), 0)),
                    f"{s.get('repo', '')}@{str(s.get('commit', ''))[:12]}",
                    str(s.get("path", "")),
                ]
                for s in doc["sources"]
            ],
            right=(1,),
            indent="  ",
        )
    elif suppliers:
        out.line()
        out.table(
            ["supplier", "rows"],
            [[name, str(n)] for name, n in sorted(suppliers.items())],
            right=(1,),
            indent="  ",
        )
    env = os.environ.get("NODUS_CATALOG")
    if embedded:
        out.line()
        out.line(out.paint("Another catalog: --catalog FILE.csv or NODUS_CATALOG=FILE.csv", "dim"))
    elif env and catalog_path:
        out.line(out.paint(f"(--catalog overrides NODUS_CATALOG={env})", "dim"))
    out.flush()
    return 0
