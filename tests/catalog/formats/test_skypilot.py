"""SkyPilot vms.csv files (v6, v7, v8 layouts) converted to catalog rows and validated."""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Sequence

import pytest
import skypilot_real as real
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
        "GPU host a3-edgegpu-8g-nolssd: no H100 ×8 GPU row in its zone": 1,
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
    a2 = next(o for o in found if o.machine_id == "a2-highgpu-1g" and o.region == "us-central1")
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


# -- real rows of SkyPilot's GCP catalog (tests/catalog/skypilot/gcp_v8.csv) ------------------


def gcp() -> tuple[dict[tuple[str, str | None, int, str], Offer], Checked]:
    found, checked = offers(real.read("gcp_v8.csv"), "gcp")
    by_key = {(o.machine_id, o.gpu, o.gpu_count, o.region): o for o in found}
    assert len(by_key) == len(found)  # one configuration per machine and region
    return by_key, checked


def test_gcp_every_host_and_gpu_pair_is_priced_as_skypilot_prices_it() -> None:
    """Issue 18, defect 1: host row + GPU row of one zone, price and spot summed; no GPU
    row is dropped for being cheaper than the same GPU elsewhere."""
    by_key, _ = gcp()
    # (machine, gpu, count, region): (price, spot), SkyPilot's sums (gcp_pricing_rule.md)
    expected = {
        ("a3-highgpu-8g", "H100", 8, "us-central1"): (43.06615, 26.83013),  # 9.46006 + 33.60609
        ("a3-highgpu-8g", "H100", 8, "us-east4"): (87.83247, 20.04446),
        ("a3-highgpu-8g", "H100", 8, "asia-northeast1"): (45.7547, 31.50253),
        ("a2-highgpu-1g", "A100", 1, "us-central1"): (3.67339, 1.80385),
        ("a2-highgpu-1g", "A100", 1, "europe-west4"): (2.42771, 1.48734),
        ("a2-ultragpu-1g", "A100", 1, "us-central1"): (2.94582, 2.51378),  # A100-80GB
        ("a2-ultragpu-1g", "A100", 1, "europe-west4"): (3.24335, 2.63588),
        ("a3-ultragpu-8g", "H200", 8, "us-central1"): (86.75992, 40.99433),
        ("a3-ultragpu-8g", "H200", 8, "europe-west4"): (49.48188, 42.05909),
        ("g2-standard-4", "L4", 1, "us-central1"): (0.70683, 0.28184),
        ("n1-standard-4", "T4", 1, "us-central1"): (0.54, 0.22723),
        ("n1-standard-8", "V100", 1, "us-central1"): (2.86, 1.19296),
    }
    for key, (price, spot) in expected.items():
        offer = by_key[key]
        assert (offer.price_per_hour, offer.spot_price_per_hour) == (price, spot), key
    # A spot price above the on-demand one is SkyPilot's data: kept, as it sums them.
    a100_80 = by_key[("a2-ultragpu-1g", "A100", 1, "us-central1")]
    assert a100_80.gpu_memory_gb == 80.0
    cheapest = min(
        (o for o in by_key.values() if o.gpu == "H100" and o.gpu_count == 8),
        key=lambda o: o.price_per_hour,
    )
    assert (cheapest.machine_id, cheapest.region) in {
        ("a3-highgpu-8g", "us-central1"),
        ("a3-edgegpu-8g", "us-central1"),
        ("a3-edgegpu-8g-nolssd", "us-central1"),
    }
    assert cheapest.price_per_hour == 43.06615


def test_gcp_b200_pairs_with_its_host_priced_zero() -> None:
    """Defect 2: a4-highgpu-8g hosts cost 0.0 (the B200 row carries the whole price)."""
    by_key, _ = gcp()
    b200 = {region: o for (m, g, n, region), o in by_key.items() if g == "B200"}
    assert sorted(b200) == ["europe-west4", "us-central1", "us-east4", "us-west3"]
    assert all(o.machine_id == "a4-highgpu-8g" and o.gpu_count == 8 for o in b200.values())
    assert (b200["us-central1"].price_per_hour, b200["us-central1"].spot_price_per_hour) == (
        90.216,
        32.6064,
    )
    assert b200["us-east4"].price_per_hour == 64.44
    assert b200["us-central1"].gpu_memory_gb == 180.0


