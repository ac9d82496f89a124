"""User configuration (``config.toml``) and the state folder (``NODUS_HOME``).

The configuration file is ``NODUS_CONFIG``, else ``$XDG_CONFIG_HOME/nodus/config.toml``
(default ``~/.config/nodus/config.toml``). Every key is optional:

```toml
[local]
price_per_hour = 2.5      # what this machine costs you, USD per hour (default 0)
region = "eu-west-1"      # optional: lets `location` requirements match this machine

[catalog]
# What `nodus catalog update` fetches when given no SOURCE: URLs (or paths, relative to
# this file) of nodus-format CSV files or of SkyPilot catalog vms.csv files; "NAME=URL"
# names the supplier (else the URL's path does: .../catalogs/v7/aws/vms.csv is aws).
sources = [
  "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs/v7/aws/vms.csv",
  "lambda=https://example.com/prices/lambda.csv",
]
max_age_days = 30         # plans warn when the prices in use are older (default 30)
timeout = 30              # seconds one source may take, retries included (default 30)

[limits]
max_spend_per_day = 200.0     # USD, across every run recorded in this NODUS_HOME
max_spend_per_month = 3000.0  # USD
max_price_per_hour = 40.0     # USD per hour: a ceiling no workload can raise

[slurm]                       # --target slurm (docs/targets.md)
partition = "gpu"             # optional: sbatch --partition (default: the cluster's)
account = "ml"                # optional: sbatch --account
qos = "normal"                # optional: sbatch --qos
work_root = "/shared/nodus"   # a folder every node sees at the same path
container = "docker"          # how a node runs the image: "docker" or "podman"
price_per_hour = 4.0          # USD per hour of a whole node (default: not set; 0 is free)
prices = { gpu-a = 12.0 }     # USD per hour by node or partition name

[kubernetes]                  # --target kubernetes (docs/targets.md)
context = "gpu-cluster"       # optional: a context of your kubeconfig (default: its current)
namespace = "ml"              # optional: where Jobs go (default: the context's, else "default")
priority_class = "batch-low"  # optional: the PriorityClass every pod gets
priority_classes = { urgent = 80 }  # optional: a run's `priority` at or above -> that class
queue = "team-a"              # optional: a Kueue LocalQueue (kueue.x-k8s.io/queue-name)
price_per_hour = 4.0          # USD per hour of a whole node (default: the catalog's price
                              # of its instance type, else not set; 0 is free)
prices = { "p5.48xlarge" = 98.3 }  # USD per hour by node name or a value of its labels

[functions]
keep_warm = 60            # seconds a single call's warm worker waits for the next call
                          # of its kind (default 60; 0: a new container for every call)
```

Each section is read into a frozen struct (:func:`local`, :func:`catalog`,
:func:`limits`, :func:`slurm`, :func:`kubernetes`, :func:`functions`). Mistakes are errors
that name the file, the key and what to write: booleans, non-finite and negative numbers
are never valid amounts, unknown keys get a "did you mean", and a section name close to
a known one (``[limit]``) is pointed out rather than silently ignored.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nodus_cli.errors import NodusError
from nodus_cli.structs import field, struct

#: The sections this module reads, and their keys.
SECTIONS: dict[str, tuple[str, ...]] = {
    "local": ("price_per_hour", "region"),
    "catalog": ("sources", "max_age_days", "timeout"),
    "limits": ("max_spend_per_day", "max_spend_per_month", "max_price_per_hour"),
    "slurm": ("partition", "account", "qos", "work_root", "container", "price_per_hour", "prices"),
    "kubernetes": (
        "context",
        "namespace",
        "priority_class",
        "priority_classes",
        "queue",
        "price_per_hour",
        "prices",
    ),
    "functions": ("keep_warm",),
}
#: How a Slurm node runs a workload's image (``[slurm] container``): the ones nodus knows.
SLURM_CONTAINERS = ("docker", "podman")
#: Seconds a warm worker of single function calls stays for the next call (``keep_warm``).
DEFAULT_KEEP_WARM = 60.0
DEFAULT_MAX_AGE_DAYS = 30.0
#: Seconds one source of ``nodus catalog update`` may take, retries included.
DEFAULT_CATALOG_TIMEOUT = 30.0
#: A source's own name, in ``NAME=URL``.
_SOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def home() -> Path:
    """Where run records and logs live: ``NODUS_HOME``, default ``~/.local/share/nodus``."""
    configured = os.environ.get("NODUS_HOME")
    if configured:
        return Path(configured)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "nodus"


def private_folder(path: Path, *also: Path) -> None:
    """Create ``path`` (and its parents) 0700, or make it, and the folders ``also``
    names, 0700 when they are this user's and open to others: the state folder holds run
    records, logs and work folders, none of them anyone else's business.

    Raises ``FileExistsError`` when ``path`` is not a folder and ``OSError`` when it cannot
    be created; a folder nodus may not re-mode (someone else's, or read-only) is left as
    it is, since the files inside are 0600 anyway.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    for folder in (path, *also):
        try:
            info = folder.stat()
            if info.st_uid == os.getuid() and info.st_mode & 0o077:
                folder.chmod(0o700)
        except OSError:
            pass


def config_path() -> Path:
    configured = os.environ.get("NODUS_CONFIG")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "nodus" / "config.toml"


@struct(frozen=True)
class LocalConfig:
    """``[local]``: what this machine costs an hour, and where it is."""

    price_per_hour: float = 0.0
    region: str = "local"


@struct(frozen=True)
class CatalogSource:
    """One ``[catalog] sources`` entry (or ``nodus catalog update`` argument)."""

    #: An http(s) URL, or a ``file://`` URL (a path is made one).
    url: str
    #: The name given as ``NAME=URL``; None: the URL's path names it.
    name: str | None = None
    #: As written, when that was a path (shown as the user wrote it).
    written: str | None = None

    def __str__(self) -> str:
        shown = self.written or self.url
        return f"{self.name}={shown}" if self.name else shown


@struct(frozen=True)
class CatalogConfig:
    """``[catalog]``: the sources ``nodus catalog update`` reads, and how old prices may be."""

    sources: tuple[CatalogSource, ...] = ()
    max_age_days: float = DEFAULT_MAX_AGE_DAYS
    #: The file the values came from (None: defaults, no file).
    path: Path | None = None
    #: Seconds one source of ``nodus catalog update`` may take, retries included.
    timeout: float = DEFAULT_CATALOG_TIMEOUT


@struct(frozen=True)
class LimitsConfig:
    """Spending limits (USD). None: not set."""

    max_spend_per_day: float | None = None
    max_spend_per_month: float | None = None
    max_price_per_hour: float | None = None
    #: The file the values came from (None: defaults, no file).
    path: Path | None = None

    @property
    def any(self) -> bool:
        return any(
            v is not None
            for v in (self.max_spend_per_day, self.max_spend_per_month, self.max_price_per_hour)
        )


# -- reading -------------------------------------------------------------------------------


def _document(path: Path) -> dict[str, Any] | None:
    """The parsed file, or None when there is none. Section names close to a known one
    are errors (a mistyped ``[limit]`` must not silently mean "no limits")."""
    if not path.is_file():
        return None
    try:
        doc = tomllib.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise NodusError(f"{path}: cannot read the configuration: {exc}") from None
    for key in doc:
        if key in SECTIONS:
            continue
        close = difflib.get_close_matches(key, list(SECTIONS), n=1, cutoff=0.75)
        if close:
            raise NodusError(
                f"{path}: [{key}]: unknown section; did you mean [{close[0]}]?",
                hint=f"rename the section to [{close[0]}]",
            )
    return doc


def _section(path: Path, doc: dict[str, Any], name: str) -> dict[str, Any]:
    section = doc.get(name, {})
    if not isinstance(section, dict):
        raise NodusError(
            f"{path}: [{name}] must be a table",
            hint=f"write it as a section: [{name}] on its own line, then key = value lines",
        )
    allowed = SECTIONS[name]
    for key in sorted(set(section) - set(allowed)):
        close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
        guess = f"; did you mean {close[0]}?" if close else ""
        raise NodusError(
            f"{path}: {name}.{key}: unknown key{guess} (allowed: {', '.join(allowed)})"
        )
    return section


def _node_prices(
    path: Path, name: str, section: dict[str, Any], table: str, example: str
) -> tuple[float | None, dict[str, float]]:
    """A cluster section's ``price_per_hour`` (every node; None: not set, which is not 0,
    a cluster you do not pay for) and ``prices`` (by node, or what else the cluster names:
    ``table`` says it, ``example`` shows it), in USD per hour."""
    raw_price = section.get("price_per_hour")
    price = None
    if raw_price is not None:
        price = _amount(
            path,
            name,
            "price_per_hour",
            raw_price,
            unit="USD per hour",
            example="4.0",
            zero_ok=True,
        )
    raw = section.get("prices", {})
    if not isinstance(raw, dict):
        raise NodusError(
            f"{path}: {name}.prices must be {table}", hint=f"write it as, e.g., {example}"
        )
    prices = {
        str(node): _amount(
            path,
            name,
            f"prices.{node}",
            value,
            unit="USD per hour",
            example="12.0",
            zero_ok=True,
        )
        for node, value in raw.items()
    }
    return price, prices


def _amount(
    path: Path, section: str, key: str, value: object, *, unit: str, example: str, zero_ok: bool
) -> float:
    """A number of ``unit``: never a boolean, never inf or nan, never negative (nor zero
    unless ``zero_ok``)."""
    bad = (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero_ok)
    )
    if bad:
        what = "a number >= 0" if zero_ok else "a positive number"
        raise NodusError(
            f"{path}: {section}.{key} must be {what} ({unit}), not {_shown(value)}",
            hint=f"write it as, e.g., {key} = {example}",
        )
    assert isinstance(value, int | float)
    return float(value)


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}" (a string)'
    return repr(value)


