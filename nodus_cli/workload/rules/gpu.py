"""The GPU a workload asks for: ``gpu``, a model name as ``nodus gpus`` lists it.

Contract: :func:`name` returns the model as nodus spells it (any spelling the GPU table
knows: ``"h100"``, ``"NVIDIA H100"``), or reports what the text names instead, with what to
write: a memory or form-factor variant, a model and a count in one string, a supplier, a
TPU, nvidia-smi's name, a machine type, or the closest models. The GPU table
(:mod:`nodus_cli.hardware.gpus`) is read only when a workload names a GPU.
"""

from __future__ import annotations

from typing import Any

from nodus_cli.hardware import gpus
from nodus_cli.workload.hints import (
    MAX_NAME,
    generic_gpu_message,
    machine_message,
    model_and_count,
    tpu_message,
)
from nodus_cli.workload.lineindex import Key
from nodus_cli.workload.model import ALLOWED_COUNTS
from nodus_cli.workload.report import ProblemReport

__all__ = ["name"]

#: How a message shows a valid ``gpu``.
_EXAMPLE = 'gpu = "H100" (`nodus gpus` lists the models)'


def name(report: ProblemReport, raw: Any, key: Key) -> str | None:
    """The GPU model ``raw`` names, as nodus spells it; None, reported, when it names none."""
    if not isinstance(raw, str):
        report.error(key, f"must be a GPU model name in quotes, e.g. {_EXAMPLE}")
        return None
    if not raw.strip():
        report.error(
            key, 'is empty: write a model, e.g. gpu = "H100", or omit gpu to accept any model'
        )
        return None
    if len(raw) > MAX_NAME:
        report.error(key, f"is not a GPU model name: write a model, e.g. {_EXAMPLE}")
        return None
    table = gpus.table()
    family = table.lookup(raw)
    if family is not None:
        return family.name
    message = (
        generic_gpu_message(raw)
        or _variant_message(table, raw)
        or _count_message(table, raw)
        or _supplier_message(table, raw)
        or tpu_message(raw)
        or _driver_name_message(table, raw)
        or machine_message(raw)
        or _unknown_gpu_message(table, raw)
    )
    report.error(key, message)
    return None


def _variant_message(table: gpus.GpuTable, raw: str) -> str | None:
    variant = table.variant(raw)
    if variant is None:
        return None
    fam = variant.family.name
    if variant.superchip_memory_gb is not None and variant.memory_gb is not None:
        return (
            f'"{raw}" names a {fam} superchip by a memory figure that counts its '
            f"Grace CPU's memory ({variant.superchip_memory_gb:g} GB), not a model: the "
            f'GPU itself has {variant.memory_gb:g} GB; write gpu = "{fam}" with '
            f"peak_memory_gb = {variant.memory_gb:g}"
        )
    if variant.memory_gb is not None:
        what = "a form factor and memory variant" if variant.form_factor else "a memory variant"
        return (
            f'"{raw}" names {what}, not a model: write gpu = "{fam}" '
            f"with peak_memory_gb = {variant.memory_gb:g}"
        )
    return (
        f'"{raw}" names a form factor, not a model: write gpu = "{fam}" (a form factor such '
        "as SXM or PCIe cannot be requested; set peak_memory_gb for the memory you need)"
    )


def _count_message(table: gpus.GpuTable, raw: str) -> str | None:
    """``"H100:8"``, ``"8x H100"``: a model and a count in one string."""
    for pattern in model_and_count():
        m = pattern.match(raw)
        if m is None:
            continue
        family = table.lookup(m.group("name"))
        if family is None:
            continue
        count = int(m.group("count"))
        note = "" if count in ALLOWED_COUNTS else " (one machine carries 1, 2, 4 or 8 GPUs)"
        return (
            f'"{raw}" names a model and a count: write gpu = "{family.name}", '
            f"gpu_count = {count}{note}"
        )
    return None


def _driver_name_message(table: gpus.GpuTable, raw: str) -> str | None:
    family = table.driver_name(raw)
    if family is None:
        return None
    return (
        f'"{raw}" is how nvidia-smi names the {family.name}, not a model name: write '
        f'gpu = "{family.name}" (and peak_memory_gb for the memory you need)'
    )


def _supplier_message(table: gpus.GpuTable, raw: str) -> str | None:
    if not table.is_supplier(raw):
        return None
    return (
        f'"{raw}" is a supplier, not a GPU model: nodus compares every supplier; write the '
        'model, e.g. gpu = "H100", and narrow the choice with location if needed'
    )


def _unknown_gpu_message(table: gpus.GpuTable, raw: str) -> str:
    resolved = table.resolve_supplier_spelling(raw)
    close = [resolved[0].name] if resolved is not None else []
    for name in table.suggestions(raw):
        if name not in close:
            close.append(name)
    hint = f"; did you mean {gpus.quoted_list(close[:3])}?" if close else ""
    return f'unknown GPU model "{raw}"{hint} (`nodus gpus` lists them)'
