"""SPEC section 2, rule by rule: what a workload file may say and what the user reads."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from nodus_cli.errors import Problem
from nodus_cli.workload import (
    FLAT_SHORTCUTS,
    LEGACY_OPTIMIZATION,
    NESTED_ONLY,
    Requirements,
    Result,
    Stage,
    load_file,
    load_text,
    normalize,
    to_toml,
)

IMAGE = 'image = "img:1"\n'


def check(text: str) -> Result:
    return load_text(textwrap.dedent(text), "w.toml")


def problem(result: Result, loc: str, severity: str = "error") -> Problem:
    """The one problem at ``loc`` (fails listing every problem otherwise)."""
    found = [p for p in result.problems if p.loc == loc and p.severity == severity]
    assert len(found) == 1, f"expected one {severity} at {loc!r}, got {result.problems}"
    return found[0]


def error(text: str, loc: str, *words: str, line: int | None = None) -> Problem:
    result = check(text)
    assert not result.valid
    found = problem(result, loc)
    for word in words:
        assert word in found.message, f"{word!r} not in {found.message!r}"
    if line is not None:
        assert found.line == line, (found, line)
    return found


def valid(text: str) -> Result:
    result = check(text)
    assert result.valid, result.problems
    assert result.workload is not None
    return result


def reqs(text: str) -> Requirements:
    workload = valid(text).workload
    assert workload is not None
    return workload.requirements


SPEC_EXAMPLE = """\
name = "llama-finetune"                 # optional; default: the file name without .toml
image = "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime"
command = ["python", "train.py", "--epochs", "3"]   # list of strings, or one string
env = { HF_HOME = "/cache" }            # optional
model = "llama-3-8b"                    # optional, descriptive only
budget = 50.0                           # optional: USD for the whole run

gpu = "H100"                            # flat shortcut
gpu_count = 8                           # flat shortcut
peak_memory_gb = 80                     # flat shortcut: GPU memory needed on each GPU

