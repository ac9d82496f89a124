"""The rules of a catalog row: canonical GPU names and nominal memory, sizes, host size."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from catalog_support import HEADER, OFFERS, load, write_catalog

from nodus_cli import catalog
from nodus_cli.catalog import CatalogError, Offer, rows


@pytest.mark.parametrize(
    ("spelled", "memory", "family", "nominal"),
    [
        ("H100", "80", "H100", 80.0),
        ("NVIDIA H100 80GB HBM3", "79.6", "H100", 80.0),  # nvidia-smi spelling
        ("H100-SXM", "", "H100", 80.0),  # form factor
        ("H100-NVL", "", "H100", 94.0),  # the variant names the memory
        ("A100-80GB", "", "A100", 80.0),  # memory taken from the variant
        ("A100", "40", "A100", 40.0),
        ("A100", "", "A100", 40.0),  # no figure: the smallest variant, never over-claim
        ("A10G", "22.4", "A10G", 24.0),  # AWS under-reports: 22888 MiB is the 24 GB model
        ("L40S", "44.7", "L40S", 48.0),
        ("V100-32GB", "", "V100", 32.0),
        ("RTX4090", "24", "RTX 4090", 24.0),
        ("RTXA6000", "48", "RTX A6000", 48.0),
    ],
)
def test_supplier_spellings_are_canonicalized(
    tmp_path: Path, spelled: str, memory: str, family: str, nominal: float
) -> None:
    (offer,) = load(tmp_path, f"acme,m1,{spelled},1,{memory},8,32,us-east-1,1.5,,x86_64\n")
    assert offer.gpu == family
    assert offer.gpu_memory_gb == nominal


def test_machine_ids_that_name_the_model_win_over_a_merged_accelerator_name(
    tmp_path: Path,
) -> None:
    (offer,) = load(tmp_path, "vast,2x-RTX_4070S_Ti-32-65536,RTX4070,2,12,32,64,US,0.5,,x86_64\n")
    assert offer.gpu == "RTX 4070 Ti SUPER"
    assert offer.gpu_memory_gb == 16.0


def test_a_user_catalog_row_parses_into_every_field(tmp_path: Path) -> None:
    (offer,) = load(tmp_path, "aws,p5.48xlarge,H100,8,80,192,2048,us-east-1,98.32,20.99,x86_64\n")
    assert offer == Offer(
        supplier="aws",
        machine_id="p5.48xlarge",
        region="us-east-1",
        gpu="H100",
        gpu_count=8,
        gpu_memory_gb=80.0,
        vcpus=192.0,
        memory_gb=2048.0,
        disk_gb=None,
        arch="x86_64",
        price_per_hour=98.32,
        spot_price_per_hour=20.99,
    )


def test_rows_without_a_gpu_are_cpu_only(tmp_path: Path) -> None:
    (offer,) = load(tmp_path, "aws,c7i.8xlarge,,0,,32,64,us-east-1,1.43,,x86_64\n")
    assert offer.gpu is None
    assert offer.gpu_count == 0


def test_host_size_column_and_supplier_rule(tmp_path: Path) -> None:
    header = HEADER.rstrip("\n") + ",host_size\n"
    rows = (
        "vast,1x-H100_SXM-32-65536,H100,1,80,32,64,US,2.0,,x86_64,\n"  # the supplier rule
        "vast,1x-H200-32-65536,H200,1,141,32,64,US,3.0,,x86_64,exact\n"  # said otherwise
        "acme,big,,0,,64,256,us-east-1,1.0,,x86_64,minimum\n"  # said explicitly
        "acme,small,,0,,4,8,us-east-1,0.1,,x86_64,\n"
    )
    minimum = {o.machine_id: o.size_is_minimum for o in load(tmp_path, rows, header)}
    assert minimum == {
        "1x-H100_SXM-32-65536": True,
        "1x-H200-32-65536": False,
        "big": True,
        "small": False,
    }
    path = write_catalog(tmp_path, "acme,x,,0,,4,8,us,1,,x86_64,roughly\n", header, "bad.csv")
    with pytest.raises(CatalogError, match=r'bad\.csv:2: host_size must be "exact", "minimum"'):
        catalog.load_user_catalog(path)


def test_check_gives_the_row_back_as_canonical_text() -> None:
    cells = ("aws", " g5.xlarge ", "us-east-1", "A10G", "1.0", "22.4", "4.0", "16", "", "")
    cells += ("1.006", "0.4", "")
    assert catalog.check(cells) == (
        "aws",
        "g5.xlarge",
        "us-east-1",
        "A10G",
        "1",
        "24",  # the nominal memory of the model, not AWS's 22.4
        "4",
        "16",
        "",
        "x86_64",
        "1.006",
        "0.4",
        "",
    )
    spot_only = ("aws", "p5e", "us", "H200", "8", "", "", "", "", "", "", "30.5", "")
    assert catalog.check(spot_only) is None


def test_the_rules_agree_with_parse_row_on_every_transcribed_row() -> None:
    """check (cells in, canonical text out) and parse_row (a row by column name, as an
    offer) are one rule: on every row of tools/catalog/offers.csv, and on what they reject."""
    with OFFERS.open(newline="", encoding="utf-8") as handle:
        records = list(csv.DictReader(handle))
    for row in records:
        offer = catalog.parse_row(row)
        cells = catalog.check(rows.cells_of(row))
        assert (cells is None) == (offer is None), row
        if cells is not None:
            assert catalog.offer(cells) == offer
            assert catalog.check(cells) == cells  # canonical text stays as it is
    bad = {"supplier": "aws", "machine_id": "x", "gpu": "H100", "gpu_count": "1.5"}
    with pytest.raises(ValueError, match="gpu_count must be a whole number") as one:
        catalog.parse_row(bad)
    with pytest.raises(ValueError) as other:
        catalog.check(("aws", "x", "", "H100", "1.5", "", "", "", "", "", "1", "", ""))
    assert str(one.value) == str(other.value)
