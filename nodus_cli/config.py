"""User configuration (``~/.config/nodus/config.toml``) and the state folder (``NODUS_HOME``).

```toml
[local]
price_per_hour = 2.5      # what this machine costs you, USD per hour (default 0)
region = "eu-west-1"      # optional: lets `location` requirements match this machine
```
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from nodus_cli.problems import NodusError


def home() -> Path:
    """Where run records and logs live: ``NODUS_HOME``, default ``~/.local/share/nodus``."""
    configured = os.environ.get("NODUS_HOME")
    if configured:
        return Path(configured)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "nodus"


def config_path() -> Path:
    configured = os.environ.get("NODUS_CONFIG")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "nodus" / "config.toml"


@dataclass(frozen=True, slots=True)
class LocalConfig:
    price_per_hour: float = 0.0
    region: str = "local"


def local() -> LocalConfig:
    path = config_path()
    if not path.is_file():
        return LocalConfig()
    try:
        doc = tomllib.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise NodusError(f"{path}: cannot read the configuration: {exc}") from None
    section = doc.get("local", {})
    if not isinstance(section, dict):
        raise NodusError(f"{path}: [local] must be a table")
    unknown = sorted(set(section) - {"price_per_hour", "region"})
    if unknown:
        raise NodusError(
            f"{path}: local.{unknown[0]}: unknown key (allowed: price_per_hour, region)"
        )
    price = section.get("price_per_hour", 0.0)
    if (
        isinstance(price, bool)
        or not isinstance(price, int | float)
        or not math.isfinite(price)
        or price < 0
    ):
        raise NodusError(
            f"{path}: local.price_per_hour must be a number >= 0 (USD per hour), not {price!r}"
        )
    region = section.get("region", "local")
    if not isinstance(region, str) or not region.strip():
        raise NodusError(f'{path}: local.region must be a region name in quotes, e.g. "us-east-1"')
    return LocalConfig(float(price), region.strip())
