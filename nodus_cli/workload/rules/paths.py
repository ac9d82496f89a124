"""Host paths written in the file: mount sources, ``[map] over`` and ``output_dir``.

Contract: a host path resolves against the report's ``base_dir`` (the workload file's
folder; the working directory for the Python API), ``~`` being the home folder. Whether it
exists is checked when a run starts, never here: CI validates workloads without their data.
The one exception is ``output_dir``, which must not name a file, because a run writes a
folder there.
"""

from __future__ import annotations

import os
from typing import Any

from nodus_cli.workload.lineindex import Key
from nodus_cli.workload.report import ProblemReport, clip
from nodus_cli.workload.rules.values import NUL_CHARACTER

__all__ = ["host_path", "output_dir"]


def host_path(report: ProblemReport, raw: str, key: Key) -> str | None:
    """A host path as written, absolute; None, reported at ``key``, when it holds a NUL
    character or ``~user`` names no user."""
    if "\x00" in raw:
        report.error(key, NUL_CHARACTER)
        return None
    text = raw
    if text.startswith("~"):
        text = os.path.expanduser(text)
        if text.startswith("~"):
            report.error(
                key, f'"{clip(raw)}" starts with an unknown user\'s ~: write the full path'
            )
            return None
    return os.path.normpath(os.path.join(report.base_dir, text))


def output_dir(report: ProblemReport, doc: dict[str, Any]) -> str | None:
    """``output_dir``: the folder that receives one folder per run."""
    if "output_dir" not in doc:
        return None
    raw, key = doc["output_dir"], ("output_dir",)
    if not isinstance(raw, str):
        report.error(key, 'must be a folder path in quotes, e.g. output_dir = "out"')
        return None
    if not raw.strip():
        report.error(key, 'is empty: write a folder, e.g. output_dir = "out", or omit it')
        return None
    path = host_path(report, raw, key)
    if path is None:
        return None
    if os.path.isfile(path):
        report.error(
            key,
            f'"{clip(raw)}" is a file ({path}): output_dir names a folder, which receives '
            "one folder per run; choose another path",
        )
        return None
    return path
