"""Following a Kubernetes pod's log: how soon a printed line shows, and what a long log
costs the API server (issue 34).

``nodus run --target kubernetes`` (installed, :func:`_timing.nodus_command`; its own
NODUS_HOME, KUBECONFIG and NODUS_CONFIG) of a one-stage workload against the tests' API
server emulator (``tests/harness/kubernetes_emulator.py``, its own process, one H100
node). The benchmark plays the scheduler and the kubelet: it starts the Job's pod, appends
lines of 100 bytes to its log at ``--rate`` lines a second for ``--seconds`` (the log is
the pod's annotation, written whole at each tick of :data:`TICK` seconds, as the emulator
takes it), then ends the pod. Each round, measured:

* bytes of log the emulator served for the pod (its ``--served`` count) against the log's
  own size (goal: about 1x), split into what was served while the pod ran (the follow
  stream) and after its end (the stream's rest and nodus's one final read). The API
  server's ``timestamps`` prefix each line with 31 bytes, so a log read once costs
  (100 + 31) / 100 = 1.31x at these lines;
* the delay from a line's write to the emulator (the PATCH answered) to its line on the
  standard output of ``nodus run`` (``PYTHONUNBUFFERED``) and of ``nodus logs -f RUN_ID``
  (what a user who follows the run from another terminal sees: it reads the run's
  recorded log), median and worst over the round's lines (goal: within 1 s), and the
  worst of the lines after the first second: the first lines wait for nodus's next look
  at the pod (every 0.5 s) to open the stream;
* baseline in the same round: the old way, the whole log read again at every look of
  0.5 s (``GET .../log``, no ``follow``, no timestamps), done by the benchmark alongside
  against the same pod; its bytes are counted here and taken off the emulator's count.

The emulator keeps the log in the pod's annotation, so each of nodus's looks at the pod
(and each PATCH here) carries the whole log too: not counted as log served (a real API
server's pod has no log in it), but CPU on this machine that a real cluster would not
spend.

Printed: each round, then the medians of ``--rounds`` rounds, and the old way's bytes as a
ratio to nodus's. Every line must reach both outputs exactly once, in order, or the
benchmark stops. Figures in benchmarks/README.md.

Run: python benchmarks/kubernetes_logs.py [--seconds 20] [--rate 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from _timing import REPO, installed_env, nodus_command

SERVER = REPO / "tests" / "harness" / "kubernetes_emulator.py"
NAMESPACE = "ml"
NODE = "gpu-h100"
LOG_ANNOTATION = "emulator.nodus.test/log"
#: Seconds between two writes of the log to the emulator (each one PATCHes it whole).
TICK = 0.05
#: Seconds between two reads of the whole log, the old way (a look of the follow loop).
OLD_LOOK = 0.5
LINE_BYTES = 100
#: The longest log the emulator can take: it is PATCHed whole, in one request of at most
#: 1 MiB (aiohttp's ``client_max_size``), its JSON around it.
MAX_LOG = 1_000_000
WORKLOAD = """\
name = "logbench"
image = "nvcr.io/nvidia/pytorch:24.05-py3"
command = "python train.py"
gpu = "H100"
gpu_count = 1
"""
SEQ = re.compile(r"\| line (\d{6}) ")


class Emulator:
    """The emulator's process, a kubeconfig for it, and the benchmark's hands on it."""

    def __init__(self, folder: Path) -> None:
        self.served = folder / "served.json"
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--served", str(self.served)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT="):
            self.proc.kill()
            sys.exit(f"the emulator did not start: {line!r} (pip install -e '.[test]')")
        self.url = f"http://127.0.0.1:{line.strip().split('=', 1)[1]}"
        self.kubeconfig = folder / "kubeconfig"
        cluster = {"name": "e", "cluster": {"server": self.url}}
        context = {"cluster": "e", "user": "u", "namespace": NAMESPACE}
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [cluster],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "e", "context": context}],
                    "current-context": "e",
                }
            )
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def raw(self, method: str, path: str, doc: Any = None) -> bytes:
        data = json.dumps(doc).encode() if doc is not None else None
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Authorization": "Bearer t"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            body: bytes = answer.read()
        return body

    def call(self, method: str, path: str, doc: Any = None) -> Any:
        return json.loads(self.raw(method, path, doc))

    def add_node(self) -> None:
        gpus = {"cpu": "96", "memory": "1056Gi", "pods": "110", "nvidia.com/gpu": "8"}
        labels = {
            "kubernetes.io/hostname": NODE,
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.memory": "81559",
            "nvidia.com/gpu.count": "8",
        }
        taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        self.call(
            "POST",
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": NODE, "labels": labels},
                "spec": {"taints": [taint]},
                "status": {
                    "allocatable": gpus,
                    "capacity": gpus,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )

    def new_pod(self, seen: set[str], timeout: float = 60.0) -> str:
        """The pod of the Job nodus created in this round (waits for it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pod in self.call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]:
                name = str(pod["metadata"]["name"])
                if name not in seen:
                    seen.add(name)
                    return name
            time.sleep(0.1)
        sys.exit(f"nodus created no pod within {timeout:g} s")

    def patch_pod(self, pod: str, doc: dict[str, Any]) -> None:
        self.raw("PATCH", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}", doc)

    def run_pod(self, pod: str) -> None:
        running = {"running": {"startedAt": "2026-12-05T01:00:00Z"}}
        self.patch_pod(
            pod,
            {
                "metadata": {"annotations": {LOG_ANNOTATION: ""}},
                "spec": {"nodeName": NODE},
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [{"name": "task", "state": running}],
                },
            },
        )

    def write_log(self, pod: str, log: str) -> None:
        self.patch_pod(pod, {"metadata": {"annotations": {LOG_ANNOTATION: log}}})

    def end_pod(self, pod: str) -> None:
        ended = {"terminated": {"exitCode": 0, "reason": "Completed"}}
        self.patch_pod(
            pod,
            {
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [{"name": "task", "state": ended}],
                }
            },
        )

    def served_bytes(self, pod: str) -> int:
        """The bytes of ``pod``'s log served so far (the file is rewritten as it goes)."""
        for _ in range(50):
            try:
                served: dict[str, int] = json.loads(self.served.read_text())
            except (OSError, ValueError):
                time.sleep(0.02)
                continue
            return served.get(pod, 0)
        return 0


