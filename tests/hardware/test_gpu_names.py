"""SPEC 2.2: which GPU names are accepted, and what a user reads for the others."""

from __future__ import annotations

import pytest

from nodus_cli.hardware import gpus
from nodus_cli.workload import Result, load_text


def gpu(name: str, where: str = "flat") -> Result:
    body = f'gpu = "{name}"\n'
    if where == "nested":
        body = "[requirements]\n" + body
    elif where == "stage":
        body = '[[stages]]\nname = "s"\n' + body
    return load_text(f'image = "i"\n{body}', "w.toml")


def accepted(name: str) -> str:
    result = gpu(name)
    assert result.workload is not None, result.problems
    canonical = result.workload.requirements.gpu
    assert canonical is not None
    return canonical


def rejected(name: str) -> str:
    result = gpu(name)
    assert not result.valid, f"{name!r} was accepted"
    (problem,) = result.errors
    assert (problem.loc, problem.line) == ("gpu", 2)
    return problem.message


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("H100", "H100"),
        ("h100", "H100"),
        ("nvidia h100", "H100"),
        ("NVIDIA H100", "H100"),
        ("Nvidia-H100", "H100"),
        ("h-100", "H100"),
        ("H_100", "H100"),
        (" h 1 0 0 ", "H100"),
        ("H200", "H200"),
        ("B200", "B200"),
        ("GH200", "GH200"),
        ("A100", "A100"),
        ("a10g", "A10G"),
        ("A10", "A10"),
        ("L4", "L4"),
        ("l40s", "L40S"),
        ("L40-S", "L40S"),
        ("T4", "T4"),
        ("Tesla T4", "T4"),
        ("V100", "V100"),
        ("RTX 4090", "RTX 4090"),
        ("RTX4090", "RTX 4090"),
        ("rtx-4090", "RTX 4090"),
        ("nvidia geforce rtx 4090", "RTX 4090"),
        ("RTX A6000", "RTX A6000"),
        ("A6000", "RTX A6000"),
        ("rtxa6000", "RTX A6000"),
        ("NVIDIA RTX A6000", "RTX A6000"),
        ("RTX 6000 Ada", "RTX 6000 Ada"),
        ("rtx6000ada", "RTX 6000 Ada"),
        ("MI300X", "MI300X"),
    ],
)
def test_accepted_spellings_normalize_to_the_canonical_name(spelling: str, canonical: str) -> None:
    assert accepted(spelling) == canonical


@pytest.mark.parametrize("where", ["flat", "nested", "stage"])
def test_names_are_matched_wherever_gpu_stands(where: str) -> None:
    result = gpu("nvidia-h100", where)
    assert result.workload is not None, result.problems
    assert result.workload.stages[0].requirements.gpu == "H100"


def test_every_canonical_name_and_alias_is_accepted() -> None:
    table = gpus.table()
    for family in table.families:
        assert accepted(family.name) == family.name
        for alias in family.aliases:
            assert accepted(alias) == family.name


@pytest.mark.parametrize(
    ("spelling", "fix"),
    [
        ("A100-80GB", 'write gpu = "A100" with peak_memory_gb = 80'),
        ("a100 80gb", 'write gpu = "A100" with peak_memory_gb = 80'),
        ("A100_40GB", 'write gpu = "A100" with peak_memory_gb = 40'),
        ("A100-80G", 'write gpu = "A100" with peak_memory_gb = 80'),
        ("nvidia-a100-80gb", 'write gpu = "A100" with peak_memory_gb = 80'),
        ("H100-94GB", 'write gpu = "H100" with peak_memory_gb = 94'),
        ("B200-180GB", 'write gpu = "B200" with peak_memory_gb = 180'),
        ("V100-32GB", 'write gpu = "V100" with peak_memory_gb = 32'),
        ("A10 24GB", 'write gpu = "A10" with peak_memory_gb = 24'),
        ("L40S 48GB", 'write gpu = "L40S" with peak_memory_gb = 48'),
        ("GTX 1060 3GB", 'write gpu = "GTX 1060" with peak_memory_gb = 3'),
        ("RTX 4060 Ti 16GB", 'write gpu = "RTX 4060 Ti" with peak_memory_gb = 16'),
    ],
)
def test_memory_variants_are_rejected_with_the_exact_fix(spelling: str, fix: str) -> None:
    message = rejected(spelling)
    assert message.startswith(f'"{spelling}" names a memory variant, not a model: ')
    assert message.endswith(fix)


@pytest.mark.parametrize(
    ("spelling", "family"),
    [
        ("H100 SXM", "H100"),
        ("H100-SXM", "H100"),
        ("H100 PCIe", "H100"),
        ("h100sxm5", "H100"),
        ("A100 SXM4", "A100"),
        ("H200 NVL", "H200"),
        ("V100 PCIe", "V100"),
    ],
)
def test_form_factors_point_to_the_family(spelling: str, family: str) -> None:
    message = rejected(spelling)
    assert message.startswith(f'"{spelling}" names a form factor, not a model: ')
    assert f'write gpu = "{family}"' in message
    assert "cannot be requested" in message


