"""The workload rules: raw TOML (or the Python API's arguments) to a normalized workload.

Normalizing collects *all* problems of a document in one pass (a CI run should show every
mistake at once) and never raises for bad input. The result is the plain data of
:mod:`nodus_cli.workload.model`; the hints for what users of other tools write live in
:mod:`nodus_cli.workload.hints`.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, Literal

from nodus_cli import gpus
from nodus_cli.problems import Problem, Severity
from nodus_cli.tomlsource import Key, LineIndex, LoadFailure, display_key, parse, read_text
from nodus_cli.workload.hints import (
    FOREIGN_KEYS,
    MAX_NAME,
    MODEL_AND_COUNT,
    foreign_fix,
    machine_message,
    unquote_fix,
)
from nodus_cli.workload.model import (
    ALLOWED_COUNTS,
    ARCHES,
    FLAT_SHORTCUTS,
    LEGACY_OPTIMIZATION,
    NESTED_ONLY,
    NOT_INHERITED,
    REQUIREMENT_KEYS,
    RESERVED_ENV,
    STAGE_KEYS,
    TOP_LEVEL_KEYS,
    TOP_LEVEL_ONLY,
    WHOLE_WORKLOAD,
    WORKLOAD_ONLY,
    Requirements,
    Result,
    Stage,
    Workload,
)

_STAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_WHITESPACE = re.compile(r"\s")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MAX_NUMBER = 2**63
_GPU_EXAMPLE = 'gpu = "H100" (`nodus gpus` lists the models)'

_Where = Literal["top", "requirements", "stage", "stage_requirements"]


def load_file(path: Path, display: str | None = None) -> Result:
    """Read, parse and normalize one workload file; relative paths in it (``mounts``,
    ``map.over``, ``output_dir``) are relative to the file's folder."""
    shown = display if display is not None else str(path)
    try:
        text = read_text(path)
    except LoadFailure as failure:
        return Result(shown, None, [failure.problem])
    return load_text(text, shown, default_name=path.stem, base_dir=path.resolve().parent)


def load_text(
    text: str,
    path: str = "<string>",
    default_name: str = "workload",
    base_dir: Path | None = None,
) -> Result:
    try:
        doc = parse(text)
    except LoadFailure as failure:
        return Result(path, None, [failure.problem])
    return normalize(
        doc, path=path, default_name=default_name, lines=LineIndex(text), base_dir=base_dir
    )


def normalize(
    doc: dict[str, Any],
    path: str = "<workload>",
    default_name: str = "workload",
    lines: LineIndex | None = None,
    *,
    base_dir: Path | None = None,
    mapping_wins: bool = False,
) -> Result:
    """Check every rule of ``doc`` and build the normalized workload.

    ``base_dir`` is the folder relative paths are resolved against (default: the working
    directory). ``mapping_wins`` is the Python API's rule: a key of the ``requirements``
    mapping wins over the matching flat shortcut, where a file must not set both.
    """
    normalizer = _Normalizer(lines, path, base_dir or Path.cwd(), mapping_wins)
    workload = normalizer.workload(doc, default_name)
    problems = sorted(normalizer.problems, key=lambda p: (p.line is None, p.line or 0))
    has_errors = any(p.severity == "error" for p in problems)
    return Result(path, None if has_errors else workload, problems)


