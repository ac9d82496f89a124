"""Validating worst-case workload files: time per file for each shape, up to 1 MiB.

Workload files are limited to 1 MiB, but within that limit a file may take any shape: one
dotted key of 40,000 parts, a table header as deep, thousands of tables or stages, a huge
array, a very long string. Each shape is generated at a few sizes up to 1 MiB and validated
in this process (reading, the depth pre-scan, TOML parsing, every rule, and the line of
every problem); the script prints the time per file, the growth ratio per doubling of the
size (goal: about 2, linear growth) and whether the 1 MiB file validates in under 2 s.

A case that runs longer than --limit seconds is stopped and shown as such.
Run: python benchmarks/validate_pathological.py [--limit 30] [--repeats 3]
"""

from __future__ import annotations

import argparse
import itertools
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nodus_cli.workload.keydepth import MAX_KEY_PARTS
from nodus_cli.workload.tomlsource import MAX_FILE_BYTES
from nodus_cli.workload.validation import validate_paths

GOAL_SECONDS = 2.0
SIZES = (MAX_FILE_BYTES // 8, MAX_FILE_BYTES // 4, MAX_FILE_BYTES // 2, MAX_FILE_BYTES)
HEAD = 'image = "img:1"\n'


def _fill(head: str, unit: str, size: int, tail: str = "") -> str:
    """``head`` + ``unit`` repeated + ``tail``, at most ``size`` bytes."""
    room = size - len(head.encode()) - len(tail.encode())
    return head + unit * max(room // len(unit.encode()), 0) + tail


def deep_dotted_key(size: int) -> str:
    parts = (size - 8) // 2
    return "a" + ".a" * (parts - 1) + " = 1\n"


def deep_header(size: int) -> str:
    parts = (size - 8) // 2
    return "[a" + ".a" * (parts - 1) + "]\n"


def deep_array_header(size: int) -> str:
    parts = (size - 8) // 2
    return "[[a" + ".a" * (parts - 1) + "]]\n"


def deep_inline_key(size: int) -> str:
    parts = (size - 16) // 2
    return "x = { a" + ".a" * (parts - 1) + " = 1 }\n"


def many_max_depth_keys(size: int) -> str:
    """Dotted keys of as many parts as nodus accepts, one per line."""
    lines, used, i = [HEAD], len(HEAD), 0
    while True:
        line = f"k{i}" + ".a" * (MAX_KEY_PARTS - 1) + " = 1\n"
        if used + len(line) > size:
            return "".join(lines)
        lines.append(line)
        used += len(line)
        i += 1


def max_depth_headers_and_keys(size: int) -> str:
    """Headers and keys under them, together as deep as nodus accepts."""
    half = MAX_KEY_PARTS // 2
    lines, used, i = [HEAD], len(HEAD), 0
    while True:
        line = f"[h{i}" + ".a" * (half - 1) + "]\n" + "k" + ".b" * (half - 1) + " = 1\n"
        if used + len(line) > size:
            return "".join(lines)
        lines.append(line)
        used += len(line)
        i += 1


def many_inline_tables(size: int) -> str:
    return _fill(HEAD + "x = [{a = 1}", ", {a = 1}", size - 2, "]\n")


def deep_nested_inline_tables(size: int) -> str:
    depth = (size - 8) // 8
    return "x = " + "{a = " * depth + "1" + "}" * depth + "\n"


def many_tables(size: int) -> str:
    lines, used, i = [HEAD], len(HEAD), 0
    while True:
        line = f"[t{i}]\nx = 1\n"
        if used + len(line) > size:
            return "".join(lines)
        lines.append(line)
        used += len(line)
        i += 1


def many_unknown_keys(size: int) -> str:
    lines, used, i = [HEAD], len(HEAD), 0
    while True:
        line = f"gpu_typ{i} = 1\n"
        if used + len(line) > size:
            return "".join(lines)
        lines.append(line)
        used += len(line)
        i += 1


def many_stages(size: int) -> str:
    lines, used, i = [HEAD], len(HEAD), 0
    while True:
        stage = f'[[stages]]\nname = "s{i}"\n[stages.requirements]\ncpu = 1\n'
        if used + len(stage) > size:
            return "".join(lines)
        lines.append(stage)
        used += len(stage)
        i += 1


def many_bad_stages(size: int) -> str:
    """Every stage has two problems, each reported with its line."""
    lines, used, i = [HEAD], len(HEAD), 0
    while True:
        stage = f'[[stages]]\nname = "s{i}"\nnum_gpus = 3\ngpu_count = 3\n'
        if used + len(stage) > size:
            return "".join(lines)
        lines.append(stage)
        used += len(stage)
        i += 1


def huge_array(size: int) -> str:
    return _fill(HEAD + 'command = ["a"', ', "a"', size - 2, "]\n")


def huge_bad_array(size: int) -> str:
    """Every argument is a number: one problem, with its line, per element."""
    return _fill(HEAD + "command = [\n1", ",\n1", size - 3, "\n]\n")


def huge_map(size: int) -> str:
    return _fill(HEAD + '[map]\nitems = ["a"', ', "a"', size - 2, "]\n")


def many_mounts(size: int) -> str:
    return _fill(HEAD + 'mounts = ["v:/d"', ', "v:/d"', size - 2, "]\n")


def long_string(size: int) -> str:
    return _fill(HEAD + 'command = "', "a", size - 2, '"\n')


def long_multiline_string(size: int) -> str:
    return _fill(HEAD + 'command = """', 'a\\"""', size - 4, '"""\n')


def long_comment(size: int) -> str:
    return _fill(HEAD + "#", "x", size - 1, "\n")


def deep_nested_arrays(size: int) -> str:
    depth = (size - 8) // 2
    return "x = " + "[" * depth + "]" * depth + "\n"


def many_env_secrets(size: int) -> str:
    """Literal values under secret-looking names: one warning, with its line, per entry."""
    lines, used, i = [HEAD + "[env]\n"], len(HEAD) + 6, 0
    while True:
        line = f'TOKEN_{i} = "x"\n'
        if used + len(line) > size:
            return "".join(lines)
        lines.append(line)
        used += len(line)
        i += 1


SHAPES: dict[str, Callable[[int], str]] = {
    "deep dotted key": deep_dotted_key,
    "deep [a.a...] header": deep_header,
    "deep [[a.a...]] header": deep_array_header,
    "deep key in an inline table": deep_inline_key,
    f"{MAX_KEY_PARTS}-part keys, one per line": many_max_depth_keys,
    "headers and keys at the depth limit": max_depth_headers_and_keys,
    "many inline tables": many_inline_tables,
    "deeply nested inline tables": deep_nested_inline_tables,
    "many tables": many_tables,
    "many unknown keys": many_unknown_keys,
    "many stages": many_stages,
    "many stages with errors": many_bad_stages,
    "huge array": huge_array,
    "huge array, every element wrong": huge_bad_array,
    "huge [map] items": huge_map,
    "many mounts (duplicates)": many_mounts,
    "long string": long_string,
    "long multi-line string": long_multiline_string,
    "long comment": long_comment,
    "deeply nested arrays": deep_nested_arrays,
    "many env secrets": many_env_secrets,
}


class _TooSlow(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _TooSlow


def time_file(path: Path, repeats: int, limit: float) -> float | None:
    """Median seconds to validate the file, or None when one run passed ``limit``."""
    samples = []
    for _ in range(repeats):
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            start = time.perf_counter()
            validate_paths([str(path)])
            samples.append(time.perf_counter() - start)
        except _TooSlow:
            return None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=float, default=30.0, help="seconds before a case stops")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shape", action="append", help="only these shapes (repeatable)")
    args = parser.parse_args()
    shapes = {k: v for k, v in SHAPES.items() if not args.shape or k in args.shape}
    width = max(len(name) for name in shapes)
    sizes = " ".join(f"{s // 1024:>7} KiB" for s in SIZES)
    print(f"validate_pathological: median of {args.repeats} per file, sizes {sizes.strip()}")
    print(f"{'shape':<{width}}  {' '.join(f'{s // 1024:>7}K' for s in SIZES)}  growth/2x  1 MiB")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in shapes.items():
            times: list[float | None] = []
            for size in SIZES:
                text = make(size)
                assert len(text.encode()) <= MAX_FILE_BYTES, (name, size)
                path = Path(tmp) / "w.toml"
                path.write_text(text, "utf-8")
                found = time_file(path, args.repeats, args.limit)
                times.append(found)
                if found is None:
                    break  # larger sizes take longer still
            cells = [f"{t:7.3f}s" if t is not None else f">{args.limit:5.0f}s " for t in times]
            cells += ["      - "] * (len(SIZES) - len(cells))
            pairs = [b / a for a, b in itertools.pairwise(times) if a and b and a > 1e-4]
            growth = f"{statistics.median(pairs):5.2f}x" if pairs else "    - "
            last = times[-1] if len(times) == len(SIZES) else None
            ok = last is not None and last < GOAL_SECONDS
            failed += not ok
            verdict = "under 2 s" if ok else "OVER 2 s"
            print(f"{name:<{width}}  {' '.join(cells)}  {growth:>9}  {verdict}")
    print(
        f"{len(shapes) - failed} of {len(shapes)} shapes validate a 1 MiB file in under "
        f"{GOAL_SECONDS:g} s (goal: all, with linear growth: about 2x per doubling)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
