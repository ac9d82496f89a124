"""nodus_cli.targets.cluster.pricing: a node's GPU model and its price."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalog_support import write_catalog

from nodus_cli.targets.cluster.pricing import (
    GpuModel,
    NodePrice,
    catalog_price,
    gpu_model,
    models_listed,
    node_price,
    number,
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