class _Normalizer:
    def __init__(
        self, lines: LineIndex | None, path: str, base_dir: Path, mapping_wins: bool
    ) -> None:
        self.lines = lines
        self.path = path
        self.base_dir = base_dir
        self.mapping_wins = mapping_wins
        self.problems: list[Problem] = []

    @property
    def table(self) -> gpus.GpuTable:
        """The GPU names, read (once per process) only when the workload names a GPU."""
        return gpus.table()

    # -- reporting -----------------------------------------------------------------

    def error(self, key: Key, message: str) -> None:
        self._add(key, message, "error")

    def warn(self, key: Key, message: str) -> None:
        self._add(key, message, "warning")

    def _add(self, key: Key, message: str, severity: Severity) -> None:
        line = self.lines.line_of(key) if self.lines is not None else None
        loc = _printable(display_key(key))
        self.problems.append(Problem(loc, _printable(message), severity, line))

    def _at_line(self, key: Key) -> str:
        """`` (line 7)`` when the key's line is known, else nothing."""
        line = self.lines.line_of(key) if self.lines is not None else None
        return f" (line {line})" if line is not None else ""

    # -- the document --------------------------------------------------------------

    def workload(self, doc: dict[str, Any], default_name: str) -> Workload:
        self._check_keys(doc, (), TOP_LEVEL_KEYS, where="top")
        nested_raw = doc.get("requirements", {})
        if not isinstance(nested_raw, dict):
            self.error(
                ("requirements",),
                "must be a table: write [requirements] on its own line, with one key = value "
                "per line below it",
            )
            nested_raw = {}
        self._check_keys(nested_raw, ("requirements",), REQUIREMENT_KEYS, where="requirements")

        name = self._string(doc, ("name",)) or default_name
        image = self._image(doc, ("image",))
        command = self._command(doc, ("command",))
        env = self._env(doc.get("env"), ("env",))
        model = self._string(doc, ("model",))
        budget = self._positive(doc, ("budget",), "USD for the whole run")

        reqs, optimization, _ = self._requirements(doc, nested_raw, ())
        stages_raw = doc.get("stages")
        declared = "stages" in doc
        if declared:
            stages = self._stages(stages_raw, reqs, image, command, env)
            if stages:
                self._unused_by_stages(doc, nested_raw)
        else:
            if image is None and "image" not in doc:
                self.error(("image",), 'required: set image = "registry/name:tag" at the top level')
            stages = [Stage("main", image or "", command, env, reqs)]
        return Workload(
            name=name,
            image=image,
            command=command,
            env=env,
            model=model,
            budget=budget,
            requirements=reqs,
            stages=stages,
            optimization=optimization,
            declared_stages=declared,
        )

    def _unused_by_stages(self, doc: dict[str, Any], nested: dict[str, Any]) -> None:
        """Workload-level GPU and memory requirements reach no stage: say so."""
        for key in NOT_INHERITED:
            path: Key | None = None
            if key in doc and key in FLAT_SHORTCUTS:
                path = (key,)
            elif key in nested:
                path = ("requirements", key)
            if path is None:
                continue
            self.warn(
                path,
                "applies to no stage: stages never inherit GPU requirements or memory_gb; "
                "move it into [stages.requirements] of the stages that need it",
            )

    def _check_keys(
        self, table: dict[str, Any], prefix: Key, allowed: tuple[str, ...], where: _Where
    ) -> None:
        nested = where in ("requirements", "stage_requirements")
        home = "[stages.requirements]" if where.startswith("stage") else "[requirements]"
        for key in table:
            if key in allowed:
                continue
            path = (*prefix, key)
            spelled = key.strip().lower().replace("-", "_").replace(" ", "_")
            if not nested and key in NESTED_ONLY:
                self.error(path, f"`{key}` belongs in {home}: move it there")
            elif where == "requirements" and key in TOP_LEVEL_ONLY:
                self.error(
                    path,
                    f"`{key}` belongs at the top level of the file, not in [requirements]: "
                    "move it above [requirements]",
                )
            elif where.startswith("stage") and key in WORKLOAD_ONLY:
                self.error(
                    path,
                    f"`{key}` applies to the whole workload: set it at the top level of the "
                    "file, not in a stage",
                )
            elif where == "stage_requirements" and key in TOP_LEVEL_ONLY:
                self.error(
                    path,
                    f"`{key}` belongs in the [[stages]] table itself, not in "
                    "[stages.requirements]: move it above [stages.requirements]",
                )
            elif spelled != key and spelled in allowed + (() if nested else NESTED_ONLY):
                where_to = f" in {home}" if spelled not in allowed else ""
                self.error(
                    path,
                    f"unknown key; did you mean `{spelled}`{where_to}? Keys are lowercase "
                    "with underscores",
                )
            elif spelled in FOREIGN_KEYS:
                target, why = FOREIGN_KEYS[spelled]
                where_to = f" in {home}" if not nested and target in NESTED_ONLY else ""
                fix = foreign_fix(spelled, table[key])
                self.error(path, f"unknown key; did you mean `{target}`{where_to}? {why}{fix}")
            else:
                pool = list(allowed) + ([] if nested else list(NESTED_ONLY))
                close = (
                    difflib.get_close_matches(spelled, pool, n=1, cutoff=0.6)
                    if len(key) <= MAX_NAME
                    else []
                )
                hint = ""
                if close:
                    where_to = f" in {home}" if close[0] not in allowed else ""
                    hint = f"; did you mean `{close[0]}`{where_to}?"
                valid = ", ".join(allowed)
                self.error(path, f"unknown key{hint} (allowed here: {valid})")

    # -- requirements ----------------------------------------------------------------

    def _requirements(
        self, flat: dict[str, Any], nested: dict[str, Any], prefix: Key
    ) -> tuple[Requirements, str, tuple[bool, bool]]:
        """Merge flat shortcuts and the nested table of one level (workload or stage).

        Returns the requirements, the normalized optimization and whether ``cpu`` and
        ``disk_gb`` were set to something other than zero (stages inherit them if not).
        """
        values: dict[str, tuple[Any, Key]] = {}
        for name in FLAT_SHORTCUTS:
            in_flat, in_nested = name in flat, name in nested
            if in_flat and in_nested and self.mapping_wins:
                in_flat = False  # the API: the explicit mapping key wins
            if in_flat and in_nested:
                where = "at the top level" if not prefix else "as a stage shortcut"
                table = "[requirements]" if not prefix else "[stages.requirements]"
                other = self._at_line((*prefix, "requirements", name))
                self.error(
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

        gpu = self._gpu(*values["gpu"]) if "gpu" in values else None
        count = self._gpu_count(*values["gpu_count"]) if "gpu_count" in values else 0
        peak = None
        if "peak_memory_gb" in values:
            peak = self._number(*values["peak_memory_gb"], positive=True, unit="GB per GPU")
        if "gpu_interconnect" in values:
            self._interconnect(*values["gpu_interconnect"])
        optimization = "automatic"
        if "optimization" in values:
            raw, key = values["optimization"]
            self._optimization(raw, key, nested_form="requirements" in key)
        gpu_given = "gpu" in values or "gpu_count" in values or "peak_memory_gb" in values
        if gpu_given and "gpu_count" not in values:
            count = 1  # SPEC 2.1: omitted with a GPU requested means one
        if gpu is not None and peak is not None:
            family = self.table.lookup(gpu)
            if family is not None and family.memory_gb and peak > family.max_memory_gb:
                sizes = " or ".join(f"{m:g} GB" for m in family.memory_gb)
                self.error(
                    values["peak_memory_gb"][1],
                    f"no {gpu} has {peak:g} GB: {gpu} comes with {sizes} per GPU; "
                    "lower peak_memory_gb or choose another gpu",
                )

        cpu = self._quantity(values.get("cpu"), "CPUs")
        memory = self._quantity(values.get("memory_gb"), "GB")
        disk = self._quantity(values.get("disk_gb"), "GB")
        location = self._location(*values["location"]) if "location" in values else None
        max_price = None
        if "max_price_per_hour" in values:
            max_price = self._number(
                *values["max_price_per_hour"], positive=True, unit="USD per hour"
            )
        arch = self._arch(*values["arch"]) if "arch" in values else None
        reqs = Requirements(
            gpu=gpu,
            gpu_count=count,
            peak_memory_gb=peak,
            cpu=cpu or 1.0,
            memory_gb=memory or None,
            disk_gb=disk or None,
            location=location,
            max_price_per_hour=max_price,
            arch=arch,
        )
        # Zero or omitted cpu/disk mean "not set", which stages need to know to inherit.
        return reqs, optimization, (bool(cpu), bool(disk))

    def _gpu(self, raw: Any, key: Key) -> str | None:
        if not isinstance(raw, str):
            self.error(key, f"must be a GPU model name in quotes, e.g. {_GPU_EXAMPLE}")
            return None
        if not raw.strip():
            self.error(
                key, 'is empty: write a model, e.g. gpu = "H100", or omit gpu to accept any model'
            )
            return None
        if len(raw) > MAX_NAME:
            self.error(key, f"is not a GPU model name: write a model, e.g. {_GPU_EXAMPLE}")
            return None
        family = self.table.lookup(raw)
        if family is not None:
            return family.name
        message = (
            self._variant_message(raw)
            or self._count_message(raw)
            or self._supplier_message(raw)
            or machine_message(raw)
            or self._unknown_gpu_message(raw)
        )
        self.error(key, message)
        return None

    def _variant_message(self, raw: str) -> str | None:
        variant = self.table.variant(raw)
        if variant is None:
            return None
        fam = variant.family.name
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

    def _count_message(self, raw: str) -> str | None:
        """``"H100:8"``, ``"8x H100"``: a model and a count in one string."""
        for pattern in MODEL_AND_COUNT:
            m = pattern.match(raw)
            if m is None:
                continue
            family = self.table.lookup(m.group("name"))
            if family is None:
                continue
            count = int(m.group("count"))
            note = "" if count in ALLOWED_COUNTS else " (one machine carries 1, 2, 4 or 8 GPUs)"
            return (
                f'"{raw}" names a model and a count: write gpu = "{family.name}", '
                f"gpu_count = {count}{note}"
            )
        return None

    def _supplier_message(self, raw: str) -> str | None:
        if not self.table.is_supplier(raw):
            return None
        return (
            f'"{raw}" is a supplier, not a GPU model: nodus compares every supplier; write the '
            'model, e.g. gpu = "H100", and narrow the choice with location if needed'
        )

    def _unknown_gpu_message(self, raw: str) -> str:
        resolved = self.table.resolve_supplier_spelling(raw)
        close = [resolved[0].name] if resolved is not None else []
        for name in self.table.suggestions(raw):
            if name not in close:
                close.append(name)
        hint = f"; did you mean {gpus.quoted_list(close[:3])}?" if close else ""
        return f'unknown GPU model "{raw}"{hint} (`nodus gpus` lists them)'

    def _gpu_count(self, raw: Any, key: Key) -> int:
        if isinstance(raw, bool):
            self.error(key, f"must be a whole number: 1, 2, 4 or 8, not {_toml(raw)}")
            return 0
        if isinstance(raw, str):
            fix = (
                f": write gpu_count = {raw.strip()}" if raw.strip() in ("1", "2", "4", "8") else ""
            )
            self.error(key, f"must be a number without quotes (1, 2, 4 or 8){fix}")
            return 0
        if not isinstance(raw, int | float):
            self.error(key, "must be a whole number: 1, 2, 4 or 8")
            return 0
        if isinstance(raw, float):
            if not math.isfinite(raw):
                self.error(key, f"must be a whole number: 1, 2, 4 or 8, not {raw}")
                return 0
            if not raw.is_integer():
                self.error(key, f"must be a whole number of GPUs (1, 2, 4 or 8), not {raw:g}")
                return 0
            if int(raw) in ALLOWED_COUNTS:
                self.error(key, f"must be an integer: write gpu_count = {int(raw)}")
                return 0
        count = int(raw)
        if count in ALLOWED_COUNTS:
            return count
        if count > 8:
            self.error(
                key,
                f"{count} GPUs cannot be requested: gpu_count counts GPUs on ONE machine (1, 2, 4 "
                "or 8), and a group of machines cannot satisfy a request; use at most 8",
            )
        elif count < 0:
            self.error(key, "cannot be negative: use 1, 2, 4 or 8 GPUs")
        elif count == 0:
            self.error(
                key, "must be 1, 2, 4 or 8; omit gpu_count (and gpu) for a workload without a GPU"
            )
        else:
            up = next(c for c in ALLOWED_COUNTS if c >= count)
            self.error(
                key,
                f"must be 1, 2, 4 or 8, not {count}: machines carry 1, 2, 4 or 8 GPUs; "
                f"write gpu_count = {up}",
            )
        return 0

    def _interconnect(self, raw: Any, key: Key) -> None:
        if raw == "any":
            return
        if isinstance(raw, str) and raw.strip().lower() == "any":
            self.error(key, 'write gpu_interconnect = "any" (lowercase, no spaces)')
        elif isinstance(raw, str):
            self.error(
                key,
                f'"{raw}" cannot be requested: the interconnect topology cannot be verified yet; '
                'write gpu_interconnect = "any" or omit it (a GPU count never implies NVLink, '
                "NVSwitch or pooled memory)",
            )
        else:
            self.error(key, 'must be the string "any": write gpu_interconnect = "any" or omit it')

    def _optimization(self, raw: Any, key: Key, nested_form: bool) -> None:
        if raw == "" and nested_form:
            self.warn(key, "an empty optimization is accepted but has no effect: omit it")
            return
        if raw == "":
            self.error(
                key,
                "the flat shortcut does not accept an empty string: omit optimization "
                "(it has no effect)",
            )
            return
        if isinstance(raw, str) and raw in LEGACY_OPTIMIZATION:
            self.warn(
                key,
                f'"{raw}" is a legacy setting with no effect, recorded as "automatic": omit it',
            )
            return
        allowed = ", ".join(LEGACY_OPTIMIZATION)
        shown = f'"{raw}"' if isinstance(raw, str) else _toml(raw)
        self.error(
            key,
            f"{shown} is not an accepted value; optimization is a legacy setting with no effect: "
            f"omit it (accepted for compatibility: {allowed})",
        )

    def _location(self, raw: Any, key: Key) -> str | None:
        if not isinstance(raw, str) or not raw.strip():
            self.error(
                key,
                'must be a region or region prefix in quotes, e.g. location = "us" or '
                '"us-east-1"; omit it to allow any location',
            )
            return None
        location = raw.strip()
        if len(location) > MAX_NAME or not _known_location(location):
            self.warn(
                key,
                f'"{_clip(location)}" matches no region or area nodus knows, so no catalog '
                'offer will match: use an area (us, eu, asia, ...) or a region such as "us-east-1"',
            )
        return location

    def _arch(self, raw: Any, key: Key) -> str | None:
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
            self.error(key, f'write arch = "{fix[raw.strip().lower()]}" (nodus spells it that way)')
        else:
            self.error(key, 'must be "x86_64" or "arm64"; omit it to accept either')
        return None

    # -- numbers -------------------------------------------------------------------

    def _number(self, raw: Any, key: Key, positive: bool, unit: str) -> float | None:
        name = key[-1]
        if isinstance(raw, bool):
            self.error(key, f"must be a number ({unit}), not {_toml(raw)}")
            return None
        if isinstance(raw, str):
            self.error(key, f"must be a number ({unit}) without quotes{unquote_fix(raw, key)}")
            return None
        if not isinstance(raw, int | float):
            self.error(key, f"must be a number ({unit}), e.g. {name} = 8")
            return None
        if isinstance(raw, int) and abs(raw) >= _MAX_NUMBER:
            self.error(key, f"is too large to be a quantity ({unit})")
            return None
        value = float(raw)
        if not math.isfinite(value):
            self.error(key, f"must be a finite number ({unit}), not {raw}")
            return None
        if value < 0:
            self.error(key, f"cannot be negative ({unit}), got {value:g}")
            return None
        if positive and value == 0:
            limit = "omit it to set no limit" if name != "peak_memory_gb" else "omit it"
            self.error(key, f"must be greater than 0 ({unit}); {limit}")
            return None
        return value

    def _quantity(self, item: tuple[Any, Key] | None, unit: str) -> float | None:
        if item is None:
            return None
        return self._number(item[0], item[1], positive=False, unit=unit)

    def _positive(self, doc: dict[str, Any], key: Key, unit: str) -> float | None:
        if key[-1] not in doc:
            return None
        return self._number(doc[key[-1]], key, positive=True, unit=unit)

    # -- strings, commands, env ----------------------------------------------------

    def _string(self, doc: dict[str, Any], key: Key) -> str | None:
        name = key[-1]
        if name not in doc:
            return None
        raw = doc[name]
        if not isinstance(raw, str):
            self.error(key, f'must be a string in quotes, e.g. {name} = "..."')
            return None
        if not raw.strip():
            self.error(key, f"must not be empty; write a value or omit {name}")
            return None
        if "\x00" in raw:
            self.error(key, "must not contain a NUL character (\\u0000)")
            return None
        return raw

    def _image(self, doc: dict[str, Any], key: Key) -> str | None:
        image = self._string(doc, key)
        if image is not None and _WHITESPACE.search(image):
            self.error(
                key,
                f'"{_clip(image)}" is not an image reference: it contains whitespace; '
                'write image = "registry/name:tag"',
            )
            return None
        return image

    def _command(self, doc: dict[str, Any], key: Key) -> list[str] | None:
        if "command" not in doc:
            return None
        raw = doc["command"]
        empty = "must not be empty; omit it to run the image's own command"
        if isinstance(raw, str):
            if not raw.strip():
                self.error(key, empty)
                return None
            if "\x00" in raw:
                self.error(key, "must not contain a NUL character (\\u0000)")
                return None
            return ["/bin/sh", "-c", raw]
        if isinstance(raw, list):
            if not raw:
                self.error(key, empty)
                return None
            ok = True
            for index, arg in enumerate(raw):
                if not isinstance(arg, str):
                    self.error(
                        (*key, index),
                        f"every argument must be a string: write {_toml(arg, quoted=True)}",
                    )
                    ok = False
                elif "\x00" in arg:
                    self.error((*key, index), "must not contain a NUL character (\\u0000)")
                    ok = False
            return list(raw) if ok else None
        self.error(
            key,
            'must be a list of strings, e.g. ["python", "train.py"], or one string run by '
            "/bin/sh -c",
        )
        return None

    def _env(self, raw: Any, key: Key) -> dict[str, str]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.error(key, 'must be a table, e.g. env = { HF_HOME = "/cache" }')
            return {}
        env: dict[str, str] = {}
        for name, value in raw.items():
            path = (*key, name)
            if not _ENV_NAME.match(name):
                self.error(
                    path,
                    "is not a valid environment variable name: use letters, digits and _, "
                    "not starting with a digit",
                )
                continue
            if name in RESERVED_ENV:
                self.error(path, f"{name} is set by nodus for every stage; choose another name")
                continue
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                self.error(path, f"must be a string: write {name} = {_toml(value, quoted=True)}")
                continue
            if isinstance(value, float) and not math.isfinite(value):
                self.error(path, f'must be a string: write {name} = "{value}"')
                continue
            if isinstance(value, str) and "\x00" in value:
                self.error(path, "must not contain a NUL character (\\u0000)")
                continue
            env[name] = value if isinstance(value, str) else str(value)
        return env

    # -- stages --------------------------------------------------------------------

    def _stages(
        self,
        raw: Any,
        base: Requirements,
        image: str | None,
        command: list[str] | None,
        env: dict[str, str],
    ) -> list[Stage]:
        if not isinstance(raw, list) or not all(isinstance(s, dict) for s in raw):
            self.error(
                ("stages",),
                "must be an array of tables: write each stage as a [[stages]] table with "
                'name = "..." below it',
            )
            return []
        if not raw:
            self.error(("stages",), "is empty: add [[stages]] tables or remove `stages`")
            return []
        seen: dict[str, int] = {}
        stages: list[Stage] = []
        for index, table in enumerate(raw):
            prefix: Key = ("stages", index)
            self._check_keys(table, prefix, STAGE_KEYS, where="stage")
            nested = table.get("requirements", {})
            if not isinstance(nested, dict):
                self.error(
                    (*prefix, "requirements"),
                    "must be a table: write [stages.requirements] after this stage's keys",
                )
                nested = {}
            self._check_keys(
                nested, (*prefix, "requirements"), REQUIREMENT_KEYS, where="stage_requirements"
            )
            name = self._string(table, (*prefix, "name"))
            if "name" not in table:
                self.error(prefix, 'every stage needs a name: add name = "..." to this [[stages]]')
            if name is not None:
                if not _STAGE_NAME.match(name):
                    self.error(
                        (*prefix, "name"),
                        f'"{_clip(name)}" is not a valid stage name: use letters, digits, ".", '
                        '"_" or "-", starting with a letter or digit, at most 63 characters',
                    )
                elif name in seen:
                    first = seen[name]
                    self.error(
                        (*prefix, "name"),
                        f'"{name}" is already the name of stages[{first}]'
                        f"{self._at_line(('stages', first, 'name'))}: stage names must be unique",
                    )
                else:
                    seen[name] = index
            stage_image = self._image(table, (*prefix, "image"))
            if stage_image is None and "image" not in table:
                stage_image = image
                if image is None:
                    self.error(
                        (*prefix, "image"),
                        'no image: set image = "registry/name:tag" at the top level or in '
                        "this stage",
                    )
            stage_command = self._command(table, (*prefix, "command"))
            stage_env = {**env, **self._env(table.get("env"), (*prefix, "env"))}
            own, _, (cpu_set, disk_set) = self._requirements(table, nested, prefix)
            for key in WHOLE_WORKLOAD:
                mine, theirs = getattr(own, key), getattr(base, key)
                if mine is not None and theirs is not None and mine != theirs:
                    self.error(
                        (*prefix, "requirements", key),
                        f"the whole workload has {key} = {_toml(theirs)}, which applies to every "
                        f"stage: remove {key} here or change it at the top level",
                    )
            effective = replace(
                own,
                cpu=own.cpu if cpu_set else base.cpu,
                disk_gb=own.disk_gb if disk_set else base.disk_gb,
                location=base.location or own.location,
                max_price_per_hour=base.max_price_per_hour or own.max_price_per_hour,
                arch=base.arch or own.arch,
            )
            stages.append(
                Stage(
                    name or f"stage-{index}",
                    stage_image or "",
                    stage_command if stage_command is not None else command,
                    stage_env,
                    effective,
                )
            )
        return stages


@cache
def _known_location(location: str) -> bool:
    from nodus_cli import locations

    try:
        return locations.is_known(location)
    except Exception:  # a broken installation must not break validation
        return True


def _toml(value: Any, quoted: bool = False) -> str:
    """A value as it would be written in TOML (``quoted``: as a string)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = f"{value:g}" if math.isfinite(value) else str(value)
    elif isinstance(value, int | str):
        text = str(value)
    else:
        return '"..."'
    if quoted or isinstance(value, str):
        return json.dumps(_clip(text), ensure_ascii=False)
    return text


def _printable(text: str) -> str:
    """One line of text: control characters from the file are shown escaped."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def _clip(text: str, limit: int = MAX_NAME) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
