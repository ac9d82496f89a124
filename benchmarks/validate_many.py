"""Validating 10,000 generated workload files in one process (goal: >= 3,000 files/s).

The baseline, measured in the same run, is parsing the same files with tomllib alone:
the ratio says what nodus's rules cost on top of reading TOML.
Run: python benchmarks/validate_many.py [--files 10000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from nodus_cli.workload.validation import validate_paths

GOAL_FILES_PER_SECOND = 3000
GPUS = ["H100", "A100", "L4", "RTX 4090", "a10g", "nvidia h200", "RTX A6000", "T4"]


def generate(folder: Path, count: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    for i in range(count):
        gpu = rng.choice(GPUS)
        stages = ""
        if i % 3 == 0:
            stages = (
                '\n[[stages]]\nname = "prepare"\ncommand = "python prep.py"\n'
                "[stages.requirements]\ncpu = 2\n"
                f'\n[[stages]]\nname = "train"\ngpu = "{gpu}"\ngpu_count = 2\n'
            )
        broken = 'gpu_type = "A100"\n' if i % 10 == 0 else ""
        (folder / f"w{i:05d}.toml").write_text(
            f'name = "job-{i}"\nimage = "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime"\n'
            f'command = ["python", "train.py", "--seed", "{i}"]\n'
            f'env = {{ SEED = "{i}" }}\n{broken}'
            + ("" if stages else f'gpu = "{gpu}"\ngpu_count = {rng.choice([1, 2, 4, 8])}\n')
            + f"\n[requirements]\ncpu = {rng.randint(1, 32)}\nmemory_gb = 64\n"
            f'location = "{rng.choice(["us", "eu", "asia"])}"\n' + stages,
            "utf-8",
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        generate(folder, args.files)
        files = sorted(folder.glob("*.toml"))
        nodus_times, toml_times = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            for f in files:
                tomllib.loads(f.read_text("utf-8"))
            toml_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            results = validate_paths([str(folder)])
            nodus_times.append(time.perf_counter() - start)
        invalid = sum(1 for r in results if not r.valid)
    nodus_s, toml_s = statistics.median(nodus_times), statistics.median(toml_times)
    rate = args.files / nodus_s
    print(f"validate_many: {args.files} files ({invalid} invalid), median of {args.repeats}")
    print(f"  nodus validate (in-process): {nodus_s:.2f} s = {rate:,.0f} files/s")
    print(f"  tomllib parse only:          {toml_s:.2f} s = {args.files / toml_s:,.0f} files/s")
    print(f"  ratio nodus / tomllib: {nodus_s / toml_s:.2f}x")
    verdict = "meets" if rate >= GOAL_FILES_PER_SECOND else "misses"
    print(f"{rate:,.0f} files/s {verdict} the goal of {GOAL_FILES_PER_SECOND:,} files/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
