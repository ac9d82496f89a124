"""The ``[requirements]`` keys, said four times, say the same: the rules' list
(``REQUIREMENT_KEYS``), the Python API's typed form (``nodus_cli.Requirements``), the
normalized model (``workload.model.Requirements``, with ``optimization`` on the workload)
and the JSON Schema. docs/workload.md is held to the same list by
tests/docs/test_docs_reference.py. A key added to one and not the others fails here,
naming the key and where it is missing.
"""

from __future__ import annotations

from typing import Any

import nodus_cli
from nodus_cli.structs import fields
from nodus_cli.workload import REQUIREMENT_KEYS, Requirements, Workload, normalize, schema

#: A valid value of each key, for the API's typed form.
VALID: dict[str, Any] = {
    "gpu": "L4",
    "gpu_count": 2,
    "peak_memory_gb": 20.0,
    "gpu_interconnect": "any",
    "optimization": "lowest_cost",
    "share_gpu": False,
    "cpu": 2.0,
    "memory_gb": 8.0,
    "disk_gb": 50.0,
    "location": "us",
    "max_price_per_hour": 9.5,
    "arch": "x86_64",
}
#: Normalized onto the workload, not onto its requirements.
ON_THE_STAGE = {"optimization"}


def names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}


def test_the_rules_and_the_api_name_the_same_keys() -> None:
    api = names(nodus_cli.Requirements)
    assert sorted(set(REQUIREMENT_KEYS) - api) == [], "missing from nodus_cli.Requirements"
    assert sorted(api - set(REQUIREMENT_KEYS)) == [], "missing from REQUIREMENT_KEYS"


def test_the_rules_and_the_model_name_the_same_keys() -> None:
    model = names(Requirements)
    wanted = set(REQUIREMENT_KEYS) - ON_THE_STAGE
    assert sorted(wanted - model) == [], "missing from workload.model.Requirements"
    assert sorted(model - wanted) == [], "missing from REQUIREMENT_KEYS"
    assert set(Requirements().as_json()) == model
    for key in ON_THE_STAGE:
        assert key in names(Workload), key


def test_the_rules_and_the_schema_name_the_same_keys() -> None:
    properties = set(schema.schema()["$defs"]["Requirements"]["properties"])
    assert sorted(set(REQUIREMENT_KEYS) - properties) == [], "missing from the schema"
    assert sorted(properties - set(REQUIREMENT_KEYS)) == [], "missing from REQUIREMENT_KEYS"


def test_every_key_of_the_api_form_reaches_the_normalized_workload() -> None:
    assert set(VALID) == set(REQUIREMENT_KEYS)
    typed = nodus_cli.Requirements(**VALID)
    assert typed.as_dict() == VALID
    result = normalize({"image": "img:1", "requirements": typed.as_dict()}, mapping_wins=True)
    assert result.workload is not None, result.problems
    workload = result.workload
    normalized = {**workload.requirements.as_json(), "optimization": workload.optimization}
    changed = {key for key in VALID if normalized[key] != Requirements().as_json().get(key)}
    # Every key but those whose valid value here is also the default was taken.
    assert changed >= set(VALID) - {"gpu_interconnect", "share_gpu"}, sorted(changed)