def local() -> LocalConfig:
    path = config_path()
    doc = _document(path)
    if doc is None:
        return LocalConfig()
    section = _section(path, doc, "local")
    price = _amount(
        path,
        "local",
        "price_per_hour",
        section.get("price_per_hour", 0.0),
        unit="USD per hour",
        example="2.5",
        zero_ok=True,
    )
    region = section.get("region", "local")
    if not isinstance(region, str) or not region.strip():
        raise NodusError(f'{path}: local.region must be a region name in quotes, e.g. "us-east-1"')
    return LocalConfig(price, region.strip())


@struct(frozen=True)
class SlurmConfig:
    """``[slurm]``: where and how ``--target slurm`` submits."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    #: A folder every node sees at the same path (None: ``NODUS_HOME/slurm``).
    work_root: Path | None = None
    container: str = "docker"
    #: USD per hour of every node without a price of its own (None: not set).
    price_per_hour: float | None = None
    #: USD per hour by node or partition name (a node's own price first).
    prices: dict[str, float] = field(default_factory=dict)

    def price_of(self, node: str, partition: str | None) -> tuple[float | None, str]:
        """The price declared for ``node`` (its own entry of ``prices``, else its
        partition's, else ``price_per_hour``; None: not set) and the key that declares it."""
        if node in self.prices:
            return self.prices[node], f"[slurm] prices: {node!r} (the node)"
        if partition is not None and partition in self.prices:
            return self.prices[partition], f"[slurm] prices: {partition!r} (its partition)"
        return self.price_per_hour, "[slurm] price_per_hour"


def slurm() -> SlurmConfig:
    path = config_path()
    doc = _document(path)
    if doc is None:
        return SlurmConfig()
    section = _section(path, doc, "slurm")
    words: dict[str, str | None] = {}
    for key in ("partition", "account", "qos", "work_root", "container"):
        value = section.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise NodusError(
                f"{path}: slurm.{key} must be a name in quotes, not {_shown(value)}",
                hint=f'write it as, e.g., {key} = "{_SLURM_EXAMPLES[key]}"',
            )
        words[key] = value.strip() if isinstance(value, str) else None
    container = words["container"] or "docker"
    if container not in SLURM_CONTAINERS:
        raise NodusError(
            f"{path}: slurm.container = {container!r}: nodus runs images on Slurm nodes "
            f"with {' or '.join(SLURM_CONTAINERS)} only so far",
            hint='write container = "docker" (each node\'s Docker engine) or "podman"',
        )
    root = words["work_root"]
    work_root = Path(root).expanduser() if root else None
    if work_root is not None and not work_root.is_absolute():
        work_root = (path.parent / work_root).resolve()
    price, prices = _node_prices(
        path,
        "slurm",
        section,
        "a table of node or partition names to USD per hour",
        "prices = { gpu-a = 12.0 }",
    )
    return SlurmConfig(
        words["partition"],
        words["account"],
        words["qos"],
        work_root,
        container,
        price,
        prices,
    )


_SLURM_EXAMPLES = {
    "partition": "gpu",
    "account": "ml",
    "qos": "normal",
    "work_root": "/shared/nodus",
    "container": "docker",
}


@struct(frozen=True)
class KubernetesConfig:
    """``[kubernetes]``: which cluster and namespace ``--target kubernetes`` uses, how its
    pods wait (a PriorityClass, a Kueue queue) and what its nodes cost."""

    context: str | None = None
    namespace: str | None = None
    priority_class: str | None = None
    queue: str | None = None
    #: USD per hour of every node without a price of its own (None: not set).
    price_per_hour: float | None = None
    #: USD per hour by node name, else by the value of one of the node's labels (its
    #: instance type, its GPU product).
    prices: dict[str, float] = field(default_factory=dict)
    #: PriorityClass name -> the lowest workload ``priority`` (0-100) that gets it.
    priority_classes: dict[str, int] = field(default_factory=dict)

    def class_for(self, priority: int) -> str | None:
        """The PriorityClass of a run of ``priority``: the class of ``priority_classes``
        with the highest threshold the priority reaches, else ``priority_class``."""
        reached = [
            (floor, name) for name, floor in self.priority_classes.items() if priority >= floor
        ]
        return max(reached)[1] if reached else self.priority_class

    def price_of(self, node: str, labels: dict[str, str]) -> tuple[float | None, str]:
        """The price declared for ``node`` (its name's entry of ``prices``, else the entry
        of one of its label values, else ``price_per_hour``; None: not set) and the key
        that declares it."""
        if node in self.prices:
            return self.prices[node], f"[kubernetes] prices: {node!r} (the node)"
        for value, key in sorted((v, k) for k, v in labels.items()):
            if value in self.prices:
                return self.prices[value], f"[kubernetes] prices: {value!r} (label {key})"
        return self.price_per_hour, "[kubernetes] price_per_hour"


_KUBERNETES_EXAMPLES = {
    "context": "gpu-cluster",
    "namespace": "ml",
    "priority_class": "batch-low",
    "queue": "team-a",
}


def kubernetes() -> KubernetesConfig:
    path = config_path()
    doc = _document(path)
    if doc is None:
        return KubernetesConfig()
    section = _section(path, doc, "kubernetes")
    words: dict[str, str | None] = {}
    for key, example in _KUBERNETES_EXAMPLES.items():
        value = section.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise NodusError(
                f"{path}: kubernetes.{key} must be a name in quotes, not {_shown(value)}",
                hint=f'write it as, e.g., {key} = "{example}"',
            )
        words[key] = value.strip() if isinstance(value, str) else None
    price, prices = _node_prices(
        path,
        "kubernetes",
        section,
        "a table of node names or label values to USD per hour",
        'prices = { "p5.48xlarge" = 98.3 }',
    )
    raw_classes = section.get("priority_classes", {})
    if not isinstance(raw_classes, dict):
        raise NodusError(
            f"{path}: kubernetes.priority_classes must be a table of PriorityClass names to "
            "the lowest workload priority (0 to 100) that gets each",
            hint="write it as, e.g., priority_classes = { urgent = 80, batch-low = 0 }",
        )
    classes = {}
    for name, floor in raw_classes.items():
        if isinstance(floor, bool) or not isinstance(floor, int) or not 0 <= floor <= 100:
            raise NodusError(
                f"{path}: kubernetes.priority_classes.{name} must be a whole number from 0 "
                f"to 100 (the lowest workload priority that gets it), not {_shown(floor)}",
                hint=f"write it as, e.g., priority_classes = {{ {name} = 80 }}",
            )
        classes[str(name)] = floor
    return KubernetesConfig(
        words["context"],
        words["namespace"],
        words["priority_class"],
        words["queue"],
        price,
        prices,
        classes,
    )


def parse_source(text: str, base: Path | None = None) -> CatalogSource:
    """``URL``, ``PATH`` or ``NAME=URL`` / ``NAME=PATH`` as a source; ValueError with what to
    write otherwise. A path (relative to ``base``, default the working folder) becomes a
    ``file://`` URL; an ``http://``, ``https://`` or ``file://`` URL stays as it is."""
    text = text.strip()
    name: str | None = None
    head, sep, rest = text.partition("=")
    if sep and "://" not in head and _SOURCE_NAME.fullmatch(head.strip()):
        name, text = head.strip(), rest.strip()
    elif sep and "://" not in head and not (Path(base or ".") / text).expanduser().exists():
        raise ValueError(
            f"{head.strip()!r} is not a source name: use letters, digits, '-', '_' "
            "or '.', e.g. aws=https://..."
        )
    what = (
        'write a URL such as "https://example.com/catalogs/v7/aws/vms.csv", a path such as '
        "./vms.csv, or NAME=URL"
    )
    if not text:
        raise ValueError(f"the source is empty: {what}")
    scheme, has_scheme, _ = text.partition("://")
    if has_scheme:
        scheme = scheme.lower()
        if scheme == "file":
            parts = urlsplit(text)
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                raise ValueError(f"{text!r} is not a file URL of an absolute path: {what}")
            return CatalogSource(text, name)
        if scheme not in ("http", "https") or len(text) < 10:
            raise ValueError(f"{text!r} is not an http(s) or file URL, or a path: {what}")
        return CatalogSource(text, name)
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = Path(base or Path.cwd()) / path
    host, slash, _ = text.partition("/")
    if slash and "." in host.strip(".") and not text.startswith((".", "~")) and not path.exists():
        # "example.com/vms.csv": a URL without its scheme, more likely than a file
        raise ValueError(
            f"{text!r} is not an http(s) URL, and there is no such file: write "
            f'"https://{text}", or a path such as ./vms.csv'
        )
    return CatalogSource(path.resolve().as_uri(), name, written=text)


def catalog() -> CatalogConfig:
    path = config_path()
    doc = _document(path)
    if doc is None:
        return CatalogConfig()
    section = _section(path, doc, "catalog")
    raw = section.get("sources", [])
    example = 'sources = ["https://example.com/catalogs/v7/aws/vms.csv"]'
    if not isinstance(raw, list):
        raise NodusError(
            f"{path}: catalog.sources must be a list of URLs in quotes, not {_shown(raw)}",
            hint=f"write it as, e.g., {example}",
        )
    sources = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, str):
            raise NodusError(
                f"{path}: catalog.sources[{i}] must be a URL in quotes, not {_shown(entry)}",
                hint=f"write it as, e.g., {example}",
            )
        try:
            sources.append(parse_source(entry, path.parent))  # paths: from this file
        except ValueError as exc:
            raise NodusError(f"{path}: catalog.sources[{i}]: {exc}") from None
    age = _amount(
        path,
        "catalog",
        "max_age_days",
        section.get("max_age_days", DEFAULT_MAX_AGE_DAYS),
        unit="days",
        example="30",
        zero_ok=False,
    )
    timeout = _amount(
        path,
        "catalog",
        "timeout",
        section.get("timeout", DEFAULT_CATALOG_TIMEOUT),
        unit="seconds",
        example="30",
        zero_ok=False,
    )
    return CatalogConfig(tuple(sources), age, path, timeout)