@pytest.mark.parametrize(
    ("spelling", "fix"),
    [
        ("A100-SXM4-80GB", 'write gpu = "A100" with peak_memory_gb = 80'),
        ("A100-80GB-PCIe", 'write gpu = "A100" with peak_memory_gb = 80'),
        ("H100 NVL", 'write gpu = "H100" with peak_memory_gb = 94'),
        ("Tesla V100-SXM2-16GB", 'write gpu = "V100" with peak_memory_gb = 16'),
    ],
)
def test_form_factor_and_memory_together(spelling: str, fix: str) -> None:
    message = rejected(spelling)
    assert "names a form factor and memory variant, not a model" in message
    assert message.endswith(fix)


@pytest.mark.parametrize(
    "spelling", ["aws", "AWS", "gcp", "lambda", "Lambda Labs", "runpod", "azure"]
)
def test_supplier_names_are_rejected_as_such(spelling: str) -> None:
    message = rejected(spelling)
    assert message.startswith(f'"{spelling}" is a supplier, not a GPU model: ')
    assert "nodus compares every supplier" in message
    assert 'write the model, e.g. gpu = "H100"' in message


@pytest.mark.parametrize(
    ("spelling", "carries"),
    [
        ("p4d.24xlarge", 'it carries 8× A100 (40 GB each): write gpu = "A100", gpu_count = 8'),
        ("p5.48xlarge", 'it carries 8× H100 (80 GB each): write gpu = "H100", gpu_count = 8'),
        ("g5.xlarge", 'it carries 1× A10G (24 GB each): write gpu = "A10G", gpu_count = 1'),
        ("a2-highgpu-1g", 'it carries 1× A100 (40 GB each): write gpu = "A100", gpu_count = 1'),
        ("P4D.24XLARGE", "it carries 8× A100"),
    ],
)
def test_machine_ids_say_which_gpus_the_machine_carries(spelling: str, carries: str) -> None:
    message = rejected(spelling)
    assert message.startswith(f'"{spelling}" is a machine ID (')
    assert "not a GPU model" in message
    assert carries in message


def test_a_machine_id_offered_with_several_gpus_lists_them() -> None:
    message = rejected("n1-standard-8")
    assert message.startswith(
        '"n1-standard-8" is a machine ID (gcp), not a GPU model; it comes with'
    )
    assert "T4" in message and "V100" in message
    assert "write the model and count you need" in message


def test_an_unknown_machine_id_is_recognized_by_its_shape() -> None:
    message = rejected("x9.48xlarge")
    assert message.startswith('"x9.48xlarge" looks like a machine ID, not a GPU model')


@pytest.mark.parametrize(
    ("spelling", "fix"),
    [
        ("H100:8", 'write gpu = "H100", gpu_count = 8'),
        ("8x H100", 'write gpu = "H100", gpu_count = 8'),
        ("A100x4", 'write gpu = "A100", gpu_count = 4'),
        ("2 x nvidia l4", 'write gpu = "L4", gpu_count = 2'),
    ],
)
def test_a_model_and_count_in_one_string(spelling: str, fix: str) -> None:
    message = rejected(spelling)
    assert message == f'"{spelling}" names a model and a count: {fix}'


@pytest.mark.parametrize(
    ("spelling", "suggested"),
    [
        ("H1000", '"H100"'),
        ("H10", '"H100"'),
        ("4090", '"RTX 4090"'),
        ("RTX6000", '"Quadro RTX 6000"'),
        ("A1000", '"A100"'),
        ("L40SS", '"L40S"'),
    ],
)
def test_unknown_names_get_the_nearest_suggestions(spelling: str, suggested: str) -> None:
    message = rejected(spelling)
    assert message.startswith(f'unknown GPU model "{spelling}"; did you mean ')
    assert suggested in message.split("?")[0]
    assert message.endswith("(`nodus gpus` lists them)")


def test_an_unknown_name_without_a_near_one() -> None:
    assert rejected("potato") == 'unknown GPU model "potato" (`nodus gpus` lists them)'


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ('""', "is empty"),
        ('"  "', "is empty"),
        ("100", "must be a GPU model name in quotes"),
        ('["H100"]', "must be a GPU model name in quotes"),
        ("true", "must be a GPU model name in quotes"),
        (f'"{"x" * 500}"', "is not a GPU model name"),
    ],
)
def test_non_names(value: str, words: str) -> None:
    result = load_text(f'image = "i"\ngpu = {value}\n')
    (problem,) = result.errors
    assert words in problem.message and problem.line == 2


def test_long_digit_strings_are_cheap() -> None:
    # Regular expressions must not backtrack badly on long input.
    for text in ("1" * 5000 + "xlarge", " " * 5000 + "x", "a" * 5000 + "80gb"):
        result = load_text(f'image = "i"\ngpu = "{text}"\n[requirements]\nmemory_gb = "{text}"\n')
        assert len(result.errors) == 2


