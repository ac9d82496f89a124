"""What a stage's container runs: ``command``, ``entrypoint`` and ``env``.

Contract: :func:`command` and :func:`entrypoint` return the process arguments exactly as
written (a command string becomes ``/bin/sh -c STRING``), or None when absent or wrong;
:func:`shell_and_entrypoint` reports the one combination Docker would silently change.
:func:`env` returns the variables whose names and values are valid, the ``${NAME}``
templates in them checked (never resolved: that happens when a run starts, see
:mod:`nodus_cli.workload.environment`), and warns about a secret written into the file.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from typing import Any

from nodus_cli.workload import environment
from nodus_cli.workload.lineindex import Key
from nodus_cli.workload.model import RESERVED_ENV
from nodus_cli.workload.report import ProblemReport, toml
from nodus_cli.workload.rules.values import NUL_CHARACTER

__all__ = ["command", "entrypoint", "env", "shell_and_entrypoint"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SHELL = "/bin/sh"


def command(
    report: ProblemReport, table: dict[str, Any], key: Key
) -> tuple[list[str] | None, bool]:
    """The command and whether it is a string (run by ``/bin/sh -c``)."""
    if "command" not in table:
        return None, False
    raw = table["command"]
    empty = "must not be empty; omit it to run the image's own command"
    if isinstance(raw, str):
        if not raw.strip():
            report.error(key, empty)
            return None, False
        if "\x00" in raw:
            report.error(key, NUL_CHARACTER)
            return None, False
        return [_SHELL, "-c", raw], True
    if isinstance(raw, list):
        if not raw:
            report.error(key, empty)
            return None, False
        return _strings(report, raw, key), False
    report.error(
        key,
        'must be a list of strings, e.g. ["python", "train.py"], or one string run by /bin/sh -c',
    )
    return None, False


def entrypoint(report: ProblemReport, table: dict[str, Any], key: Key) -> list[str] | None:
    """``entrypoint``: a list of strings (``[]`` clears the image's ENTRYPOINT)."""
    if "entrypoint" not in table:
        return None
    raw = table["entrypoint"]
    if isinstance(raw, str):
        words = raw.split()[:8] if len(raw) <= 1000 else []
        report.error(
            key,
            f"must be a list of strings, not one string: write entrypoint = {_listed(words)} "
            "(the image's ENTRYPOINT is replaced by exactly these arguments; [] clears it)",
        )
        return None
    if not isinstance(raw, list):
        report.error(
            key,
            'must be a list of strings, e.g. entrypoint = ["python"], or [] to clear the '
            "image's ENTRYPOINT",
        )
        return None
    return _strings(report, raw, key)


def _strings(report: ProblemReport, raw: list[Any], key: Key) -> list[str] | None:
    ok = True
    for index, arg in enumerate(raw):
        if isinstance(arg, str) and "\x00" not in arg:
            continue
        ok = False
        if report.full:  # only counted: skip building the message
            report.skip()
        elif not isinstance(arg, str):
            report.error((*key, index), f"every argument must be a string: write {toml(arg, True)}")
        else:
            report.error((*key, index), NUL_CHARACTER)
    return list(raw) if ok else None


def shell_and_entrypoint(
    report: ProblemReport, text: str, command_key: Key, entrypoint: list[str], entrypoint_key: Key
) -> None:
    """A command string with an entrypoint: the string's shell replaces the entrypoint.

    Reported at the command when the entrypoint is inherited, else at the entrypoint.
    """
    try:
        words = shlex.split(text) if len(text) <= 1000 else []
    except ValueError:
        words = text.split()
    fix = f", e.g. command = {_listed(words)}" if words and len(words) <= 12 else ""
    report_at, other, other_key = command_key, "entrypoint", entrypoint_key
    if len(entrypoint_key) > len(command_key):  # the stage's own entrypoint
        report_at, other, other_key = entrypoint_key, "the command string", command_key
    line = report.line(other_key)
    at = f" ({other}: line {line})" if line else ""
    if not entrypoint:
        report.error(
            report_at,
            "a command string already runs via /bin/sh -c, without the image's ENTRYPOINT: "
            f"write command as a list{fix}, or remove entrypoint = []{at}",
        )
        return
    report.error(
        report_at,
        "a command string runs via /bin/sh -c, which replaces the entrypoint: write command "
        f"as a list to pass it to the entrypoint{fix}{at}",
    )


def _listed(words: list[str]) -> str:
    """Words as a TOML list of strings: ``["python", "train.py"]``."""
    return "[" + ", ".join(json.dumps(w, ensure_ascii=False) for w in words) + "]"


def env(report: ProblemReport, raw: Any, key: Key) -> dict[str, str]:
    """The ``env`` table at ``key`` (None: not written)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        report.error(key, 'must be a table, e.g. env = { HF_HOME = "/cache" }')
        return {}
    variables: dict[str, str] = {}
    for name, value in raw.items():
        path = (*key, name)
        if not _ENV_NAME.match(name):
            report.error(
                path,
                "is not a valid environment variable name: use letters, digits and _, "
                "not starting with a digit",
            )
            continue
        if name in RESERVED_ENV:
            report.error(path, f"{name} is set by nodus in every container; choose another name")
            continue
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            report.error(path, f"must be a string: write {name} = {toml(value, quoted=True)}")
            continue
        if isinstance(value, float) and not math.isfinite(value):
            report.error(path, f'must be a string: write {name} = "{value}"')
            continue
        if isinstance(value, str) and "\x00" in value:
            report.error(path, NUL_CHARACTER)
            continue
        text = value if isinstance(value, str) else str(value)
        if not _env_value(report, name, text, path):
            continue
        variables[name] = text
    return variables


def _env_value(report: ProblemReport, name: str, text: str, path: Key) -> bool:
    """Check a value's templates; warn about secrets written into the file."""
    literal = True
    if "$" in text:
        try:
            parts = environment.parse(text)
        except environment.TemplateError as exc:
            report.error(path, str(exc))
            return False
        literal = not any(isinstance(p, environment.Template) for p in parts)
        bare = environment.bare_references(text)
        if bare:
            first = bare[0]
            report.warn(
                path,
                f"${first} is passed as written: neither nodus nor Docker expands it; write "
                f"${{{first}}} to take {first} from the environment when the run starts, "
                f"or $${first} to keep the $ and silence this",
            )
    if literal and text and environment.looks_secret(name):
        report.warn(
            path,
            f"{name} looks like a secret written into the file: write "
            f'{name} = "${{{name}}}" to take it from the environment when the run starts '
            "(a literal is stored in the file and in run records)",
        )
    return True