class Reader:
    """A process's standard output, each line with the moment it was read."""

    def __init__(self, proc: subprocess.Popen[str], name: str) -> None:
        self.proc = proc
        self.name = name
        self.lines: list[tuple[float, str]] = []
        self.done = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, ""):
            self.lines.append((time.monotonic(), line))
        self.done = True

    def wait_for(self, words: str, timeout: float = 60.0) -> None:
        """Until a line has ``words`` (the process printed it), or stop."""
        deadline = time.monotonic() + timeout
        while not any(words in line for _, line in self.lines):
            if time.monotonic() > deadline or (self.proc.poll() is not None and self.done):
                sys.exit(f"{self.name} did not say {words!r}; it printed:\n{self.text()}")
            time.sleep(0.05)

    def text(self) -> str:
        return "".join(line for _, line in self.lines)

    def delays(self, written: dict[int, float]) -> list[float]:
        """Each line's delay from its write; every line once, in order, or stop."""
        seen = [(at, int(m.group(1))) for at, line in self.lines if (m := SEQ.search(line))]
        if [seq for _, seq in seen] != list(range(len(written))):
            said = f"{len(seen)} lines of {len(written)}, not each once in order"
            sys.exit(f"{self.name}: {said}:\n{self.text()}")
        return [at - written[seq] for at, seq in seen]


class OldWay(threading.Thread):
    """The whole log read again at every look (no ``follow``, no timestamps)."""

    def __init__(self, emulator: Emulator, pod: str) -> None:
        super().__init__(daemon=True)
        self.emulator = emulator
        self.pod = pod
        self.bytes = 0
        self.done = threading.Event()

    def run(self) -> None:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{self.pod}/log"
        while not self.done.wait(OLD_LOOK):
            try:
                self.bytes += len(self.emulator.raw("GET", path))
            except OSError:  # the emulator is gone: the round stops and says why
                return

    def stop(self) -> None:
        self.done.set()
        self.join()
        # and once more at the end (the log is whole now), as the old way did
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{self.pod}/log"
        self.bytes += len(self.emulator.raw("GET", path))


def _line(seq: int) -> str:
    head = f"line {seq:06d} "
    return head + "x" * (LINE_BYTES - len(head) - 1) + "\n"