def test_names_module_helpers() -> None:
    table = gpus.table()
    assert gpus.normalize(" NVIDIA  RTX-A6000 ") == "rtxa6000"
    assert table.lookup("a6000") is table.lookup("RTX A6000")
    assert table.is_supplier("Vast.ai")
    assert gpus.quoted_list(["A", "B", "C"]) == '"A", "B" or "C"'
    assert gpus.quoted_list(["A"]) == '"A"'
    assert table.suggestions("") == []
    variant = table.variant("A100-80GB")
    assert variant is not None and (variant.family.name, variant.memory_gb) == ("A100", 80.0)
    assert table.variant("H100") is None


# -- superchips, form factors, TPUs and words that are no model ---------------------------------


@pytest.mark.parametrize(
    ("spelling", "figure", "gpu_memory"),
    [
        ("NVIDIA GH200 480GB", 480, 96),
        ("GH200 480GB", 480, 96),
        ("GH200-480GB", 480, 96),
        ("NVIDIA GH200 120GB", 120, 96),
        ("GH200 624GB", 624, 144),
        ("nvidia gh200 624gb", 624, 144),
    ],
)
def test_gh200_superchip_figures_are_not_gpu_memory(
    spelling: str, figure: int, gpu_memory: int
) -> None:
    message = rejected(spelling)
    assert message == (
        f'"{spelling}" names a GH200 superchip by a memory figure that counts its Grace CPU\'s '
        f"memory ({figure} GB), not a model: the GPU itself has {gpu_memory} GB; write "
        f'gpu = "GH200" with peak_memory_gb = {gpu_memory}'
    )
    assert f"peak_memory_gb = {figure}" not in message


def test_gh200_gpu_memory_spellings_stay_memory_variants() -> None:
    assert rejected("GH200-144GB").endswith('write gpu = "GH200" with peak_memory_gb = 144')
    assert rejected("GH200 96GB").endswith('write gpu = "GH200" with peak_memory_gb = 96')


def test_the_catalog_reads_a_superchip_figure_as_the_gpu_memory() -> None:
    found = gpus.table().resolve_supplier_spelling("GH200 480GB")
    assert found is not None and (found[0].name, found[1]) == ("GH200", 96.0)


@pytest.mark.parametrize(
    "spelling",
    [
        "Tesla V100-FHHL-16GB",
        "Tesla V100-SXM2-16GB",
        "Tesla V100-PCIE-16GB",
        "V100-FHHL-16GB",
        "Tesla V100S-PCIE-32GB",
    ],
)
def test_v100_form_factor_siblings_get_the_same_hint(spelling: str) -> None:
    message = rejected(spelling)
    memory = 32 if "32GB" in spelling else 16
    assert message == (
        f'"{spelling}" names a form factor and memory variant, not a model: write gpu = "V100" '
        f"with peak_memory_gb = {memory}"
    )


def test_every_driver_name_is_accepted_or_points_to_a_real_memory_size() -> None:
    # What nvidia-smi prints is what users paste: never suggest a memory the GPU lacks.
    table = gpus.table()
    for family in table.families:
        for name in family.smi_names:
            result = gpu(name)
            if result.valid:
                continue
            (problem,) = result.errors
            suggested = [
                float(word.rstrip(".,;"))
                for word in problem.message.split("peak_memory_gb = ")[1:]
                for word in [word.split()[0]]
            ]
            assert f'gpu = "{family.name}"' in problem.message, (name, problem.message)
            for memory in suggested:
                assert memory in family.memory_gb, (name, problem.message)


@pytest.mark.parametrize(
    "spelling", ["tpu-v4-8", "TPU v5e", "v5litepod-8", "tpu v3", "v4-8", "v5e", "Google TPU v6e"]
)
def test_tpus_are_not_supported(spelling: str) -> None:
    message = rejected(spelling)
    assert message == (
        f'"{spelling}" names a TPU, and nodus runs GPUs, not TPUs: write a GPU '
        'model, e.g. gpu = "H100" (`nodus gpus` lists them)'
    )


@pytest.mark.parametrize("spelling", ["gpu", "GPU", "Gpu", "gpus", "any", "nvidia", "NVIDIA GPU"])
def test_words_that_are_no_model(spelling: str) -> None:
    message = rejected(spelling)
    assert message == (
        f'"{spelling}" is not a GPU model: write a model, e.g. gpu = "H100" (`nodus gpus` lists '
        "them), or omit gpu to accept any model"
    )
    assert "Laptop" not in message


def test_v100_and_other_v_names_are_not_tpus() -> None:
    assert accepted("V100") == "V100"
    assert "TPU" not in rejected("V1000")
    assert "TPU" not in rejected("V9")


def test_a_driver_name_points_to_its_family() -> None:
    name = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    assert rejected(name) == (
        f'"{name}" is how nvidia-smi names the RTX PRO 6000, not a model name: write '
        'gpu = "RTX PRO 6000" (and peak_memory_gb for the memory you need)'
    )
