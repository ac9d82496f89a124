"""``nodus validate``: check workload files the way CI needs it."""

from __future__ import annotations

from nodus_cli.output import console, emit_json
from nodus_cli.problems import Problem
from nodus_cli.validation import validate_paths
from nodus_cli.workload import Result


def run(paths: list[str], as_json: bool, fmt: str) -> int:
    results = validate_paths(paths)
    all_valid = all(r.valid for r in results)
    if as_json:
        emit_json({"valid": all_valid, "files": [r.as_json() for r in results]})
    elif fmt == "github":
        _github(results)
    else:
        _human(results)
    return 0 if all_valid else 1


def _human(results: list[Result]) -> None:
    from rich.markup import escape

    out = console()
    errors = warnings = 0
    for result in results:
        for problem in result.problems:
            colour = "red" if problem.severity == "error" else "yellow"
            text = escape(problem.render(result.path))
            sev = problem.severity
            out.print(text.replace(f": {sev}: ", f": [bold {colour}]{sev}[/]: ", 1))
        errors += len(result.errors)
        warnings += len(result.warnings)
        if result.valid:
            out.print(f"[green]✓[/] {escape(result.path)}")
    invalid = sum(1 for r in results if not r.valid)
    files = f"{len(results)} file{'s' if len(results) != 1 else ''}"
    summary = f"{files}: {len(results) - invalid} valid, {invalid} invalid"
    if errors or warnings:
        summary += f" ({_count(errors, 'error')}, {_count(warnings, 'warning')})"
    out.print(f"[bold {'red' if invalid else 'green'}]{summary}[/]")


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _github(results: list[Result]) -> None:
    """GitHub Actions workflow commands, so problems show up on the pull request's lines."""
    lines = []
    for result in results:
        for problem in result.problems:
            lines.append(_annotation(result.path, problem))
    invalid = sum(1 for r in results if not r.valid)
    lines.append(f"{len(results)} files: {len(results) - invalid} valid, {invalid} invalid")
    print("\n".join(lines))


def _annotation(path: str, problem: Problem) -> str:
    props = f"file={_prop(path)}"
    if problem.line is not None:
        props += f",line={problem.line}"
    props += f",title={_prop('nodus: ' + problem.loc if problem.loc else 'nodus')}"
    message = f"{problem.loc}: {problem.message}" if problem.loc else problem.message
    return f"::{problem.severity} {props}::{_data(message)}"


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")
