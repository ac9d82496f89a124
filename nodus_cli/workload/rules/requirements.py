"""What a workload or stage needs from a machine: ``[requirements]`` and its flat shortcuts.

Contract: :func:`requirements` merges one level's flat shortcuts (``gpu = "H100"`` at the
top level or in a stage) with its nested table; a shortcut set in both is an error, even
when both agree, except for the Python API, whose ``requirements`` mapping wins. It applies
the defaults (a GPU asked for without ``gpu_count`` is one GPU; ``share_gpu`` means one
GPU sized by ``peak_memory_gb``) and refuses what no machine or Docker can give. What a
stage takes from the workload is :mod:`~nodus_cli.workload.rules.stages`'s business; it
passes the workload's requirements as ``unset``, where a stage's unset ``cpu`` and
``disk_gb`` come from.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from nodus_cli.hardware import gpus
from nodus_cli.workload.hints import MAX_NAME
from nodus_cli.workload.lineindex import Key
from nodus_cli.workload.model import (
    ALLOWED_COUNTS,
    ARCHES,
    FLAT_SHORTCUTS,
    LEGACY_OPTIMIZATION,
    NESTED_ONLY,
    Requirements,
)
from nodus_cli.workload.report import ProblemReport, clip, toml
from nodus_cli.workload.rules import gpu
from nodus_cli.workload.rules.values import number, quantity

__all__ = ["MIN_CPU", "MIN_MEMORY_GB", "requirements"]

#: Docker's smallest CPU share (``--cpus``) and memory limit (6 MB).
MIN_CPU = 0.01
MIN_MEMORY_GB = 0.006


#: Where a top-level ``cpu`` and ``disk_gb`` left unset come from.
_DEFAULTS = Requirements()


def requirements(
    report: ProblemReport,
    flat: dict[str, Any],
    nested: dict[str, Any],
    prefix: Key,
    mapping_wins: bool,
    unset: Requirements = _DEFAULTS,
) -> Requirements:
    """Merge the flat shortcuts and the nested table of one level (``prefix``: the workload
    or a stage). ``mapping_wins``: a shortcut set in both is not an error, the nested wins.
    ``unset``: where ``cpu`` and ``disk_gb`` come from when the level sets them to zero or
    omits them (a stage passes the workload's)."""
    values: dict[str, tuple[Any, Key]] = {}
    for name in FLAT_SHORTCUTS:
        in_flat, in_nested = name in flat, name in nested
        if in_flat and in_nested and mapping_wins:
            in_flat = False  # the API: the explicit mapping key wins
        if in_flat and in_nested:
            where = "at the top level" if not prefix else "as a stage shortcut"
            table = "[requirements]" if not prefix else "[stages.requirements]"
            other = report.at_line((*prefix, "requirements", name))
            report.error(
                (*prefix, name),
                f"set both {where} and in {table}{other}, even if they agree: "
                "keep only one of them",
            )
            continue
        if in_flat:
            values[name] = (flat[name], (*prefix, name))
        elif in_nested:
            values[name] = (nested[name], (*prefix, "requirements", name))
    for name in NESTED_ONLY:
        if name in nested:
            values[name] = (nested[name], (*prefix, "requirements", name))

    model = gpu.name(report, *values["gpu"]) if "gpu" in values else None
    count = _gpu_count(report, *values["gpu_count"]) if "gpu_count" in values else 0
    peak = None
    if "peak_memory_gb" in values:
        peak = number(report, *values["peak_memory_gb"], positive=True, unit="GB per GPU")
    if "gpu_interconnect" in values:
        _interconnect(report, *values["gpu_interconnect"])
    if "optimization" in values:  # checked, then recorded as "automatic" (the model's default)
        raw, key = values["optimization"]
        _optimization(report, raw, key, nested_form="requirements" in key)
    share = _share_gpu(report, *values["share_gpu"]) if "share_gpu" in values else False
    gpu_given = "gpu" in values or "gpu_count" in values or "peak_memory_gb" in values
    if gpu_given and "gpu_count" not in values:
        count = 1  # SPEC 2.1: omitted with a GPU requested means one
    if share:
        _shared(report, values, count)
        count = 1
    if model is not None and peak is not None:
        family = gpus.table().lookup(model)
        if family is not None and family.memory_gb and peak > family.max_memory_gb:
            sizes = " or ".join(f"{m:g} GB" for m in family.memory_gb)
            report.error(
                values["peak_memory_gb"][1],
                f"no {model} has {peak:g} GB: {model} comes with {sizes} per GPU; "
                "lower peak_memory_gb or choose another gpu",
            )

    cpu = quantity(report, values.get("cpu"), "CPUs")
    if cpu is not None and 0 < cpu < MIN_CPU:
        report.error(
            values["cpu"][1],
            f"{cpu:g} is below {MIN_CPU:g} CPU, the smallest CPU share Docker accepts: write "
            f"cpu = {MIN_CPU:g} or more (0 or omitted: 1 CPU)",
        )
        cpu = None
    memory = quantity(report, values.get("memory_gb"), "GB")
    if memory is not None and 0 < memory < MIN_MEMORY_GB:
        report.error(
            values["memory_gb"][1],
            f"{memory:g} GB is below Docker's smallest memory limit, 6 MB: write "
            f"memory_gb = {MIN_MEMORY_GB:g} or more (0 or omitted: 2 GiB per CPU)",
        )
        memory = None
    disk = quantity(report, values.get("disk_gb"), "GB")
    location = _location(report, *values["location"]) if "location" in values else None
    max_price = None
    if "max_price_per_hour" in values:
        max_price = number(
            report, *values["max_price_per_hour"], positive=True, unit="USD per hour"
        )
    arch = _arch(report, *values["arch"]) if "arch" in values else None
    return Requirements(
        gpu=model,
        gpu_count=count,
        peak_memory_gb=peak,
        cpu=cpu or unset.cpu,
        memory_gb=memory or None,
        disk_gb=disk or unset.disk_gb,
        location=location,
        max_price_per_hour=max_price,
        arch=arch,
        share_gpu=share,
    )


def _share_gpu(report: ProblemReport, raw: Any, key: Key) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        report.error(
            key,
            f"must be true or false without quotes: write share_gpu = {raw.strip().lower()}",
        )
    else:
        report.error(key, f"must be true or false, e.g. share_gpu = true, not {toml(raw)}")
    return False


def _shared(report: ProblemReport, values: dict[str, tuple[Any, Key]], count: int) -> None:
    """``share_gpu = true``: one GPU, shared by tasks sized by ``peak_memory_gb``."""
    key = values["share_gpu"][1]
    if "gpu_count" in values and count not in (0, 1):
        report.error(
            values["gpu_count"][1],
            f"share_gpu = true shares ONE GPU between tasks, not {count}: write "
            "gpu_count = 1 or omit it (without share_gpu, each task gets its own "
            f"{count} GPUs)",
        )
    if "peak_memory_gb" not in values:
        report.error(
            key,
            "share_gpu = true needs peak_memory_gb, the GPU memory each task uses: a GPU of "
            "D GB runs at most floor(D / peak_memory_gb) tasks at once, so nodus needs each "
            "task's memory to know how many fit (four tasks of 20 GB on a 24 GB card would "
            "run out of memory); add peak_memory_gb = <GB each task needs>",
        )


def _gpu_count(report: ProblemReport, raw: Any, key: Key) -> int:
    if isinstance(raw, bool):
        report.error(key, f"must be a whole number: 1, 2, 4 or 8, not {toml(raw)}")
        return 0
    if isinstance(raw, str):
        fix = f": write gpu_count = {raw.strip()}" if raw.strip() in ("1", "2", "4", "8") else ""
        report.error(key, f"must be a number without quotes (1, 2, 4 or 8){fix}")
        return 0
    if not isinstance(raw, int | float):
        report.error(key, "must be a whole number: 1, 2, 4 or 8")
        return 0
    if isinstance(raw, float):
        if not math.isfinite(raw):
            report.error(key, f"must be a whole number: 1, 2, 4 or 8, not {raw}")
            return 0
        if 0 < raw < 1:
            report.error(
                key,
                f"{raw:g} of a GPU cannot be requested as a count: to let tasks share one "
                "GPU, write share_gpu = true with peak_memory_gb = <memory each task needs> "
                "(and gpu_count = 1, or omit it); a GPU then runs as many tasks at once as "
                "its memory holds",
            )
            return 0
        if not raw.is_integer():
            report.error(key, f"must be a whole number of GPUs (1, 2, 4 or 8), not {raw:g}")
            return 0
        if int(raw) in ALLOWED_COUNTS:
            report.error(key, f"must be an integer: write gpu_count = {int(raw)}")
            return 0
    count = int(raw)
    if count in ALLOWED_COUNTS:
        return count
    if count > 8:
        report.error(
            key,
            f"{count} GPUs cannot be requested: gpu_count counts GPUs on ONE machine (1, 2, 4 "
            "or 8), and a group of machines cannot satisfy a request; use at most 8",
        )
    elif count < 0:
        report.error(key, "cannot be negative: use 1, 2, 4 or 8 GPUs")
    elif count == 0:
        report.error(
            key, "must be 1, 2, 4 or 8; omit gpu_count (and gpu) for a workload without a GPU"
        )
    else:
        up = next(c for c in ALLOWED_COUNTS if c >= count)
        report.error(
            key,
            f"must be 1, 2, 4 or 8, not {count}: machines carry 1, 2, 4 or 8 GPUs; "
            f"write gpu_count = {up}",
        )
    return 0


def _interconnect(report: ProblemReport, raw: Any, key: Key) -> None:
    if raw == "any":
        return
    if isinstance(raw, str) and raw.strip().lower() == "any":
        report.error(key, 'write gpu_interconnect = "any" (lowercase, no spaces)')
    elif isinstance(raw, str):
        report.error(
            key,
            f'"{raw}" cannot be requested: the interconnect topology cannot be verified yet; '
            'write gpu_interconnect = "any" or omit it (a GPU count never implies NVLink, '
            "NVSwitch or pooled memory)",
        )
    else:
        report.error(key, 'must be the string "any": write gpu_interconnect = "any" or omit it')


def _optimization(report: ProblemReport, raw: Any, key: Key, nested_form: bool) -> None:
    if raw == "" and nested_form:
        report.warn(key, "an empty optimization is accepted but has no effect: omit it")
        return
    if raw == "":
        report.error(
            key,
            "the flat shortcut does not accept an empty string: omit optimization "
            "(it has no effect)",
        )
        return
    if isinstance(raw, str) and raw in LEGACY_OPTIMIZATION:
        report.warn(
            key,
            f'"{raw}" is a legacy setting with no effect, recorded as "automatic": omit it',
        )
        return
    allowed = ", ".join(LEGACY_OPTIMIZATION)
    shown = f'"{raw}"' if isinstance(raw, str) else toml(raw)
    report.error(
        key,
        f"{shown} is not an accepted value; optimization is a legacy setting with no effect: "
        f"omit it (accepted for compatibility: {allowed})",
    )


def _location(report: ProblemReport, raw: Any, key: Key) -> str | None:
    if not isinstance(raw, str) or not raw.strip():
        report.error(
            key,
            'must be a region or region prefix in quotes, e.g. location = "us" or '
            '"us-east-1"; omit it to allow any location',
        )
        return None
    location = raw.strip()
    if len(location) > MAX_NAME or not _known_location(location):
        report.warn(
            key,
            f'"{clip(location)}" matches no region or area nodus knows, so no catalog '
            'offer will match: use an area (us, eu, asia, ...) or a region such as "us-east-1"',
        )
    return location


def _arch(report: ProblemReport, raw: Any, key: Key) -> str | None:
    if raw in ARCHES:
        return str(raw)
    fix = {
        "amd64": "x86_64",
        "x64": "x86_64",
        "x86-64": "x86_64",
        "x86_64": "x86_64",
        "intel": "x86_64",
        "aarch64": "arm64",
        "arm": "arm64",
        "arm64": "arm64",
        "arm64v8": "arm64",
    }
    if isinstance(raw, str) and raw.strip().lower() in fix:
        report.error(key, f'write arch = "{fix[raw.strip().lower()]}" (nodus spells it that way)')
    else:
        report.error(key, 'must be "x86_64" or "arm64"; omit it to accept either')
    return None


@cache
def _known_location(location: str) -> bool:
    from nodus_cli.hardware import locations  # lazy, for start-up: few files name a location

    try:
        return locations.is_known(location)
    except Exception:  # a broken installation must not break validation
        return True
