"""Start-up: `nodus --help` and `nodus validate FILE` against a bare interpreter start.

Measured honestly: nodus is installed the way users install it (``pip install .`` into a
fresh virtual environment, not editable: an editable install's import hook makes even
``python -c pass`` about twice as slow, which would flatter every ratio), and the baseline
is that environment's own ``python -c pass``. ``python -I -S -c pass`` (no site at all)
is shown too, as the floor. Byte-code is compiled at install, as pip does.

Goal: validating one file within 8x a bare interpreter start (every command line goes
through the one parser, the Typer application, whose import is most of the cost).
Run: python benchmarks/startup.py [--rounds 21] [--reuse DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import REPO, interleaved_medians

GOAL = 8.0


def install(folder: Path) -> Path:
    """A fresh virtual environment with nodus installed from this checkout (not editable)."""
    venv = folder / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(REPO)],
            check=True,
        )
    return venv


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument(
        "--reuse", type=Path, default=None, help="keep the installed environment in this folder"
    )
    args = parser.parse_args()
    example = str(REPO / "examples" / "l4-inference.toml")
    with tempfile.TemporaryDirectory(prefix="nodus-startup-") as tmp:
        folder = args.reuse or Path(tmp)
        venv = install(folder)
        python, nodus = str(venv / "bin" / "python"), str(venv / "bin" / "nodus")
        env = {
            "NODUS_HOME": str(folder / "home"),
            "NODUS_CONFIG": str(folder / "config.toml"),
            "NO_COLOR": "1",
        }
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: byte-code is used
        medians = interleaved_medians(
            {
                "python -I -S -c pass": [python, "-I", "-S", "-c", "pass"],
                "python -c pass": [python, "-c", "pass"],
                "nodus --help": [nodus, "--help"],
                "nodus validate FILE": [nodus, "validate", example],
            },
            args.rounds,
            env,
        )
    base = medians["python -c pass"]
    print(
        f"startup benchmark, nodus installed with pip ({args.rounds} interleaved rounds, medians)"
    )
    for name, seconds in medians.items():
        print(f"  {name:<22} {seconds * 1000:7.1f} ms   {seconds / base:5.2f}x python -c pass")
    ratio = medians["nodus validate FILE"] / base
    verdict = "meets" if ratio <= GOAL else "misses"
    print(
        f"validate one file: {ratio:.2f}x a bare interpreter start "
        f"({verdict} the goal of {GOAL:g}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