def test_gcp_nolssd_hosts_pair_like_their_twins() -> None:
    """Defect 3: a3-edgegpu-8g-nolssd and a3-ultragpu-8g-nolssd."""
    by_key, _ = gcp()
    for twin, gpu in (("a3-edgegpu-8g", "H100"), ("a3-ultragpu-8g", "H200")):
        regions = {r for (m, g, n, r) in by_key if m == twin and g == gpu}
        assert regions
        for region in regions:
            plain = by_key[(twin, gpu, 8, region)]
            nolssd = by_key[(f"{twin}-nolssd", gpu, 8, region)]
            assert (nolssd.price_per_hour, nolssd.spot_price_per_hour) == (
                plain.price_per_hour,
                plain.spot_price_per_hour,
            )


def test_gcp_every_refused_row_is_reported_with_its_line_and_reason() -> None:
    """Defect 4: GPU rows without a host are reported, not dropped; the report adds up in
    rows and in configurations."""
    _, checked = gcp()
    name = "gcp_v8.csv"
    refused = {line: r for r in checked.refused for line in r.lines}
    for words, reason in [
        (("H100-MEGA", "asia-northeast3-a"), "H100-MEGA ×8 GPU row: no host row (a3-megagpu-8g)"),
        (("H200", "asia-south1-b"), "H200 ×8 GPU row: no host row (a3-ultragpu-8g) in its zone"),
        ((",,,H100,1,", "us-east4-a"), "H100 ×1 GPU row: no host row (a3-highgpu-1g) in its zone"),
        ((",,,T4,4,",), "T4 ×4 GPU row: no host row (n1-standard-32) in its zone"),
        (("tpu-v6e-1", "asia-east1-c"), "not a GPU (tpu)"),
    ]:
        line = real.line_of(name, *words)
        assert refused[line].reason.startswith(reason), (words, refused[line].reason)
        assert not refused[line].bad
    # 100 rows: 22 refused (16 GPU rows without a host in their zone, 6 TPU rows), as 21
    # configurations (the two identical TPU rows of us-central2-b are one).
    assert checked.rows_read == 100
    assert checked.rows_refused == 22 and checked.rows_used == 78
    assert len(checked.refused) == 21
    lines = sorted(n for r in checked.refused for n in r.lines)
    assert len(lines) == len(set(lines)) == 22  # each refused row reported once


def test_gcp_v7_and_v9_layouts_price_the_same_way() -> None:
    found, checked = offers(real.read("gcp_v7.csv"), "gcp")
    by_key = {(o.machine_id, o.gpu, o.gpu_count, o.region): o for o in found}
    # v7's spot price above its on-demand one (60.86432 > 33.60609) is kept as summed.
    h100 = by_key[("a3-highgpu-8g", "H100", 8, "us-central1")]
    assert h100.price_per_hour == 43.06615
    assert checked.rows_used + checked.rows_refused == checked.rows_read == 18
    found, checked = offers(real.read("gcp_v9.csv"), "gcp")
    by_key = {(o.machine_id, o.gpu, o.gpu_count, o.region): o for o in found}
    a100 = by_key[("a2-highgpu-1g", "A100", 1, "us-central1")]
    assert (a100.price_per_hour, a100.spot_price_per_hour) == (3.67339, 1.92802)
    assert ("z3-highmem-88-highlssd", None, 0, "us-central1") in by_key  # a CPU machine
    line = real.line_of("gcp_v9.csv", "A100,1", "asia-northeast1-a")
    (why,) = [r for r in checked.refused if line in r.lines]
    assert why.reason == "A100 ×1 GPU row: no host row (a2-highgpu-1g) in its zone"


# -- real rows of RunPod, AWS and Lambda ---------------------------------------------------


