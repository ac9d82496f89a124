"""A JSON Schema of the workload file (docs/workload.md), for editors and other tools.

``python -m nodus_cli.workload.schema > schemas/workload.schema.json`` regenerates the checked-in
schema; a test fails when it is stale. The schema describes the file's shape (keys,
types, allowed values); ``nodus validate`` remains the reference for the rules a schema
cannot say (GPU names, flat-versus-nested duplicates, stage inheritance).

Editors (Taplo, the Even Better TOML extension) find the schema from a ``#:schema`` line at
the top of a workload file; a relative path there is relative to the workload file's own
folder, so a file in ``workloads/`` of a repository that keeps the schema in ``schemas/``
starts with ``#:schema ../schemas/workload.schema.json``.

Only this module imports pydantic, and nothing a command runs imports this module: pydantic
is a dependency of the project's tests and tools (the ``test`` extra), not of nodus. Run
without it, the module says in one line how to install it.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, Literal

#: What ``python -m nodus_cli.workload.schema`` says when pydantic is not installed.
NEEDS_PYDANTIC = (
    "the schema is generated with pydantic, which nodus itself does not need: "
    "pip install 'pydantic>=2.6' (or install nodus with its test extra, pip install -e '.[test]')"
)

try:
    from pydantic import BaseModel, ConfigDict, Field
    from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
    from pydantic_core import core_schema
except ImportError:
    if __name__ == "__main__":
        sys.exit(f"error: {NEEDS_PYDANTIC}")
    raise

SCHEMA_ID = "urn:nodus:schema:workload-file"
DIALECT = "https://json-schema.org/draft/2020-12/schema"

# -- the values ------------------------------------------------------------------------

GpuName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        description=(
            "GPU model family: a canonical name listed by `nodus gpus`, e.g. "
            '"H100", "A100", "L4", "RTX 4090", "RTX A6000". Case, whitespace, hyphens, '
            'underscores and an "NVIDIA" prefix do not matter; "A6000" is an alias of '
            '"RTX A6000". Memory variants ("A100-80GB") and form factors ("H100 SXM") are '
            "not names: choose the family and set peak_memory_gb. A hard requirement, never "
            "substituted."
        ),
        examples=["H100", "A100", "L4", "RTX 4090"],
    ),
]
GpuCount = Annotated[
    Literal[1, 2, 4, 8],
    Field(
        description=(
            "GPUs on ONE machine: 1, 2, 4 or 8. A group of machines cannot satisfy a request. "
            "Omitted with a GPU requested: 1. A count never implies NVLink, NVSwitch or pooled "
            "memory."
        )
    ),
]
PeakMemory = Annotated[
    float,
    Field(
        gt=0,
        description=(
            "GPU memory needed on EACH GPU, in GB (> 0); compared with the model variant's "
            "nominal memory (an 80 GB A100 satisfies 80)."
        ),
    ),
]
Interconnect = Annotated[
    Literal["any"],
    Field(
        description=(
            'Only "any" (no topology constraint): other values are rejected because the '
            "topology cannot be verified yet."
        )
    ),
]
_LEGACY = 'Legacy, no effect: nodus warns "omit it" and records "automatic".'
FlatOptimization = Annotated[
    Literal["automatic", "lowest_cost", "lower_cost", "balanced", "faster", "fastest"],
    Field(description=f"{_LEGACY} The flat shortcut does not accept an empty string."),
]
NestedOptimization = Annotated[
    Literal["automatic", "lowest_cost", "lower_cost", "balanced", "faster", "fastest", ""],
    Field(description=f"{_LEGACY} An empty string is accepted in [requirements]."),
]
Cpu = Annotated[
    float,
    Field(
        ge=0,
        description=(
            "CPUs (may be fractional, at least 0.01: Docker's smallest CPU share). Default 1; "
            "0 means not set."
        ),
        json_schema_extra={"anyOf": [{"const": 0}, {"type": "number", "minimum": 0.01}]},
    ),
]
MemoryGb = Annotated[
    float,
    Field(
        ge=0,
        description=(
            "Host memory in GB, /dev/shm included, at least 0.006 (Docker's smallest limit, "
            "6 MB). 0 or omitted: routing ignores memory and a container gets 2 GiB per "
            "requested CPU."
        ),
        json_schema_extra={"anyOf": [{"const": 0}, {"type": "number", "minimum": 0.006}]},
    ),
]
DiskGb = Annotated[float, Field(ge=0, description="Disk in GB; 0 means not set.")]
Location = Annotated[
    str,
    Field(
        min_length=1,
        description='A region or region prefix: "us", "eu", "asia", "us-east-1", ...',
        examples=["us", "eu", "us-east-1"],
    ),
]
MaxPrice = Annotated[
    float,
    Field(
        gt=0,
        description=(
            "Price limit in USD per hour for the whole machine (all its GPUs), > 0. "
            "Configurations above it are excluded."
        ),
    ),
]
Arch = Annotated[
    Literal["x86_64", "arm64"],
    Field(description="CPU architecture the image needs: x86_64 or arm64."),
]
Command = Annotated[
    Annotated[str, Field(min_length=1)] | Annotated[list[str], Field(min_length=1)],
    Field(
        description=(
            'What to run: a list of strings (["python", "train.py"]), given to the image\'s '
            "ENTRYPOINT as `docker run` would, or one string, which always runs via "
            "/bin/sh -c whatever the ENTRYPOINT (so a string cannot be combined with "
            "entrypoint). Omitted: the image's own command."
        )
    ),
]
Entrypoint = Annotated[
    list[str],
    Field(
        description=(
            'Replaces the image\'s ENTRYPOINT, e.g. ["python"]; [] clears it. A list, never '
            "one string. Stages inherit the workload's when they omit it. With an entrypoint, "
            "write command as a list: a command string runs via /bin/sh -c instead."
        )
    ),
]
Env = Annotated[
    dict[
        Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
        str | int | float,
    ],
    Field(
        description=(
            'Environment variables, e.g. { HF_HOME = "/cache" }. In a value, ${NAME} and '
            "${NAME:-default} take NAME from the host's environment when the run starts (never "
            "stored: records keep the template); a missing variable without a default stops "
            "the run before anything starts. $$ is a literal $; any other $ is literal. A "
            "literal value under a name with TOKEN, KEY, SECRET or PASSWORD gets a warning: "
            'write HF_TOKEN = "${HF_TOKEN}" instead.'
        ),
        json_schema_extra={"additionalProperties": False},
    ),
]
Mounts = Annotated[
    list[Annotated[str, Field(pattern=r"^[^:]+:/[^:]*(:(ro|rw))?$")]],
    Field(
        description=(
            'Docker -v syntax, "SOURCE:TARGET[:ro|:rw]", e.g. ["./data:/data:ro", '
            '"hf-cache:/root/.cache/huggingface"]. A SOURCE with a "/" is a host path (~/ is '
            "the home folder; a relative path is relative to this file; it must exist when "
            "the run starts); without one it is a named volume, created when missing and kept "
            "after the run. TARGET is an absolute container path other than / and /nodus/work "
            "(the work directory); one mount per TARGET. A stage's mounts add to the "
            "workload's."
        )
    ),
]
PortNumber = Annotated[int, Field(ge=1, le=65535)]
PortSpec = Annotated[
    str,
    Field(
        pattern=(
            r"^(((\d{1,3}\.){3}\d{1,3}|\[[0-9A-Fa-f:.]+\]):)?(\d{1,5}:)?\d{1,5}"
            r"(/(tcp|udp))?$"
        )
    ),
]
Ports = Annotated[
    list[PortNumber | PortSpec],
    Field(
        description=(
            'Ports published on the host: 8000 (host 8000 to container 8000), "8080:80" '
            '(host 8080 to container 80), "127.0.0.1:8080:80" (that address only), with an '
            'optional "/udp" or "/tcp". No ranges; a host port once. A stage\'s ports add to '
            "the workload's; a stage with [map] cannot publish ports."
        )
    ),
]
OutputDir = Annotated[
    str,
    Field(
        min_length=1,
        description=(
            "After the run, success or not, the contents of $NODUS_WORK_DIR are copied to "
            "OUTPUT_DIR/RUN_ID/. Relative to this file; a folder, not a file. Top level only."
        ),
    ),
]
ShareGpu = Annotated[
    bool,
    Field(
        description=(
            "Tasks may share one GPU, sized by memory: needs peak_memory_gb (the GPU memory "
            "each task uses) and gpu_count 1 (or omitted); a GPU of D GB runs at most "
            "floor(D / peak_memory_gb) tasks at once. Never inherited by stages."
        )
    ),
]
Image = Annotated[
    str,
    Field(
        min_length=1,
        pattern=r"^\S+$",
        description='Container image, e.g. "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime".',
    ),
]

# -- the tables ------------------------------------------------------------------------


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Map(_Table):
    """Fan-out: the command runs once per item, each in its own container (a task)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"oneOf": [{"required": ["items"]}, {"required": ["over"]}]},
    )

    items: list[str | int] | None = Field(
        None,
        min_length=1,
        max_length=100_000,
        description="The inputs, one task each (strings or integers; at most 100,000).",
    )
    over: str | None = Field(
        None,
        min_length=1,
        description=(
            "A file of inputs, one per non-empty line (at most 100,000), relative to this "
            "workload file; read when the workload is validated."
        ),
    )
    parallel: int | None = Field(
        None, ge=1, description="At most this many tasks at once (default: as capacity allows)."
    )


