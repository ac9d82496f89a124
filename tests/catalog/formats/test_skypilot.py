"""SkyPilot vms.csv files (v6, v7, v8 layouts) converted to catalog rows and validated."""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Sequence

import pytest
import skypilot_samples as samples
from paths import REPO

from nodus_cli import catalog
from nodus_cli.catalog import Offer, formats
from nodus_cli.catalog.formats import Checked, FormatError, skypilot

OFFERS = REPO / "tools" / "catalog" / "offers.csv"


def offers(text: str, supplier: str) -> tuple[list[Offer], Checked]:
    checked = formats.check(skypilot.FORMAT.convert(text, supplier))
    assert checked.rows_used + checked.rows_refused == checked.rows_read  # every row counted
    return [catalog.offer(c) for c in checked.rows], checked


def reasons(checked: Checked) -> dict[str, int]:
    """Refused configurations by reason."""
    return dict(Counter(r.reason for r in checked.refused))


def cells(row: Sequence[str]) -> dict[str, str]:
    """A converted row by column name."""
    return dict(zip(catalog.COLUMNS, row, strict=True))


def converted_rows(text: str, supplier: str) -> list[Sequence[str]]:
    return [c for _, c in skypilot.FORMAT.convert(text, supplier).rows()]


def test_aws_v7_one_row_per_type_and_region_with_the_lowest_spot_of_its_zones() -> None:
    found, checked = offers(samples.AWS_V7, "aws")
    got = {
        (o.machine_id, o.region): (o.gpu, o.gpu_count, o.price_per_hour, o.spot_price_per_hour)
        for o in found
    }
    assert got == {k: v[:4] for k, v in samples.AWS_V7_EXPECTED.items()}
    arch = {(o.machine_id, o.region): o.arch for o in found}
    assert arch == {k: v[4] for k, v in samples.AWS_V7_EXPECTED.items()}
    assert reasons(checked) == {"not a GPU (Inferentia2)": 1, "no on-demand price": 1}
    assert checked.rows_read == len(samples.AWS_V7.splitlines()) - 1
    # AWS's 22888 MiB L4 is the 24 GB model.
    assert {o.gpu_memory_gb for o in found if o.gpu == "L4"} == {24.0}


def test_aws_rows_match_the_embedded_transcription() -> None:
    """The same rules as tools/catalog/offers.csv: g6.xlarge in us-east-1 and us-west-2."""
    with OFFERS.open(encoding="utf-8") as handle:
        rows = {
            (r["machine_id"], r["region"]): r
            for r in csv.DictReader(handle)
            if r["supplier"] == "aws" and r["machine_id"] == "g6.xlarge"
        }
    converted = {
        (c["machine_id"], c["region"]): c for c in map(cells, converted_rows(samples.AWS_V7, "aws"))
    }
    for key in (("g6.xlarge", "us-east-1"), ("g6.xlarge", "us-west-2")):
        assert float(converted[key]["price_per_hour"]) == float(rows[key]["price_per_hour"])
        assert float(converted[key]["spot_price_per_hour"]) == float(
            rows[key]["spot_price_per_hour"]
        )


def test_gcp_v8_hosts_and_gpus_are_priced_together() -> None:
    found, checked = offers(samples.GCP_V8, "gcp")
    got = {
        (o.machine_id, o.gpu, o.gpu_count, o.region): (o.price_per_hour, o.spot_price_per_hour)
        for o in found
    }
    assert got == samples.GCP_V8_EXPECTED
    a2 = next(o for o in found if o.machine_id == "a2-highgpu-1g")
    assert (a2.vcpus, a2.memory_gb, a2.gpu_memory_gb) == (12.0, 85.0, 40.0)
    assert reasons(checked) == {
        "anomalous regional GPU price (A100)": 1,
        "unpaired GPU host": 1,  # a2-highgpu-1g in europe-west4
        "GPU host without a known pairing": 2,  # a3-edgegpu-8g-nolssd, a4-highgpu-8g
        "GPU row without a host": 1,  # B200
        "not a GPU (tpu)": 1,
    }
    assert "host and GPU rows" in checked.layout


