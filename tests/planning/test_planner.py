"""The planner against small hand-written catalogs whose right answers are known.

Every requirement has a test that shows what it excludes, how the exclusion is counted
and what the plan says when it empties the list. Catalogs are CSV text loaded with
``catalog.load_user_catalog``, so supplier spellings go through the real loader.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from nodus_cli import catalog, records
from nodus_cli.catalog import Offer
from nodus_cli.planning.filters import CHECKS
from nodus_cli.planning.plan import Plan, PriceCeiling, StagePlan
from nodus_cli.planning.planner import plan_workload
from nodus_cli.planning.ranking import BASIS_PRICE, BASIS_RUNTIME, RuntimeLookup, no_history
from nodus_cli.workload import Workload, load_text

HEADER = (
    "supplier,machine_id,gpu,gpu_count,gpu_memory_gb,vcpus,memory_gb,region,"
    "price_per_hour,spot_price_per_hour,arch,disk_gb\n"
)


@pytest.fixture(autouse=True)
def _no_user_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own config.toml (a [limits] ceiling) must not change these plans."""
    monkeypatch.setenv("NODUS_CONFIG", str(tmp_path / "no-config.toml"))


def offers(tmp_path: Path, rows: str) -> list[Offer]:
    path = tmp_path / "catalog.csv"
    path.write_text(HEADER + rows, encoding="utf-8")
    return list(catalog.load_user_catalog(path).offers)


def workload(text: str) -> Workload:
    body = 'name = "t"\nimage = "busybox:1"\ncommand = "true"\n' + text
    result = load_text(body, "t.toml", "t")
    assert result.workload is not None, [p.message for p in result.errors]
    return result.workload


def plan(tmp_path: Path, rows: str, text: str, history: RuntimeLookup = no_history) -> Plan:
    return plan_workload(workload(text), offers(tmp_path, rows), history=history)


def stage(tmp_path: Path, rows: str, text: str, history: RuntimeLookup = no_history) -> StagePlan:
    return plan(tmp_path, rows, text, history).stages[0]


def machines(s: StagePlan) -> list[str]:
    return [c.offer.machine_id for c in s.candidates]


def excluded(s: StagePlan) -> dict[str, int]:
    return {k: v for k, v in s.excluded.items() if v}


# A small market: the right answers below are worked out by hand from these rows.
MARKET = """\
aws,p5.48xlarge,H100,8,80,192,2048,us-east-1,98.32,,x86_64,
lambda,gpu_8x_h100_sxm5,NVIDIA H100 80GB HBM3,8,79.6,208,1800,us-west-1,23.92,,x86_64,
lambda,gpu_1x_h100_pcie,H100-PCIe,1,80,26,200,europe-central-1,2.49,,x86_64,
runpod,4x_H100_SECURE,H100,4,80,64,500,EU-RO-1,10.00,,x86_64,
aws,p4d.24xlarge,A100,8,40,96,1152,us-east-1,32.77,,x86_64,
gcp,a2-ultragpu-8g,A100-80GB,8,,96,1360,us-central1,40.22,,x86_64,
lambda,gpu_1x_gh200,GH200,1,96,72,432,us-east-1,1.49,,arm64,
runpod,1x_B200_SECURE,B200,1,180,28,283,US,5.99,,x86_64,
aws,g5.xlarge,A10G,1,22.4,4,16,us-east-1,1.006,,x86_64,
"""


# -- each requirement: what it excludes --------------------------------------------------------


def test_gpu_excludes_every_other_model_and_never_substitutes(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, 'gpu = "H100"')
    assert excluded(s) == {"gpu": 5}  # A100 x2, GH200, B200, A10G
    # The cheaper GH200 and A10G are not offered as "better" or "cheaper" H100s.
    assert machines(s) == [
        "gpu_1x_h100_pcie",
        "4x_H100_SECURE",
        "gpu_8x_h100_sxm5",
        "p5.48xlarge",
    ]
    assert s.basis == BASIS_PRICE


def test_any_gpu_when_no_model_is_named(tmp_path: Path) -> None:
    rows = MARKET + "cudo,cpu-16,,0,,16,64,us-east-1,0.30,,x86_64,\n"
    s = stage(tmp_path, rows, "gpu_count = 1")
    assert excluded(s) == {"gpu": 1}  # only the CPU-only machine
    assert s.selected is not None
    assert s.selected.offer.machine_id == "g5.xlarge"


def test_gpu_count_is_one_machine_with_at_least_that_many(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, 'gpu = "H100"\ngpu_count = 2')
    assert excluded(s) == {"gpu": 5, "gpu_count": 1}  # the 1x H100
    assert machines(s) == ["4x_H100_SECURE", "gpu_8x_h100_sxm5", "p5.48xlarge"]


