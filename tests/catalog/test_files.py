"""Catalog files: the embedded catalog and its build, files nodus writes, ``--catalog``
files (every bad row with its line number, never a traceback)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from catalog_support import HEADER, OFFERS, load, write_catalog
from paths import REPO

from nodus_cli import catalog
from nodus_cli.catalog import CatalogError, files
from nodus_cli.hardware import gpus

# -- user catalogs -----------------------------------------------------------------------


def test_extra_columns_are_ignored_and_disk_is_read_when_present(tmp_path: Path) -> None:
    header = HEADER.rstrip("\n") + ",disk_gb,source\n"
    (offer,) = load(
        tmp_path, "aws,g5.xlarge,A10G,1,22.4,4,16,us-east-1,1.006,,x86_64,250,x\n", header
    )
    assert offer.disk_gb == 250.0
    assert offer.gpu_memory_gb == 24.0


def test_columns_may_come_in_any_order_with_a_bom_and_spaces(tmp_path: Path) -> None:
    header = (
        "\ufeff price_per_hour ,arch,region,supplier,machine_id,gpu,gpu_count,gpu_memory_gb,"
        "vcpus,memory_gb,spot_price_per_hour\n"
    )
    (offer,) = load(
        tmp_path, "2.5,aarch64,us-east-1,lambda,gpu_1x_gh200,GH200,1,96,72,432,\n", header
    )
    assert (offer.supplier, offer.gpu, offer.arch, offer.price_per_hour) == (
        "lambda",
        "GH200",
        "arm64",
        2.5,
    )


def test_spot_only_rows_are_left_out_and_counted(tmp_path: Path) -> None:
    path = write_catalog(
        tmp_path,
        "aws,p5e.48xlarge,H200,8,141,192,2048,us-east-1,,30.5,x86_64\n"
        "aws,p5.48xlarge,H100,8,80,192,2048,us-east-1,98.32,,x86_64\n",
    )
    cat = catalog.load_user_catalog(path)
    assert [o.machine_id for o in cat.offers] == ["p5.48xlarge"]
    assert cat.meta["dropped"] == {"no on-demand price": 1}


def test_bad_rows_are_reported_with_their_line_numbers(tmp_path: Path) -> None:
    path = write_catalog(
        tmp_path,
        "aws,ok,H100,8,80,192,2048,us-east-1,98.32,,x86_64\n"  # line 2
        "aws,x,H100,8,80,192,2048,us-east-1,abc,,x86_64\n"  # 3: price not a number
        "aws,y,Z9000,1,16,8,32,us-east-1,1.0,,x86_64\n"  # 4: unknown GPU
        "aws,z,H100,1.5,80,8,32,us-east-1,1.0,,x86_64\n"  # 5: fractional count
        "aws,w,H100,0,80,8,32,us-east-1,1.0,,x86_64\n"  # 6: GPU without a count
        "aws,v,H100,1,80,8,32,us-east-1,1.0,,sparc\n"  # 7: arch
        "aws,u,H100,1,80,8,32,us-east-1,-1,,x86_64\n"  # 8: negative price
        "aws,t,H100,1,80,8,32,us-east-1,,,x86_64\n"  # 9: no price at all
        ",s,H100,1,80,8,32,us-east-1,1.0,,x86_64\n"  # 10: no supplier
        "aws,r,H100,1,80,8,32,us-east-1,inf,,x86_64\n",  # 11: not finite
    )
    with pytest.raises(CatalogError) as caught:
        catalog.load_user_catalog(path)
    message = caught.value.message
    assert "9 bad rows" in message
    for line, words in [
        (3, "price_per_hour is not a number: 'abc'"),
        (4, "unknown GPU 'Z9000'"),
        (5, "gpu_count must be a whole number"),
        (6, "gpu_count must be at least 1"),
        (7, 'arch must be "x86_64" or "arm64"'),
        (8, "price_per_hour must be a finite number >= 0"),
        (9, "price_per_hour is empty"),
        (10, "supplier and machine_id must not be empty"),
        (11, "price_per_hour must be a finite number >= 0"),
    ]:
        assert f"{path}:{line}: {words}" in message
    assert f"{path}:2:" not in message


def test_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    path = write_catalog(
        tmp_path,
        "aws,ok,H100,8,80,192,2048,us-east-1,98.32,,x86_64\n\n\naws,x,H100,8,80,1,1,us,abc,,x86_64\n",
    )
    with pytest.raises(CatalogError, match=r"c\.csv:5: price_per_hour"):
        catalog.load_user_catalog(path)


def test_missing_columns(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, "aws,x\n", header="supplier,machine_id\n")
    with pytest.raises(CatalogError) as caught:
        catalog.load_user_catalog(path)
    assert f"{path}:1:" in caught.value.message
    assert "gpu_count" in caught.value.message and "price_per_hour" in caught.value.message


def test_empty_file(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, "", header="")
    with pytest.raises(CatalogError, match="empty"):
        catalog.load_user_catalog(path)


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read the catalog"):
        catalog.load_user_catalog(tmp_path / "nope.csv")
    with pytest.raises(CatalogError, match="cannot read the catalog"):
        catalog.load_user_catalog(tmp_path)


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "bin.csv"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 20)
    with pytest.raises(CatalogError, match="not a readable CSV file"):
        catalog.load_user_catalog(path)


def test_many_bad_rows_are_summarized(tmp_path: Path) -> None:
    rows = "".join(f"aws,m{i},H100,1,80,8,32,us,nan?,,x86_64\n" for i in range(30))
    with pytest.raises(CatalogError) as caught:
        catalog.load_user_catalog(write_catalog(tmp_path, rows))
    assert "30 bad rows" in caught.value.message
    assert "... and 10 more" in caught.value.message


# -- the embedded catalog --------------------------------------------------------------------


def test_embedded_catalog_is_canonical_with_nominal_memory() -> None:
    cat = catalog.embedded()
    assert len(cat.offers) > 1000
    table = gpus.table()
    for offer in cat.offers:
        assert offer.price_per_hour > 0
        assert offer.arch in ("x86_64", "arm64")
        if offer.gpu is None:  # a CPU-only machine
            assert (offer.gpu_count, offer.gpu_memory_gb) == (0, 0.0), offer
            assert offer.vcpus > 0 and offer.memory_gb > 0
            continue
        family = table.get(offer.gpu)
        assert family.name == offer.gpu  # canonical, not a supplier spelling
        assert offer.gpu_memory_gb in family.memory_gb, offer  # a real variant
        assert offer.gpu_count >= 1


def test_embedded_catalog_holds_cpu_only_machines() -> None:
    cpu_only = [o for o in catalog.embedded().offers if o.gpu is None]
    assert len(cpu_only) == 315
    assert {o.supplier for o in cpu_only} == {"aws", "azure", "runpod"}
    graviton = [o for o in cpu_only if o.machine_id.startswith(("c7g.", "m7g."))]
    assert graviton and all(o.arch == "arm64" for o in graviton)
    assert catalog.embedded().meta["cpu_only_rows"] == 315


def test_embedded_catalog_records_its_sources_date_and_name() -> None:
    meta = catalog.embedded().meta
    assert meta["built_from"] == "tools/catalog/offers.csv"
    assert "SOURCES.md" in meta["provenance"]
    assert meta["built_at"]
    assert meta["rows"] == len(catalog.embedded().offers)
    suppliers = {s["supplier"] for s in meta["sources"]}
    assert {"aws", "gcp", "azure", "lambda"} <= suppliers
    for source in meta["sources"]:
        assert source["repo"] and source["commit"] and source["path"]
    # The date the prices are as of, and why it is the only date there is.
    assert date.fromisoformat(meta["prices_as_of"])
    assert "commits, not dates" in meta["as_of_note"]
    assert meta["name"] == "nodus embedded catalog, 19 suppliers"
    cat = catalog.embedded()
    assert cat.as_of == date.fromisoformat(meta["prices_as_of"])
    assert cat.label == f"embedded catalog (prices as of {meta['prices_as_of']})"
    assert cat.kind == catalog.EMBEDDED


def test_the_sourced_data_lives_in_the_repository() -> None:
    folder = OFFERS.parent
    for name in ("offers.csv", "SOURCES.md", "nvidia_smi_names.txt"):
        assert (folder / name).is_file(), name
    sources = (folder / "SOURCES.md").read_text(encoding="utf-8")
    assert "skypilot-org/skypilot-catalog" in sources
    with OFFERS.open(encoding="utf-8") as handle:
        assert sum(1 for _ in handle) == 2662  # header + 2661 rows


def test_vast_sizes_are_minimums_and_others_are_exact() -> None:
    offers = catalog.embedded().offers
    vast = [o for o in offers if o.supplier == "vast"]
    assert vast and all(o.size_is_minimum for o in vast)
    assert not any(o.size_is_minimum for o in offers if o.supplier != "vast")
    assert vast[0].as_json()["host_size"] == "minimum"
    assert catalog.embedded().meta["host_size_minimum"].keys() == {"vast"}


def test_a_region_has_no_empty_parts() -> None:
    # SkyPilot's vast.ai file writes a region without a state as ", US, NA".
    from nodus_cli.catalog import rows

    cells = rows.check(
        ["vast", "2x-H100", ", US, NA", "H100", "2", "80", "32", "64", "", "x86_64", "3.7", "", ""]
    )
    assert cells is not None and cells[2] == "US, NA"
    regions = [o.region for o in catalog.embedded().offers if o.supplier == "vast"]
    assert "US, NA" in regions
    assert not [r for r in regions if r.startswith(",") or ", ," in r or r.endswith(",")]


def test_embedded_catalog_knows_the_quirks() -> None:
    offers = catalog.embedded().offers
    by_machine = {(o.supplier, o.machine_id): o for o in offers}
    assert by_machine[("aws", "g5.xlarge")].gpu_memory_gb == 24.0  # not AWS's 22.4
    assert by_machine[("aws", "p4de.24xlarge")].gpu_memory_gb == 80.0  # A100-80GB
    assert by_machine[("aws", "p4d.24xlarge")].gpu_memory_gb == 40.0
    assert by_machine[("lambda", "gpu_1x_gh200")].arch == "arm64"
    assert by_machine[("azure", "Standard_ND96isr_H100_v5")].gpu_count == 8


def test_build_tool_reproduces_the_embedded_catalog(tmp_path: Path) -> None:
    """From the repository alone: the default input is tools/catalog/offers.csv."""
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "build_catalog.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    built = (tmp_path / "catalog.csv").read_text(encoding="utf-8")
    assert built == catalog.embedded_path().read_text(encoding="utf-8")
    meta = json.loads((tmp_path / "catalog_meta.json").read_text(encoding="utf-8"))
    embedded = catalog.embedded().meta
    for key in ("sources", "name", "prices_as_of", "rows", "suppliers", "dropped", "provenance"):
        assert meta[key] == embedded[key], key


def test_build_tool_takes_another_as_of_date(tmp_path: Path) -> None:
    args = [sys.executable, str(REPO / "tools" / "build_catalog.py"), "--out", str(tmp_path)]
    done = subprocess.run([*args, "--as-of", "2027-01-15"], capture_output=True, check=False)
    assert done.returncode == 0
    meta = json.loads((tmp_path / "catalog_meta.json").read_text(encoding="utf-8"))
    assert meta["prices_as_of"] == "2027-01-15"
    done = subprocess.run([*args, "--as-of", "soon"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "YYYY-MM-DD" in done.stderr


def test_offers_csv_as_a_user_catalog_equals_the_embedded_catalog() -> None:
    """One canonicalization for both: the build tool and --catalog use parse_row."""
    user = catalog.load_user_catalog(OFFERS)
    assert user.offers == catalog.embedded().offers
    assert user.meta["dropped"] == catalog.embedded().meta["dropped"]


def test_what_nodus_writes_it_reads_back(tmp_path: Path) -> None:
    offers = catalog.embedded().offers
    path = tmp_path / "offers.csv"
    cells = [catalog.check(row) for row in _cells(catalog.embedded_path())]
    path.write_bytes(files.write_rows(c for c in cells if c is not None))
    assert files.read_canonical(path) == offers
    assert path.read_bytes() == catalog.embedded_path().read_bytes()  # one layout
    odd = ("acme", "m,1", 'us "east"', "", "0", "0", "2", "4", "", "x86_64", "1", "", "")
    path.write_bytes(files.write_rows([odd]))
    (offer,) = files.read_canonical(path)
    assert (offer.machine_id, offer.region) == ("m,1", 'us "east"')


def _cells(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        order = [header.index(c) for c in catalog.COLUMNS]
        return [[row[i] for i in order] for row in reader]
