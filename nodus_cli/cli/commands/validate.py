"""``nodus validate``: check workload files the way CI needs it.

Output is written directly (no rich): validating thousands of files, or running as a
pre-commit hook, should cost little more than parsing them.

``--strict`` makes warnings count as errors (exit 1) for CI; the files stay valid in the
report (their workloads are normalized), the verdict and the exit code change, and the
summary says why.
"""

from __future__ import annotations

import json
import os
import sys

from nodus_cli.cli.output import use_colour
from nodus_cli.errors import Problem
from nodus_cli.workload import Result
from nodus_cli.workload.validation import validate_paths

_RESET = "\x1b[0m"
_STYLES = {
    "error": "\x1b[1;31m",
    "warning": "\x1b[1;33m",
    "ok": "\x1b[32m",
    "bad": "\x1b[1;31m",
    "good": "\x1b[1;32m",
}


def run(paths: list[str], fmt: str, strict: bool = False) -> int:
    """Validate, print in ``fmt`` (text, github or json); 0 when all pass, else 1."""
    results = validate_paths(paths)
    ok = passed(results, strict)
    if fmt == "json":
        document = {"version": 1, "valid": ok, "files": [r.as_json() for r in results]}
        _write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    elif fmt == "github":
        _write(github(results, strict))
    else:
        _write(human(results, colour=use_colour(), strict=strict))
    return 0 if ok else 1


def passed(results: list[Result], strict: bool = False) -> bool:
    """Every file is valid (and, with ``strict``, has no warning)."""
    return all(r.valid and not (strict and r.warnings) for r in results)


def human(results: list[Result], colour: bool = False, strict: bool = False) -> str:
    """``file:line: error: key: message`` lines, a mark per valid file, and a summary."""

    def paint(text: str, style: str) -> str:
        return f"{_STYLES[style]}{text}{_RESET}" if colour else text

    lines: list[str] = []
    errors = warnings = 0
    for result in results:
        for problem in result.problems:
            text = problem.render(result.path)
            sev = problem.severity
            lines.append(text.replace(f": {sev}: ", f": {paint(sev, sev)}: ", 1))
        errors += _problems(result.errors)
        warnings += _problems(result.warnings)
        if result.valid:
            mark = paint("✗", "bad") if strict and result.warnings else paint("✓", "ok")
            lines.append(f"{mark} {result.path}")
    style = "good" if passed(results, strict) else "bad"
    lines.append(paint(summary(results, errors, warnings, strict), style))
    return "\n".join(lines) + "\n"


def summary(
    results: list[Result],
    errors: int | None = None,
    warnings: int | None = None,
    strict: bool = False,
) -> str:
    if errors is None:
        errors = sum(_problems(r.errors) for r in results)
    if warnings is None:
        warnings = sum(_problems(r.warnings) for r in results)
    invalid = sum(1 for r in results if not r.valid)
    text = f"{_count(len(results), 'file')}: {len(results) - invalid} valid, {invalid} invalid"
    if errors or warnings:
        text += f" ({_count(errors, 'error')}, {_count(warnings, 'warning')})"
    if strict and warnings:
        text += "; --strict: warnings count as errors"
    return text


def _problems(found: list[Problem]) -> int:
    """How many problems ``found`` stands for (a "4,000 more not shown" counts 4,000)."""
    return sum(p.count for p in found)


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' if n != 1 else ''}"


def github(results: list[Result], strict: bool = False) -> str:
    """GitHub Actions workflow commands, so problems show up on the pull request's lines."""
    lines = [annotation(r.path, p) for r in results for p in r.problems]
    lines.append(summary(results, strict=strict))
    return "\n".join(lines) + "\n"


def annotation(path: str, problem: Problem) -> str:
    """``::error file=F,line=N,title=T::message``, escaped as the Actions toolkit does."""
    props = f"file={_prop(path)}"
    if problem.line is not None:
        props += f",line={problem.line}"
    title = f"nodus: {problem.loc}" if problem.loc else "nodus"
    props += f",title={_prop(title)}"
    message = f"{problem.loc}: {problem.message}" if problem.loc else problem.message
    return f"::{problem.severity} {props}::{_data(message)}"


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _write(text: str) -> None:
    """Write to stdout whatever its encoding, and stop quietly when the reader has gone."""
    try:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:
            encoding = sys.stdout.encoding or "ascii"
            sys.stdout.flush()
            sys.stdout.buffer.write(text.encode(encoding, "replace"))
        sys.stdout.flush()
    except BrokenPipeError:
        # `nodus validate ... | head`: the rest is not wanted; avoid a second error at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
