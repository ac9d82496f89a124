"""Finding workload files and validating many of them (``nodus validate``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from nodus_cli.errors import NodusError
from nodus_cli.workload import Result, load_file

#: TOML files that are tool configuration, never workloads, skipped when walking folders.
NOT_WORKLOADS = frozenset(
    {
        "pyproject.toml",
        "Cargo.toml",
        "ruff.toml",
        "taplo.toml",
        "rustfmt.toml",
        "Pipfile",
        "poetry.lock",
        "config.toml",
        "netlify.toml",
        "fly.toml",
        "wrangler.toml",
        "rust-toolchain.toml",
        "clippy.toml",
        "deny.toml",
        "uv.toml",
        "pixi.toml",
        "hatch.toml",
        "mise.toml",
        "cliff.toml",
        "book.toml",
        "typos.toml",
        "_typos.toml",
        "Cross.toml",
        "Makefile.toml",
        "samconfig.toml",
        "stylua.toml",
        "pyrefly.toml",
        "lychee.toml",
    }
)
_SKIP_DIRS = frozenset({"node_modules", "__pycache__", "venv", "site-packages"})


def discover(paths: Iterable[str]) -> list[Path]:
    """Files named on the command line, and ``*.toml`` found under named folders.

    A named file is always validated; inside folders, hidden files and directories and
    tool configuration files (``pyproject.toml`` ...) are skipped. A file named twice is
    validated once.
    """
    found: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            below = sorted(_walk(path))
            if not below:
                raise NodusError(
                    f"{raw}: no workload files (*.toml) in this folder",
                    exit_code=2,
                    hint="name the workload files, or a folder that holds them",
                )
            candidates = below
        elif path.exists():
            candidates = [path]
        else:
            raise NodusError(f"{raw}: no such file or folder", exit_code=2)
        for candidate in candidates:
            if candidate not in seen:
                seen.add(candidate)
                found.append(candidate)
    return found


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS]
        for name in filenames:
            if name.endswith(".toml") and not name.startswith(".") and name not in NOT_WORKLOADS:
                yield Path(dirpath) / name


def shown(path: Path) -> str:
    """A path as text that can always be printed (file names need not be UTF-8)."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text


def validate_paths(paths: Iterable[str]) -> list[Result]:
    return [load_file(p, shown(p)) for p in discover(paths)]
