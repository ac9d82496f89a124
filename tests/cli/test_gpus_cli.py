"""``nodus gpus`` and ``nodus catalog`` as a user runs them: a subprocess per call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from catalog_support import HEADER

from nodus_cli import catalog

MARKET = """\
aws,p5.48xlarge,H100,8,80,192,2048,us-east-1,98.32,20.99,x86_64
lambda,gpu_8x_h100_sxm5,NVIDIA H100 80GB HBM3,8,79.6,208,1800,us-west-1,23.92,,x86_64
lambda,gpu_1x_h100_pcie,H100-PCIe,1,80,26,200,europe-central-1,2.49,,x86_64
runpod,4x_H100_SECURE,H100,4,80,64,500,EU-RO-1,10.00,,x86_64
aws,p4d.24xlarge,A100,8,40,96,1152,us-east-1,32.77,,x86_64
gcp,a2-ultragpu-1g,A100-80GB,1,,12,170,us-central1,5.07,,x86_64
aws,g5.xlarge,A10G,1,22.4,4,16,us-east-1,1.006,,x86_64
aws,g5.12xlarge,A10G,4,22.4,48,192,us-east-1,5.672,,x86_64
"""


def nodus(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NODUS_CATALOG", "FORCE_COLOR")}
    env.update({"NO_COLOR": "1", "NODUS_HOME": str(tmp_path / "state"), **extra})
    return subprocess.run(
        [sys.executable, "-m", "nodus_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def market(tmp_path: Path, rows: str = MARKET) -> str:
    path = tmp_path / "market.csv"
    path.write_text(HEADER + rows, encoding="utf-8")
    return str(path)


def gpus_json(tmp_path: Path, *args: str) -> dict[str, Any]:
    done = nodus(tmp_path, "gpus", "--json", *args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def family(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [g for g in doc["gpus"] if g["name"] == name]
    assert len(found) == 1, name
    return found[0]


# -- nodus gpus ----------------------------------------------------------------------------------


def test_gpus_json_follows_spec_3_1(tmp_path: Path) -> None:
    doc = gpus_json(tmp_path, "--catalog", market(tmp_path))
    for g in doc["gpus"]:
        assert set(g) >= {
            "name",
            "aliases",
            "vendor",
            "memory_gb",
            "counts",
            "min_price_per_gpu_hour",
        }
    h100 = family(doc, "H100")
    assert h100["vendor"] == "nvidia"
    assert h100["memory_gb"] == [80.0, 94.0]
    assert h100["counts"] == [1, 4, 8]
    assert h100["min_price_per_gpu_hour"] == 2.49  # lambda 1x H100 at $2.49
    assert h100["cheapest"]["machine_id"] == "gpu_1x_h100_pcie"
    a100 = family(doc, "A100")
    assert a100["counts"] == [1, 8]
    assert a100["min_price_per_gpu_hour"] == pytest.approx(32.77 / 8)
    a10g = family(doc, "A10G")
    assert a10g["min_price_per_gpu_hour"] == pytest.approx(1.006)
    assert a10g["counts"] == [1, 4]
    # Models with no offer are listed too, with no price.
    b200 = family(doc, "B200")
    assert b200["counts"] == [] and b200["min_price_per_gpu_hour"] is None
    a6000 = family(doc, "RTX A6000")
    assert "A6000" in a6000["aliases"]


def test_gpus_filters(tmp_path: Path) -> None:
    cat = market(tmp_path)
    h100 = family(gpus_json(tmp_path, "--catalog", cat, "--supplier", "aws"), "H100")
    assert h100["counts"] == [8] and h100["min_price_per_gpu_hour"] == pytest.approx(12.29)
    h100 = family(gpus_json(tmp_path, "--catalog", cat, "--location", "eu"), "H100")
    assert h100["counts"] == [1, 4]
    h100 = family(gpus_json(tmp_path, "--catalog", cat, "--count", "8"), "H100")
    assert h100["min_price_per_gpu_hour"] == pytest.approx(2.99)
    h100 = family(
        gpus_json(tmp_path, "--catalog", cat, "--count", "8", "--location", "us-east"), "H100"
    )
    assert h100["offers"] == 1 and h100["cheapest"]["supplier"] == "aws"


def test_gpus_table(tmp_path: Path) -> None:
    done = nodus(tmp_path, "gpus", "--catalog", market(tmp_path))
    assert done.returncode == 0
    out = done.stdout
    (line,) = [ln for ln in out.splitlines() if ln.startswith("H100 ")]
    assert "nvidia" in line
    assert "80/94 GB" in line
    assert "1,4,8" in line
    assert "$2.49" in line
    # Where the cheapest is: supplier, machine and region, one column each.
    assert line.split()[-3:] == ["lambda", "gpu_1x_h100_pcie", "europe-central-1"]


def test_gpus_filtered_table_lists_only_models_on_offer(tmp_path: Path) -> None:
    done = nodus(tmp_path, "gpus", "--catalog", market(tmp_path), "--supplier", "gcp")
    assert done.returncode == 0
    models = [ln.split()[0] for ln in done.stdout.splitlines()[2:] if ln and ln[0].isalnum()]
    assert "A100" in models and "H100" not in models


@pytest.mark.parametrize("name", ["H100", "h100", "nvidia h-100", "NVIDIA_H100"])
def test_gpus_name_in_any_spelling(tmp_path: Path, name: str) -> None:
    doc = gpus_json(tmp_path, name, "--catalog", market(tmp_path))
    assert [g["name"] for g in doc["gpus"]] == ["H100"]
    offers = doc["offers"]
    assert len(offers) == 4
    # Cheapest per GPU-hour first.
    assert [(o["supplier"], o["region"], o["gpu_count"]) for o in offers] == [
        ("lambda", "europe-central-1", 1),  # $2.49 per GPU-hour
        ("runpod", "EU-RO-1", 4),  # $2.50
        ("lambda", "us-west-1", 8),  # $2.99
        ("aws", "us-east-1", 8),  # $12.29
    ]
    (p5,) = [o for o in offers if o["machine_id"] == "p5.48xlarge"]
    assert p5["price_per_hour"] == 98.32
    assert p5["price_per_gpu_hour"] == pytest.approx(12.29)
    assert p5["gpu_memory_gb"] == 80.0


def test_gpus_name_table_shows_whole_machine_and_per_gpu_prices(tmp_path: Path) -> None:
    done = nodus(tmp_path, "gpus", "A10G", "--catalog", market(tmp_path))
    assert done.returncode == 0
    (line,) = [ln for ln in done.stdout.splitlines() if "g5.12xlarge" in ln]
    assert "$5.67" in line and "$1.42" in line
    assert " 24 " in line  # nominal memory, not AWS's 22.4
    assert "22.4" not in done.stdout


def test_gpus_memory_variant_name(tmp_path: Path) -> None:
    doc = gpus_json(tmp_path, "A100-80GB", "--catalog", market(tmp_path))
    assert doc["variant_memory_gb"] == 80.0
    assert [o["machine_id"] for o in doc["offers"]] == ["a2-ultragpu-1g"]


def test_gpus_name_with_filters(tmp_path: Path) -> None:
    doc = gpus_json(tmp_path, "H100", "--catalog", market(tmp_path), "--location", "eu")
    assert [o["machine_id"] for o in doc["offers"]] == ["gpu_1x_h100_pcie", "4x_H100_SECURE"]
    doc = gpus_json(tmp_path, "H100", "--catalog", market(tmp_path), "--count", "4")
    assert [o["machine_id"] for o in doc["offers"]] == ["4x_H100_SECURE"]


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("H1000", 'unknown GPU model "H1000"'),
        ("p4d.24xlarge", "8× A100"),  # a machine ID: what it carries
        ("aws", "is a supplier"),
    ],
)
def test_gpus_bad_names(tmp_path: Path, name: str, words: str) -> None:
    done = nodus(tmp_path, "gpus", name)
    assert done.returncode == 2
    assert words in done.stderr
    assert "Traceback" not in done.stderr


def test_gpus_unknown_supplier_and_location_warn(tmp_path: Path) -> None:
    done = nodus(tmp_path, "gpus", "--catalog", market(tmp_path), "--supplier", "awz")
    assert done.returncode == 0
    assert 'no supplier "awz"' in done.stdout and "aws" in done.stdout
    done = nodus(tmp_path, "gpus", "--catalog", market(tmp_path), "--location", "mars")
    assert "matches no region" in done.stdout


def test_gpus_bad_count(tmp_path: Path) -> None:
    done = nodus(tmp_path, "gpus", "--count", "0")
    assert done.returncode == 2


def test_gpus_embedded_catalog(tmp_path: Path) -> None:
    doc = gpus_json(tmp_path)
    h100 = family(doc, "H100")
    assert 8 in h100["counts"]
    assert h100["min_price_per_gpu_hour"] > 0
    # Every family in the embedded catalog is a canonical name.
    offered = {o.gpu for o in catalog.embedded().offers if o.gpu is not None}
    assert offered <= {g["name"] for g in doc["gpus"]}
    a10g = gpus_json(tmp_path, "A10G")
    assert {o["gpu_memory_gb"] for o in a10g["offers"]} == {24.0}


def test_gpus_bad_catalog(tmp_path: Path) -> None:
    cat = market(tmp_path, MARKET + "aws,x,Z9000,1,16,8,32,us-east-1,1,,x86_64\n")
    done = nodus(tmp_path, "gpus", "--catalog", cat)
    assert done.returncode == 1
    assert "market.csv:10: unknown GPU 'Z9000'" in done.stderr
    assert "Traceback" not in done.stderr


# -- nodus catalog -------------------------------------------------------------------------------


def test_catalog_shows_the_embedded_catalog_path_sources_and_date(tmp_path: Path) -> None:
    done = nodus(tmp_path, "catalog")
    assert done.returncode == 0
    out = done.stdout
    assert str(catalog.embedded_path()) in out
    assert "embedded catalog" in out
    assert f"built from tools/catalog/offers.csv on {catalog.embedded().meta['built_at']}" in out
    assert "skypilot-org/skypilot-catalog@" in out
    doc = json.loads(nodus(tmp_path, "catalog", "--json").stdout)
    assert doc["path"] == str(catalog.embedded_path())
    assert doc["embedded"] is True
    assert doc["rows"] == len(catalog.embedded().offers)
    assert doc["built_at"]
    assert {s["supplier"] for s in doc["sources"]} >= {"aws", "gcp"}


def test_catalog_shows_a_user_catalog(tmp_path: Path) -> None:
    cat = market(tmp_path)
    doc = json.loads(nodus(tmp_path, "catalog", "--json", "--catalog", cat).stdout)
    assert doc["path"] == cat
    assert doc["embedded"] is False
    assert doc["chosen_by"] == "--catalog"
    assert doc["rows"] == 8
    assert doc["suppliers"] == {"aws": 4, "gcp": 1, "lambda": 2, "runpod": 1}
    doc = json.loads(nodus(tmp_path, "catalog", "--json", NODUS_CATALOG=cat).stdout)
    assert doc["path"] == cat and doc["chosen_by"] == "NODUS_CATALOG"
    done = nodus(tmp_path, "catalog", NODUS_CATALOG=cat)
    assert cat in done.stdout and "user catalog" in done.stdout


# -- names: the table catalog imports read, variants refused or narrowed (issue 18) ---------


def test_gpus_takes_every_name_a_catalog_import_takes(tmp_path: Path) -> None:
    """RTX6000 (Lambda's gpu_1x_rtx6000) is the Quadro RTX 6000 24 GB in both."""
    doc = gpus_json(tmp_path, "RTX6000")
    assert [g["name"] for g in doc["gpus"]] == ["Quadro RTX 6000"]
    assert ("lambda", "gpu_1x_rtx6000") in {(o["supplier"], o["machine_id"]) for o in doc["offers"]}
    assert {o["gpu_memory_gb"] for o in doc["offers"]} == {24.0}


@pytest.mark.parametrize("name", ["H100-MEGA", "H100-SXM", "NVIDIA H100 80GB HBM3", "A100 SXM4"])
def test_gpus_refuses_a_variant_it_cannot_tell_apart(tmp_path: Path, name: str) -> None:
    done = nodus(tmp_path, "gpus", name, "--catalog", market(tmp_path))
    assert done.returncode == 2, done.stdout
    family = "H100" if "H100" in name else "A100"
    assert f"names a variant of the {family}" in done.stderr
    assert "apart by memory only" in done.stderr
    assert f"hint: `nodus gpus {family}` lists every {family} offer" in done.stderr
    assert done.stdout == ""


def test_gpus_narrows_a_variant_its_memory_names(tmp_path: Path) -> None:
    rows = MARKET + "vast,1x-H100_NVL-32-65536,H100-NVL,1,94,32,64,US,2.08,,x86_64\n"
    doc = gpus_json(tmp_path, "H100 NVL", "--catalog", market(tmp_path, rows))
    assert doc["variant_memory_gb"] == 94.0
    assert [o["machine_id"] for o in doc["offers"]] == ["1x-H100_NVL-32-65536"]
