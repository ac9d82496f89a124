"""The workload file model: every rule of SPEC section 2, from raw TOML to a normalized workload.

Normalizing collects *all* problems of a file in one pass (a CI run should show every
mistake at once) and never raises for bad input. The result is plain data that the
planner and runners consume; ``--json`` prints it as SPEC 3.1 shows.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nodus_cli import gpus
from nodus_cli.problems import Problem, Severity
from nodus_cli.tomlsource import Key, LineIndex, LoadFailure, display_key, parse, read_text

ALLOWED_COUNTS = (1, 2, 4, 8)
LEGACY_OPTIMIZATION = ("automatic", "lowest_cost", "lower_cost", "balanced", "faster", "fastest")
ARCHES = ("x86_64", "arm64")

#: Keys that may stand both at the top level (flat shortcut) and in [requirements].
FLAT_SHORTCUTS = ("gpu", "gpu_count", "peak_memory_gb", "gpu_interconnect", "optimization")
#: Keys that belong only in [requirements].
NESTED_ONLY = ("cpu", "memory_gb", "disk_gb", "location", "max_price_per_hour", "arch")
REQUIREMENT_KEYS = FLAT_SHORTCUTS + NESTED_ONLY
TOP_LEVEL_ONLY = ("name", "image", "command", "env", "model", "budget", "stages")
TOP_LEVEL_KEYS = TOP_LEVEL_ONLY + FLAT_SHORTCUTS + ("requirements",)
STAGE_KEYS = ("name", "image", "command", "env", "requirements", *FLAT_SHORTCUTS)
#: Requirements every stage takes from the workload.
WHOLE_WORKLOAD = ("location", "max_price_per_hour", "arch")

#: Spellings from other tools, and what to write in a nodus file instead.
FOREIGN_KEYS: dict[str, tuple[str, str]] = {
    "gpu_type": ("gpu", 'the GPU model is `gpu`, e.g. gpu = "A100"'),
    "num_gpus": ("gpu_count", "the number of GPUs on one machine is `gpu_count` (1, 2, 4 or 8)"),
    "gpus": ("gpu_count", 'write gpu = "MODEL" for the model and gpu_count = N for the count'),
    "accelerators": ("gpu", 'write gpu = "MODEL" and gpu_count = N instead of accelerators'),
    "accelerator": ("gpu", 'write gpu = "MODEL" and gpu_count = N'),
    "gpu_model": ("gpu", 'the GPU model is `gpu`, e.g. gpu = "H100"'),
    "gpu_memory_gb": ("peak_memory_gb", "GPU memory per GPU is `peak_memory_gb`"),
    "gpu_memory": ("peak_memory_gb", "GPU memory per GPU is `peak_memory_gb`, in GB"),
    "vram": ("peak_memory_gb", "GPU memory per GPU is `peak_memory_gb`, in GB"),
    "num_cpus": ("cpu", "CPUs are `cpu` in [requirements]"),
    "cpus": ("cpu", "CPUs are `cpu` in [requirements]"),
    "vcpus": ("cpu", "CPUs are `cpu` in [requirements]"),
    "memory_bytes": ("memory_gb", "host memory is `memory_gb` in [requirements], in GB"),
    "memory": ("memory_gb", "host memory is `memory_gb` in [requirements], in GB"),
    "mem": ("memory_gb", "host memory is `memory_gb` in [requirements], in GB"),
    "disk": ("disk_gb", "disk is `disk_gb` in [requirements], in GB"),
    "disk_size": ("disk_gb", "disk is `disk_gb` in [requirements], in GB"),
    "region": ("location", "regions are chosen with `location` in [requirements]"),
    "zone": ("location", "regions are chosen with `location` in [requirements]"),
    "cloud": ("location", "nodus compares every supplier; narrow by `location` instead"),
    "instance_type": ("gpu", "nodus chooses machines; request the resources (gpu, gpu_count, cpu)"),
    "max_price": ("max_price_per_hour", "the price limit is `max_price_per_hour`, USD per hour"),
    "run": ("command", "what to run is `command`"),
    "cmd": ("command", "what to run is `command`"),
    "environment": ("env", "environment variables are the table `env`"),
    "envs": ("env", "environment variables are the table `env`"),
    "docker_image": ("image", "the container image is `image`"),
}

_STAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ACCELERATOR_SPEC = re.compile(r"^\s*([A-Za-z0-9 _.\-]+?)\s*[:x×]\s*(\d+)\s*$")
_SIZE_SPEC = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(gib|gb|g|mib|mb|tib|tb)?\s*$", re.IGNORECASE)
RESERVED_ENV = ("NODUS_WORK_DIR", "NODUS_RUN_ID", "NODUS_STAGE")


@dataclass(frozen=True, slots=True)
class Requirements:
    gpu: str | None = None
    gpu_count: int = 0
    peak_memory_gb: float | None = None
    gpu_interconnect: str = "any"
    cpu: float = 1.0
    memory_gb: float | None = None
    disk_gb: float | None = None
    location: str | None = None
    max_price_per_hour: float | None = None
    arch: str | None = None

    @property
    def wants_gpu(self) -> bool:
        return self.gpu_count > 0

    def as_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "gpu_count": self.gpu_count,
            "peak_memory_gb": self.peak_memory_gb,
            "gpu_interconnect": self.gpu_interconnect,
            "cpu": self.cpu,
            "memory_gb": self.memory_gb,
            "disk_gb": self.disk_gb,
            "location": self.location,
            "max_price_per_hour": self.max_price_per_hour,
            "arch": self.arch,
        }


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    image: str
    command: list[str] | None
    env: dict[str, str]
    requirements: Requirements

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.image,
            "command": self.command,
            "env": dict(self.env),
            "requirements": self.requirements.as_json(),
        }


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    image: str | None
    command: list[str] | None
    env: dict[str, str]
    model: str | None
    budget: float | None
    requirements: Requirements
    stages: list[Stage]
    optimization: str = "automatic"
    declared_stages: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.image,
            "command": self.command,
            "env": dict(self.env),
            "model": self.model,
            "budget": self.budget,
            "optimization": self.optimization,
            "requirements": self.requirements.as_json(),
            "stages": [s.as_json() for s in self.stages],
        }


@dataclass(slots=True)
class Result:
    """What normalizing a file produced: a workload when there are no errors."""

    path: str
    workload: Workload | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def valid(self) -> bool:
        return self.workload is not None

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "valid": self.valid,
            "errors": [p.as_json() for p in self.errors],
            "warnings": [p.as_json() for p in self.warnings],
            "workload": self.workload.as_json() if self.workload else None,
        }


def load_file(path: Path, display: str | None = None) -> Result:
    """Read, parse and normalize one workload file."""
    shown = display if display is not None else str(path)
    try:
        text = read_text(path)
    except LoadFailure as failure:
        return Result(shown, None, [failure.problem])
    return load_text(text, shown, default_name=path.stem)


def load_text(text: str, path: str = "<string>", default_name: str = "workload") -> Result:
    try:
        doc = parse(text)
    except LoadFailure as failure:
        return Result(path, None, [failure.problem])
    return normalize(doc, path=path, default_name=default_name, lines=LineIndex(text))


def normalize(
    doc: dict[str, Any],
    path: str = "<workload>",
    default_name: str = "workload",
    lines: LineIndex | None = None,
) -> Result:
    normalizer = _Normalizer(lines)
    workload = normalizer.workload(doc, default_name)
    problems = sorted(normalizer.problems, key=lambda p: (p.line is None, p.line or 0))
    has_errors = any(p.severity == "error" for p in problems)
    return Result(path, None if has_errors else workload, problems)


class _Normalizer:
    def __init__(self, lines: LineIndex | None) -> None:
        self.lines = lines
        self.problems: list[Problem] = []
        self.table = gpus.table()

    # -- reporting -----------------------------------------------------------------

    def error(self, key: Key, message: str) -> None:
        self._add(key, message, "error")

    def warn(self, key: Key, message: str) -> None:
        self._add(key, message, "warning")

    def _add(self, key: Key, message: str, severity: Severity) -> None:
        line = self.lines.line_of(key) if self.lines is not None else None
        self.problems.append(Problem(display_key(key), message, severity, line))

    # -- the document --------------------------------------------------------------

    def workload(self, doc: dict[str, Any], default_name: str) -> Workload:
        self._check_keys(doc, (), TOP_LEVEL_KEYS, where="top")
        nested_raw = doc.get("requirements", {})
        if "requirements" in doc and not isinstance(nested_raw, dict):
            self.error(("requirements",), "must be a table: write [requirements] on its own line")
            nested_raw = {}
        if isinstance(nested_raw, dict):
            self._check_keys(nested_raw, ("requirements",), REQUIREMENT_KEYS, where="requirements")

        name = self._string(doc, ("name",)) or default_name
        image = self._string(doc, ("image",))
        command = self._command(doc, ("command",))
        env = self._env(doc.get("env"), ("env",))
        model = self._string(doc, ("model",))
        budget = self._positive(doc, ("budget",), "USD for the whole run")

        reqs, optimization, gpu_given, _ = self._requirements(doc, nested_raw, ())
        stages_raw = doc.get("stages")
        stages: list[Stage] = []
        declared = stages_raw is not None
        if declared:
            stages = self._stages(stages_raw, reqs, image, command, env)
            if gpu_given and stages:
                self.warn(
                    _first_gpu_key(doc, nested_raw),
                    "GPU requirements are not inherited by stages, so this applies to no stage: "
                    "move it into the [[stages]] that need a GPU",
                )
        else:
            if image is None:
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

    def _check_keys(
        self, table: dict[str, Any], prefix: Key, allowed: tuple[str, ...], where: str
    ) -> None:
        for key in table:
            if key in allowed:
                continue
            path = (*prefix, key)
            if where in ("top", "stage") and key in NESTED_ONLY:
                target = "[requirements]" if where == "top" else "[stages.requirements]"
                self.error(path, f"`{key}` belongs in {target}: move it there")
            elif where == "requirements" and key in TOP_LEVEL_ONLY:
                self.error(
                    path, f"`{key}` belongs at the top level of the file, not in [requirements]"
                )
            elif where == "stage" and key in ("model", "budget", "stages"):
                self.error(
                    path,
                    f"`{key}` applies to the whole workload: set it at the top level, not in a stage",
                )
            elif key.lower() in FOREIGN_KEYS:
                target, why = FOREIGN_KEYS[key.lower()]
                self.error(path, f"unknown key; did you mean `{target}`? {why}"
                           f"{_foreign_fix(key.lower(), table[key])}")
            else:
                pool = list(allowed) + (list(NESTED_ONLY) if where != "requirements" else [])
                close = difflib.get_close_matches(key, pool, n=1, cutoff=0.6)
                hint = f"; did you mean `{close[0]}`?" if close else ""
                valid = ", ".join(allowed)
                self.error(path, f"unknown key{hint} (allowed here: {valid})")

    # -- requirements ----------------------------------------------------------------

    def _requirements(
        self, flat: dict[str, Any], nested: dict[str, Any], prefix: Key
    ) -> tuple[Requirements, str, bool, tuple[bool, bool]]:
        """Merge flat shortcuts and the nested table of one level (workload or stage)."""
        values: dict[str, tuple[Any, Key]] = {}
        for key in FLAT_SHORTCUTS:
            in_flat, in_nested = key in flat, key in nested
            if in_flat and in_nested:
                self.error(
                    (*prefix, key),
                    f"set both at the top level and in [requirements] (line "
                    f"{self._line((*prefix, 'requirements', key))}); keep one of them"
                    if not prefix
                    else "set both as a stage shortcut and in [stages.requirements]; keep one",
                )
                continue
            if in_flat:
                values[key] = (flat[key], (*prefix, key))
            elif in_nested:
                values[key] = (nested[key], (*prefix, "requirements", key))
        for key in NESTED_ONLY:
            if key in nested:
                values[key] = (nested[key], (*prefix, "requirements", key))

        gpu = None
        if "gpu" in values:
            gpu = self._gpu(*values["gpu"])
        count = 0
        if "gpu_count" in values:
            count = self._gpu_count(*values["gpu_count"])
        peak = None
        if "peak_memory_gb" in values:
            peak = self._number(*values["peak_memory_gb"], positive=True, unit="GB per GPU")
        if "gpu_interconnect" in values:
            self._interconnect(*values["gpu_interconnect"])
        optimization = "automatic"
        if "optimization" in values:
            raw, key = values["optimization"]
            self._optimization(raw, key, nested_form=key[-2:-1] == ("requirements",))
        gpu_given = "gpu" in values or "gpu_count" in values or "peak_memory_gb" in values
        if gpu_given and count == 0 and "gpu_count" not in values:
            count = 1
        if gpu is not None and peak is not None:
            family = self.table.lookup(gpu)
            if family is not None and family.memory_gb and peak > family.max_memory_gb:
                sizes = ", ".join(f"{m:g} GB" for m in family.memory_gb)
                self.error(
                    values["peak_memory_gb"][1],
                    f"no {gpu} has {peak:g} GB: {gpu} comes with {sizes} per GPU; "
                    "lower peak_memory_gb or choose another gpu",
                )

        cpu = self._quantity(values.get("cpu"), "CPUs")
        memory = self._quantity(values.get("memory_gb"), "GB")
        disk = self._quantity(values.get("disk_gb"), "GB")
        location = None
        if "location" in values:
            location = self._location(*values["location"])
        max_price = None
        if "max_price_per_hour" in values:
            max_price = self._number(
                *values["max_price_per_hour"], positive=True, unit="USD per hour"
            )
        arch = None
        if "arch" in values:
            arch = self._arch(*values["arch"])
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
        return reqs, optimization, gpu_given, (bool(cpu), bool(disk))

    def _line(self, key: Key) -> str:
        line = self.lines.line_of(key) if self.lines is not None else None
        return str(line) if line is not None else "?"

    def _gpu(self, raw: Any, key: Key) -> str | None:
        if not isinstance(raw, str) or not raw.strip():
            self.error(key, 'must be a GPU model name in quotes, e.g. gpu = "H100" (see `nodus gpus`)')
            return None
        family = self.table.lookup(raw)
        if family is not None:
            return family.name
        variant = self.table.variant(raw)
        if variant is not None:
            fam = variant.family.name
            if variant.memory_gb is not None:
                self.error(
                    key,
                    f'"{raw}" names a memory variant, not a model: write gpu = "{fam}" '
                    f"with peak_memory_gb = {variant.memory_gb:g}",
                )
            else:
                self.error(
                    key,
                    f'"{raw}" names a form factor, not a model: write gpu = "{fam}" '
                    "(the form factor cannot be requested)",
                )
            return None
        if self.table.is_supplier(raw):
            self.error(
                key,
                f'"{raw}" is a supplier, not a GPU model: nodus compares every supplier; '
                'write the model, e.g. gpu = "H100", and narrow by location if needed',
            )
            return None
        machine = _machine_hint(raw)
        if machine is not None:
            self.error(key, machine)
            return None
        close = self.table.suggestions(raw)
        hint = f"; did you mean {gpus.quoted_list(close)}?" if close else ""
        self.error(key, f'unknown GPU model "{raw}"{hint} (`nodus gpus` lists them)')
        return None

    def _gpu_count(self, raw: Any, key: Key) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            self.error(key, "must be a whole number: 1, 2, 4 or 8")
            return 0
        if isinstance(raw, float):
            if not math.isfinite(raw):
                self.error(key, "must be a whole number: 1, 2, 4 or 8 (not inf or nan)")
                return 0
            if not raw.is_integer():
                self.error(key, f"must be a whole number of GPUs (1, 2, 4 or 8), not {raw:g}")
                return 0
            self.error(key, f"must be an integer: write gpu_count = {int(raw)}")
            return 0
        if raw in ALLOWED_COUNTS:
            return raw
        if raw > 8:
            self.error(
                key,
                f"{raw} GPUs cannot be requested: gpu_count counts GPUs on ONE machine "
                "(at most 8), and a group of machines cannot satisfy a request",
            )
        elif raw <= 0:
            self.error(
                key,
                "must be 1, 2, 4 or 8; omit gpu_count (and gpu) for a workload without a GPU",
            )
        else:
            self.error(key, f"must be 1, 2, 4 or 8, not {raw}")
        return 0

    def _interconnect(self, raw: Any, key: Key) -> None:
        if raw == "any":
            return
        if isinstance(raw, str):
            self.error(
                key,
                f'"{raw}" cannot be requested: the interconnect topology cannot be verified yet; '
                'use gpu_interconnect = "any" or omit it (a GPU count never implies NVLink)',
            )
        else:
            self.error(key, 'must be the string "any"')

    def _optimization(self, raw: Any, key: Key, nested_form: bool) -> None:
        if raw == "" and nested_form:
            return
        if raw == "":
            self.error(
                key,
                "the flat shortcut does not accept an empty string: omit optimization",
            )
            return
        if isinstance(raw, str) and raw in LEGACY_OPTIMIZATION:
            self.warn(key, f'"{raw}" has no effect and is recorded as "automatic": omit it')
            return
        allowed = ", ".join(LEGACY_OPTIMIZATION)
        self.error(key, f"is a legacy setting with no effect: omit it (accepted values: {allowed})")

    def _location(self, raw: Any, key: Key) -> str | None:
        if not isinstance(raw, str) or not raw.strip():
            self.error(key, 'must be a region or region prefix in quotes, e.g. location = "us"')
            return None
        return raw.strip()

    def _arch(self, raw: Any, key: Key) -> str | None:
        if raw in ARCHES:
            return str(raw)
        fix = {"amd64": "x86_64", "x64": "x86_64", "x86-64": "x86_64", "aarch64": "arm64",
               "arm": "arm64"}
        if isinstance(raw, str) and raw.lower() in fix:
            self.error(key, f'write arch = "{fix[raw.lower()]}" (nodus spells it that way)')
        else:
            self.error(key, 'must be "x86_64" or "arm64"')
        return None

    # -- numbers -------------------------------------------------------------------

    def _number(self, raw: Any, key: Key, positive: bool, unit: str) -> float | None:
        if isinstance(raw, bool):
            self.error(key, f"must be a number ({unit}), not true/false")
            return None
        if isinstance(raw, str):
            self.error(key, f"must be a number ({unit}) without quotes{_unquote_fix(raw, key)}")
            return None
        if not isinstance(raw, int | float):
            self.error(key, f"must be a number ({unit})")
            return None
        value = float(raw)
        if not math.isfinite(value):
            self.error(key, f"must be a finite number ({unit}), not {raw}")
            return None
        if value < 0:
            self.error(key, f"cannot be negative ({unit})")
            return None
        if positive and value == 0:
            self.error(key, f"must be greater than 0 ({unit}); omit it to set no limit")
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
        assert isinstance(name, str)
        if name not in doc:
            return None
        raw = doc[name]
        if not isinstance(raw, str):
            self.error(key, f'must be a string in quotes, e.g. {name} = "..."')
            return None
        if not raw.strip():
            self.error(key, "must not be empty")
            return None
        return raw

    def _command(self, doc: dict[str, Any], key: Key) -> list[str] | None:
        if "command" not in doc:
            return None
        raw = doc["command"]
        if isinstance(raw, str):
            if not raw.strip():
                self.error(key, "must not be empty; omit it to run the image's own command")
                return None
            return ["/bin/sh", "-c", raw]
        if isinstance(raw, list) and raw and all(isinstance(a, str) for a in raw):
            return list(raw)
        if isinstance(raw, list) and not raw:
            self.error(key, "must not be empty; omit it to run the image's own command")
            return None
        self.error(
            key,
            'must be a list of strings, e.g. ["python", "train.py"], or one string run by /bin/sh -c',
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
                self.error(path, "is not a valid environment variable name (letters, digits, _)")
                continue
            if name in RESERVED_ENV:
                self.error(path, f"{name} is set by nodus for every stage; choose another name")
                continue
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                self.error(path, f'must be a string, e.g. {name} = "{_tomlish(value)}"')
                continue
            if isinstance(value, float) and not math.isfinite(value):
                self.error(path, f'must be a string, e.g. {name} = "..."')
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
            self.error(("stages",), "must be an array of tables: write each stage as [[stages]]")
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
                self.error((*prefix, "requirements"), "must be a table: [stages.requirements]")
                nested = {}
            else:
                self._check_keys(
                    nested, (*prefix, "requirements"), REQUIREMENT_KEYS, where="requirements"
                )
            name = self._string(table, (*prefix, "name"))
            if "name" not in table:
                self.error(prefix, 'every stage needs a name: add name = "..." to this [[stages]]')
            if name is not None:
                if not _STAGE_NAME.match(name):
                    self.error(
                        (*prefix, "name"),
                        f'"{name}" is not a valid stage name: use letters, digits, ".", "_" or '
                        '"-", starting with a letter or digit, at most 63 characters',
                    )
                elif name in seen:
                    self.error(
                        (*prefix, "name"),
                        f'"{name}" is already the name of stage {seen[name]}: names must be unique',
                    )
                else:
                    seen[name] = index
            stage_image = self._string(table, (*prefix, "image")) or image
            if stage_image is None:
                self.error(
                    (*prefix, "image"),
                    "no image: set image at the top level or in this stage",
                )
            stage_command = self._command(table, (*prefix, "command"))
            stage_env = {**env, **self._env(table.get("env"), (*prefix, "env"))}
            own, _, _, (cpu_set, disk_set) = self._requirements(table, nested, prefix)
            for key in WHOLE_WORKLOAD:
                mine, theirs = getattr(own, key), getattr(base, key)
                if mine is not None and theirs is not None and mine != theirs:
                    self.error(
                        (*prefix, "requirements", key),
                        f"{key} is set for the whole workload ({theirs!r}) and applies to every "
                        "stage; remove it here or change it at the top",
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


def _first_gpu_key(doc: dict[str, Any], nested: dict[str, Any]) -> Key:
    for key in ("gpu", "gpu_count", "peak_memory_gb"):
        if key in doc:
            return (key,)
        if key in nested:
            return ("requirements", key)
    return ("requirements",)


def _machine_hint(raw: str) -> str | None:
    """Machine IDs in a GPU field: say what the machine carries when the catalog knows it."""
    from nodus_cli import catalog  # deferred: validating good files never loads the catalog

    offer = catalog.find_machine(raw)
    if offer is not None:
        return (
            f'"{raw}" is a machine ID ({offer.supplier}), not a GPU model; it carries '
            f"{offer.gpu_count}× {offer.gpu} ({offer.gpu_memory_gb:g} GB each): write "
            f'gpu = "{offer.gpu}", gpu_count = {offer.gpu_count}'
            + (f", peak_memory_gb = {offer.gpu_memory_gb:g}" if offer.gpu_memory_gb else "")
        )
    if re.search(r"\d+xlarge|\.\d*x?large|standard|highgpu|megagpu|ultragpu|^[a-z]\d[a-z]*\.", raw,
                 re.IGNORECASE):
        return (
            f'"{raw}" looks like a machine ID, not a GPU model: write the model it carries, '
            'e.g. gpu = "A100", with gpu_count'
        )
    return None


def _foreign_fix(key: str, value: Any) -> str:
    if key in ("accelerators", "accelerator", "gpus") and isinstance(value, str):
        m = _ACCELERATOR_SPEC.match(value)
        if m:
            return f' (here: gpu = "{m.group(1)}", gpu_count = {m.group(2)})'
        return f' (here: gpu = "{value}")'
    if key in ("num_gpus", "gpus") and isinstance(value, int) and not isinstance(value, bool):
        return f" (here: gpu_count = {value})"
    if key == "gpu_type" and isinstance(value, str):
        return f' (here: gpu = "{value}")'
    if key == "memory_bytes" and isinstance(value, int) and not isinstance(value, bool):
        return f" (here: memory_gb = {value / 1024**3:g})"
    if key in ("num_cpus", "cpus", "vcpus") and isinstance(value, int | float):
        return f" (here: cpu = {value})"
    return ""


def _unquote_fix(raw: str, key: Key) -> str:
    m = _SIZE_SPEC.match(raw)
    if not m:
        return ""
    number = float(m.group(1))
    unit = (m.group(2) or "").lower()
    if unit in ("mib", "mb"):
        number /= 1024
    elif unit in ("tib", "tb"):
        number *= 1024
    return f": write {key[-1]} = {number:g}"


def _tomlish(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "..."
