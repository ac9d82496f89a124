"""The workload: the file's rules (the normalizer, composing one rule module per subject in
``rules/``, reporting to one ``report``), the normalized data (model), the hints for
spellings from other tools, and the workload written back as a file (document).

Data flows one way: a TOML document or the Python API's keyword arguments go through
:func:`normalize`, which collects every problem and returns a :class:`Result`; a valid
result carries a :class:`Workload` that planners, targets and records consume.
"""

from nodus_cli.workload.document import to_toml
from nodus_cli.workload.model import (
    ALLOWED_COUNTS,
    FLAT_SHORTCUTS,
    LEGACY_OPTIMIZATION,
    MAX_MAP_ITEMS,
    NESTED_ONLY,
    REQUIREMENT_KEYS,
    RESERVED_ENV,
    STAGE_KEYS,
    TOP_LEVEL_KEYS,
    FunctionCall,
    MapSpec,
    Mount,
    Port,
    Requirements,
    Result,
    Stage,
    Workload,
    from_json,
)
from nodus_cli.workload.normalizer import load_file, load_text, normalize

__all__ = [
    "ALLOWED_COUNTS",
    "FLAT_SHORTCUTS",
    "LEGACY_OPTIMIZATION",
    "MAX_MAP_ITEMS",
    "NESTED_ONLY",
    "REQUIREMENT_KEYS",
    "RESERVED_ENV",
    "STAGE_KEYS",
    "TOP_LEVEL_KEYS",
    "FunctionCall",
    "MapSpec",
    "Mount",
    "Port",
    "Requirements",
    "Result",
    "Stage",
    "Workload",
    "from_json",
    "load_file",
    "load_text",
    "normalize",
    "to_toml",
]