def test_gpu_count_is_never_satisfied_by_several_machines(tmp_path: Path) -> None:
    rows = """\
runpod,4x_H100_a,H100,4,80,64,500,US,10.0,,x86_64,
runpod,4x_H100_b,H100,4,80,64,500,US,10.5,,x86_64,
runpod,2x_H100,H100,2,80,32,250,US,5.0,,x86_64,
"""
    s = stage(tmp_path, rows, 'gpu = "H100"\ngpu_count = 8')
    assert not s.feasible
    assert excluded(s) == {"gpu_count": 3}
    assert s.emptied_by == "gpu_count"
    text = s.explanation or ""
    assert "no single machine has 8× H100" in text
    assert "group of machines cannot satisfy" in text
    assert "the largest H100 count that meets the other requirements is 4" in text
    # The nearest offers: the largest count first, then the cheapest.
    assert [c.offer.machine_id for c in s.nearest] == ["4x_H100_a", "4x_H100_b", "2x_H100"]


def test_peak_memory_compares_the_nominal_variant(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, 'gpu = "A100"\npeak_memory_gb = 80')
    assert excluded(s) == {"gpu": 7, "peak_memory_gb": 1}  # the 40 GB p4d
    assert machines(s) == ["a2-ultragpu-8g"]  # "A100-80GB" with no figure: 80 GB
    # AWS reports 22.4 GB for the 24 GB A10G: the nominal memory satisfies 24.
    s = stage(tmp_path, MARKET, 'gpu = "A10G"\npeak_memory_gb = 24')
    assert machines(s) == ["g5.xlarge"]
    # An H100 reported as 79.6 GB is an 80 GB H100.
    s = stage(tmp_path, MARKET, 'gpu = "H100"\ngpu_count = 8\npeak_memory_gb = 80')
    assert machines(s) == ["gpu_8x_h100_sxm5", "p5.48xlarge"]


def test_peak_memory_without_a_model_takes_any_gpu_with_enough(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, "peak_memory_gb = 90")
    assert sorted(machines(s)) == ["1x_B200_SECURE", "gpu_1x_gh200"]
    assert excluded(s) == {"peak_memory_gb": 7}


def test_cpu(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, 'gpu = "H100"\n[requirements]\ncpu = 100')
    assert excluded(s) == {"gpu": 5, "cpu": 2}  # the 26- and 64-vCPU machines
    assert machines(s) == ["gpu_8x_h100_sxm5", "p5.48xlarge"]


def test_fractional_cpu(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, 'gpu = "A10G"\n[requirements]\ncpu = 3.5')
    assert machines(s) == ["g5.xlarge"]
    s = stage(tmp_path, MARKET, 'gpu = "A10G"\n[requirements]\ncpu = 4.5')
    assert excluded(s) == {"gpu": 8, "cpu": 1}


def test_memory_gb(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, 'gpu = "H100"\n[requirements]\nmemory_gb = 1900')
    assert excluded(s) == {"gpu": 5, "memory_gb": 3}  # 200, 500 and 1800 GB
    assert machines(s) == ["p5.48xlarge"]


def test_disk_gb_keeps_configurations_that_list_no_disk(tmp_path: Path) -> None:
    rows = """\
acme,small-disk,H100,1,80,16,64,us-east-1,2.0,,x86_64,100
acme,big-disk,H100,1,80,16,64,us-east-1,3.0,,x86_64,1000
acme,no-disk-listed,H100,1,80,16,64,us-east-1,4.0,,x86_64,
"""
    s = stage(tmp_path, rows, 'gpu = "H100"\n[requirements]\ndisk_gb = 500')
    assert excluded(s) == {"disk_gb": 1}
    assert machines(s) == ["big-disk", "no-disk-listed"]
    assert any("list no disk size" in n for n in s.notes)


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("eu", ["gpu_1x_h100_pcie", "4x_H100_SECURE"]),  # europe-central-1, EU-RO-1
        ("europe", ["gpu_1x_h100_pcie", "4x_H100_SECURE"]),
        ("us", ["gpu_8x_h100_sxm5", "p5.48xlarge"]),
        ("us-east", ["p5.48xlarge"]),
        ("us-east-1", ["p5.48xlarge"]),
        ("us-west-1", ["gpu_8x_h100_sxm5"]),
    ],
)
def test_location(tmp_path: Path, location: str, expected: list[str]) -> None:
    s = stage(tmp_path, MARKET, f'gpu = "H100"\n[requirements]\nlocation = "{location}"')
    assert machines(s) == expected
    assert s.excluded["location"] == 4 - len(expected)


def test_location_across_supplier_spellings(tmp_path: Path) -> None:
    rows = """\
aws,g5.xlarge,A10G,1,24,4,16,eu-west-1,1.10,,x86_64,
gcp,g2-standard-4,L4,1,24,4,16,europe-west4,0.70,,x86_64,
azure,Standard_NV36ads_A10_v5,A10,1,24,36,440,westeurope,3.20,,x86_64,
fluidstack,l4_1x,L4,1,24,8,32,FINLAND,0.80,,x86_64,
vast,1x-L4-8-32768,L4,1,24,8,32,"Bavaria, DE, EU",0.40,,x86_64,
aws,g5.xlarge,A10G,1,24,4,16,us-east-1,1.00,,x86_64,
"""
    s = stage(tmp_path, rows, 'gpu_count = 1\n[requirements]\nlocation = "eu"')
    assert excluded(s) == {"location": 1}
    assert sorted(c.offer.region for c in s.candidates) == sorted(
        ["eu-west-1", "europe-west4", "westeurope", "FINLAND", "Bavaria, DE, EU"]
    )


