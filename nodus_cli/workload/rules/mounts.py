"""What a container reaches on the host: ``mounts``, in Docker's ``SOURCE:TARGET[:ro]``.

Contract: :func:`mounts` returns each valid entry of one level (the workload or a stage)
with its key path; :func:`distinct` joins a stage's entries to those it inherits and
reports a container path mounted twice. A source with a ``/`` (or ``.``, ``..``, ``~``) is a
host folder, resolved by :mod:`~nodus_cli.workload.rules.paths`; any other is a named
volume. A container path may not cover ``/`` or nodus's own work directory.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from nodus_cli.workload.lineindex import Key
from nodus_cli.workload.model import Mount
from nodus_cli.workload.report import ProblemReport, clip, toml
from nodus_cli.workload.rules.paths import host_path
from nodus_cli.workload.rules.values import NUL_CHARACTER

__all__ = ["WORK_DIR", "distinct", "mounts"]

#: The work directory nodus mounts in every container (``$NODUS_WORK_DIR``); it must stay
#: equal to ``nodus_cli.targets.docker.containers.WORK_DIR_IN_CONTAINER`` (a test checks).
WORK_DIR = "/nodus/work"

_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_MOUNTS_LIST = 'must be a list of "SOURCE:TARGET[:ro]" strings, e.g. mounts = ["./data:/data:ro"]'
_MOUNT_STRING = 'must be one string "SOURCE:TARGET[:ro]", e.g. "./data:/data:ro"'


def mounts(report: ProblemReport, table: dict[str, Any], prefix: Key) -> list[tuple[Mount, Key]]:
    """The ``mounts`` of one level (workload or stage), each with its key path."""
    if "mounts" not in table:
        return []
    raw, key = table["mounts"], (*prefix, "mounts")
    if isinstance(raw, str):
        report.error(key, f"must be a list: write mounts = [{toml(raw)}]")
        return []
    if isinstance(raw, dict):
        report.error(key, _long_mount(raw) or _MOUNTS_LIST)
        return []
    if not isinstance(raw, list):
        report.error(key, _MOUNTS_LIST)
        return []
    found: list[tuple[Mount, Key]] = []
    for index, item in enumerate(raw):
        entry = (*key, index)
        mount = _mount(report, item, entry)
        if mount is not None:
            found.append((mount, entry))
    return found


def _mount(report: ProblemReport, item: Any, key: Key) -> Mount | None:
    if isinstance(item, dict):
        report.error(key, _long_mount(item) or _MOUNT_STRING)
        return None
    if not isinstance(item, str):
        report.error(key, _MOUNT_STRING)
        return None
    if not item.strip():
        report.error(key, 'is empty: write "SOURCE:TARGET[:ro]", e.g. "./data:/data", or remove it')
        return None
    if "\x00" in item:
        report.error(key, NUL_CHARACTER)
        return None
    shown = clip(item)
    parts = item.split(":")
    if len(parts) == 1:
        if item.startswith("/"):
            report.error(
                key,
                f'"{shown}" names no source: an anonymous volume is not supported; name it, '
                f'e.g. "cache:{shown}", or mount a host folder, e.g. "./data:{shown}"',
            )
        else:
            report.error(
                key,
                f'"{shown}" names no container path: write SOURCE:TARGET[:ro], e.g. '
                f'"{shown}:/data"',
            )
        return None
    if len(parts) > 3:
        report.error(
            key,
            f'"{shown}" has {len(parts) - 1} colons: write SOURCE:TARGET[:ro] (neither path '
            'may contain ":")',
        )
        return None
    source, target = parts[0], parts[1]
    read_only = _mount_mode(report, parts[2], key) if len(parts) == 3 else False
    if read_only is None:
        return None
    source_path = _mount_source(report, source, target, key)
    target_path = _mount_target(report, target, source, key)
    if source_path is None or target_path is None:
        return None
    return Mount(source_path, target_path, read_only, item, report.origin(key))


def _mount_mode(report: ProblemReport, mode: str, key: Key) -> bool | None:
    if mode in ("ro", "rw"):
        return mode == "ro"
    if mode.lower() in ("ro", "rw"):
        report.error(key, f"write :{mode.lower()} (lowercase)")
        return None
    if not mode:
        report.error(key, 'ends with ":": write :ro for a read-only mount, or nothing')
        return None
    options = [o.strip() for o in mode.split(",")]
    why = ""
    if any(o in ("z", "Z") for o in options):
        why = " (SELinux relabelling, z or Z, is not done by nodus: label the folder on the host)"
    elif any(o in ("cached", "delegated", "consistent") for o in options):
        why = " (cached, delegated and consistent only tuned Docker Desktop on macOS: omit it)"
    ro = "ro" in options
    fix = "write :ro" if ro else "write :ro for a read-only mount, or nothing"
    report.error(
        key,
        f'the mode "{clip(mode)}" is not supported{why}: nodus accepts :ro (read-only) or '
        f":rw (the default); {fix}",
    )
    return None


def _mount_source(report: ProblemReport, source: str, target: str, key: Key) -> str | None:
    if not source:
        report.error(
            key,
            f'names no source before ":": write a host path, e.g. "./data:{clip(target)}", '
            f'or a volume name, e.g. "cache:{clip(target)}"',
        )
        return None
    if "/" in source or source in (".", "..") or source.startswith("~"):
        return host_path(report, source, key)
    if _VOLUME_NAME.fullmatch(source) is None:
        report.error(
            key,
            f'"{clip(source)}" is not a volume name: a name has letters, digits, "_", "." '
            'or "-", starting with a letter or digit; a host folder needs a "/": write '
            f'"./{clip(source)}:{clip(target)}" for one next to the workload file',
        )
        return None
    return source


def _mount_target(report: ProblemReport, target: str, source: str, key: Key) -> str | None:
    if not target:
        report.error(
            key,
            f'names no container path after ":": write an absolute path, e.g. '
            f'"{clip(source)}:/data"',
        )
        return None
    if not target.startswith("/"):
        report.error(
            key,
            f'the container path "{clip(target)}" is not absolute: write "/{clip(target)}"',
        )
        return None
    path = posixpath.normpath(target)
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    if path == "/":
        report.error(
            key,
            "cannot mount over the container's root folder /: choose a folder, e.g. /data",
        )
        return None
    if path == WORK_DIR or path.startswith(WORK_DIR + "/"):
        inside = "is" if path == WORK_DIR else "is inside"
        report.error(
            key,
            f"{clip(target)} {inside} nodus's own work directory ({WORK_DIR}, "
            "$NODUS_WORK_DIR), which the stages of a run share: mount elsewhere, e.g. /data",
        )
        return None
    return path


def distinct(
    report: ProblemReport, inherited: list[tuple[Mount, Key]], own: list[tuple[Mount, Key]]
) -> tuple[Mount, ...]:
    """The effective list; a container path mounted twice is an error."""
    return report.unique(inherited, own, _target, _same_target)


def _target(mount: Mount) -> str:
    return mount.target


def _same_target(mount: Mount, other: str) -> str:
    return (
        f"{mount.target} is already the target of {other}: a container path takes one mount; "
        "remove one or choose another path"
    )


def _long_mount(table: dict[str, Any]) -> str | None:
    """Docker's long syntax (a table): the one string to write instead."""
    source = next((table[k] for k in ("source", "src", "host_path") if k in table), None)
    target = next(
        (table[k] for k in ("target", "destination", "dst", "container_path") if k in table), None
    )
    read_only = any(table.get(k) is True for k in ("read_only", "readonly", "ro"))
    if not isinstance(source, str) or not isinstance(target, str):
        return 'write it as one string "SOURCE:TARGET[:ro]", e.g. "./data:/data:ro"'
    written = f"{source}:{target}" + (":ro" if read_only else "")
    return f'write it as one string SOURCE:TARGET[:ro]: "{clip(written)}"'
