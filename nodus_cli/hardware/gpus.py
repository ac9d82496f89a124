"""GPU model families: canonical names, aliases, memory variants and driver names.

The table lives in ``data/gpus.json`` (built from the sourced catalog in tools/catalog and
the product names ``nvidia-smi`` prints). This module only knows how to match spellings to it.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

from nodus_cli import data
from nodus_cli.structs import struct

_STRIP = re.compile(r"[\s_\-]+")
_MEMORY_SUFFIX = re.compile(r"^(?P<base>.*?)(?P<digits>\d+)(?:gb|g)$")
#: A node label's name of part of a GPU: a MIG slice or a time-sliced share.
_PART = re.compile(r"mig\d|shared$")
_FORM_FACTORS = (
    "sxm6",
    "sxm5",
    "sxm4",
    "sxm3",
    "sxm2",
    "sxm",
    "pcie",
    "fhhl",
    "nvlink",
    "nvl",
    "mega",
    "oam",
    "hbm3e",
    "hbm3",
)


def normalize(name: str) -> str:
    """Case, whitespace, hyphens, underscores and an ``NVIDIA`` prefix do not matter."""
    key = _STRIP.sub("", name.lower())
    if key.startswith("nvidia"):
        key = key[len("nvidia") :]
    return key


@struct(frozen=True)
class GpuFamily:
    """A GPU model (H100, L4, ...): its vendor, architecture and memory variants."""

    name: str
    vendor: str
    architecture: str
    compute_capability: str | None
    segment: str
    memory_gb: tuple[float, ...]
    aliases: tuple[str, ...]
    smi_names: tuple[str, ...]
    #: Superchips named by a memory figure that counts the CPU's memory ("GH200 480GB"):
    #: that figure -> the memory of the GPU itself.
    superchip_memory_gb: tuple[tuple[float, float], ...] = ()

    @property
    def max_memory_gb(self) -> float:
        return max(self.memory_gb) if self.memory_gb else 0.0

    def nominal_memory(self, reported_gb: float | None) -> float:
        """Snap a supplier's or driver's figure to the nominal variant (22.4 GB A10G -> 24)."""
        if not self.memory_gb:
            return reported_gb or 0.0
        if reported_gb is None or reported_gb <= 0:
            return min(self.memory_gb)
        return min(self.memory_gb, key=lambda v: (abs(v - reported_gb), v))


@struct(frozen=True)
class Variant:
    """One spelling of a GPU (a name table row): the family and the memory it names."""

    family: GpuFamily
    spelling: str
    memory_gb: float | None
    form_factor: str | None
    #: The superchip figure the spelling names ("GH200 480GB": 480) when ``memory_gb`` is
    #: the GPU's own memory taken from it (96).
    superchip_memory_gb: float | None = None


@struct(frozen=True)
class CatalogName:
    """What a GPU name in a catalog (or ``nodus gpus NAME``) says: the family, and the
    memory variant and form factor (or machine variant) it names, if any."""

    family: GpuFamily
    memory_gb: float | None
    form_factor: str | None


class GpuTable:
    """The one table of GPU names: what users may write (:meth:`lookup`) and every
    spelling a supplier's catalog uses (:meth:`catalog_name`), from ``data/gpus.json``."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.families: list[GpuFamily] = []
        self._by_key: dict[str, GpuFamily] = {}
        self._variants: dict[str, Variant] = {}
        self._smi: dict[str, GpuFamily] = {}
        self._catalog_extra: dict[str, Variant] = {}
        self._pool: dict[str, str] | None = None
        #: Every spelling the table holds and the family it names, clashes included.
        self._spelled: list[tuple[str, str]] = []
        self.suppliers: frozenset[str] = frozenset(
            normalize(s) for s in raw.get("not_gpu_names", {}).get("suppliers", [])
        )
        for entry in raw["families"]:
            family = GpuFamily(
                name=entry["name"],
                vendor=entry["vendor"],
                architecture=entry.get("architecture", ""),
                compute_capability=entry.get("compute_capability"),
                segment=entry.get("segment", ""),
                memory_gb=tuple(float(m) for m in entry.get("memory_gb", [])),
                aliases=tuple(entry.get("aliases", [])),
                smi_names=tuple(entry.get("smi_names", [])),
                superchip_memory_gb=tuple(
                    (float(named), float(gpu))
                    for named, gpu in entry.get("superchip_memory_gb", {}).items()
                ),
            )
            self.families.append(family)
            for spelling in (family.name, *family.aliases):
                self._by_key.setdefault(normalize(spelling), family)
                self._spelled.append((spelling, family.name))
            for smi in family.smi_names:
                self._smi[normalize(smi)] = family
            for v in entry.get("variant_spellings", []):
                mem = v.get("memory_gb")
                memory = float(mem) if mem is not None else None
                self._variants[normalize(v["spelling"])] = Variant(
                    family, v["spelling"], memory, v.get("form_factor")
                )
                self._spelled.append((v["spelling"], family.name))
        for spelling, target in raw.get("catalog_spellings", {}).items():
            family = self._by_key[normalize(target["family"])]
            mem = target.get("memory_gb")
            self._catalog_extra[normalize(spelling)] = Variant(
                family, spelling, float(mem) if mem is not None else None, target.get("form_factor")
            )
            self._spelled.append((spelling, family.name))
        #: family name -> memory -> the form factors spelled with that memory.
        self._forms: dict[str, dict[float, set[str]]] = {}
        for variant in (*self._variants.values(), *self._catalog_extra.values()):
            if variant.memory_gb is not None and variant.form_factor:
                forms = self._forms.setdefault(variant.family.name, {})
                forms.setdefault(variant.memory_gb, set()).add(variant.form_factor.upper())

    def lookup(self, name: str) -> GpuFamily | None:
        """A family by canonical name or alias (what users may write)."""
        return self._by_key.get(normalize(name))

    def get(self, canonical: str) -> GpuFamily:
        return self._by_key[normalize(canonical)]

    def variant(self, name: str) -> Variant | None:
        """A memory-variant or form-factor spelling (``A100-80GB``, ``H100 SXM``)."""
        key = normalize(name)
        found = self._variants.get(key)
        if found is not None:
            return found
        return self._generic_variant(key)

    def _generic_variant(self, key: str) -> Variant | None:
        """A family name followed by a memory size and/or a form factor, in either order.

        A memory size the family really comes in wins over other readings of the digits
        (``a10040gb`` is an A100 with 40 GB, not an A10 with 040 GB).
        """
        if len(key) > 64:
            return None
        splits = list(self._splits(key, None, None, depth=3))
        for family, memory, form in splits:
            if memory is None or memory in family.memory_gb:
                return Variant(family, key, memory, form.upper() if form else None)
        for family, memory, form in splits:
            for named, gpu_memory in family.superchip_memory_gb:
                if memory == named:
                    shown = form.upper() if form else None
                    return Variant(family, key, gpu_memory, shown, superchip_memory_gb=named)
        if splits:
            family, memory, form = splits[0]
            return Variant(family, key, memory, form.upper() if form else None)
        return None

    def _splits(
        self, key: str, memory: float | None, form: str | None, depth: int
    ) -> Iterator[tuple[GpuFamily, float | None, str | None]]:
        family = self._by_key.get(key)
        if family is not None and (memory is not None or form is not None):
            yield family, memory, form
        known = self._variants.get(key) if family is None else None
        if known is not None and (memory is not None or form is not None):
            # "Tesla V100S" + "-PCIE-32GB": a variant spelling with more said after it
            yield (
                known.family,
                memory if memory is not None else known.memory_gb,
                form or (known.form_factor.lower() if known.form_factor else None),
            )
        if depth == 0:
            return
        if form is None:
            for ff in _FORM_FACTORS:
                if key.endswith(ff) and len(key) > len(ff):
                    yield from self._splits(key[: -len(ff)], memory, ff, depth - 1)
        if memory is None:
            m = _MEMORY_SUFFIX.match(key)
            if m is not None:
                prefix, digits = m.group("base"), m.group("digits")
                for k in (2, 3, 1):
                    if k < len(digits) or (k == len(digits) and prefix):
                        base = prefix + digits[:-k]
                        yield from self._splits(base, float(digits[-k:]), form, depth - 1)

    def catalog_name(self, name: str) -> CatalogName | None:
        """Any spelling a supplier's catalog uses, or a user may give ``nodus gpus``: the
        family, with the memory and form factor it implies; None when unknown."""
        family = self.lookup(name)
        if family is not None:
            return CatalogName(family, None, None)
        key = normalize(name)
        hit = self._catalog_extra.get(key) or self.variant(name)
        if hit is not None:
            return CatalogName(hit.family, hit.memory_gb, hit.form_factor)
        smi = self._smi.get(key)
        if smi is not None:
            return CatalogName(smi, _memory_in(name), None)
        return None

    def resolve_supplier_spelling(self, name: str) -> tuple[GpuFamily, float | None] | None:
        """Catalog loading: any spelling a supplier uses, with the memory it implies."""
        found = self.catalog_name(name)
        return (found.family, found.memory_gb) if found is not None else None

    def only_form_at(self, family: GpuFamily, memory_gb: float, form_factor: str) -> bool:
        """Whether the table knows ``family`` with ``memory_gb`` in that form factor only
        (the H100 with 94 GB is the NVL; with 80 GB it is SXM5 or PCIe)."""
        forms = self._forms.get(family.name, {}).get(memory_gb, set())
        return forms == {form_factor.upper()}

    @property
    def clashes(self) -> list[str]:
        """Spellings the table gives two families (each must name one)."""
        owner: dict[str, str] = {}
        found = []
        for spelling, family in self._spelled:
            key = normalize(spelling)
            if owner.setdefault(key, family) != family:
                found.append(f"{spelling!r}: {owner[key]} vs {family}")
        return found

    def node_label(self, value: str) -> CatalogName | None:
        """The GPU a Kubernetes node label names: the GPU operator's
        ``nvidia.com/gpu.product`` (the driver's product name with hyphens:
        ``NVIDIA-H100-80GB-HBM3``, ``Tesla-T4``), GKE's ``cloud.google.com/gke-accelerator``
        (``nvidia-tesla-a100``, ``nvidia-h100-80gb``) or karpenter's
        ``karpenter.k8s.aws/instance-gpu-name`` (``h100``). None when the table does not
        know it, and for a part of a GPU: a MIG slice (``...-MIG-1g.5gb``) or a
        time-sliced share (``...-SHARED``) is not the model, and is never read as one."""
        key = normalize(value)
        if _PART.search(key) or len(key) > 64:
            return None
        found = self.catalog_name(value)
        if found is None and key.startswith("tesla"):
            # GKE keeps the retired "Tesla" brand in front of models sold without it
            found = self.catalog_name(key[len("tesla") :])
        return found

    def driver_name(self, product: str) -> GpuFamily | None:
        """The family of exactly a product name ``nvidia-smi`` prints (no other reading)."""
        return self._smi.get(normalize(product))

    def from_smi_name(self, product: str) -> GpuFamily | None:
        """The family of a product name as ``nvidia-smi`` prints it."""
        key = normalize(product)
        found = self._smi.get(key) or self._by_key.get(key)
        if found is not None:
            return found
        hit = self.variant(product)
        return hit.family if hit else None

    def is_supplier(self, name: str) -> bool:
        return normalize(name) in self.suppliers

    def suggestions(self, name: str, limit: int = 3) -> list[str]:
        """The canonical names closest to a spelling: containing it first, then similar."""
        key = normalize(name)[:64]
        if not key:
            return []
        pool = self._suggestion_pool()
        out: list[str] = []
        if len(key) >= 2:
            for spelling, canonical in pool.items():
                if key in spelling and canonical not in out:
                    out.append(canonical)
        matches = difflib.get_close_matches(key, list(pool), n=limit * 2, cutoff=0.5)
        for m in matches:
            if pool[m] not in out:
                out.append(pool[m])
        if not out:
            # "a100x" or "h1000": fall back to families the text starts with.
            out = [f.name for f in self.families if key.startswith(normalize(f.name))]
        return out[:limit]

    def _suggestion_pool(self) -> dict[str, str]:
        if self._pool is None:
            pool = {normalize(f.name): f.name for f in self.families}
            for f in self.families:
                for alias in f.aliases:
                    pool.setdefault(normalize(alias), f.name)
            self._pool = pool
        return self._pool


def _memory_in(text: str) -> float | None:
    m = re.search(r"(\d{2,3})\s*GB", text, re.IGNORECASE)
    return float(m.group(1)) if m else None


@cache
def table() -> GpuTable:
    # A path next to this file, not importlib.resources: its import would be part of every
    # `nodus validate` (benchmarks/README.md), and the package is always installed as files.
    raw = json.loads(data.path("gpus.json").read_text("utf-8"))
    return GpuTable(raw)


def quoted_list(names: list[str]) -> str:
    quoted = [f'"{n}"' for n in names]
    if len(quoted) <= 1:
        return "".join(quoted)
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]