def test_arch_excludes_the_other_architecture_and_says_which(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, 'peak_memory_gb = 90\n[requirements]\narch = "arm64"')
    assert machines(s) == ["gpu_1x_gh200"]
    assert excluded(s) == {"peak_memory_gb": 7, "arch": 1}  # the x86_64 B200
    assert s.removed["arch"] == [{"arch": "x86_64", "gpu": "B200", "configurations": 1}]
    assert any("arch = arm64 excluded 1 B200 (x86_64)" in n for n in s.notes)
    s = stage(tmp_path, MARKET, 'peak_memory_gb = 90\n[requirements]\narch = "x86_64"')
    assert machines(s) == ["1x_B200_SECURE"]


def test_image_cuda_version_excludes_gpus_it_cannot_drive(tmp_path: Path) -> None:
    text = 'image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"\npeak_memory_gb = 90'
    w = load_text('name = "t"\ncommand = "true"\n' + text, "t.toml", "t").workload
    assert w is not None
    s = plan_workload(w, offers(tmp_path, MARKET)).stages[0]
    assert machines(s) == ["gpu_1x_gh200"]  # Hopper: fine for CUDA 12.4
    assert excluded(s) == {"peak_memory_gb": 7, "image": 1}  # B200 needs CUDA 12.8
    (row,) = s.removed["image"]
    assert row["gpu"] == "B200" and row["configurations"] == 1
    assert "needs CUDA 12.8 or newer" in row["reason"]
    assert any("B200" in n and "CUDA 12.4" in n and "12.8 or newer" in n for n in s.notes)


@pytest.mark.parametrize(
    ("image", "eligible"),
    [
        ("pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime", True),  # 12.8 drives a B200
        ("nvidia/cuda:12.9.1-runtime-ubuntu24.04", True),
        ("nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04", False),
        ("myorg/train:12.4.1-cudnn-runtime", False),
        ("busybox:1", True),  # declares nothing: excludes nothing
    ],
)
def test_image_and_b200(tmp_path: Path, image: str, eligible: bool) -> None:
    w = load_text(
        f'name = "t"\nimage = "{image}"\ncommand = "true"\ngpu = "B200"', "t.toml", "t"
    ).workload
    assert w is not None
    s = plan_workload(w, offers(tmp_path, MARKET)).stages[0]
    assert s.feasible is eligible
    if not eligible:
        assert s.emptied_by == "image"
        assert "CUDA 12.4" in (s.explanation or "")
        assert "needs CUDA 12.8 or newer" in (s.explanation or "")
        assert [c.offer.machine_id for c in s.nearest] == ["1x_B200_SECURE"]


def test_image_too_new_for_old_gpus(tmp_path: Path) -> None:
    rows = "gcp,n1-standard-8,V100,1,16,8,30,us-central1,2.86,,x86_64,\n"
    w = load_text(
        'name = "t"\nimage = "nvidia/cuda:13.0.0-runtime"\ncommand = "true"\ngpu = "V100"',
        "t.toml",
        "t",
    ).workload
    assert w is not None
    s = plan_workload(w, offers(tmp_path, rows)).stages[0]
    assert s.emptied_by == "image"
    assert "too old for CUDA 13.0" in (s.explanation or "")


def test_max_price_per_hour_keeps_an_equal_price(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, 'gpu = "H100"\n[requirements]\nmax_price_per_hour = 10.0')
    assert machines(s) == ["gpu_1x_h100_pcie", "4x_H100_SECURE"]  # 2.49 and exactly 10.00
    assert excluded(s) == {"gpu": 5, "max_price_per_hour": 2}


def test_budget_excludes_only_measured_configurations_over_it(tmp_path: Path) -> None:
    runtimes = {"gpu_1x_h100_pcie": 36000.0, "4x_H100_SECURE": 3600.0}  # 10 h and 1 h

    def history(stage_name: str, offer: Offer) -> float | None:
        return runtimes.get(offer.machine_id)

    # 10 h x $2.49 = $24.90 > $20; 1 h x $10 = $10; the 8x machines are unmeasured.
    s = stage(tmp_path, MARKET, 'gpu = "H100"\nbudget = 20.0', history)
    assert excluded(s) == {"gpu": 5, "budget": 1}
    assert machines(s) == ["4x_H100_SECURE", "gpu_8x_h100_sxm5", "p5.48xlarge"]
    assert s.basis == BASIS_PRICE  # not every eligible configuration is measured
    assert s.candidates[0].estimated_cost == pytest.approx(10.0)
    assert s.candidates[1].estimated_cost is None


def test_budget_can_empty_the_list(tmp_path: Path) -> None:
    def history(stage_name: str, offer: Offer) -> float | None:
        return 7200.0  # 2 h everywhere

    s = stage(tmp_path, MARKET, 'gpu = "H100"\nbudget = 4.0', history)
    assert not s.feasible
    assert s.emptied_by == "budget"
    assert s.excluded["budget"] == 4
    # The lowest estimate: 2 h x $2.49.
    assert "the lowest estimate is $4.98" in (s.explanation or "")
    assert s.nearest[0].offer.machine_id == "gpu_1x_h100_pcie"


