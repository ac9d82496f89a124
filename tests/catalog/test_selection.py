"""Which catalog is in use: --catalog, then NODUS_CATALOG, then the stored one, then the
embedded one."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from catalog_support import HEADER

from nodus_cli import catalog


def write_catalog(tmp_path: Path, rows: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(HEADER + rows, encoding="utf-8")
    return path


def test_load_prefers_the_argument_then_nodus_catalog_then_the_embedded_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = write_catalog(tmp_path, "a,m1,H100,1,80,8,32,us,1,,x86_64\n", "one.csv")
    two = write_catalog(tmp_path, "b,m2,H100,1,80,8,32,us,1,,x86_64\n", "two.csv")
    monkeypatch.setenv("NODUS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NODUS_CATALOG", raising=False)
    assert catalog.load().path == str(catalog.embedded_path())
    assert catalog.load().chosen_by == "default"
    monkeypatch.setenv("NODUS_CATALOG", str(two))
    assert catalog.load().offers[0].supplier == "b"
    assert catalog.load().chosen_by == "NODUS_CATALOG"
    assert catalog.load(str(one)).offers[0].supplier == "a"
    assert catalog.load(str(one)).chosen_by == "--catalog"
    today = datetime.now(UTC).date()
    assert catalog.load(str(one)).label == f"user catalog one.csv (file of {today})"
    monkeypatch.setenv("NODUS_CATALOG", "")
    assert catalog.load().path == str(catalog.embedded_path())
