"""Local run overhead: `nodus run` against `docker run --rm`, one-stage echo, CPU only.

Per round, in alternating order (so drift in the engine affects both alike):

- nodus: the wall time of a fresh ``nodus run FILE`` of a one-stage echo workload, from
  start to exit: parsing and planning against this machine, the run record, the
  container (create, start, live output, wait, remove), the final record;
- baseline: the wall time of ``docker run --rm nodus-test/busybox:1 echo hi``.

Prints both medians and their ratio (goal: at most 1.4x). Needs the local engine and the
test image (``bash tests/harness/engine.sh up``). Not collected by pytest.

Run: python benchmarks/run_overhead.py [--rounds 7] [--max-ratio 1.4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _timing import alternate, installed_env, nodus_command, report_ratio, timed

IMAGE = "nodus-test/busybox:1"
GOAL = 1.4
WORKLOAD = f"""\
name = "run-overhead"
image = "{IMAGE}"
command = ["echo", "hi"]
"""


def time_nodus(file: Path, env: dict[str, str]) -> float:
    return timed([*nodus_command(), "run", str(file)], env, lambda out: "main | hi" in out)


def time_docker(env: dict[str, str]) -> float:
    cmd = ["docker", "run", "--rm", IMAGE, "echo", "hi"]
    return timed(cmd, env, lambda out: out.strip() == "hi")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="measured rounds (default 7)")
    parser.add_argument(
        "--max-ratio", type=float, default=None, help="exit 1 when the ratio is above this"
    )
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nodus-bench-") as tmp:
        file = Path(tmp) / "echo.toml"
        file.write_text(WORKLOAD, "utf-8")
        env = installed_env(Path(tmp))
        print(f"one-stage echo, CPU only; {opts.rounds} interleaved rounds")
        time_nodus(file, env)  # warm-up: byte-code, page cache
        time_docker(env)
        nodus_times, docker_times = alternate(
            opts.rounds, lambda: time_nodus(file, env), lambda: time_docker(env)
        )
    ratio = report_ratio("nodus run FILE", nodus_times, "docker run --rm", docker_times, GOAL)
    if opts.max_ratio is not None and ratio > opts.max_ratio:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