def test_gcp_pair_equals_the_embedded_row() -> None:
    with OFFERS.open(encoding="utf-8") as handle:
        (row,) = [
            r
            for r in csv.DictReader(handle)
            if r["supplier"] == "gcp"
            and r["machine_id"] == "a2-highgpu-1g"
            and r["region"] == "us-central1"
        ]
    found, _ = offers(samples.GCP_V8, "gcp")
    a2 = next(o for o in found if o.machine_id == "a2-highgpu-1g")
    assert a2.price_per_hour == float(row["price_per_hour"])
    assert a2.spot_price_per_hour == float(row["spot_price_per_hour"])


def test_runpod_v7_price_after_spot_and_country_regions() -> None:
    found, _ = offers(samples.RUNPOD_V7, "runpod")
    got = {
        (o.machine_id, o.region): (
            o.gpu,
            o.gpu_count,
            o.price_per_hour,
            o.spot_price_per_hour,
            o.gpu_memory_gb,
        )
        for o in found
    }
    assert got == samples.RUNPOD_V7_EXPECTED


def test_azure_v6_without_zones() -> None:
    found, _ = offers(samples.AZURE_V6, "azure")
    got = {
        (o.machine_id, o.region): (
            o.gpu,
            o.gpu_count,
            o.price_per_hour,
            o.spot_price_per_hour,
            o.arch,
        )
        for o in found
    }
    assert got == samples.AZURE_V6_EXPECTED
    a100 = next(o for o in found if o.gpu)
    assert a100.gpu_memory_gb == 80.0


def test_vast_gpu_memory_is_a_total_and_sizes_are_minimums() -> None:
    found, _ = offers(samples.VAST_V8, "vast")
    got = {
        (o.machine_id, o.region): (o.gpu, o.gpu_count, o.gpu_memory_gb, o.price_per_hour)
        for o in found
    }
    assert got == samples.VAST_V8_EXPECTED
    assert all(o.size_is_minimum and o.spot_price_per_hour is None for o in found)


def test_columns_are_found_by_name_in_any_order() -> None:
    header, *rows = samples.AZURE_V6.splitlines()
    names = next(csv.reader([header]))
    order = list(reversed(range(len(names))))
    shuffled = [",".join(names[i] for i in order)]
    for line in rows:
        cells = next(csv.reader([line]))
        shuffled.append(",".join(f'"{cells[i]}"' for i in order))
    found, _ = offers("\n".join(shuffled) + "\n", "azure")
    assert {(o.machine_id, o.price_per_hour) for o in found} == {
        ("Standard_D2ps_v5", 0.077),
        ("Standard_E2as_v5", 0.128),
        ("Standard_NC24ads_A100_v4", 3.673),
    }


def test_a_file_that_is_not_a_vms_csv() -> None:
    with pytest.raises(FormatError, match=r"not a SkyPilot vms\.csv: the header lacks"):
        skypilot.FORMAT.convert("a,b,c\n1,2,3\n", "aws")
    assert skypilot.FORMAT.detect(samples.GCP_V8.splitlines()[0].split(","))
    assert not skypilot.FORMAT.detect(samples.NODUS_CSV.splitlines()[0].split(","))


def test_unknown_accelerators_are_left_for_the_validator_to_report() -> None:
    text = samples.AZURE_V6 + "Standard_X1,Z9000,1,4.0,16,,1.0,,eastus,V2\n"
    converted = skypilot.FORMAT.convert(text, "azure")
    lines, row = list(converted.rows())[-1]
    assert list(lines) == [5] and cells(row)["gpu"] == "Z9000"
    with pytest.raises(ValueError, match="unknown GPU 'Z9000'"):
        catalog.check(row)
    with pytest.raises(ValueError, match="unknown GPU 'Z9000'"):
        catalog.parse_row(cells(row))  # the same rules as a --catalog row
    (bad,) = formats.check(converted).bad
    assert (bad.line, bad.lines) == (5, (5,))
    assert bad.reason.startswith("unknown GPU 'Z9000'")