[requirements]                          # the nested ("dictionary") form
cpu = 32
memory_gb = 256
disk_gb = 500
location = "us"
max_price_per_hour = 120.0
gpu_interconnect = "any"
"""


# -- the SPEC example -------------------------------------------------------------------


def test_the_spec_example_is_valid_and_normalized() -> None:
    result = valid(SPEC_EXAMPLE)
    assert result.problems == []
    w = result.workload
    assert w is not None
    assert w.name == "llama-finetune"
    assert w.image == "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime"
    assert w.command == ["python", "train.py", "--epochs", "3"]
    assert w.env == {"HF_HOME": "/cache"}
    assert (w.model, w.budget, w.optimization) == ("llama-3-8b", 50.0, "automatic")
    assert w.requirements == Requirements(
        gpu="H100",
        gpu_count=8,
        peak_memory_gb=80.0,
        gpu_interconnect="any",
        cpu=32.0,
        memory_gb=256.0,
        disk_gb=500.0,
        location="us",
        max_price_per_hour=120.0,
        arch=None,
    )
    assert [s.name for s in w.stages] == ["main"]
    assert w.stages[0] == Stage("main", w.image, w.command, w.env, w.requirements)


def test_the_name_defaults_to_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "train-big.toml"
    path.write_text(IMAGE)
    result = load_file(path)
    assert result.workload is not None
    assert result.workload.name == "train-big"
    assert result.path == str(path)


def test_a_minimal_workload_needs_only_an_image() -> None:
    r = reqs(IMAGE)
    assert r == Requirements()
    assert (r.gpu, r.gpu_count, r.cpu, r.memory_gb) == (None, 0, 1.0, None)


def test_a_workload_without_image_or_stages_is_an_error() -> None:
    error("name = 'x'\n", "image", 'required: set image = "registry/name:tag"')


# -- keys and where they may stand (2.1) ---------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("gpu", '"H100"'),
        ("gpu_count", "2"),
        ("peak_memory_gb", "40"),
        ("gpu_interconnect", '"any"'),
        ("optimization", '"automatic"'),
    ],
)
def test_flat_shortcuts_stand_at_the_top_or_nested(key: str, value: str) -> None:
    flat = check(f"{IMAGE}{key} = {value}\n")
    nested = check(f"{IMAGE}[requirements]\n{key} = {value}\n")
    assert flat.valid and nested.valid
    assert flat.workload is not None and nested.workload is not None
    assert flat.workload.requirements == nested.workload.requirements


@pytest.mark.parametrize("key", FLAT_SHORTCUTS)
def test_a_shortcut_set_flat_and_nested_is_an_error_even_when_equal(key: str) -> None:
    value = {
        "gpu": '"H100"',
        "gpu_count": "8",
        "peak_memory_gb": "80",
        "gpu_interconnect": '"any"',
        "optimization": '"automatic"',
        "share_gpu": "true",
    }[key]
    text = f"{IMAGE}{key} = {value}\n\n[requirements]\n{key} = {value}\n"
    found = error(
        text,
        key,
        "set both at the top level and in [requirements] (line 5)",
        "even if they agree",
        "keep only one of them",
        line=2,
    )
    assert found.severity == "error"


def test_a_shortcut_set_flat_and_nested_in_a_stage_is_an_error() -> None:
    text = """\
        image = "img"
        [[stages]]
        name = "train"
        gpu = "H100"
        [stages.requirements]
        gpu = "H100"
    """
    error(
        text,
        "stages[0].gpu",
        "set both as a stage shortcut and in [stages.requirements] (line 6)",
        "keep only one",
        line=4,
    )


@pytest.mark.parametrize("key", NESTED_ONLY)
def test_nested_only_keys_at_the_top_level_say_where_they_belong(key: str) -> None:
    value = {"location": '"us"', "arch": '"arm64"'}.get(key, "4")
    error(
        f"{IMAGE}{key} = {value}\n",
        key,
        f"`{key}` belongs in [requirements]: move it there",
        line=2,
    )


def test_nested_only_keys_in_a_stage_belong_in_stage_requirements() -> None:
    text = 'image = "i"\n[[stages]]\nname = "a"\ncpu = 4\n'
    error(text, "stages[0].cpu", "`cpu` belongs in [stages.requirements]: move it there", line=4)


@pytest.mark.parametrize("key", ["name", "image", "command", "env", "model", "budget", "stages"])
def test_top_level_keys_in_requirements_say_where_they_belong(key: str) -> None:
    value = {"env": "{ A = '1' }", "budget": "5", "stages": "[]"}.get(key, '"x"')
    error(
        f"{IMAGE}[requirements]\n{key} = {value}\n",
        f"requirements.{key}",
        f"`{key}` belongs at the top level of the file, not in [requirements]",
        line=3,
    )


@pytest.mark.parametrize("key", ["model", "budget"])
def test_workload_only_keys_in_a_stage(key: str) -> None:
    value = '"m"' if key == "model" else "5"
    text = f'image = "i"\n[[stages]]\nname = "a"\n{key} = {value}\n'
    error(text, f"stages[0].{key}", "applies to the whole workload: set it at the top level")


def test_stage_keys_in_stage_requirements() -> None:
    text = 'image = "i"\n[[stages]]\nname = "a"\n[stages.requirements]\nimage = "x"\n'
    error(
        text,
        "stages[0].requirements.image",
        "belongs in the [[stages]] table itself, not in [stages.requirements]",
        line=5,
    )


@pytest.mark.parametrize(
    ("line", "loc", "words"),
    [
        ('gpu_type = "H100"', "gpu_type", ["did you mean `gpu`?", '(here: gpu = "H100")']),
        ('gpu_type = "nvidia a100"', "gpu_type", ['(here: gpu = "A100")']),
        ("num_gpus = 8", "num_gpus", ["did you mean `gpu_count`?", "(here: gpu_count = 8)"]),
        (
            "num_gpus = 0.25",
            "num_gpus",
            ["(here: 0.25 of a GPU is share_gpu = true with peak_memory_gb = <memory each"],
        ),
        (
            "num_cpus = 4",
            "num_cpus",
            ["did you mean `cpu` in [requirements]?", "(here: cpu = 4)"],
        ),
        (
            "memory_bytes = 34359738368",
            "memory_bytes",
            ["did you mean `memory_gb` in [requirements]?", "(here: memory_gb = 32)"],
        ),
        ("gpus = 4", "gpus", ["did you mean `gpu_count`?", "(here: gpu_count = 4)"]),
        ('gpus = "A100:8"', "gpus", ['(here: gpu = "A100", gpu_count = 8)']),
        (
            'accelerators = "H100:8"',
            "accelerators",
            ["did you mean `gpu`?", '(here: gpu = "H100", gpu_count = 8)'],
        ),
        ('accelerators = "L4"', "accelerators", ["did you mean `gpu`?", '(here: gpu = "L4")']),
        ("vram = 24", "vram", ["did you mean `peak_memory_gb`?", "(here: peak_memory_gb = 24)"]),
        ('region = "us"', "region", ["did you mean `location` in [requirements]?"]),
        ('imge = "x"', "imge", ["unknown key; did you mean `image`?"]),
        ('GPU = "H100"', "GPU", ["did you mean `gpu`?", "lowercase"]),
        ("gpu-count = 2", "gpu-count", ["did you mean `gpu_count`?"]),
        ("memory_gbs = 2", "memory_gbs", ["did you mean `memory_gb` in [requirements]?"]),
        (
            "zzz = 1",
            "zzz",
            [
                "unknown key (allowed here: name, image, command, env, model, budget, stages, "
                "entrypoint, mounts, ports, map, output_dir, priority, wait_timeout, gpu"
            ],
        ),
    ],
)
def test_unknown_keys_get_a_did_you_mean_hint(line: str, loc: str, words: list[str]) -> None:
    error(f"{IMAGE}{line}\n", loc, *words, line=2)


def test_unknown_keys_in_requirements_and_stages() -> None:
    error(
        f"{IMAGE}[requirements]\nnum_gpus = 2\n",
        "requirements.num_gpus",
        "did you mean `gpu_count`?",
        "(here: gpu_count = 2)",
        line=3,
    )
    found = error(
        f"{IMAGE}[requirements]\ncpus = 2\n", "requirements.cpus", "did you mean `cpu`?", line=3
    )
    assert "in [requirements]" not in found.message  # it is already there
    error(
        'image = "i"\n[[stages]]\nname = "a"\nnum_cpus = 2\n',
        "stages[0].num_cpus",
        "did you mean `cpu` in [stages.requirements]?",
        line=4,
    )


# -- quantities ----------------------------------------------------------------------------

NUMBERS = [
    ("peak_memory_gb", "peak_memory_gb"),
    ("requirements.cpu", "cpu"),
    ("requirements.memory_gb", "memory_gb"),
    ("requirements.disk_gb", "disk_gb"),
    ("requirements.max_price_per_hour", "max_price_per_hour"),
    ("budget", "budget"),
]


def _numeric(loc: str, key: str, value: str) -> str:
    if loc.startswith("requirements."):
        return f"{IMAGE}[requirements]\n{key} = {value}\n"
    return f"{IMAGE}{key} = {value}\n"


@pytest.mark.parametrize(("loc", "key"), [*NUMBERS, ("gpu_count", "gpu_count")])
@pytest.mark.parametrize("value", ["true", "false"])
def test_booleans_are_never_quantities(loc: str, key: str, value: str) -> None:
    found = error(_numeric(loc, key, value), loc, f"not {value}")
    assert "number" in found.message


@pytest.mark.parametrize(("loc", "key"), NUMBERS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+nan"])
def test_non_finite_numbers_are_never_quantities(loc: str, key: str, value: str) -> None:
    error(_numeric(loc, key, value), loc, "must be a finite number")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_gpu_counts(value: str) -> None:
    error(f"{IMAGE}gpu_count = {value}\n", "gpu_count", "must be a whole number: 1, 2, 4 or 8")


@pytest.mark.parametrize(("loc", "key"), NUMBERS)
def test_negative_quantities_are_errors(loc: str, key: str) -> None:
    error(_numeric(loc, key, "-1"), loc, "cannot be negative", line=2 if "." not in loc else 3)


@pytest.mark.parametrize(
    ("loc", "key"),
    [
        ("peak_memory_gb", "peak_memory_gb"),
        ("requirements.max_price_per_hour", "max_price_per_hour"),
        ("budget", "budget"),
    ],
)
def test_zero_is_not_a_positive_quantity(loc: str, key: str) -> None:
    error(_numeric(loc, key, "0"), loc, "must be greater than 0")


def test_zero_cpu_memory_and_disk_mean_not_set() -> None:
    r = reqs(f"{IMAGE}[requirements]\ncpu = 0\nmemory_gb = 0\ndisk_gb = 0.0\n")
    assert (r.cpu, r.memory_gb, r.disk_gb) == (1.0, None, None)


def test_fractional_cpus_and_integer_quantities() -> None:
    r = reqs(f"{IMAGE}peak_memory_gb = 24\n[requirements]\ncpu = 0.5\nmemory_gb = 3\n")
    assert (r.cpu, r.memory_gb, r.peak_memory_gb) == (0.5, 3.0, 24.0)
    assert isinstance(r.peak_memory_gb, float)


@pytest.mark.parametrize(
    ("value", "fix"),
    [('"32GB"', "write memory_gb = 32"), ('"512 MiB"', "write memory_gb = 0.5"), ('"8"', "= 8")],
)
def test_quoted_numbers_get_the_unquoted_fix(value: str, fix: str) -> None:
    error(
        f"{IMAGE}[requirements]\nmemory_gb = {value}\n",
        "requirements.memory_gb",
        "must be a number (GB) without quotes",
        fix,
    )


def test_other_value_types_are_not_numbers() -> None:
    error(f"{IMAGE}[requirements]\ncpu = [1]\n", "requirements.cpu", "must be a number (CPUs)")
    error(
        f"{IMAGE}[requirements]\ndisk_gb = 1979-05-27\n", "requirements.disk_gb", "must be a number"
    )


def test_an_integer_too_large_for_a_quantity() -> None:
    error(f"{IMAGE}budget = {10**30}\n", "budget", "too large")


# -- GPU requests: count, memory, interconnect ----------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_gpu_counts_on_one_machine(count: int) -> None:
    r = reqs(f'{IMAGE}gpu = "A100"\ngpu_count = {count}\n')
    assert (r.gpu, r.gpu_count, r.wants_gpu) == ("A100", count, True)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("3", ["must be 1, 2, 4 or 8, not 3", "write gpu_count = 4"]),
        ("5", ["write gpu_count = 8"]),
        ("16", ["16 GPUs cannot be requested", "ONE machine", "a group of machines cannot"]),
        ("0", ["omit gpu_count (and gpu) for a workload without a GPU"]),
        ("-2", ["cannot be negative"]),
        ("8.0", ["must be an integer: write gpu_count = 8"]),
        ("16.0", ["16 GPUs cannot be requested"]),
        ("2.5", ["whole number of GPUs (1, 2, 4 or 8), not 2.5"]),
        ('"8"', ["without quotes", "write gpu_count = 8"]),
        ("[8]", ["must be a whole number: 1, 2, 4 or 8"]),
    ],
)
def test_gpu_count_must_be_1_2_4_or_8(value: str, words: list[str]) -> None:
    error(f'{IMAGE}gpu = "H100"\ngpu_count = {value}\n', "gpu_count", *words, line=3)


def test_gpu_count_defaults_to_one_when_a_gpu_is_requested() -> None:
    assert reqs(f'{IMAGE}gpu = "L4"\n').gpu_count == 1
    assert reqs(f"{IMAGE}peak_memory_gb = 16\n").gpu_count == 1
    assert reqs(IMAGE).gpu_count == 0


def test_a_count_without_a_model_accepts_any_model() -> None:
    r = reqs(f"{IMAGE}gpu_count = 4\n")
    assert (r.gpu, r.gpu_count) == (None, 4)


def test_peak_memory_is_per_gpu_and_bounded_by_the_model() -> None:
    assert reqs(f'{IMAGE}gpu = "A100"\npeak_memory_gb = 80\n').peak_memory_gb == 80.0
    error(
        f'{IMAGE}gpu = "A100"\npeak_memory_gb = 100\n',
        "peak_memory_gb",
        "no A100 has 100 GB: A100 comes with 40 GB or 80 GB per GPU",
        line=3,
    )


@pytest.mark.parametrize("where", ["flat", "nested"])
def test_gpu_interconnect_any_is_accepted(where: str) -> None:
    text = 'gpu_interconnect = "any"\n'
    text = IMAGE + (text if where == "flat" else "[requirements]\n" + text)
    assert reqs(text).gpu_interconnect == "any"


@pytest.mark.parametrize("value", ["nvlink", "nvswitch", "NVLink", "pcie"])
def test_other_interconnects_are_rejected(value: str) -> None:
    error(
        f'{IMAGE}gpu_count = 8\ngpu_interconnect = "{value}"\n',
        "gpu_interconnect",
        f'"{value}" cannot be requested: the interconnect topology cannot be verified yet',
        'write gpu_interconnect = "any" or omit it',
        line=3,
    )


def test_interconnect_spelling_and_type() -> None:
    error(
        f'{IMAGE}gpu_interconnect = "ANY"\n', "gpu_interconnect", 'write gpu_interconnect = "any"'
    )
    error(f"{IMAGE}gpu_interconnect = 1\n", "gpu_interconnect", 'must be the string "any"')


# -- optimization (2.4) ----------------------------------------------------------------------


@pytest.mark.parametrize("value", LEGACY_OPTIMIZATION)
@pytest.mark.parametrize("where", ["flat", "nested"])
def test_legacy_optimization_warns_and_records_automatic(value: str, where: str) -> None:
    line = f'optimization = "{value}"\n'
    text = IMAGE + (line if where == "flat" else "[requirements]\n" + line)
    result = valid(text)
    loc = "optimization" if where == "flat" else "requirements.optimization"
    warning = problem(result, loc, "warning")
    assert f'"{value}" is a legacy setting with no effect, recorded as "automatic": omit it' in (
        warning.message
    )
    assert warning.line == (2 if where == "flat" else 3)
    assert result.workload is not None
    assert result.workload.optimization == "automatic"
    assert result.as_json()["workload"]["optimization"] == "automatic"


def test_empty_optimization_is_accepted_nested_and_rejected_flat() -> None:
    result = valid(f'{IMAGE}[requirements]\noptimization = ""\n')
    assert "omit it" in problem(result, "requirements.optimization", "warning").message
    error(
        f'{IMAGE}optimization = ""\n',
        "optimization",
        "the flat shortcut does not accept an empty string: omit optimization",
        line=2,
    )


def test_empty_optimization_in_a_stage_follows_the_same_rule() -> None:
    stage = 'image = "i"\n[[stages]]\nname = "a"\n'
    valid(f'{stage}[stages.requirements]\noptimization = ""\n')
    error(f'{stage}optimization = ""\n', "stages[0].optimization", "does not accept an empty")


@pytest.mark.parametrize("value", ['"cheapest"', '"Fastest"', "1", "true"])
def test_other_optimization_values_are_errors(value: str) -> None:
    error(
        f"{IMAGE}optimization = {value}\n",
        "optimization",
        "is not an accepted value",
        "omit it (accepted for compatibility: automatic, lowest_cost, lower_cost, balanced, "
        "faster, fastest)",
    )


# -- money, location, arch (2.5) -------------------------------------------------------------


def test_budget_and_price_limit() -> None:
    result = valid(f"{IMAGE}budget = 12.5\n[requirements]\nmax_price_per_hour = 3\n")
    assert result.workload is not None
    assert result.workload.budget == 12.5
    assert result.workload.requirements.max_price_per_hour == 3.0
    error(f"{IMAGE}budget = -1\n", "budget", "cannot be negative (USD for the whole run)")
    error(
        f"{IMAGE}[requirements]\nmax_price_per_hour = 0\n",
        "requirements.max_price_per_hour",
        "must be greater than 0 (USD per hour); omit it to set no limit",
    )


def test_arch() -> None:
    assert reqs(f'{IMAGE}[requirements]\narch = "arm64"\n').arch == "arm64"
    error(f'{IMAGE}[requirements]\narch = "aarch64"\n', "requirements.arch", 'write arch = "arm64"')
    error(f'{IMAGE}[requirements]\narch = "amd64"\n', "requirements.arch", 'write arch = "x86_64"')
    error(
        f'{IMAGE}[requirements]\narch = "sparc"\n',
        "requirements.arch",
        'must be "x86_64" or "arm64"',
    )


def test_location() -> None:
    assert reqs(f'{IMAGE}[requirements]\nlocation = "us-east-1"\n').location == "us-east-1"
    assert reqs(f'{IMAGE}[requirements]\nlocation = "eu"\n').location == "eu"
    error(f'{IMAGE}[requirements]\nlocation = ""\n', "requirements.location", "region")
    error(f"{IMAGE}[requirements]\nlocation = 1\n", "requirements.location", "in quotes")
    result = valid(f'{IMAGE}[requirements]\nlocation = "mars-north-9"\n')
    warning = problem(result, "requirements.location", "warning")
    assert "matches no region or area nodus knows" in warning.message


# -- image, command, env -----------------------------------------------------------------------


def test_commands() -> None:
    w = valid(f'{IMAGE}command = "python train.py && echo done"\n').workload
    assert w is not None and w.command == ["/bin/sh", "-c", "python train.py && echo done"]
    w = valid(f'{IMAGE}command = ["python", "-c", "print(1)"]\n').workload
    assert w is not None and w.command == ["python", "-c", "print(1)"]
    error(f"{IMAGE}command = []\n", "command", "must not be empty; omit it to run the image's own")
    error(f'{IMAGE}command = "  "\n', "command", "must not be empty")
    error(
        f'{IMAGE}command = ["python", 3]\n',
        "command[1]",
        'every argument must be a string: write "3"',
    )
    error(f"{IMAGE}command = 3\n", "command", "must be a list of strings")


def test_env() -> None:
    w = valid(f'{IMAGE}env = {{ HF_HOME = "/cache", WORKERS = 4 }}\n').workload
    assert w is not None and w.env == {"HF_HOME": "/cache", "WORKERS": "4"}
    error(
        f"{IMAGE}env = {{ DEBUG = true }}\n", "env.DEBUG", 'must be a string: write DEBUG = "true"'
    )
    error(f'{IMAGE}env = {{ "1X" = "a" }}\n', "env.1X", "not a valid environment variable name")
    error(f'{IMAGE}env = {{ NODUS_WORK_DIR = "a" }}\n', "env.NODUS_WORK_DIR", "set by nodus")
    error(f'{IMAGE}env = "A=1"\n', "env", "must be a table")


def test_image_and_strings() -> None:
    error('image = "pytorch/pytorch: 2.8"\n', "image", "contains whitespace")
    error("image = 3\n", "image", 'must be a string in quotes, e.g. image = "..."')
    error('image = ""\n', "image", "must not be empty")
    error(f'{IMAGE}name = "a\\u0000b"\n', "name", "NUL")


# -- stages (2.6) ----------------------------------------------------------------------------

STAGED = """\
image = "base:1"
command = ["python", "main.py"]
env = { A = "1", B = "2" }