class Requirements(_Table):
    """The nested ("dictionary") form: [requirements] or [stages.requirements]."""

    gpu: GpuName | None = None
    gpu_count: GpuCount | None = None
    peak_memory_gb: PeakMemory | None = None
    gpu_interconnect: Interconnect | None = None
    optimization: NestedOptimization | None = None
    cpu: Cpu | None = None
    memory_gb: MemoryGb | None = None
    disk_gb: DiskGb | None = None
    location: Location | None = None
    max_price_per_hour: MaxPrice | None = None
    arch: Arch | None = None
    share_gpu: ShareGpu | None = None


class Stage(_Table):
    """One [[stages]] table: a container run in file order (docs/workload.md, "Stages")."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$",
        description="The stage's name, unique within the workload.",
    )
    image: Image | None = Field(None, description="Container image; default: the workload's.")
    command: Command | None = None
    entrypoint: Entrypoint | None = None
    env: Env | None = Field(
        None,
        description=(
            "Environment, merged over the workload's env; ${NAME} and ${NAME:-default} take "
            "NAME from the host when the run starts ($$ is a literal $)."
        ),
    )
    mounts: Mounts | None = None
    ports: Ports | None = None
    map: Map | None = Field(
        None,
        description=(
            "[stages.map]: fan this stage out over inputs, one task per item "
            "(exactly one of items and over; optional parallel)."
        ),
    )
    requirements: Requirements | None = Field(
        None,
        description=(
            "This stage's requirements. Omitted or zero cpu and disk_gb inherit the workload's; "
            "location, max_price_per_hour and arch apply to every stage; GPU requirements and "
            "memory_gb are never inherited."
        ),
    )
    gpu: GpuName | None = None
    gpu_count: GpuCount | None = None
    peak_memory_gb: PeakMemory | None = None
    gpu_interconnect: Interconnect | None = None
    optimization: FlatOptimization | None = None
    share_gpu: ShareGpu | None = None


class WorkloadFile(_Table):
    """A nodus workload file: what to run and what it needs."""

    model_config = ConfigDict(extra="forbid", title="nodus workload file")

    name: str | None = Field(
        None, min_length=1, description="Default: the file name without .toml."
    )
    image: Image | None = Field(
        None, description="Container image; required unless every stage has one."
    )
    command: Command | None = None
    env: Env | None = None
    entrypoint: Entrypoint | None = None
    mounts: Mounts | None = None
    ports: Ports | None = None
    map: Map | None = Field(
        None,
        description=(
            "Fan the command out over inputs, one task per item (exactly one of items and "
            "over; optional parallel). With [[stages]], write [stages.map] in the stage that "
            "fans out instead."
        ),
    )
    output_dir: OutputDir | None = None
    model: str | None = Field(
        None, description="Descriptive only: never downloads weights.", min_length=1
    )
    budget: float | None = Field(
        None,
        gt=0,
        description="USD for the whole run: every device, every stage, retries (> 0).",
    )
    priority: int | None = Field(
        None,
        ge=0,
        le=100,
        description=(
            "Its place when it waits for GPUs other runs hold: 0 to 100, higher first; "
            "equal priorities first come, first served (default 50)."
        ),
    )
    wait_timeout: str | float | None = Field(
        None,
        description=(
            'Give up waiting for GPUs after this long: "90s", "30m", "2h" or a number of '
            "seconds (exit 3). Default: wait as long as it takes."
        ),
    )
    stages: list[Stage] | None = Field(
        None,
        min_length=1,
        description=(
            'Optional steps run in file order; without stages the workload is one stage, "main".'
        ),
    )
    gpu: GpuName | None = None
    gpu_count: GpuCount | None = None
    peak_memory_gb: PeakMemory | None = None
    gpu_interconnect: Interconnect | None = None
    optimization: FlatOptimization | None = None
    share_gpu: ShareGpu | None = None
    requirements: Requirements | None = Field(
        None,
        description=(
            "The nested form. A flat shortcut given both at the top level and here is an "
            "error, even when both agree."
        ),
    )


class _TomlSchema(GenerateJsonSchema):
    """TOML has no null: an optional key is simply left out."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        result = self.generate_inner(schema["schema"])
        default = schema.get("default")
        if default is not None:
            result["default"] = default
        return result


def schema() -> dict[str, Any]:
    generated = WorkloadFile.model_json_schema(schema_generator=_TomlSchema)
    return {"$schema": DIALECT, "$id": SCHEMA_ID, **generated}


def render() -> str:
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