# -- counting, ranking and determinism -----------------------------------------------------------


def test_every_configuration_is_counted_once(tmp_path: Path) -> None:
    text = (
        'gpu = "H100"\ngpu_count = 4\n[requirements]\ncpu = 100\nlocation = "us"\n'
        "max_price_per_hour = 50.0"
    )
    s = stage(tmp_path, MARKET, text)
    assert s.eligible + sum(s.excluded.values()) == len(offers(tmp_path, MARKET))
    # gpu 5, gpu_count 1 (1x), cpu 1 (64 vCPU), location 0, price 1 (p5 at $98.32)
    assert excluded(s) == {"gpu": 5, "gpu_count": 1, "cpu": 1, "max_price_per_hour": 1}
    assert machines(s) == ["gpu_8x_h100_sxm5"]
    assert list(s.excluded) == list(CHECKS)


def test_ranking_by_hourly_price_with_deterministic_ties(tmp_path: Path) -> None:
    rows = """\
b-supplier,m2,L4,1,24,8,32,us-east-1,0.70,,x86_64,
a-supplier,m2,L4,1,24,8,32,us-east-1,0.70,,x86_64,
a-supplier,m1,L4,1,24,8,32,us-west-2,0.70,,x86_64,
a-supplier,m1,L4,1,24,8,32,us-east-1,0.70,,x86_64,
a-supplier,m0,L4,1,24,8,32,us-east-1,0.90,,x86_64,
a-supplier,m9,L4,1,24,8,32,us-east-1,0.50,,x86_64,
"""
    market = offers(tmp_path, rows)
    w = workload('gpu = "L4"')
    expected = [
        ("m9", "a-supplier", "us-east-1"),
        ("m1", "a-supplier", "us-east-1"),
        ("m1", "a-supplier", "us-west-2"),
        ("m2", "a-supplier", "us-east-1"),
        ("m2", "b-supplier", "us-east-1"),
        ("m0", "a-supplier", "us-east-1"),
    ]
    rng = random.Random(3)
    for _ in range(10):
        rng.shuffle(market)
        s = plan_workload(w, market).stages[0]
        assert [(c.offer.machine_id, c.offer.supplier, c.offer.region) for c in s.candidates] == (
            expected
        )


def test_a_cpu_only_stage_ignores_gpus_and_says_the_machine_has_some(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, "[requirements]\ncpu = 16\nmemory_gb = 64")
    assert s.selected is not None
    assert s.selected.offer.machine_id == "gpu_1x_gh200"  # $1.49, 72 vCPU, 432 GB
    assert excluded(s) == {"cpu": 1}  # the 4-vCPU g5.xlarge
    assert any("GPUs it will not use" in n for n in s.notes)
    rows = MARKET + "cudo,cpu-16,,0,,16,64,us-east-1,0.30,,x86_64,\n"
    s = stage(tmp_path, rows, "[requirements]\ncpu = 16")
    assert s.selected is not None and s.selected.offer.gpu is None
    assert not any("GPUs it will not use" in n for n in s.notes)


# -- a stage that needs no GPU goes on a CPU-only machine ------------------------------------------

CPU_ONLY = """\
aws,m7g.2xlarge,,0,,8,32,us-east-1,0.3264,,arm64,
runpod,cpu3g-8-32,,0,,8,32,US,0.32,,x86_64,
azure,Standard_E16as_v5,,0,,16,128,eastus,1.008,,x86_64,
aws,c7i.large,,0,,2,4,eu-west-1,0.099,,x86_64,
"""
CHEAP_GPUS = """\
vast,2x-RTX_3060_Ti-32-65536,RTX3060,2,8,32,64,"Michigan, US, NA",0.20,,x86_64,
lambda,gpu_1x_a10,A10,1,24,30,200,us-east-1,0.75,,x86_64,
"""


def test_a_cpu_only_stage_goes_on_a_cpu_only_machine_even_when_a_gpu_one_is_cheaper(
    tmp_path: Path,
) -> None:
    s = stage(tmp_path, CPU_ONLY + CHEAP_GPUS, "[requirements]\ncpu = 8\nmemory_gb = 32")
    assert s.selected is not None
    # vast's 2x RTX 3060 Ti at $0.20/h would be cheaper: it is left out with its GPUs.
    assert machines(s) == ["cpu3g-8-32", "m7g.2xlarge", "Standard_E16as_v5"]
    assert excluded(s) == {"gpu": 2, "cpu": 1}  # the GPU machines; the 2-vCPU c7i.large
    assert sum(s.excluded.values()) + s.eligible == 6
    assert any(
        "2 configurations with GPUs were left out because CPU-only configurations fit" in n
        for n in s.notes
    )
    assert not any("GPUs it will not use" in n for n in s.notes)


def test_cpu_only_configurations_rank_by_hourly_price(tmp_path: Path) -> None:
    rows = CPU_ONLY + "acme,tiny,,0,,8,32,us-west-2,0.01,,x86_64,\n"
    s = stage(tmp_path, rows + CHEAP_GPUS, "[requirements]\ncpu = 2")
    prices = [c.offer.price_per_hour for c in s.candidates]
    assert prices == sorted(prices) and prices[0] == 0.01
    assert all(c.offer.gpu is None for c in s.candidates)


