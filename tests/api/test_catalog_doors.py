"""The catalog's doors of the Python API (what ``nodus catalog`` and ``nodus catalog
update`` call): the catalog in use, the sources an update reads, the update itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus_cli import Client
from nodus_cli.api import CatalogKind
from nodus_cli.errors import NodusError

ROWS = (
    "supplier,machine_id,gpu,gpu_count,gpu_memory_gb,vcpus,memory_gb,region,"
    "price_per_hour,spot_price_per_hour,arch\n"
    "acme,l4x1,L4,1,24,8,32,eu-west-1,0.7,,x86_64\n"
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NODUS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NODUS_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.delenv("NODUS_CATALOG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def test_the_embedded_catalog_is_in_use_until_an_update(home: Path) -> None:
    in_use = Client().catalog_in_use()
    assert in_use.catalog.kind == CatalogKind.EMBEDDED
    assert in_use.folder == home / "catalog"
    Path("acme.csv").write_text(ROWS, encoding="utf-8")
    client = Client()
    result = client.update_catalog(client.catalog_sources(["acme=./acme.csv"]), replace=True)
    assert result.rows == 1
    updated = client.catalog_in_use()
    assert updated.catalog.kind == CatalogKind.UPDATED
    assert [o.machine_id for o in updated.catalog.offers] == ["l4x1"]


def test_without_sources_the_update_says_where_to_list_them(home: Path) -> None:
    with pytest.raises(NodusError) as caught:
        Client().update_catalog()
    assert caught.value.exit_code == 2
    assert "no sources to update from" in caught.value.message
    assert "config.toml" in caught.value.message


def test_a_source_that_is_not_one_is_named(home: Path) -> None:
    with pytest.raises(NodusError) as caught:
        Client().catalog_sources(["ftp://example.com/x.csv"])
    assert caught.value.exit_code == 2
    assert "SOURCE 'ftp://example.com/x.csv'" in caught.value.message