def _round(
    emulator: Emulator, env: dict[str, str], workload: Path, args: Any, seen: set[str]
) -> dict[str, float]:
    nodus = nodus_command()
    run = subprocess.Popen(
        [*nodus, "run", str(workload), "--target", "kubernetes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    follower: subprocess.Popen[str] | None = None
    try:
        run_out = Reader(run, "nodus run")
        pod = emulator.new_pod(seen)
        # nodus has looked at the pod and recorded that it waits: a line for logs -f
        run_out.wait_for("the scheduler has not placed it yet")
        listed = subprocess.run(
            [*nodus, "runs", "--json"], capture_output=True, text=True, env=env, check=True
        )
        run_id = str(json.loads(listed.stdout)["runs"][0]["id"])
        follower = subprocess.Popen(
            [*nodus, "logs", "-f", run_id],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        logs_out = Reader(follower, f"nodus logs -f {run_id}")
        logs_out.wait_for("the scheduler has not placed it yet")  # it follows the run now
        emulator.run_pod(pod)
        old = OldWay(emulator, pod)
        old.start()
        written: dict[int, float] = {}
        parts: list[str] = []
        total = int(args.seconds * args.rate)
        start = tick = time.monotonic()
        while len(parts) < total:
            tick += TICK
            time.sleep(max(0.0, tick - time.monotonic()))
            due = min(total, int((time.monotonic() - start) * args.rate))
            fresh = range(len(parts), due)
            if not fresh:
                continue
            parts.extend(_line(seq) for seq in fresh)
            emulator.write_log(pod, "".join(parts))
            now = time.monotonic()
            written.update((seq, now) for seq in fresh)
        old.stop()
        while_running = emulator.served_bytes(pod) - old.bytes
        emulator.end_pod(pod)
        code = run.wait(timeout=120)
        follower.wait(timeout=60)
        run_out.thread.join(timeout=10)
        logs_out.thread.join(timeout=10)
        if code != 0:
            sys.exit(f"nodus run failed (exit {code}):\n{run_out.text()}")
        size = len("".join(parts))
        served = emulator.served_bytes(pod) - old.bytes
        by_run = run_out.delays(written)
        by_logs = logs_out.delays(written)
        steady = int(args.rate)  # the lines after the first second (the stream is open)
    finally:
        for proc in (run, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    return {
        "size": size,
        "served": served,
        "running": while_running,
        "ended": served - while_running,
        "old": old.bytes,
        "old_ratio": old.bytes / served,
        "run_median": statistics.median(by_run),
        "run_worst": max(by_run),
        "run_later": max(by_run[steady:], default=0.0),
        "logs_median": statistics.median(by_logs),
        "logs_worst": max(by_logs),
        "logs_later": max(by_logs[steady:], default=0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=200.0, help="lines a second")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.seconds * args.rate < 1 or args.rounds < 1:
        sys.exit("--seconds and --rate make at least one line, and --rounds is at least 1")
    if args.seconds * args.rate * LINE_BYTES > MAX_LOG:
        sys.exit(
            f"a log of {args.seconds:g} s at {args.rate:g} lines/s is over {MAX_LOG:,} bytes: "
            "the emulator takes a request of at most 1 MiB (aiohttp's limit) and the log is "
            "written whole; lower --seconds or --rate"
        )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        emulator = Emulator(folder)
        try:
            emulator.add_node()
            workload = folder / "logbench.toml"
            workload.write_text(WORKLOAD)
            env = {**installed_env(folder), "KUBECONFIG": str(emulator.kubeconfig)}
            env["PYTHONUNBUFFERED"] = "1"  # each line of nodus run as it prints it
            seen: set[str] = set()
            rows = []
            for i in range(args.rounds):
                row = _round(emulator, env, workload, args, seen)
                rows.append(row)
                print(
                    f"round {i + 1}: log {row['size'] / 1e3:.0f} kB, served "
                    f"{row['served'] / row['size']:.2f}x ({row['running'] / row['size']:.2f}x "
                    f"while it ran), old way {row['old'] / row['size']:.1f}x; delay: nodus run "
                    f"{row['run_median'] * 1e3:.0f} ms median, {row['run_worst'] * 1e3:.0f} ms "
                    f"worst; nodus logs -f {row['logs_median'] * 1e3:.0f} / "
                    f"{row['logs_worst'] * 1e3:.0f} ms",
                    flush=True,
                )
        finally:
            emulator.stop()
    _report(rows, args)


def _report(rows: list[dict[str, float]], args: Any) -> None:
    def med(key: str) -> float:
        return statistics.median(row[key] for row in rows)

    def ratio(key: str) -> float:
        return statistics.median(row[key] / row["size"] for row in rows)

    def kb(value: float) -> str:
        return f"{value / 1e3:7.0f} kB"

    lines = int(args.seconds * args.rate)
    print(
        f"medians of {len(rows)} rounds ({lines} lines of {LINE_BYTES} bytes, {args.seconds:g} s):"
    )
    print(f"  the log                          {kb(med('size'))}")
    print(
        f"  served to nodus                  {kb(med('served'))}  {ratio('served'):5.2f}x the log"
    )
    print(f"    while the pod ran (the stream) {kb(med('running'))}  {ratio('running'):5.2f}x")
    print(f"    after its end (the final read) {kb(med('ended'))}  {ratio('ended'):5.2f}x")
    print(f"  the old way, whole every {OLD_LOOK:g} s    {kb(med('old'))}  {ratio('old'):5.2f}x")
    print(f"  the old way against nodus        {med('old_ratio'):7.1f}x the bytes")
    for name, key in (("nodus run", "run"), ("nodus logs -f", "logs")):
        median, worst = med(f"{key}_median"), med(f"{key}_worst")
        every = max(row[f"{key}_worst"] for row in rows)
        print(
            f"  delay to {name:<14} median {median * 1e3:4.0f} ms, worst {worst * 1e3:4.0f} ms "
            f"(of all rounds {every * 1e3:.0f} ms; after the first second "
            f"{med(f'{key}_later') * 1e3:.0f} ms)"
        )
    served_ok = ratio("served") < 1.5  # read once with its timestamps: 1.31x
    delay_ok = max(row["logs_worst"] for row in rows) < 1.0
    print(f"goal: the log served about once (under 1.5x with timestamps): {_said(served_ok)}")
    print(f"goal: every line in nodus logs -f within 1 s: {_said(delay_ok)}")


def _said(met: bool) -> str:
    return "met" if met else "MISSED"


if __name__ == "__main__":
    main()