def test_a_gpu_machine_only_when_no_cpu_only_one_fits_and_the_plan_says_why(
    tmp_path: Path,
) -> None:
    s = stage(tmp_path, CPU_ONLY + CHEAP_GPUS, "[requirements]\ncpu = 24")
    # The cheapest machine: vast's (32 vCPU at least), then lambda's (30).
    assert machines(s) == ["2x-RTX_3060_Ti-32-65536", "gpu_1x_a10"]
    assert excluded(s) == {"cpu": 4}  # every CPU-only machine: under 24 vCPU
    (note,) = [n for n in s.notes if "ruled out" in n]
    assert note == (
        "this stage needs no GPU, but cpu = 24 ruled out every CPU-only configuration "
        "(4 in the inventory), so it is planned on machines with GPUs; the selected machine "
        "carries GPUs it will not use"
    )
    s = stage(tmp_path, CPU_ONLY + CHEAP_GPUS, '[requirements]\nlocation = "eu-west-1"\ncpu = 4')
    assert not s.feasible  # nothing at all: the explanation covers every machine
    s = stage(tmp_path, CPU_ONLY + CHEAP_GPUS, '[requirements]\nlocation = "us-east"\ncpu = 10')
    assert s.selected is not None and s.selected.offer.machine_id == "gpu_1x_a10"
    assert any('location = "us-east" ruled out every CPU-only configuration' in n for n in s.notes)


def test_an_inventory_without_cpu_only_machines(tmp_path: Path) -> None:
    s = stage(tmp_path, CHEAP_GPUS, "[requirements]\ncpu = 4")
    assert s.selected is not None
    assert any(
        "this stage needs no GPU, but the inventory lists no CPU-only configuration" in n
        and "GPUs it will not use" in n
        for n in s.notes
    )


def test_a_gpu_stage_never_goes_on_a_cpu_only_machine(tmp_path: Path) -> None:
    s = stage(tmp_path, CPU_ONLY + CHEAP_GPUS, "gpu_count = 1")
    assert all(c.offer.gpu is not None for c in s.candidates)
    assert excluded(s) == {"gpu": 4}


def test_the_embedded_catalog_places_cpu_work_on_cpu_only_machines() -> None:
    w = workload('[requirements]\ncpu = 8\nmemory_gb = 32\nlocation = "us"')
    s = plan_workload(w, list(catalog.embedded().offers)).stages[0]
    assert s.selected is not None
    assert s.selected.offer.gpu is None
    assert (s.selected.offer.supplier, s.selected.offer.machine_id) == ("runpod", "cpu3g-8-32")
    assert all(c.offer.gpu is None for c in s.candidates)
    assert s.excluded["gpu"] == sum(1 for o in catalog.embedded().offers if o.gpu is not None)
    # Larger than every CPU-only machine in the catalog: a GPU machine, and the plan says why.
    w = workload("[requirements]\ncpu = 100")
    s = plan_workload(w, list(catalog.embedded().offers)).stages[0]
    assert s.selected is not None and s.selected.offer.gpu is not None
    assert any("cpu = 100 ruled out every CPU-only configuration (315" in n for n in s.notes)


# -- sizes that are only a minimum (vast) ----------------------------------------------------------

VAST = """\
vast,1x-H100_SXM-32-65536,H100,1,80,32,64,"Texas, US, NA",1.87,,x86_64,
vast,2x-H100_SXM-32-65536,H100,2,160,32,64,"Thailand, TH, AS",3.73,,x86_64,
lambda,gpu_1x_h100_pcie,H100,1,80,26,200,us-east-1,2.49,,x86_64,
lambda,gpu_8x_h100_sxm5,H100,8,80,208,1800,us-west-1,23.92,,x86_64,
"""


def test_a_minimum_size_meets_requirements_at_or_below_it_and_says_so_when_selected(
    tmp_path: Path,
) -> None:
    s = stage(tmp_path, VAST, 'gpu = "H100"\n[requirements]\ncpu = 32\nmemory_gb = 64')
    assert s.selected is not None and s.selected.offer.machine_id == "1x-H100_SXM-32-65536"
    assert s.selected.offer.size_is_minimum
    assert any(
        "the selected vast offer lists 32 vCPU / 64 GB as a minimum, not its size" in n
        for n in s.notes
    )
    assert not any("only because their size is unknown" in n for n in s.notes)


def test_above_a_minimum_the_size_is_unknown_and_the_offer_excluded(tmp_path: Path) -> None:
    s = stage(tmp_path, VAST, 'gpu = "H100"\n[requirements]\ncpu = 48\nmemory_gb = 64')
    assert machines(s) == ["gpu_8x_h100_sxm5"]
    assert excluded(s) == {"cpu": 3}
    (note,) = [n for n in s.notes if "size is unknown" in n]
    assert note == (
        "2 vast configurations were excluded only because their size is unknown: they list "
        "32 vCPU / 64 GB as a minimum, below cpu = 48, and may be larger"
    )
    # Excluded by something else as well (location): not "only because" of the size.
    text = 'gpu = "H100"\n[requirements]\ncpu = 48\nlocation = "us"'
    s = stage(tmp_path, VAST, text)
    (note,) = [n for n in s.notes if "size is unknown" in n]
    assert note.startswith("1 vast configuration was")


