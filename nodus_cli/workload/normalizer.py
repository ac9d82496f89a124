"""The workload rules: raw TOML (or the Python API's arguments) to a normalized workload.

Normalizing collects *all* problems of a document in one pass (a CI run should show every
mistake at once; past :data:`~nodus_cli.workload.runkeys.MAX_PROBLEMS` they are counted)
and never raises for bad input. The result is the plain data of
:mod:`nodus_cli.workload.model`; the hints for what users of other tools write live in
:mod:`nodus_cli.workload.hints`, the rules of what a container runs and reaches (command,
entrypoint, env, mounts, ports, [map], output_dir) in :mod:`nodus_cli.workload.runkeys`.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from nodus_cli import collector
from nodus_cli.hardware import gpus
from nodus_cli.workload.hints import (
    FOREIGN_KEYS,
    MAP_FOREIGN_KEYS,
    MAX_NAME,
    MODEL_AND_COUNT,
    UNSUPPORTED_KEYS,
    foreign_fix,
    generic_gpu_message,
    machine_message,
    tpu_message,
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
    STAGE_KEYS,
    TOP_LEVEL_KEYS,
    WHOLE_WORKLOAD,
    WORKLOAD_ONLY,
    Mount,
    Port,
    Requirements,
    Result,
    Stage,
    Workload,
)
from nodus_cli.workload.runkeys import MAP_KEYS, NUL_CHARACTER, RunKeys, Where, clip, toml
from nodus_cli.workload.tomlsource import Key, LineIndex, LoadFailure, parse, read_text

_STAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_WHITESPACE = re.compile(r"\s")
_MAX_NUMBER = 2**63
_GPU_EXAMPLE = 'gpu = "H100" (`nodus gpus` lists the models)'
#: Docker's smallest CPU share (``--cpus``) and memory limit (6 MB).
MIN_CPU = 0.01
MIN_MEMORY_GB = 0.006
#: Keys that are tables of their own, never written "above [requirements]".
_TABLES = ("map", "env", "requirements", "stages")
#: GPU requirements whose unused top-level value the stages warning describes as a GPU ask.
_GPU_KEYS = ("gpu", "gpu_count", "peak_memory_gb", "share_gpu")


def load_file(path: Path, display: str | None = None) -> Result:
    """Read, parse and normalize one workload file; relative paths in it (``mounts``,
    ``map.over``, ``output_dir``) are relative to the file's folder.

    The default name is the file name without ``.toml`` (and without ``.nodus`` for a
    ``train.nodus.toml``).
    """
    shown = display if display is not None else str(path)
    try:
        text = read_text(path)
    except LoadFailure as failure:
        return Result(shown, None, [failure.problem])
    name = path.stem.removesuffix(".nodus") if path.stem != ".nodus" else path.stem
    return load_text(text, shown, default_name=name, base_dir=path.resolve().parent)


def load_text(
    text: str,
    path: str = "<string>",
    default_name: str = "workload",
    base_dir: Path | None = None,
) -> Result:
    # A large document holds many containers (see nodus_cli.collector). The collector
    # resumes once the parsed document and the line index are gone, so its first
    # collection has little left to look at.
    with collector.paused():
        result = _load_text(text, path, default_name, base_dir)
    return result


def _load_text(text: str, path: str, default_name: str, base_dir: Path | None) -> Result:
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
    left_out = normalizer.left_out()
    if left_out is not None:
        problems.append(left_out)
    has_errors = any(p.severity == "error" for p in problems)
    return Result(path, None if has_errors else workload, problems)


class _Normalizer(RunKeys):
    def __init__(
        self, lines: LineIndex | None, path: str, base_dir: Path, mapping_wins: bool
    ) -> None:
        super().__init__(lines, path, base_dir)
        self.mapping_wins = mapping_wins

    @property
    def table(self) -> gpus.GpuTable:
        """The GPU names, read (once per process) only when the workload names a GPU."""
        return gpus.table()

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
        command, shell = self.command(doc, ("command",))
        entrypoint = self.entrypoint(doc, ("entrypoint",))
        if command is not None and shell and entrypoint is not None:
            self.shell_and_entrypoint(command[2], ("command",), entrypoint, ("entrypoint",))
        env = self.env(doc.get("env"), ("env",))
        model = self._string(doc, ("model",))
        budget = self._positive(doc, ("budget",), "USD for the whole run")
        mounts = self.mounts(doc, ())
        ports = self.ports(doc, ())
        output_dir = self.output_dir(doc)

        reqs, optimization, _ = self._requirements(doc, nested_raw, ())
        declared = "stages" in doc
        base = _Base(image, command, shell, entrypoint, env, mounts, ports, reqs)
        if declared:
            if "map" in doc:
                self.error(
                    ("map",),
                    "with [[stages]], [map] belongs in the stage that fans out: move it into "
                    "that stage as [stages.map] (each stage runs its own command)",
                )
            stages = self._stages(doc.get("stages"), base)
            if stages:
                self._unused_by_stages(doc, nested_raw)
        else:
            if image is None and "image" not in doc:
                self.error(("image",), 'required: set image = "registry/name:tag" at the top level')
            fan_out = self.map(doc["map"], ("map",)) if "map" in doc else None
            published = self.distinct_ports([], ports)
            if fan_out is not None and published:
                self.error(("ports",), _PORTS_WITH_MAP)
            stages = [
                Stage(
                    "main",
                    image or "",
                    command,
                    env,
                    reqs,
                    entrypoint=entrypoint,
                    mounts=self.distinct_mounts([], mounts),
                    ports=published,
                    map=fan_out,
                    shell=shell,
                )
            ]
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
            output_dir=output_dir,
        )

    def _unused_by_stages(self, doc: dict[str, Any], nested: dict[str, Any]) -> None:
        """Workload-level GPU and memory requirements reach no stage: say so, with the fix."""
        for key in NOT_INHERITED:
            path: Key | None = None
            if key in doc and key in FLAT_SHORTCUTS:
                path, raw, here = (key,), doc[key], "at the top level"
            elif key in nested:
                path, raw, here = ("requirements", key), nested[key], "in [requirements]"
            if path is None:
                continue
            line = f"{key} = {toml(raw)}"
            if key in _GPU_KEYS:
                own = "each stage asks for its own GPU"
                where = "as a stage key or in [stages.requirements]"
            else:
                own = f"each stage sets its own {key}"
                where = "in [stages.requirements]"
            self.warn(
                path,
                f"{line} {here} reaches no stage: with [[stages]], {own}; add {line} to the "
                f"stages that need it ({where}) or remove it here",
            )

    def _check_keys(
        self, table: dict[str, Any], prefix: Key, allowed: tuple[str, ...], where: Where
    ) -> None:
        nested = where in ("requirements", "stage_requirements")
        in_stage = where.startswith("stage") or (where == "map" and prefix[:1] == ("stages",))
        home = "[stages.requirements]" if in_stage else "[requirements]"
        for key in table:
            if key in allowed:
                continue
            if self.full:  # the rest is only counted: skip building the hints
                self.hidden["error"] += 1
                continue
            path = (*prefix, key)
            spelled = key.strip().lower().replace("-", "_").replace(" ", "_")
            if where == "map":
                self._unknown_map_key(table, path, key, spelled)
            elif not nested and key in NESTED_ONLY:
                self.error(path, f"`{key}` belongs in {home}: move it there")
            elif where == "requirements" and key in TOP_LEVEL_KEYS and key not in allowed:
                move = (
                    f"write it as its own [{key}] table"
                    if key in _TABLES
                    else "move it above [requirements]"
                )
                self.error(
                    path,
                    f"`{key}` belongs at the top level of the file, not in [requirements]: {move}",
                )
            elif in_stage and key in WORKLOAD_ONLY:
                self.error(
                    path,
                    f"`{key}` applies to the whole workload: set it at the top level of the "
                    "file, not in a stage",
                )
            elif where == "stage_requirements" and key in STAGE_KEYS:
                move = (
                    f"write it as [stages.{key}] after this stage's keys"
                    if key in _TABLES
                    else "move it above [stages.requirements]"
                )
                self.error(
                    path,
                    f"`{key}` belongs in the [[stages]] table itself, not in "
                    f"[stages.requirements]: {move}",
                )
            elif spelled != key and spelled in allowed + (() if nested else NESTED_ONLY):
                where_to = f" in {home}" if spelled not in allowed else ""
                self.error(
                    path,
                    f"unknown key; did you mean `{spelled}`{where_to}? Keys are lowercase "
                    "with underscores",
                )
            elif spelled in UNSUPPORTED_KEYS:
                fix = ""
                if spelled in ("retry", "retries", "max_retries"):
                    number = table[key]
                    if isinstance(number, int) and not isinstance(number, bool) and number >= 0:
                        fix = f" (here: nodus run --retries {number})" if number < 100 else ""
                self.error(path, f"unknown key: {UNSUPPORTED_KEYS[spelled]}{fix}")
            elif spelled in FOREIGN_KEYS:
                target, why = FOREIGN_KEYS[spelled]
                shown = f"`{target}`"
                where_to = ""
                if target == "requirements":
                    shown = home
                elif target == "map":
                    shown = "[stages.map]" if in_stage else "[map]"
                elif not nested and target in NESTED_ONLY:
                    where_to = f" in {home}"
                elif in_stage and target in WORKLOAD_ONLY:
                    where_to = " at the top level of the file"
                fix = foreign_fix(spelled, table[key])
                self.error(path, f"unknown key; did you mean {shown}{where_to}? {why}{fix}")
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

    def _unknown_map_key(self, table: dict[str, Any], path: Key, key: str, spelled: str) -> None:
        if spelled in MAP_KEYS:
            self.error(
                path, f"unknown key; did you mean `{spelled}`? Keys are lowercase with underscores"
            )
            return
        if spelled in UNSUPPORTED_KEYS:
            self.error(path, f"unknown key: {UNSUPPORTED_KEYS[spelled]}")
            return
        target = MAP_FOREIGN_KEYS.get(spelled)
        if target is None and len(key) <= MAX_NAME:
            close = difflib.get_close_matches(spelled, MAP_KEYS, n=1, cutoff=0.6)
            target = close[0] if close else None
        what = {
            "items": "the inputs, one task each",
            "over": "a file of inputs, one per line",
            "parallel": "at most this many tasks at once",
        }
        hint = f"; did you mean `{target}` ({what[target]})?" if target else ""
        self.error(path, f"unknown key{hint} (allowed here: {', '.join(MAP_KEYS)})")

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
        share = self._share_gpu(*values["share_gpu"]) if "share_gpu" in values else False
        gpu_given = "gpu" in values or "gpu_count" in values or "peak_memory_gb" in values
        if gpu_given and "gpu_count" not in values:
            count = 1  # SPEC 2.1: omitted with a GPU requested means one
        if share:
            self._shared(values, count)
            count = 1
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
        if cpu is not None and 0 < cpu < MIN_CPU:
            self.error(
                values["cpu"][1],
                f"{cpu:g} is below {MIN_CPU:g} CPU, the smallest CPU share Docker accepts: write "
                f"cpu = {MIN_CPU:g} or more (0 or omitted: 1 CPU)",
            )
            cpu = None
        memory = self._quantity(values.get("memory_gb"), "GB")
        if memory is not None and 0 < memory < MIN_MEMORY_GB:
            self.error(
                values["memory_gb"][1],
                f"{memory:g} GB is below Docker's smallest memory limit, 6 MB: write "
                f"memory_gb = {MIN_MEMORY_GB:g} or more (0 or omitted: 2 GiB per CPU)",
            )
            memory = None
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
            share_gpu=share,
        )
        # Zero or omitted cpu/disk mean "not set", which stages need to know to inherit.
        return reqs, optimization, (bool(cpu), bool(disk))

    def _share_gpu(self, raw: Any, key: Key) -> bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            self.error(
                key,
                f"must be true or false without quotes: write share_gpu = {raw.strip().lower()}",
            )
        else:
            self.error(key, f"must be true or false, e.g. share_gpu = true, not {toml(raw)}")
        return False

    def _shared(self, values: dict[str, tuple[Any, Key]], count: int) -> None:
        """``share_gpu = true``: one GPU, shared by tasks sized by ``peak_memory_gb``."""
        key = values["share_gpu"][1]
        if "gpu_count" in values and count not in (0, 1):
            self.error(
                values["gpu_count"][1],
                f"share_gpu = true shares ONE GPU between tasks, not {count}: write "
                "gpu_count = 1 or omit it (without share_gpu, each task gets its own "
                f"{count} GPUs)",
            )
        if "peak_memory_gb" not in values:
            self.error(
                key,
                "share_gpu = true needs peak_memory_gb, the GPU memory each task uses: a GPU of "
                "D GB runs at most floor(D / peak_memory_gb) tasks at once, so nodus needs each "
                "task's memory to know how many fit (four tasks of 20 GB on a 24 GB card would "
                "run out of memory); add peak_memory_gb = <GB each task needs>",
            )

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
            generic_gpu_message(raw)
            or self._variant_message(raw)
            or self._count_message(raw)
            or self._supplier_message(raw)
            or tpu_message(raw)
            or self._driver_name_message(raw)
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

    def _driver_name_message(self, raw: str) -> str | None:
        family = self.table.driver_name(raw)
        if family is None:
            return None
        return (
            f'"{raw}" is how nvidia-smi names the {family.name}, not a model name: write '
            f'gpu = "{family.name}" (and peak_memory_gb for the memory you need)'
        )

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
            self.error(key, f"must be a whole number: 1, 2, 4 or 8, not {toml(raw)}")
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
            if 0 < raw < 1:
                self.error(
                    key,
                    f"{raw:g} of a GPU cannot be requested as a count: to let tasks share one "
                    "GPU, write share_gpu = true with peak_memory_gb = <memory each task needs> "
                    "(and gpu_count = 1, or omit it); a GPU then runs as many tasks at once as "
                    "its memory holds",
                )
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
        shown = f'"{raw}"' if isinstance(raw, str) else toml(raw)
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
                f'"{clip(location)}" matches no region or area nodus knows, so no catalog '
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
            self.error(key, f"must be a number ({unit}), not {toml(raw)}")
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

    # -- strings --------------------------------------------------------------------

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
            self.error(key, NUL_CHARACTER)
            return None
        return raw

    def _image(self, doc: dict[str, Any], key: Key) -> str | None:
        image = self._string(doc, key)
        if image is not None and _WHITESPACE.search(image):
            self.error(
                key,
                f'"{clip(image)}" is not an image reference: it contains whitespace; '
                'write image = "registry/name:tag"',
            )
            return None
        return image

    # -- stages --------------------------------------------------------------------

    def _stages(self, raw: Any, base: _Base) -> list[Stage]:
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
            name = self._stage_name(table, prefix, seen, index)
            stage_image = self._image(table, (*prefix, "image"))
            if stage_image is None and "image" not in table:
                stage_image = base.image
                if base.image is None:
                    self.error(
                        (*prefix, "image"),
                        'no image: set image = "registry/name:tag" at the top level or in '
                        "this stage",
                    )
            command, shell, entrypoint = self._stage_command(table, prefix, base)
            stage_env = {**base.env, **self.env(table.get("env"), (*prefix, "env"))}
            own, _, (cpu_set, disk_set) = self._requirements(table, nested, prefix)
            for key in WHOLE_WORKLOAD:
                mine, theirs = getattr(own, key), getattr(base.requirements, key)
                if mine is not None and theirs is not None and mine != theirs:
                    self.error(
                        (*prefix, "requirements", key),
                        f"the whole workload has {key} = {toml(theirs)}, which applies to every "
                        f"stage: remove {key} here or change it at the top level",
                    )
            whole = base.requirements
            effective = replace(
                own,
                cpu=own.cpu if cpu_set else whole.cpu,
                disk_gb=own.disk_gb if disk_set else whole.disk_gb,
                location=whole.location or own.location,
                max_price_per_hour=whole.max_price_per_hour or own.max_price_per_hour,
                arch=whole.arch or own.arch,
            )
            mounts = self.distinct_mounts(base.mounts, self.mounts(table, prefix))
            own_ports = self.ports(table, prefix)
            ports = self.distinct_ports(base.ports, own_ports)
            fan_out = self.map(table["map"], (*prefix, "map")) if "map" in table else None
            if fan_out is not None and ports:
                if own_ports:
                    self.error((*prefix, "ports"), _PORTS_WITH_MAP)
                else:
                    self.error(
                        (*prefix, "map"),
                        f"this stage takes the workload's ports{self._at_line(('ports',))}, but "
                        f"{_PORTS_WITH_MAP_WHY}: move ports into the stages that serve them",
                    )
            stages.append(
                Stage(
                    name or f"stage-{index}",
                    stage_image or "",
                    command,
                    stage_env,
                    effective,
                    entrypoint=entrypoint,
                    mounts=mounts,
                    ports=ports,
                    map=fan_out,
                    shell=shell,
                )
            )
        return stages

    def _stage_name(
        self, table: dict[str, Any], prefix: Key, seen: dict[str, int], index: int
    ) -> str | None:
        name = self._string(table, (*prefix, "name"))
        if "name" not in table:
            self.error(prefix, 'every stage needs a name: add name = "..." to this [[stages]]')
        if name is None:
            return None
        if not _STAGE_NAME.match(name):
            self.error(
                (*prefix, "name"),
                f'"{clip(name)}" is not a valid stage name: use letters, digits, ".", '
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
        return name

    def _stage_command(
        self, table: dict[str, Any], prefix: Key, base: _Base
    ) -> tuple[list[str] | None, bool, list[str] | None]:
        """The stage's command, shell flag and entrypoint, each inherited when omitted."""
        command_key: Key = ("command",)
        command, shell = base.command, base.shell
        if "command" in table:
            command_key = (*prefix, "command")
            command, shell = self.command(table, command_key)
        entrypoint_key: Key = ("entrypoint",)
        entrypoint = base.entrypoint
        if "entrypoint" in table:
            entrypoint_key = (*prefix, "entrypoint")
            entrypoint = self.entrypoint(table, entrypoint_key)
        own = "command" in table or "entrypoint" in table  # else the top level said it
        if own and command is not None and shell and entrypoint is not None:
            self.shell_and_entrypoint(command[2], command_key, entrypoint, entrypoint_key)
        return command, shell, entrypoint


class _Base:
    """What stages take from the top level of the file."""

    __slots__ = (
        "command",
        "entrypoint",
        "env",
        "image",
        "mounts",
        "ports",
        "requirements",
        "shell",
    )

    def __init__(
        self,
        image: str | None,
        command: list[str] | None,
        shell: bool,
        entrypoint: list[str] | None,
        env: dict[str, str],
        mounts: list[tuple[Mount, Key]],
        ports: list[tuple[Port, Key]],
        requirements: Requirements,
    ) -> None:
        self.image = image
        self.command = command
        self.shell = shell
        self.entrypoint = entrypoint
        self.env = env
        self.mounts = mounts
        self.ports = ports
        self.requirements = requirements


_PORTS_WITH_MAP_WHY = (
    "a stage with [map] cannot publish ports: its tasks run at once and every one would "
    "need the same host port"
)
_PORTS_WITH_MAP = f"{_PORTS_WITH_MAP_WHY}; publish ports from a stage without [map]"


@cache
def _known_location(location: str) -> bool:
    from nodus_cli.hardware import locations

    try:
        return locations.is_known(location)
    except Exception:  # a broken installation must not break validation
        return True
