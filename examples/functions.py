"""A pipeline of Python functions: parse on CPUs, transform on a GPU, summarize on CPUs.

Each step is a plain Python function that nodus runs in a container with the hardware
it asks for; results pass from step to step as values. Nothing needs to be installed in
the image but Python of this interpreter's version (nodus brings the rest).

    python examples/functions.py                       # python:3.11-slim, an L4
    python examples/functions.py --image my/python:3.11 --gpu H100

The parse step is a map (one call per shard, on warm workers); each transform starts as
soon as its shard is parsed; the summary waits for every transform. ``nodus runs`` lists
the three kinds of run, named after their functions.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from nodus_cli import CallFailed, Client, function

SHARDS = ["3,1,4,1,5", "9,2,6", "5,3,5,8,9,7"]


def parse(text: str) -> list[float]:
    """CPU: one shard of comma-separated numbers."""
    return [float(part) for part in text.split(",")]


def transform(values: list[float]) -> dict[str, Any]:
    """GPU: here a stand-in for the real work (a model, a kernel), on the device it got."""
    device = os.environ.get("NVIDIA_VISIBLE_DEVICES", "none")
    print(f"transforming {len(values)} values on {device}")
    return {"device": device, "values": [v * v for v in values]}


def summarize(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """CPU: every transformed shard together."""
    values = [v for part in parts for v in part["values"]]
    return {
        "count": len(values),
        "total": sum(values),
        "devices": sorted({part["device"] for part in parts}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    parser.add_argument("--image", default=f"python:{version}-slim")
    parser.add_argument("--gpu", default="L4")
    opts = parser.parse_args(argv)
    with Client() as client:
        cpu = {"image": opts.image, "client": client, "cpu": 1, "memory_gb": 0.5}
        parse_on_cpu = function(parse, **cpu)
        transform_on_gpu = function(transform, image=opts.image, client=client, gpu=opts.gpu)
        summarize_on_cpu = function(summarize, **cpu)

        parsed = parse_on_cpu.map(SHARDS)  # one call per shard
        transformed = [transform_on_gpu(shard) for shard in parsed]  # a Call as the argument
        summary = summarize_on_cpu(transformed)  # a list of Calls: waits for all of them
        try:
            result = summary.result()
        except CallFailed as error:
            print(f"error: {error.message}", file=sys.stderr)
            return 1
        print(f"{result['count']} values, total {result['total']:g}, on {result['devices']}")
        print(f"runs: parse {parsed.id}, summarize {summary.id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