# -- the configured price ceiling ----------------------------------------------------------------

CEILING = PriceCeiling(5.0, "[limits] max_price_per_hour in /home/u/.config/nodus/config.toml")


def test_the_ceiling_excludes_what_costs_more_and_names_where_it_is_set(tmp_path: Path) -> None:
    w = workload('gpu = "H100"')
    p = plan_workload(w, offers(tmp_path, MARKET), ceiling=CEILING)
    s = p.stages[0]
    assert machines(s) == ["gpu_1x_h100_pcie"]
    assert excluded(s) == {"gpu": 5, "max_price_per_hour": 3}
    assert any(
        n.startswith(
            "max_price_per_hour: 3 configurations above $5.00/h excluded by the ceiling "
            "[limits] max_price_per_hour in /home/u/.config/nodus/config.toml, which no "
            "workload can raise"
        )
        for n in s.notes
    )
    assert p.as_json()["limits"] == {
        "max_price_per_hour": 5.0,
        "source": CEILING.source,
    }


def test_a_workload_cannot_raise_the_ceiling_but_may_lower_it(tmp_path: Path) -> None:
    market = offers(tmp_path, MARKET)
    raised = plan_workload(
        workload('gpu = "H100"\n[requirements]\nmax_price_per_hour = 100.0'),
        market,
        ceiling=CEILING,
    ).stages[0]
    assert machines(raised) == ["gpu_1x_h100_pcie"]  # still $5/h at most
    lowered = plan_workload(
        workload('gpu = "H100"\n[requirements]\nmax_price_per_hour = 2.0'),
        market,
        ceiling=CEILING,
    ).stages[0]
    assert not lowered.feasible
    assert "costs more than $2.00/h" in (lowered.explanation or "")
    assert "ceiling" not in (lowered.explanation or "")  # the workload's own limit decided
    assert not any("ceiling" in n for n in lowered.notes)


def test_when_the_ceiling_empties_the_list_it_is_named(tmp_path: Path) -> None:
    w = workload('gpu = "H100"\ngpu_count = 8')
    s = plan_workload(w, offers(tmp_path, MARKET), ceiling=CEILING).stages[0]
    assert s.emptied_by == "max_price_per_hour"
    assert (s.explanation or "").startswith(
        "max_price_per_hour: every 8× H100 configuration that meets the other requirements "
        "costs more than $5.00/h (the ceiling [limits] max_price_per_hour in "
        "/home/u/.config/nodus/config.toml, which no workload can raise)"
    )


def test_the_ceiling_comes_from_the_configuration_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("[limits]\nmax_price_per_hour = 5.0\n")
    monkeypatch.setenv("NODUS_CONFIG", str(cfg))
    p = plan_workload(workload('gpu = "H100"'), offers(tmp_path, MARKET))
    assert p.ceiling == PriceCeiling(5.0, f"[limits] max_price_per_hour in {cfg}")
    assert machines(p.stages[0]) == ["gpu_1x_h100_pcie"]
    # Every inventory: the same list of offers from a local machine or a cluster node.
    local = offers(tmp_path, "local,host,,0,,8,32,local,9.0,,x86_64,\n")
    s = plan_workload(workload("[requirements]\ncpu = 1"), local, target="local").stages[0]
    assert not s.feasible and s.emptied_by == "max_price_per_hour"
    assert plan_workload(workload('gpu = "H100"'), [], ceiling=None).ceiling is None


def test_stages_are_planned_separately(tmp_path: Path) -> None:
    text = """
[requirements]
location = "us"

[[stages]]
name = "prepare"
[stages.requirements]
cpu = 4

[[stages]]
name = "train"
gpu = "H100"
gpu_count = 8
"""
    p = plan(tmp_path, MARKET, text)
    prepare, train = p.stages
    assert prepare.selected is not None and train.selected is not None
    assert prepare.selected.offer.machine_id == "g5.xlarge"  # the cheapest in us with 4 vCPU
    assert train.selected.offer.machine_id == "gpu_8x_h100_sxm5"
    assert p.feasible


def test_an_empty_inventory(tmp_path: Path) -> None:
    s = plan_workload(workload('gpu = "H100"'), []).stages[0]
    assert not s.feasible
    assert s.explanation == "the inventory lists no configuration at all"


# -- the words when nothing is eligible ------------------------------------------------------------


def test_location_empties_the_list_and_names_the_cheapest_outside(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, 'gpu = "H100"\ngpu_count = 8\n[requirements]\nlocation = "eu"')
    assert not s.feasible
    assert excluded(s) == {"gpu": 5, "gpu_count": 2, "location": 2}
    assert s.emptied_by == "location"
    text = s.explanation or ""
    assert 'no 8× H100 configuration is in location "eu"' in text
    assert "the cheapest 8× H100 outside it is lambda gpu_8x_h100_sxm5 in us-west-1" in text
    assert "$23.92/h" in text
    assert [c.offer.machine_id for c in s.nearest] == ["gpu_8x_h100_sxm5", "p5.48xlarge"]