def limits() -> LimitsConfig:
    path = config_path()
    doc = _document(path)
    if doc is None:
        return LimitsConfig()
    section = _section(path, doc, "limits")
    found: dict[str, float | None] = {}
    for key, unit, example in (
        ("max_spend_per_day", "USD", "200.0"),
        ("max_spend_per_month", "USD", "3000.0"),
        ("max_price_per_hour", "USD per hour", "40.0"),
    ):
        value = section.get(key)
        found[key] = (
            None
            if value is None
            else _amount(path, "limits", key, value, unit=unit, example=example, zero_ok=False)
        )
    return LimitsConfig(
        found["max_spend_per_day"],
        found["max_spend_per_month"],
        found["max_price_per_hour"],
        path if any(v is not None for v in found.values()) else None,
    )


@struct(frozen=True)
class FunctionsConfig:
    """``[functions]``: how Python function calls run."""

    keep_warm: float = DEFAULT_KEEP_WARM


def functions() -> FunctionsConfig:
    path = config_path()
    doc = _document(path)
    if doc is None:
        return FunctionsConfig()
    section = _section(path, doc, "functions")
    if "keep_warm" not in section:
        return FunctionsConfig()
    warm = _amount(
        path,
        "functions",
        "keep_warm",
        section["keep_warm"],
        unit="seconds",
        example="60",
        zero_ok=True,
    )
    return FunctionsConfig(warm)