[requirements]
cpu = 8
disk_gb = 100
memory_gb = 64
location = "us"
max_price_per_hour = 30
arch = "x86_64"

[[stages]]
name = "prepare"
command = "python prepare.py"

[[stages]]
name = "train"
image = "train:2"
env = { B = "3" }
gpu = "H100"
gpu_count = 8
[stages.requirements]
cpu = 0
disk_gb = 20
memory_gb = 512

[[stages]]
name = "report"
[stages.requirements]
cpu = 2
"""


def test_stages_inherit_cpu_disk_location_price_and_arch_but_not_gpu_or_memory() -> None:
    result = valid(STAGED)
    w = result.workload
    assert w is not None and w.declared_stages
    prepare, train, report = w.stages
    assert [s.name for s in w.stages] == ["prepare", "train", "report"]
    # image and command default to the workload's; env merges over it
    assert (prepare.image, train.image, report.image) == ("base:1", "train:2", "base:1")
    assert prepare.command == ["/bin/sh", "-c", "python prepare.py"]
    assert report.command == ["python", "main.py"]
    assert train.env == {"A": "1", "B": "3"} and prepare.env == {"A": "1", "B": "2"}
    # omitted or zero cpu/disk inherit; a stage's own values win
    assert (prepare.requirements.cpu, prepare.requirements.disk_gb) == (8.0, 100.0)
    assert (train.requirements.cpu, train.requirements.disk_gb) == (8.0, 20.0)
    assert (report.requirements.cpu, report.requirements.disk_gb) == (2.0, 100.0)
    # location, price limit and arch apply to every stage
    for stage in w.stages:
        assert stage.requirements.location == "us"
        assert stage.requirements.max_price_per_hour == 30.0
        assert stage.requirements.arch == "x86_64"
    # GPU requirements and memory_gb are never inherited: a CPU-only step stays CPU-only
    assert (prepare.requirements.gpu, prepare.requirements.gpu_count) == (None, 0)
    assert prepare.requirements.memory_gb is None and report.requirements.memory_gb is None
    assert (train.requirements.gpu, train.requirements.gpu_count) == ("H100", 8)
    assert train.requirements.memory_gb == 512.0
    # memory_gb at the workload level reaches no stage: the user is told
    warning = problem(result, "requirements.memory_gb", "warning")
    assert warning.message == (
        "memory_gb = 64 in [requirements] reaches no stage: with [[stages]], each stage sets "
        "its own memory_gb; add memory_gb = 64 to the stages that need it (in "
        "[stages.requirements]) or remove it here"
    )
    assert warning.line == 8


def test_workload_gpu_with_stages_reaches_no_stage_and_warns() -> None:
    text = 'image = "i"\ngpu = "H100"\n[[stages]]\nname = "cpu-only"\n'
    result = valid(text)
    assert result.workload is not None
    assert result.workload.stages[0].requirements.gpu_count == 0
    warning = problem(result, "gpu", "warning")
    assert warning.message == (
        'gpu = "H100" at the top level reaches no stage: with [[stages]], each stage asks for '
        'its own GPU; add gpu = "H100" to the stages that need it (as a stage key or in '
        "[stages.requirements]) or remove it here"
    )
    assert warning.line == 2


def test_a_workload_without_stages_has_one_stage_main() -> None:
    w = valid(SPEC_EXAMPLE).workload
    assert w is not None and not w.declared_stages
    assert [s.name for s in w.stages] == ["main"]
    assert w.stages[0].requirements == w.requirements


def test_stage_names_are_unique() -> None:
    text = 'image = "i"\n[[stages]]\nname = "a"\n\n[[stages]]\nname = "a"\n'
    error(
        text,
        "stages[1].name",
        '"a" is already the name of stages[0] (line 3): stage names must be unique',
        line=6,
    )


def test_every_stage_needs_a_valid_name() -> None:
    error(
        'image = "i"\n[[stages]]\ncommand = "x"\n', "stages[0]", "every stage needs a name", line=2
    )
    error(
        'image = "i"\n[[stages]]\nname = "my stage"\n',
        "stages[0].name",
        '"my stage" is not a valid stage name',
        line=3,
    )


def test_stage_images() -> None:
    w = valid('[[stages]]\nname = "a"\nimage = "x:1"\n').workload
    assert w is not None and w.image is None and w.stages[0].image == "x:1"
    error(
        '[[stages]]\nname = "a"\n[[stages]]\nname = "b"\nimage = "x"\n',
        "stages[0].image",
        'no image: set image = "registry/name:tag" at the top level or in this stage',
        line=1,
    )


def test_whole_workload_requirements_conflicting_in_a_stage() -> None:
    text = """\
        image = "i"
        [requirements]
        location = "us"
        [[stages]]
        name = "a"
        [stages.requirements]
        location = "eu"
        [[stages]]
        name = "b"
        [stages.requirements]
        location = "us"
    """
    found = error(
        text,
        "stages[0].requirements.location",
        'the whole workload has location = "us", which applies to every stage',
        "remove location here or change it at the top level",
        line=7,
    )
    assert found.severity == "error"
    assert len(check(text).errors) == 1  # the same value again is fine


def test_a_stage_may_set_what_the_workload_leaves_open() -> None:
    text = 'image = "i"\n[[stages]]\nname = "a"\n[stages.requirements]\nlocation = "eu"\n'
    w = valid(text).workload
    assert w is not None and w.stages[0].requirements.location == "eu"


def test_stages_must_be_an_array_of_tables() -> None:
    error(f'{IMAGE}stages = "a"\n', "stages", "must be an array of tables", line=2)
    error(f"{IMAGE}stages = []\n", "stages", "is empty", line=2)
    w = valid(f'{IMAGE}stages = [{{ name = "a" }}, {{ name = "b", gpu = "L4" }}]\n').workload
    assert w is not None and [s.requirements.gpu for s in w.stages] == [None, "L4"]


def test_stage_requirements_follow_the_same_rules() -> None:
    text = """\
        image = "i"
        [[stages]]
        name = "a"
        [[stages]]
        name = "b"
        gpu = "A100-80GB"
        [stages.requirements]
        gpu_count = 3
        cpu = -1
        optimization = "fastest"
    """
    result = check(text)
    assert not result.valid
    assert problem(result, "stages[1].gpu").line == 6
    assert "write gpu_count = 4" in problem(result, "stages[1].requirements.gpu_count").message
    assert problem(result, "stages[1].requirements.cpu").line == 9
    assert problem(result, "stages[1].requirements.optimization", "warning").line == 10


# -- reporting --------------------------------------------------------------------------------


def test_every_problem_of_a_file_is_reported_in_line_order() -> None:
    text = """\
        image = "i"
        gpu = "nope"
        num_gpus = 2
        [requirements]
        cpu = -1
        arch = "mips"
    """
    result = check(text)
    assert [p.line for p in result.problems] == [2, 3, 5, 6]
    assert [p.loc for p in result.problems] == [
        "gpu",
        "num_gpus",
        "requirements.cpu",
        "requirements.arch",
    ]


def test_problems_render_as_file_line_severity_key_message() -> None:
    result = check(f'{IMAGE}gpu_count = 3\ngpu = "A100-80GB"\n')
    rendered = [p.render("train.toml") for p in result.problems]
    assert rendered[0].startswith("train.toml:2: error: gpu_count: must be 1, 2, 4 or 8")
    assert rendered[1] == (
        'train.toml:3: error: gpu: "A100-80GB" names a memory variant, not a model: '
        'write gpu = "A100" with peak_memory_gb = 80'
    )


def test_control_characters_from_the_file_are_shown_escaped() -> None:
    result = check('image = "i"\ngpu = "a\\nb"\n"x\\ty" = 1\n')
    assert [p.render("f.toml") for p in result.problems] == [
        'f.toml:2: error: gpu: unknown GPU model "a\\nb"; did you mean "A2"? '
        "(`nodus gpus` lists them)",
        "f.toml:3: error: x\\ty: unknown key (allowed here: name, image, command, env, model, "
        "budget, stages, entrypoint, mounts, ports, map, output_dir, priority, wait_timeout, "
        "gpu, gpu_count, peak_memory_gb, gpu_interconnect, optimization, share_gpu, "
        "requirements)",
    ]


def test_normalize_works_without_a_source_text() -> None:
    result = normalize({"image": "i", "gpu": "h-100", "gpu_count": 3})
    assert [(p.loc, p.line) for p in result.problems] == [("gpu_count", None)]


def test_result_json_has_the_spec_shape() -> None:
    doc = valid(SPEC_EXAMPLE).as_json()
    assert list(doc) == ["path", "valid", "errors", "warnings", "workload"]
    workload = doc["workload"]
    assert list(workload) == [
        "name",
        "image",
        "command",
        "model",
        "budget",
        "optimization",
        "output_dir",
        "priority",
        "wait_timeout",
        "requirements",
        "stages",
    ]
    assert list(workload["requirements"]) == [
        "gpu",
        "gpu_count",
        "peak_memory_gb",
        "gpu_interconnect",
        "cpu",
        "memory_gb",
        "disk_gb",
        "location",
        "max_price_per_hour",
        "arch",
        "share_gpu",
    ]
    assert [list(s) for s in workload["stages"]] == [
        [
            "name",
            "image",
            "command",
            "requirements",
            "entrypoint",
            "mounts",
            "ports",
            "map",
            "shell",
        ]
    ]
    bad = check(f"{IMAGE}gpu_count = 3\n").as_json()
    assert bad["workload"] is None
    assert bad["errors"] == [
        {"loc": "gpu_count", "line": 2, "message": bad["errors"][0]["message"]}
    ]


def test_no_gpu_means_gpu_count_zero_in_json() -> None:
    doc = valid(IMAGE).as_json()["workload"]
    assert doc["requirements"]["gpu_count"] == 0
    assert doc["requirements"]["gpu"] is None


# -- normalizing is idempotent ----------------------------------------------------------------

IDEMPOTENT = [
    IMAGE,
    SPEC_EXAMPLE,
    STAGED,
    """\
    name = "everything"
    image = "img:1"
    command = "torchrun --nproc_per_node=8 train.py"
    model = "llama-3-70b"
    budget = 500
    env = { HF_HOME = "/cache", SEED = 7 }
    gpu = "nvidia h-100"
    peak_memory_gb = 80
    gpu_interconnect = "any"
    optimization = "fastest"
    [requirements]
    gpu_count = 8
    cpu = 96.5
    memory_gb = 1024
    disk_gb = 2000
    location = "us-east-1"
    max_price_per_hour = 120
    arch = "x86_64"
    """,
    """\
    [[stages]]
    name = "only"
    image = "x:1"
    peak_memory_gb = 16
    [stages.requirements]
    optimization = ""
    location = "eu"
    """,
    """\
    image = "i"
    gpu = "A6000"
    [[stages]]
    name = "a"
    [[stages]]
    name = "b"
    command = ["x", "y"]
    env = { Z = "1" }
    [stages.requirements]
    gpu = "rtx4090"
    gpu_count = 2
    memory_gb = 0
    """,
]


@pytest.mark.parametrize("text", IDEMPOTENT)
def test_normalized_to_toml_and_normalized_again_is_the_same(text: str) -> None:
    first = valid(text).workload
    assert first is not None
    rendered = to_toml(first)
    second_result = load_text(rendered, "again.toml")
    assert second_result.valid, (rendered, second_result.problems)
    second = second_result.workload
    assert second == first
    assert to_toml(second) == rendered
    assert not [p for p in second_result.problems if "legacy" in p.message]


def test_to_toml_leaves_out_what_is_not_set() -> None:
    w = valid(f'{IMAGE}command = ["a", "b"]\n').workload
    assert w is not None
    text = to_toml(w)
    assert "gpu_count" not in text and "None" not in text and "null" not in text
    assert 'command = [\n    "a",\n    "b",\n]' in text or 'command = ["a", "b"]' in text
    assert "[requirements]" in text
    assert "optimization" not in text and "gpu_interconnect" not in text