def test_an_unknown_location_says_so(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, 'gpu = "H100"\n[requirements]\nlocation = "mars"')
    assert s.emptied_by == "location"
    assert "matches no region in this inventory" in (s.explanation or "")


def test_gpu_count_fallback_names_the_largest_count_on_offer(tmp_path: Path) -> None:
    """When the smaller machines miss another requirement too, still name the largest."""
    rows = """\
runpod,4x_H100,H100,4,80,64,500,EU-RO-1,10.0,,x86_64,
runpod,2x_H100,H100,2,80,32,250,EU-RO-1,5.0,,x86_64,
"""
    s = stage(tmp_path, rows, 'gpu = "H100"\ngpu_count = 8\n[requirements]\nlocation = "us"')
    assert s.emptied_by == "gpu_count"
    assert "the largest H100 count on offer is 4" in (s.explanation or "")
    assert s.nearest[0].offer.machine_id == "4x_H100"


def test_a_model_not_on_offer(tmp_path: Path) -> None:
    s = stage(tmp_path, MARKET, 'gpu = "RTX 4090"')
    assert s.emptied_by == "gpu"
    assert "no configuration in this inventory has RTX 4090 GPUs" in (s.explanation or "")
    assert s.nearest == []  # other models are not offered in its place


def test_the_inventory_list_is_never_reordered(tmp_path: Path) -> None:
    market = offers(tmp_path, MARKET)
    before = list(market)
    for text in ("[requirements]\ncpu = 500", 'gpu = "H100"', 'gpu = "H100"\ngpu_count = 8'):
        plan_workload(workload(text), market)
    assert market == before


@pytest.mark.parametrize(
    ("text", "emptied", "words"),
    [
        ('gpu = "H100"\npeak_memory_gb = 94', "peak_memory_gb", "the most on offer is 80 GB"),
        ('gpu = "H100"\n[requirements]\ncpu = 500', "cpu", "the largest is lambda gpu_8x_h100"),
        (
            'gpu = "H100"\n[requirements]\nmemory_gb = 4096',
            "memory_gb",
            "the largest is aws p5.48xlarge",
        ),
        (
            'gpu = "H100"\n[requirements]\narch = "arm64"',
            "arch",
            "no 1× H100 configuration is arm64",
        ),
        (
            'gpu = "H100"\n[requirements]\nmax_price_per_hour = 1.0',
            "max_price_per_hour",
            "the cheapest is lambda gpu_1x_h100_pcie in europe-central-1",
        ),
    ],
)
def test_each_requirement_that_empties_the_list_is_named(
    tmp_path: Path, text: str, emptied: str, words: str
) -> None:
    s = stage(tmp_path, MARKET, text)
    assert not s.feasible
    assert s.emptied_by == emptied
    assert (s.explanation or "").startswith(f"{emptied}: ")
    assert words in (s.explanation or "")
    assert s.nearest


# -- runtime measurements: the interface with the run records ------------------------------------


def test_ranking_switches_to_estimated_cost_only_when_every_eligible_one_is_measured(
    tmp_path: Path,
) -> None:
    runtimes = {"gpu_8x_h100_sxm5": 7200.0, "p5.48xlarge": 600.0}

    def history(stage_name: str, offer: Offer) -> float | None:
        return runtimes.get(offer.machine_id)

    text = 'gpu = "H100"\ngpu_count = 8'
    s = stage(tmp_path, MARKET, text, history)
    # 2 h x $23.92 = $47.84 against 10 min x $98.32 = $16.39: the faster one costs less.
    assert s.basis == BASIS_RUNTIME
    assert machines(s) == ["p5.48xlarge", "gpu_8x_h100_sxm5"]
    assert s.selected is not None
    assert s.selected.estimated_cost == pytest.approx(600 / 3600 * 98.32)
    # One unmeasured eligible configuration: back to hourly price.
    del runtimes["gpu_8x_h100_sxm5"]
    s = stage(tmp_path, MARKET, text, history)
    assert s.basis == BASIS_PRICE
    assert machines(s) == ["gpu_8x_h100_sxm5", "p5.48xlarge"]


def _record(
    store: records.RunStore, w: Workload, offer: Offer, seconds: float, status: str = "succeeded"
) -> None:
    run = store.create_run(w, "local", offer.price_per_hour, None)
    store.save_stage(
        run.id,
        0,
        records.StageRecord(
            name="main",
            status=records.StageStatus(status),
            exit_code=0 if status == "succeeded" else 1,
            runtime_seconds=seconds,
            config=offer.as_json(),
        ),
    )
    store.finish_run(run.id, records.RunStatus(status), 0 if status == "succeeded" else 1, 0.0)