def test_runpod_gpu_memory_in_gb_under_the_mib_label() -> None:
    """Defect 5: RunPod's GpuInfo says SizeInMiB: 80 for an 80 GB GPU."""
    text = real.read("runpod_v8.csv")
    memory = {
        (c["machine_id"], c["region"]): c["gpu_memory_gb"]
        for c in map(cells, converted_rows(text, "runpod"))
    }
    assert memory[("1x_A100-80GB_SECURE", "CA")] == "80.0"  # not 0.1
    assert memory[("4x_RTXA4000_SECURE", "US")] == "16.0"
    found, checked = offers(text, "runpod")
    assert {o.gpu_memory_gb for o in found if o.gpu == "A100"} == {80.0}
    assert checked.rows_used == checked.rows_read == 11
    # The memory must come from GpuInfo when the name does not say it: the same real row
    # with the bare family name is an 80 GB A100, not the 40 GB one.
    bare = text.replace("1x_A100-80GB_SECURE,A100-80GB,", "1x_A100-SXM4_SECURE,A100,", 1)
    (a100,) = [o for o in offers(bare, "runpod")[0] if o.machine_id == "1x_A100-SXM4_SECURE"]
    assert (a100.gpu, a100.gpu_memory_gb) == ("A100", 80.0)


def test_aws_v9_local_disk_and_arch_are_read() -> None:
    """Defect 6: v9's LocalDiskSize x LocalDiskCount is the machine's disk, Arch its CPU."""
    found, checked = offers(real.read("aws_v9.csv"), "aws")
    by_key = {(o.machine_id, o.region): o for o in found}
    p5 = by_key[("p5.48xlarge", "ap-northeast-1")]
    assert (p5.disk_gb, p5.gpu, p5.gpu_count, p5.arch) == (30400.0, "H100", 8, "x86_64")
    assert by_key[("p4d.24xlarge", "us-east-1")].disk_gb == 8000.0
    assert by_key[("c3.2xlarge", "us-east-1")].disk_gb == 160.0  # 2 x 80 GB SSD
    assert by_key[("c1.medium", "us-east-1")].disk_gb == 350.0  # an HDD is disk too
    assert by_key[("a1.2xlarge", "us-east-1")].arch == "arm64"  # from the Arch column
    assert by_key[("c1.medium", "us-east-1")].arch == "x86_64"  # i386: runs 64-bit code too
    assert by_key[("p3.8xlarge", "us-west-2")].disk_gb is None  # no instance store
    assert checked.rows_used + checked.rows_refused == checked.rows_read == 16


def test_aws_v7_and_v8_rows_match_skypilots_prices() -> None:
    found, checked = offers(real.read("aws_v8.csv"), "aws")
    by_key = {(o.machine_id, o.region): o for o in found}
    assert by_key[("a1.large", "us-east-1")].arch == "arm64"
    assert by_key[("p5.48xlarge", "us-east-1")].gpu_count == 8
    found, checked = offers(real.read("aws_v7.csv"), "aws")
    by_key = {(o.machine_id, o.region): o for o in found}
    # p4de.24xlarge use1-az4 is listed twice (two GpuInfo spellings): one configuration.
    assert sum(1 for o in found if o.machine_id == "p4de.24xlarge") == len(
        {o.region for o in found if o.machine_id == "p4de.24xlarge"}
    )
    assert checked.rows_used + checked.rows_refused == checked.rows_read


def test_lambda_rtx6000_is_the_quadro_rtx_6000() -> None:
    found, _ = offers(real.read("lambda_v8.csv"), "lambda")
    (rtx,) = {(o.gpu, o.gpu_memory_gb) for o in found if o.machine_id == "gpu_1x_rtx6000"}
    assert rtx == ("Quadro RTX 6000", 24.0)
    found, _ = offers(real.read("lambda_v9.csv"), "lambda")
    assert {o.machine_id for o in found} >= {"gpu_8x_v100_n", "gpu_1x_a100_sxm4"}


