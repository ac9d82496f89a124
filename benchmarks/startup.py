"""Start-up: `nodus --help` and `nodus validate FILE` against a bare `python -c pass`.

Goal: validating one file within 8x a bare interpreter start.
Run: python benchmarks/startup.py [--rounds 21]
"""

from __future__ import annotations

import argparse
import sys

from _timing import REPO, interleaved_medians, nodus_command

GOAL = 8.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    example = str(REPO / "examples" / "l4-inference.toml")
    nodus = nodus_command()
    medians = interleaved_medians(
        {
            "python -c pass": [sys.executable, "-c", "pass"],
            "nodus --help": [*nodus, "--help"],
            "nodus validate FILE": [*nodus, "validate", example],
        },
        args.rounds,
    )
    base = medians["python -c pass"]
    print(f"startup benchmark ({args.rounds} interleaved rounds, medians)")
    for name, seconds in medians.items():
        print(f"  {name:<22} {seconds * 1000:7.1f} ms   {seconds / base:5.2f}x bare python")
    ratio = medians["nodus validate FILE"] / base
    verdict = "meets" if ratio <= GOAL else "misses"
    print(f"validate one file: {ratio:.2f}x a bare interpreter ({verdict} the goal of {GOAL:g}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
