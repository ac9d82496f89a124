"""nodus_cli.targets.cluster.pricing: a node's GPU model and its price."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalog_support import write_catalog

from nodus_cli.targets.cluster.pricing import (
    NOT_SET,
    GpuModel,
    NodePrice,
    catalog_price,
    gpu_model,
    models_listed,
    node_price,
    number,
    price_notes,
)


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("h100", GpuModel("H100", 80.0)),
        ("H100", GpuModel("H100", 80.0)),
        ("a100_80gb", GpuModel("A100", 80.0)),
        ("A100-40GB", GpuModel("A100", 40.0)),
        ("a100", GpuModel("A100", 40.0)),
        ("l4", GpuModel("L4", 24.0)),
        ("tesla", GpuModel(None, None)),
        ("L4, T4", GpuModel(None, None)),
        ("", GpuModel(None, None)),
        (None, GpuModel(None, None)),
    ],
)
def test_the_model_a_name_declares_comes_from_the_gpu_table(
    name: str | None, model: GpuModel
) -> None:
    assert gpu_model(name) == model


def test_a_name_that_lists_several_models_is_told_from_one_that_names_none() -> None:
    assert models_listed("L4, T4") == ["L4", "T4"]
    assert models_listed("L4/T4") == ["L4", "T4"]
    assert models_listed("L4/l4") == ["L4"]
    assert models_listed("L4") == []
    assert models_listed("L4, tesla") == []


def test_a_declared_price_wins_then_the_catalog_then_none(tmp_path: Path) -> None:
    rows = (
        "acme,big.8,H100,8,80,96,1024,eu,40.0,,x86_64\n"
        "acme,big.8,H100,8,80,96,1024,us,32.5,,x86_64\n"
    )
    path = str(write_catalog(tmp_path, rows))
    assert catalog_price("BIG.8", path) == 32.5
    assert catalog_price("small.1", path) is None
    label = "label nodus.price_per_hour"
    assert node_price(12.0, label, "big.8", path) == NodePrice(12.0, label)
    assert node_price(0.0, label, "big.8", path) == NodePrice(0.0, label)
    assert node_price(-1.0, label, "big.8", path) == NodePrice(32.5, "catalog price of big.8")
    assert node_price(None, label, "big.8", path) == NodePrice(32.5, "catalog price of big.8")
    assert node_price(None, label, "small.1", path) == NodePrice(0.0, "not set")
    assert node_price(None, label) == NodePrice(0.0, "not set")


def test_not_set_is_told_from_a_declared_0() -> None:
    assert not node_price(None, "[slurm] price_per_hour").known
    assert node_price(None, "[slurm] price_per_hour").source == NOT_SET
    free = node_price(0.0, "[slurm] price_per_hour")
    assert free.known and free == NodePrice(0.0, "[slurm] price_per_hour")


def test_the_catalog_price_of_a_machine_is_its_regions_when_listed_else_its_lowest(
    tmp_path: Path,
) -> None:
    rows = (
        "aws,p4d.24xlarge,A100,8,40,96,1152,us-east-1,32.77,,x86_64\n"
        "aws,p4d.24xlarge,A100,8,40,96,1152,eu-west-1,35.40,,x86_64\n"
    )
    path = str(write_catalog(tmp_path, rows))
    assert catalog_price("p4d.24xlarge", path, "eu-west-1") == 35.40
    assert catalog_price("p4d.24xlarge", path, "sa-east-1") == 32.77
    assert catalog_price("p4d.24xlarge", path) == 32.77
    by = "[kubernetes] price_per_hour"
    assert node_price(None, by, "p4d.24xlarge", path, "eu-west-1") == NodePrice(
        35.40, "catalog price of p4d.24xlarge in eu-west-1"
    )
    assert node_price(None, by, "p4d.24xlarge", path, "sa-east-1") == NodePrice(
        32.77,
        "catalog price of p4d.24xlarge (its lowest: the catalog does not list it in sa-east-1)",
    )
    # Swarm names no region: the lowest, worded as before.
    assert node_price(None, by, "p4d.24xlarge", path) == NodePrice(
        32.77, "catalog price of p4d.24xlarge"
    )
    # A declared price wins over the catalog, a declared 0 too.
    assert node_price(0.0, by, "p4d.24xlarge", path, "eu-west-1") == NodePrice(0.0, by)
    assert node_price(None, by, "p5.48xlarge", path, "eu-west-1") == NodePrice(0.0, NOT_SET)


def test_price_notes_name_the_catalog_priced_and_the_unpriced_nodes_with_the_hint() -> None:
    catalog_priced = NodePrice(35.4, "catalog price of p4d.24xlarge in eu-west-1")
    unpriced = NodePrice(0.0, NOT_SET)
    prices = [
        ("a", catalog_priced),
        ("b", NodePrice(0.0, "[kubernetes] price_per_hour")),
        ("c", catalog_priced),
        *((f"n{i}", unpriced) for i in range(7)),
    ]
    assert price_notes(prices, "set [kubernetes] price_per_hour") == [
        "nodes a, c: $/h is the catalog price of p4d.24xlarge in eu-west-1",
        "price not set for nodes n0, n1, n2, n3, n4 and 2 more: $/h shows $0.00, and what a "
        "run there costs is unknown (recorded as $0.00): set [kubernetes] price_per_hour",
    ]
    assert price_notes([("b", NodePrice(0.0, "[kubernetes] price_per_hour"))], "x") == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2.5", 2.5),
        ("0", 0.0),
        ("-1", -1.0),
        ("nan", None),
        ("inf", None),
        ("x", None),
        (None, None),
    ],
)
def test_a_declared_figure_is_a_finite_number_or_none(
    text: str | None, value: float | None
) -> None:
    assert number(text) == value
