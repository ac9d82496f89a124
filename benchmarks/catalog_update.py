"""``nodus catalog update`` of a 100,000-row SkyPilot vms.csv served from localhost.

Generates a SkyPilot v7 ``vms.csv`` (AWS layout: one row per availability zone, GPU rows
with their GpuInfo, CPU-only rows, a few rows without an on-demand price), in the order of
SkyPilot's own files (sorted by InstanceType, then region and zone; ``--order region``
lists each region's machines in turn instead, which no SkyPilot file does but another
source may), serves it from
an HTTP server on 127.0.0.1 (in a thread), and times, interleaved and as medians:

- the update end to end, in-process: fetch over HTTP, recognise the layout, convert
  (zones collapse into one row per type and region), validate every row with the rules of
  ``--catalog``, write the catalog atomically under a fresh NODUS_HOME (no 304: every round
  downloads the whole file);
- the baseline: reading the same CSV file with the ``csv`` module alone (every row, no
  conversion).

Then the command line (``nodus catalog update URL``, a fresh interpreter each time) for
what a user waits.

Goals: the update under 2 s, and at least 0.5x the csv module's throughput (rows per
second over the input file).

Run: python benchmarks/catalog_update.py [--rows 100000] [--rounds 7] [--order machine|region]
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from _timing import alternate, installed_env, nodus_command, timed

from nodus_cli.catalog import update as catalog_update
from nodus_cli.catalog.sources import Source

GOAL_SECONDS = 2.0
GOAL_THROUGHPUT = 0.5
HEADER = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,"
    "Region,AvailabilityZone"
)
GPUS = [  # (name, MiB per GPU, counts, price per GPU)
    ("L4", 22888, (1, 4, 8), 0.8),
    ("A10G", 22888, (1, 4, 8), 1.0),
    ("L40S", 45776, (1, 4, 8), 1.9),
    ("A100", 40960, (8,), 4.1),
    ("H100", 81559, (8,), 12.3),
    ("T4", 15360, (1, 4), 0.5),
]
CPU_FAMILIES = ["c6i", "c7i", "m6i", "m7i", "r6i", "r7i", "c7g", "m7g", "r7g", "c6a", "m6a"]
SIZES = [("large", 2), ("xlarge", 4), ("2xlarge", 8), ("4xlarge", 16), ("8xlarge", 32)]
SIZES += [("12xlarge", 48), ("16xlarge", 64), ("24xlarge", 96)]


def generate(rows: int, seed: int = 7, order: str = "machine") -> str:
    """A vms.csv of exactly ``rows`` rows: machine types x regions x 4 zones, each
    machine's rows together (``order="region"``: each region's rows together)."""
    rng = random.Random(seed)
    types: list[tuple[str, str, str, int, int, str, float]] = []
    for name, mib, counts, per_gpu in GPUS:
        for n in counts:
            cpus = 4 * n * 2
            info = (
                f"\"{{'Gpus': [{{'Name': '{name}', 'Manufacturer': 'NVIDIA', 'Count': {n}, "
                f"'MemoryInfo': {{'SizeInMiB': {mib}}}}}], 'TotalGpuMemoryInMiB': {mib * n}}}\""
            )
            types.append(
                (f"g{name.lower()}.{n}x", name, f"{n}.0", cpus, cpus * 4, info, per_gpu * n)
            )
    for fam in CPU_FAMILIES:
        for size, cpus in SIZES:
            mem = cpus * (8 if fam.startswith("r") else 4 if fam.startswith("m") else 2)
            types.append((f"{fam}.{size}", "", "", cpus, mem, "", cpus * 0.045))
    zones = "abcd"
    lines = [HEADER]
    # As SkyPilot's own files are: sorted by InstanceType, then region, then zone.
    regions = -(-rows // (len(types) * len(zones)))  # enough for ``rows`` rows
    pairs = [(t, r) for t in types for r in range(regions)]
    if order == "region":
        pairs.sort(key=lambda pair: pair[1])  # stable: the machines in turn
    for (machine, gpu, count, cpus, mem, info, base), region in pairs:
        name = f"bench-region-{region:03d}"
        price = round(base * (0.9 + 0.3 * rng.random()), 5)
        for z in zones:
            spot = "" if rng.random() < 0.05 else f"{price * rng.uniform(0.2, 0.6):.6f}"
            shown = "" if rng.random() < 0.002 else repr(price)
            lines.append(
                f"{machine},{gpu},{count},{cpus}.0,{mem}.0,{info},{shown},{spot},{name},{name}{z}"
            )
    del lines[rows + 1 :]
    return "\n".join(lines) + "\n"


def serve(body: bytes) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/csv")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", '"bench"')
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/catalogs/v7/aws/vms.csv"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--order",
        choices=("machine", "region"),
        default="machine",
        help="each machine's rows together, as in SkyPilot's files (default), or each region's",
    )
    args = parser.parse_args()

    text = generate(args.rows, order=args.order)
    body = text.encode()
    httpd, url = serve(body)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        csv_path = tmp / "vms.csv"
        csv_path.write_bytes(body)
        homes = iter(range(10_000))
        produced: list[int] = []

        def update() -> float:
            os.environ["NODUS_HOME"] = str(tmp / f"home-{next(homes)}")
            start = time.perf_counter()
            result = catalog_update.update([Source("aws", url)], retries=0)
            elapsed = time.perf_counter() - start
            produced.append(result.rows)
            return elapsed

        def csv_alone() -> float:
            start = time.perf_counter()
            with csv_path.open(newline="", encoding="utf-8") as handle:
                for _row in csv.reader(handle):
                    pass
            return time.perf_counter() - start

        update(), csv_alone()  # warm the caches and imports
        up, base = alternate(args.rounds, update, csv_alone)
        up_median, base_median = statistics.median(up), statistics.median(base)
        print(
            f"input: {args.rows:,} rows, {len(body) / 1e6:.1f} MB (SkyPilot v7 layout, 4 zones a "
            f"region, by {args.order}) -> {produced[-1]:,} catalog rows"
        )
        print(f"  catalog update (fetch+parse+validate+write)  median {up_median * 1e3:7.0f} ms")
        print(f"    runs (ms): {' '.join(f'{v * 1e3:.0f}' for v in up)}")
        print(f"  csv module alone (read every row)             median {base_median * 1e3:7.0f} ms")
        print(f"    runs (ms): {' '.join(f'{v * 1e3:.0f}' for v in base)}")
        rate, base_rate = args.rows / up_median, args.rows / base_median
        ratio = rate / base_rate
        print(f"throughput: {rate:,.0f} rows/s against {base_rate:,.0f} rows/s: {ratio:.2f}x")
        seconds_ok = up_median < GOAL_SECONDS
        ratio_ok = ratio >= GOAL_THROUGHPUT
        print(
            f"goals: under {GOAL_SECONDS:g} s ({'meets' if seconds_ok else 'misses'}), at least "
            f"{GOAL_THROUGHPUT:g}x the csv module ({'meets' if ratio_ok else 'misses'})"
        )

        env = installed_env(tmp)
        command = [*nodus_command(), "catalog", "update", "--retries", "0", url]
        cold = []
        for i in range(4):  # the first run warms the file cache
            env["NODUS_HOME"] = str(tmp / f"cli-home-{i}")
            cold.append(timed(command, env, lambda out: "updated:" in out))
        print(
            f"command line `nodus catalog update URL` (fresh interpreter): median "
            f"{statistics.median(cold[1:]) * 1e3:.0f} ms of 3 runs after the first "
            f"({cold[0] * 1e3:.0f} ms, cold)"
        )
    httpd.shutdown()
    return 0 if seconds_ok and ratio_ok else 1


if __name__ == "__main__":
    sys.exit(main())