def test_a_zone_with_spot_0_does_not_hide_the_other_zones_spot_prices() -> None:
    """The spot price is the lowest above 0 over the zones: 0 in one zone is none there."""
    header = samples.AWS_V7.splitlines()[0]
    text = (
        f"{header}\n"
        "c7g.large,,,2.0,4.0,,0.0725,0,us-east-1,use1-az1\n"
        "c7g.large,,,2.0,4.0,,0.0725,0.0312,us-east-1,use1-az2\n"
        "c7g.large,,,2.0,4.0,,0.0725,0.0298,us-east-1,use1-az3\n"
    )
    found, checked = offers(text, "aws")
    assert [(o.region, o.price_per_hour, o.spot_price_per_hour) for o in found] == [
        ("us-east-1", 0.0725, 0.0298)
    ]
    assert checked.rows_used == 3


@pytest.mark.parametrize("cell", ["-0.5", "nan", " ", "0.0"])
def test_a_zone_whose_spot_price_is_not_above_0_is_a_zone_without_one(cell: str) -> None:
    """Between two zones with a spot price, one with a negative, NaN, blank or 0 cell: the
    region's spot price is the lowest of the others."""
    header = samples.AWS_V7.splitlines()[0]
    text = (
        f"{header}\n"
        "c7g.large,,,2.0,4.0,,0.0725,0.0312,us-east-1,use1-az1\n"
        f"c7g.large,,,2.0,4.0,,0.0725,{cell},us-east-1,use1-az2\n"
        "c7g.large,,,2.0,4.0,,0.0725,0.0298,us-east-1,use1-az3\n"
    )
    found, checked = offers(text, "aws")
    assert [(o.region, o.spot_price_per_hour) for o in found] == [("us-east-1", 0.0298)]
    assert checked.rows_used == 3


def test_a_zone_whose_spot_price_is_not_a_number_refuses_its_region() -> None:
    """A spot cell that is no number, in the middle zone (not the lowest, not the first):
    the region's configuration is refused, with its lines and the cell; the other region
    stays."""
    header = samples.AWS_V7.splitlines()[0]
    text = (
        f"{header}\n"
        "c7g.large,,,2.0,4.0,,0.0725,0.0312,us-east-1,use1-az1\n"
        "c7g.large,,,2.0,4.0,,0.0725,abc,us-east-1,use1-az2\n"
        "c7g.large,,,2.0,4.0,,0.0725,0.0298,us-east-1,use1-az3\n"
        "c7g.large,,,2.0,4.0,,0.0725,0.0301,us-west-2,usw2-az1\n"
    )
    found, checked = offers(text, "aws")
    assert [(o.region, o.spot_price_per_hour) for o in found] == [("us-west-2", 0.0301)]
    assert [(r.line, r.reason, r.lines) for r in checked.refused] == [
        (2, "spot_price_per_hour is not a number: 'abc'", (2, 3, 4))
    ]


def test_zones_whose_prices_differ_make_one_row_at_the_regions_price() -> None:
    """A zone without a price between two with one, and a zone priced higher: one
    configuration, the highest price, every row used once."""
    header = samples.AWS_V7.splitlines()[0]
    text = (
        f"{header}\n"
        "c7g.large,,,2.0,4.0,,0.0725,0.0301,us-east-1,use1-az1\n"
        "c7g.large,,,2.0,4.0,,,0.0290,us-east-1,use1-az2\n"
        "c7g.large,,,2.0,4.0,,0.0725,0.0305,us-east-1,use1-az3\n"
        "c7g.large,,,2.0,4.0,,0.0800,0.0310,us-east-1,use1-az4\n"
        "c7g.large,,,2.0,4.0,,0.0725,0.0301,us-west-2,usw2-az1\n"
    )
    found, checked = offers(text, "aws")
    got = {o.region: (o.price_per_hour, o.spot_price_per_hour) for o in found}
    assert got == {"us-east-1": (0.08, 0.029), "us-west-2": (0.0725, 0.0301)}
    assert (checked.rows_used, checked.rows_refused, checked.rows_read) == (5, 0, 5)
