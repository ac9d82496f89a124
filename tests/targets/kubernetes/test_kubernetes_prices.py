# ruff: noqa: F811 - the fixtures imported from kubernetes_support are test parameters here
"""``--target kubernetes`` node prices against the API server emulator: declared in
``[kubernetes]``, else the catalog's price of the node's instance type in its region, else
not set, which is told from a declared 0 (``nodus nodes``, ``nodus plan``, a run's cost)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from catalog_support import write_catalog
from command_support import finish
from kubernetes_support import (
    L4_LABELS,
    KubeEmulator,
    KubeNodus,
    kube_emulator,  # noqa: F401 - fixture
)

A100_40_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.memory": "40960",
    "kubernetes.io/arch": "amd64",
}
CATALOG_ROWS = (
    "aws,p4d.24xlarge,A100,8,40,96,1152,us-east-1,32.77,,x86_64\n"
    "aws,p4d.24xlarge,A100,8,40,96,1152,eu-west-1,35.4,,x86_64\n"
)
HINT = "set [kubernetes] price_per_hour or [kubernetes] prices in config.toml"


class Nodus(KubeNodus):
    """``nodus`` with its own catalog (and an empty configuration the test writes)."""

    def __init__(self, emulator: KubeEmulator, tmp: Path) -> None:
        super().__init__(emulator, tmp, "")
        self.catalog = write_catalog(tmp, CATALOG_ROWS)
        self.env.update({"NODUS_CATALOG": str(self.catalog), "COLUMNS": "200"})

    def workload(
        self, name: str, command: str = "python train.py", gpu: str = "H100", count: int = 1
    ) -> Path:
        return super().workload(name, command, gpu, count)

    def nodes(self) -> dict[str, dict[str, Any]]:
        done = self.run("nodes", "--target", "kubernetes", "--json")
        assert done.returncode == 0, done.stderr
        return {n["hostname"]: n for n in json.loads(done.stdout)["nodes"]}


@pytest.fixture
def nodus(kube_emulator: KubeEmulator, tmp_path: Path) -> Iterator[Nodus]:
    kube_emulator.clear()
    p4d = {**A100_40_LABELS, "node.kubernetes.io/instance-type": "p4d.24xlarge"}
    kube_emulator.add_node("p4d-eu", {**p4d, "topology.kubernetes.io/region": "eu-west-1"}, 8)
    # The older label, and a region the catalog does not list the machine in.
    kube_emulator.add_node(
        "p4d-sa",
        {
            **A100_40_LABELS,
            "beta.kubernetes.io/instance-type": "p4d.24xlarge",
            "topology.kubernetes.io/region": "sa-east-1",
        },
        8,
    )
    kube_emulator.add_node("gpu-l4", L4_LABELS, 1, cpus="8", memory="32Gi")
    yield Nodus(kube_emulator, tmp_path)


def test_nodes_are_priced_from_the_catalog_by_instance_type_and_region_else_not_set(
    nodus: Nodus,
) -> None:
    nodes = nodus.nodes()
    assert {k: (n["price_per_hour"], n["price_source"]) for k, n in nodes.items()} == {
        "p4d-eu": (35.4, "catalog price of p4d.24xlarge in eu-west-1"),
        "p4d-sa": (
            32.77,
            "catalog price of p4d.24xlarge (its lowest: the catalog does not list it in sa-east-1)",
        ),
        "gpu-l4": (0.0, "not set"),
    }
    assert nodes["gpu-l4"]["price_hint"] == HINT
    assert "price_hint" not in nodes["p4d-eu"]
    done = nodus.run("nodes", "--target", "kubernetes")
    assert done.returncode == 0, done.stderr
    assert "node p4d-eu: $/h is the catalog price of p4d.24xlarge in eu-west-1" in done.stdout
    assert f"note: price not set for node gpu-l4: {HINT}" in done.stdout
    assert "$35.40" in done.stdout


def test_configured_prices_win_and_a_declared_0_is_a_price_without_the_hint(
    nodus: Nodus,
) -> None:
    nodus.config.write_text('[kubernetes]\nprice_per_hour = 0\nprices = { "p4d-sa" = 20.0 }\n')
    nodes = nodus.nodes()
    assert {k: (n["price_per_hour"], n["price_source"]) for k, n in nodes.items()} == {
        "p4d-eu": (0.0, "[kubernetes] price_per_hour"),
        "p4d-sa": (20.0, "[kubernetes] prices: 'p4d-sa' (the node)"),
        "gpu-l4": (0.0, "[kubernetes] price_per_hour"),
    }
    assert not any("price_hint" in n for n in nodes.values())
    done = nodus.run("nodes", "--target", "kubernetes")
    assert done.returncode == 0, done.stderr
    assert "price not set" not in done.stdout
    plan = nodus.run("plan", nodus.workload("train", gpu="L4", count=1), "--target", "kubernetes")
    assert plan.returncode == 0, plan.stderr
    assert "price not set" not in plan.stdout


def test_a_plan_ranks_by_the_catalog_price_and_says_where_prices_come_from(
    nodus: Nodus,
) -> None:
    done = nodus.run(
        "plan", nodus.workload("train", gpu="A100", count=8), "--target", "kubernetes", "--json"
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    [stage] = plan["stages"]
    ranked = [(c["machine_id"], c["price_per_hour"]) for c in stage["candidates"]]
    assert ranked == [("p4d-sa", 32.77), ("p4d-eu", 35.4)]
    assert "node p4d-eu: $/h is the catalog price of p4d.24xlarge in eu-west-1" in plan["notes"]
    unpriced = [n for n in plan["notes"] if n.startswith("price not set")]
    assert unpriced == [
        "price not set for node gpu-l4: $/h shows $0.00, and what a run there costs is "
        f"unknown (recorded as $0.00): {HINT}"
    ]
    # The JSON price stays a number: 0.0 where none is set.
    done = nodus.run(
        "plan", nodus.workload("train", gpu="L4", count=1), "--target", "kubernetes", "--json"
    )
    assert done.returncode == 0, done.stderr
    [stage] = json.loads(done.stdout)["stages"]
    assert stage["selected"]["price_per_hour"] == 0.0
    text = nodus.run("plan", nodus.workload("train", gpu="L4", count=1), "--target", "kubernetes")
    assert "note: price not set for node gpu-l4" in text.stdout


def test_a_run_on_a_node_of_a_catalog_instance_type_costs_its_catalog_price(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    proc = nodus.popen(
        "run", nodus.workload("train", gpu="A100", count=8), "--target", "kubernetes"
    )
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    kube_emulator.run_pod(pod, "p4d-eu")  # the scheduler's choice: the eu-west-1 node
    nodus.wait_for("the run running", lambda r: r["status"] == "running")  # its clock starts
    time.sleep(1)
    kube_emulator.end_pod(pod, 0)
    code, out = finish(proc)
    assert code == 0, out
    done = nodus.run("runs", "--json")
    [run] = json.loads(done.stdout)["runs"]
    [stage] = run["stages"]
    assert stage["node"] == "p4d-eu"
    assert stage["cost"] == pytest.approx(stage["runtime_seconds"] / 3600 * 35.4, rel=0.05)
    assert stage["cost"] > 0
    config = stage["configuration"]
    assert config["price_source"] == "catalog price of p4d.24xlarge in eu-west-1"
    assert config["price_known"] is True
    assert "unknown" not in out


def test_a_run_that_may_land_on_a_node_without_a_price_says_its_cost_is_unknown(
    nodus: Nodus, kube_emulator: KubeEmulator
) -> None:
    proc = nodus.popen("run", nodus.workload("train", gpu="L4", count=1), "--target", "kubernetes")
    pod = kube_emulator.wait_pod()["metadata"]["name"]
    kube_emulator.run_pod(pod, "gpu-l4")
    nodus.wait_for("the run running", lambda r: r["status"] == "running")  # seen on the node
    kube_emulator.end_pod(pod, 0)
    code, out = finish(proc)
    assert code == 0, out
    assert (
        "note: price not set for node gpu-l4: $/h shows $0.00, and what a run there costs "
        f"is unknown (recorded as $0.00): {HINT}"
    ) in out
    assert "succeeded (exit 0, cost unknown)" in out
    done = nodus.run("runs", "--json")
    [run] = json.loads(done.stdout)["runs"]
    assert run["cost"] == 0.0  # the JSON stays a number; the configuration says why
    [stage] = run["stages"]
    assert (stage["configuration"]["price_known"], stage["configuration"]["price_source"]) == (
        False,
        "not set",
    )
    table = nodus.run("runs").stdout
    assert "unknown" in table and "$0.00" not in table, table
    shown = nodus.run("runs", run["id"]).stdout
    assert ", cost unknown" in shown and "$0.00" not in shown, shown