def test_run_records_drive_the_ranking_and_the_budget(tmp_path: Path) -> None:
    rows = """\
lambda,gpu_8x_h100_sxm5,H100,8,80,208,1800,us-west-1,23.92,,x86_64,
aws,p5.48xlarge,H100,8,80,192,2048,us-east-1,98.32,,x86_64,
aws,p5.48xlarge,H100,8,80,192,2048,us-east-2,98.32,,x86_64,
"""
    market = offers(tmp_path, rows)
    lam, p5_east1, p5_east2 = market
    w = workload('gpu = "H100"\ngpu_count = 8\nbudget = 40.0')
    store = records.RunStore.open(tmp_path / "state")

    def planned() -> StagePlan:
        lookup = records.runtime_lookup(store, records.fingerprint(w))
        return plan_workload(w, market, history=lookup).stages[0]

    assert planned().basis == BASIS_PRICE  # nothing measured yet
    _record(store, w, p5_east1, 900.0)  # 15 min: $24.58; measures p5 in every region
    _record(store, w, lam, 3600.0, status="failed")  # a failed run measures nothing
    s = planned()
    assert s.basis == BASIS_PRICE  # the Lambda machine is not measured
    assert s.candidates[0].offer == lam
    _record(store, w, lam, 7200.0)  # 2 h: $47.84, over the $40 budget
    s = planned()
    assert excluded(s) == {"budget": 1}
    assert s.basis == BASIS_RUNTIME  # every ELIGIBLE configuration is measured
    assert [c.offer for c in s.candidates] == [p5_east1, p5_east2]
    assert s.selected is not None
    assert s.selected.estimated_cost == pytest.approx(24.58)
    assert s.selected.runtime_seconds == 900.0
    # Another workload (other fingerprint) has no measurements.
    other = workload('gpu = "H100"\ngpu_count = 8\nbudget = 40.0\nenv = { X = "1" }')
    lookup = records.runtime_lookup(store, records.fingerprint(other))
    assert plan_workload(other, market, history=lookup).stages[0].basis == BASIS_PRICE


# -- the JSON document (SPEC 3.1) -----------------------------------------------------------------


def test_plan_json_shape(tmp_path: Path) -> None:
    p = plan(tmp_path, MARKET, 'gpu = "H100"\ngpu_count = 8\n[requirements]\nlocation = "us"')
    doc: dict[str, Any] = p.as_json()
    assert doc["workload"] == "t"
    assert doc["feasible"] is True
    (st,) = doc["stages"]
    assert st["name"] == "main"
    assert st["basis"] == "hourly_price"
    assert st["eligible"] == 2
    assert st["excluded"] == {"gpu": 5, "gpu_count": 2}
    assert [c["machine_id"] for c in st["candidates"]] == ["gpu_8x_h100_sxm5", "p5.48xlarge"]
    assert st["selected"] == st["candidates"][0]
    sel = st["selected"]
    for key in (
        "supplier",
        "machine_id",
        "region",
        "gpu",
        "gpu_count",
        "gpu_memory_gb",
        "vcpus",
        "memory_gb",
        "price_per_hour",
        "estimated_cost",
    ):
        assert key in sel
    assert sel == sel | {
        "supplier": "lambda",
        "region": "us-west-1",
        "gpu": "H100",
        "gpu_count": 8,
        "gpu_memory_gb": 80.0,
        "vcpus": 208,
        "memory_gb": 1800.0,
        "price_per_hour": 23.92,
        "estimated_cost": None,
    }
    assert doc["requirements"]["gpu"] == "H100"


def test_a_fanout_stage_is_priced_per_task_hour(tmp_path: Path) -> None:
    rows = """\
one,l4x1,L4,1,24,8,32,us-east-1,1.00,,x86_64,
four,l4x4,L4,4,24,32,128,us-east-1,3.20,,x86_64,
"""
    market = offers(tmp_path, rows)
    items = ", ".join(f'"i{n}"' for n in range(10))
    w = workload(f'gpu = "L4"\nbudget = 8.0\n[map]\nitems = [{items}]\nparallel = 6')
    s = plan_workload(w, market).stages[0]
    # four tasks on the 4-GPU machine at $0.80 per task-hour beat one on the 1-GPU at $1.00
    assert machines(s) == ["l4x4", "l4x1"]
    assert s.fanout == {
        "items": 10,
        "parallel": 6,
        "tasks_per_machine": 4,
        "machines_needed": 2,
        "price_per_task_hour": 0.8,
        "budget_task_hours": 10.0,
    }
    assert any("one machine hosts 4 tasks, so that takes 2 machines" in n for n in s.notes)
    assert any(
        "the budget covers every item: 10.00 task-hours, 3,600 s per item" in n for n in s.notes
    )
    shared = workload(
        f'gpu = "L4"\nshare_gpu = true\npeak_memory_gb = 10\n[map]\nitems = [{items}]'
    )
    s = plan_workload(shared, market).stages[0]
    assert s.fanout is not None and s.fanout["tasks_per_machine"] == 8  # floor(24/10) x 4
    cpu = workload(f"[requirements]\ncpu = 2\n[map]\nitems = [{items}]")
    cpu_rows = "c,box,,0,,16,64,us-east-1,0.50,,x86_64,\n"
    s = plan_workload(cpu, offers(tmp_path, cpu_rows)).stages[0]
    assert s.fanout is not None and s.fanout["tasks_per_machine"] == 8
