"""Machine IDs: what a supplier's machine type carries, from the embedded catalog."""

from __future__ import annotations

from nodus_cli import catalog


def test_machine_ids_are_recognised() -> None:
    offer = catalog.find_machine("P4D.24xlarge")
    assert offer is not None
    assert (offer.supplier, offer.gpu, offer.gpu_count, offer.gpu_memory_gb) == (
        "aws",
        "A100",
        8,
        40.0,
    )
    text = catalog.describe_machine("p4d.24xlarge")
    assert text is not None
    assert "8× A100" in text
    assert 'gpu = "A100", gpu_count = 8, peak_memory_gb = 40' in text


def test_a_machine_id_with_several_gpu_setups_lists_them() -> None:
    # GCP's n1 types take different GPUs attached: no single answer.
    assert catalog.find_machine("n1-standard-4") is None
    assert len(catalog.machine_configurations("n1-standard-4")) > 1
    text = catalog.describe_machine("n1-standard-4")
    assert text is not None
    assert "T4" in text and "V100" in text


def test_unknown_machine_id() -> None:
    assert catalog.find_machine("z9.mega") is None
    assert catalog.describe_machine("z9.mega") is None
