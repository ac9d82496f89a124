"""Hints for what users arriving from other tools write: the nodus key or value to use.

Every message here names the concrete line to write instead when the value says it
(``num_gpus = 4`` -> ``gpu_count = 4``), so a file from another tool is fixed by reading
the errors once.
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any

from nodus_cli.hardware import gpus
from nodus_cli.workload.lineindex import Key

#: Longer text is never a name, and regular expressions stay cheap on it.
MAX_NAME = 64
_MAX_NUMBER = 2**63
#: Words that are no model: "gpu", "any" ... (compared after gpus.normalize).
GENERIC_GPU_WORDS = frozenset(
    {"", "gpu", "gpus", "anygpu", "any", "auto", "default", "cuda", "nvidiagpu", "*", "true"}
)

_MOUNTS = 'mounts are "SOURCE:TARGET[:ro]" strings, e.g. mounts = ["./data:/data:ro"]'
_OUTPUT_DIR = "output_dir names the folder that receives the work directory's contents after a run"
_ONE_MACHINE = (
    "nodus runs each stage on ONE machine (gpu_count counts the GPUs on it); multi-node jobs "
    "are not supported. To run the command once per input, in parallel, use [map]"
)
_PARALLEL = (
    "tasks run in parallel when the command fans out over inputs with [map]; its parallel "
    "key caps how many run at once"
)
_SPOT = "spot instances are not supported: nodus ranks on-demand prices; remove it"
_WORKDIR = (
    "nodus has no working-directory key: the image's WORKDIR applies (set it in the image, "
    "or cd in a command string); files shared between stages go to $NODUS_WORK_DIR"
)
_IDLE = "not supported: a run ends when its command ends; remove it"
_RETRIES = "retries are an option of the run, not a key of the file: nodus run --retries N"

FOREIGN_KEYS: dict[str, tuple[str, str]] = {
    "gpu_type": ("gpu", "the GPU model is `gpu`"),
    "gpu_model": ("gpu", "the GPU model is `gpu`"),
    "gpu_name": ("gpu", "the GPU model is `gpu`"),
    "num_gpus": ("gpu_count", "the number of GPUs on one machine is `gpu_count` (1, 2, 4 or 8)"),
    "gpu_num": ("gpu_count", "the number of GPUs on one machine is `gpu_count` (1, 2, 4 or 8)"),
    "n_gpus": ("gpu_count", "the number of GPUs on one machine is `gpu_count` (1, 2, 4 or 8)"),
    "gpus": ("gpu_count", "nodus takes the model as `gpu` and the count as `gpu_count`"),
    "accelerators": ("gpu", "nodus takes the model as `gpu` and the count as `gpu_count`"),
    "accelerator": ("gpu", "nodus takes the model as `gpu` and the count as `gpu_count`"),
    "gpu_memory_gb": ("peak_memory_gb", "GPU memory needed on each GPU is `peak_memory_gb`, in GB"),
    "gpu_memory": ("peak_memory_gb", "GPU memory needed on each GPU is `peak_memory_gb`, in GB"),
    "vram": ("peak_memory_gb", "GPU memory needed on each GPU is `peak_memory_gb`, in GB"),
    "interconnect": ("gpu_interconnect", 'the only interconnect value is gpu_interconnect = "any"'),
    "num_cpus": ("cpu", "CPUs are `cpu`"),
    "cpus": ("cpu", "CPUs are `cpu`"),
    "vcpus": ("cpu", "CPUs are `cpu`"),
    "cpu_count": ("cpu", "CPUs are `cpu`"),
    "memory_bytes": ("memory_gb", "host memory is `memory_gb`, in GB"),
    "memory": ("memory_gb", "host memory is `memory_gb`, in GB"),
    "mem": ("memory_gb", "host memory is `memory_gb`, in GB"),
    "ram": ("memory_gb", "host memory is `memory_gb`, in GB"),
    "disk": ("disk_gb", "disk is `disk_gb`, in GB"),
    "disk_size": ("disk_gb", "disk is `disk_gb`, in GB"),
    "storage": ("disk_gb", "disk is `disk_gb`, in GB"),
    "region": ("location", "regions are chosen with `location`"),
    "zone": ("location", "regions are chosen with `location`"),
    "cloud": ("location", "nodus compares every supplier; narrow the choice with `location`"),
    "provider": ("location", "nodus compares every supplier; narrow the choice with `location`"),
    "supplier": ("location", "nodus compares every supplier; narrow the choice with `location`"),
    "instance_type": ("gpu", "nodus chooses the machine; ask for resources (gpu, gpu_count, cpu)"),
    "machine_type": ("gpu", "nodus chooses the machine; ask for resources (gpu, gpu_count, cpu)"),
    "max_price": ("max_price_per_hour", "the price limit is `max_price_per_hour`, USD per hour"),
    "price_limit": ("max_price_per_hour", "the price limit is `max_price_per_hour`, USD per hour"),
    "max_cost": ("budget", "the spending limit for the whole run is `budget`, in USD"),
    "architecture": ("arch", 'the CPU architecture is `arch` ("x86_64" or "arm64")'),
    "platform": ("arch", 'the CPU architecture is `arch` ("x86_64" or "arm64")'),
    "run": ("command", "what to run is `command`"),
    "cmd": ("command", "what to run is `command`"),
    "args": ("command", "what to run is `command`"),
    "environment": ("env", "environment variables are the table `env`"),
    "envs": ("env", "environment variables are the table `env`"),
    "env_vars": ("env", "environment variables are the table `env`"),
    "docker_image": ("image", "the container image is `image`"),
    "container_image": ("image", "the container image is `image`"),
    "steps": ("stages", "steps are written as [[stages]] tables"),
    "jobs": ("stages", "steps are written as [[stages]] tables"),
    "resources": ("requirements", "what the workload needs (cpu, memory_gb, gpu ...) goes there"),
    "file_mounts": ("mounts", _MOUNTS),
    "volumes": ("mounts", _MOUNTS),
    "outputs": ("output_dir", _OUTPUT_DIR),
    "output": ("output_dir", _OUTPUT_DIR),
    "concurrency": ("map", _PARALLEL),
    "parallelism": ("map", _PARALLEL),
    "replicas": (
        "map",
        "to run the command several times, list its inputs as [map] items: each item runs "
        "as its own task (NODUS_ITEM tells it which)",
    ),
}

#: Keys of other tools for which nodus has no equivalent: what to do instead.
UNSUPPORTED_KEYS: dict[str, str] = {
    "setup": (
        "nodus has no setup step: build it into the image, or run it as a first [[stages]] "
        "step (stages share $NODUS_WORK_DIR)"
    ),
    "num_nodes": _ONE_MACHINE,
    "nodes": _ONE_MACHINE,
    "use_spot": _SPOT,
    "spot": _SPOT,
    "workdir": _WORKDIR,
    "working_dir": _WORKDIR,
    "idle_duration": _IDLE,
    "idle_timeout": _IDLE,
    "retry": _RETRIES,
    "retries": _RETRIES,
    "max_retries": _RETRIES,
}

#: Other names for the keys of a [map] table.
MAP_FOREIGN_KEYS: dict[str, str] = {
    "item": "items",
    "inputs": "items",
    "input": "items",
    "values": "items",
    "file": "over",
    "from": "over",
    "path": "over",
    "items_file": "over",
    "inputs_file": "over",
    "input_file": "over",
    "concurrency": "parallel",
    "max_parallel": "parallel",
    "max_concurrency": "parallel",
    "parallelism": "parallel",
    "workers": "parallel",
}


@cache
def _machines() -> dict[str, list[tuple[str, str | None, int, float]]]:
    """Catalog machine IDs (lowercase) and the GPU configurations they come with."""
    from nodus_cli import catalog  # deferred: validating good files never loads the catalog

    found: dict[str, list[tuple[str, str | None, int, float]]] = {}
    try:
        offers = catalog.embedded().offers
    except Exception:  # a broken installation must not break validation
        return found
    for offer in offers:
        config = (offer.supplier, offer.gpu, offer.gpu_count, offer.gpu_memory_gb)
        configs = found.setdefault(offer.machine_id.strip().lower(), [])
        if config not in configs:
            configs.append(config)
    for configs in found.values():
        configs.sort(key=lambda c: (c[0], c[1] or "", c[2], c[3]))
    return found


# The patterns below read values that are already wrong, so they are compiled on first use:
# compiling them all would be part of every `nodus validate`'s start-up (benchmarks/README.md),
# for good files that never need them.


@cache
def model_and_count() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """``"H100:8"``, ``"8x H100"``: a model and a count in one string."""
    return (
        re.compile(r"^\s*(?P<name>[A-Za-z0-9 _.\-]+?)\s*[:x×*]\s*(?P<count>\d{1,3})\s*$", re.I),
        re.compile(
            r"^\s*(?P<count>\d{1,3})\s*[x×*]?\s*(?P<name>[A-Za-z][A-Za-z0-9 _.\-]*?)\s*$", re.I
        ),
    )


@cache
def _size_spec() -> re.Pattern[str]:
    return re.compile(r"^\s*(\d{1,12}(?:\.\d{1,12})?)\s*(gib|gb|g|mib|mb|tib|tb)?\s*$", re.I)


@cache
def _tpu() -> re.Pattern[str]:
    return re.compile(
        r"^\s*(?:google[\s_-]*)?(?:cloud[\s_-]*)?tpu\b|^\s*tpu[\s_-]*v?\d"
        r"|^\s*v[2-7](?:e|p|lite|litepod|pod)?(?:-\d+)?\s*$",
        re.I,
    )


@cache
def _machine_like() -> re.Pattern[str]:
    return re.compile(
        r"\d+xlarge|\.\d*x?large|standard|highgpu|megagpu|ultragpu|^[a-z]\d[a-z]*\.", re.I
    )


def tpu_message(raw: str) -> str | None:
    """``tpu-v4-8``, ``"TPU v5e"``, ``v5litepod-8``: Google TPUs, which nodus does not run."""
    if len(raw) > MAX_NAME or _tpu().search(raw) is None:
        return None
    return (
        f'"{raw}" names a TPU, and nodus runs GPUs, not TPUs: write a GPU '
        'model, e.g. gpu = "H100" (`nodus gpus` lists them)'
    )


def generic_gpu_message(raw: str) -> str | None:
    """``"gpu"``, ``"any"``: a word, not a model."""
    if gpus.normalize(raw) not in GENERIC_GPU_WORDS:
        return None
    return (
        f'"{raw}" is not a GPU model: write a model, e.g. gpu = "H100" (`nodus gpus` lists '
        "them), or omit gpu to accept any model"
    )


def machine_message(raw: str) -> str | None:
    """Machine IDs in a GPU field: say what the machine carries when the catalog knows it."""
    configs = _machines().get(raw.strip().lower())
    if configs:
        supplier = configs[0][0]
        with_gpus = [c for c in configs if c[1] and c[2]]
        if not with_gpus:
            return (
                f'"{raw}" is a machine ID ({supplier}) without GPUs, not a GPU model: '
                "omit gpu for a CPU-only workload"
            )
        if len(with_gpus) == 1:
            _, gpu, count, memory = with_gpus[0]
            fix = f'gpu = "{gpu}", gpu_count = {count}'
            if memory:
                fix += f", peak_memory_gb = {memory:g}"
            return (
                f'"{raw}" is a machine ID ({supplier}), not a GPU model; it carries '
                f"{count}× {gpu}" + (f" ({memory:g} GB each)" if memory else "") + f": write {fix}"
            )
        shown = [f"{c}× {g} ({m:g} GB each)" for _, g, c, m in with_gpus[:4]]
        more = ", ..." if len(with_gpus) > 4 else ""
        _, gpu, count, _ = with_gpus[0]
        return (
            f'"{raw}" is a machine ID ({supplier}), not a GPU model; it comes with '
            f"{', '.join(shown)}{more}: write the model and count you need, e.g. "
            f'gpu = "{gpu}", gpu_count = {count}'
        )
    if _machine_like().search(raw):
        return (
            f'"{raw}" looks like a machine ID, not a GPU model: write the model it carries, '
            'e.g. gpu = "A100", with gpu_count'
        )
    return None


def _number_text(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return str(value) if abs(value) < _MAX_NUMBER else None
    return f"{value:g}" if math.isfinite(value) else None


def foreign_fix(key: str, value: Any) -> str:
    """The concrete line to write instead, when the value says it."""
    number = _number_text(value)
    if key in ("accelerators", "accelerator", "gpus") and isinstance(value, str):
        table = gpus.table()
        for pattern in model_and_count():
            m = pattern.match(value) if len(value) <= MAX_NAME else None
            if m:
                family = table.lookup(m.group("name"))
                name = family.name if family else m.group("name").strip()
                return f' (here: gpu = "{name}", gpu_count = {int(m.group("count"))})'
        family = table.lookup(value)
        if family is not None:
            return f' (here: gpu = "{family.name}")'
        return ""
    if key in ("gpu_type", "gpu_model", "gpu_name") and isinstance(value, str):
        family = gpus.table().lookup(value)
        if family is not None:
            return f' (here: gpu = "{family.name}")'
        return ""
    if number is None:
        return ""
    if key in ("num_gpus", "gpus", "gpu_num", "n_gpus"):
        if isinstance(value, float) and 0 < value < 1:  # a fraction of a GPU: shared
            return (
                f" (here: {number} of a GPU is share_gpu = true with peak_memory_gb = "
                "<memory each task needs>: a GPU runs as many as its memory holds)"
            )
        return f" (here: gpu_count = {number})"
    if key == "memory_bytes" and isinstance(value, int):
        return f" (here: memory_gb = {value / 1024**3:g})"
    if key in ("num_cpus", "cpus", "vcpus", "cpu_count"):
        return f" (here: cpu = {number})"
    if key in ("gpu_memory_gb", "gpu_memory", "vram"):
        return f" (here: peak_memory_gb = {number})"
    if key in ("max_price", "price_limit"):
        return f" (here: max_price_per_hour = {number})"
    if key in ("concurrency", "parallelism") and isinstance(value, int) and value >= 1:
        return f" (here: parallel = {number})"
    return ""


def unquote_fix(raw: str, key: Key) -> str:
    m = _size_spec().match(raw) if len(raw) <= MAX_NAME else None
    if not m:
        return ""
    number = float(m.group(1))
    unit = (m.group(2) or "").lower()
    if unit in ("mib", "mb"):
        number /= 1024
    elif unit in ("tib", "tb"):
        number *= 1024
    return f": write {key[-1]} = {number:g}"


# -- the same words for a caller of the Python API --------------------------------------------

#: The file's idioms and a Python caller's (keyword arguments, the ``requirements`` mapping),
#: in order: the specific ones first.
_IN_PYTHON = (
    (
        re.compile(r"`(\w+)` belongs at the top level of the file, not in \[requirements\]: [^;]*"),
        r"`\1` is a keyword of its own, not a key of requirements={...}: pass \1=...",
    ),
    (re.compile(r"`?\b(\w+)\b`? in \[requirements\]"), r"`\1=`"),
)
#: ``key = value``, the file's assignment; ``key=value`` is the caller's keyword.
_ASSIGNED = re.compile(r"\b(\w+) = ")
_TOML_BOOL = re.compile(r"=(true|false)\b")
_WRITE = re.compile(r"\bwrite (\w+)=")
_QUOTED = re.compile(r"(\"[^\"]*\")")


def in_python(message: str) -> str:
    """``message`` of the file's rules (or a run's records) in a Python caller's terms:
    ``did you mean `cpu` in [requirements]? (here: cpu = 2)`` becomes ``did you mean
    `cpu=`? (here: cpu=2)``, as the caller passes it (``cpu=2``, or
    ``requirements={"cpu": 2}``)."""
    if "[" not in message and " = " not in message:
        return message
    # A quoted value is the user's (or an example's) as it is: only nodus's words change.
    parts = _QUOTED.split(message)
    for i in range(0, len(parts), 2):
        part = parts[i]
        for pattern, words in _IN_PYTHON:
            part = pattern.sub(words, part)
        part = _ASSIGNED.sub(r"\1=", part)
        part = _TOML_BOOL.sub(lambda b: "=" + b.group(1).capitalize(), part)
        parts[i] = _WRITE.sub(r"pass \1=", part)
    return "".join(parts)
