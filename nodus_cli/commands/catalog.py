"""``nodus catalog``: which catalog is in use and where its prices come from."""

from __future__ import annotations

from nodus_cli import catalog
from nodus_cli.output import console, emit_json


def run(catalog_path: str | None, as_json: bool) -> int:
    cat = catalog.load(catalog_path)
    suppliers: dict[str, int] = {}
    for o in cat.offers:
        suppliers[o.supplier] = suppliers.get(o.supplier, 0) + 1
    doc = {
        "path": cat.path,
        "embedded": cat.path == str(catalog.embedded_path()),
        "rows": len(cat.offers),
        "suppliers": dict(sorted(suppliers.items())),
        "built_from": cat.meta.get("built_from"),
        "built_at": cat.meta.get("built_at"),
        "snapshot_note": cat.meta.get("snapshot_note"),
        "dropped": cat.meta.get("dropped", {}),
        "sources": cat.meta.get("sources", []),
    }
    if as_json:
        emit_json(doc)
        return 0
    from rich.markup import escape

    out = console()
    kind = "embedded" if doc["embedded"] else "user catalog"
    out.print(f"[bold]catalog in use[/] ({kind}): {escape(cat.path)}")
    out.print(f"{len(cat.offers)} configurations from {len(suppliers)} suppliers")
    if doc["built_from"]:
        out.print(f"built from {escape(str(doc['built_from']))} on {doc['built_at'] or '?'}")
    if doc["snapshot_note"]:
        out.print(f"[dim]{escape(str(doc['snapshot_note']))}[/]")
    for src in doc["sources"]:
        out.print(
            f"  {src.get('supplier', '?'):<15} {suppliers.get(src.get('supplier', ''), 0):>5} "
            f"rows  {escape(str(src.get('repo', '')))}@{str(src.get('commit', ''))[:12]} "
            f"{escape(str(src.get('path', '')))}"
        )
    return 0
