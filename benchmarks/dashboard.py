"""The dashboard with real history: the runs page over 100,000 recorded runs, and how
soon a log line reaches a page that follows the log.

The runs are recorded through the records store (one run made by ``RunStore.create_run``,
then copied in SQL with new ids, start times, statuses, targets and workload names: the
rows a real history has, made in seconds), so the database has schema 3's indexes as
``nodus`` makes them. Each request goes through the whole application (the token gate,
the route, the API, the page) in-process (Starlette's TestClient), first page, a deep
page, and each filter; medians of ``--rounds``. Goal: every one well under a second
(under 0.25 s).

Live logs: a served dashboard (uvicorn on 127.0.0.1) streams a running run's log by
server-sent events; a line is written to the run's log with the time it was written and
the client notes when it arrives. Goal: within a second (the stream looks every
``LOG_POLL`` seconds). Run: python benchmarks/dashboard.py [--runs 100000] [--rounds 11]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from _timing import REPO

sys.path.insert(0, str(REPO / "tests"))

import httpx
import uvicorn
from records_support import make_workload
from starlette.testclient import TestClient

from nodus_cli.dashboard import create_app
from nodus_cli.dashboard.server import bind
from nodus_cli.records import RunStatus, RunStore

TOKEN = "bench"
GOAL_PAGE = 0.25
GOAL_LOG = 1.0


def record_runs(home: Path, n: int) -> str:
    """``n`` ended runs (and one running run, whose id is returned), newest last."""
    store = RunStore.open(home)
    first = store.create_run(make_workload(), "local", 1.0, None)
    store.finish_run(first.id, RunStatus.SUCCEEDED, 0, 0.1)
    store.close()
    db = sqlite3.connect(home / "runs.sqlite3")
    columns = [row[1] for row in db.execute("PRAGMA table_info(runs)")]
    made = {
        "id": "printf('%s-%07d', substr(r.id, 1, 15), s.n)",
        "started_at": "strftime('%Y-%m-%dT%H:%M:%S+00:00', 'now', printf('-%d seconds', "
        f"{n} - s.n))",
        "status": "CASE WHEN s.n % 10 = 0 THEN 'failed' ELSE 'succeeded' END",
        "target": "CASE WHEN s.n % 3 = 0 THEN 'swarm' ELSE 'local' END",
        "workload": "printf('workload-%d', s.n % 50)",
    }
    chosen = ", ".join(made.get(c, f"r.{c}") for c in columns)
    series = f"WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {n})"
    with db:
        db.execute(
            f"{series} INSERT INTO runs ({', '.join(columns)}) SELECT {chosen} "
            "FROM runs r, s WHERE r.id = ?",
            (first.id,),
        )
        stage_cols = [row[1] for row in db.execute("PRAGMA table_info(stages)")]
        picked = ", ".join("r.id" if c == "run_id" else f"st.{c}" for c in stage_cols)
        db.execute(
            f"INSERT INTO stages ({', '.join(stage_cols)}) SELECT {picked} FROM runs r "
            "JOIN stages st ON st.run_id = ? WHERE r.id != ?",
            (first.id, first.id),
        )
    db.close()
    store = RunStore.open(home)
    live = store.create_run(make_workload(), "local", 1.0, None)
    store.set_running(live.id)
    store.close()
    return live.id


def median_get(client: TestClient, path: str, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        answer = client.get(path)
        times.append(time.perf_counter() - start)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    return statistics.median(times)


def log_latency(home: Path, run_id: str, lines: int) -> list[float]:
    sock = bind("127.0.0.1", 0)
    app = create_app(TOKEN, home)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/runs/{run_id}/events"
    store = RunStore.open(home)
    writer = store.log_writer(run_id)
    seen: list[float] = []
    try:
        with httpx.stream(
            "GET", url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        ) as stream:

            def write() -> None:
                for i in range(lines):
                    time.sleep(0.37)  # not in step with the stream's own poll
                    writer.write("main", None, "stdout", json.dumps(time.time()))
                    del i

            threading.Thread(target=write, daemon=True).start()
            for raw in stream.iter_lines():
                if raw.startswith("data: "):
                    line = json.loads(raw[6:])
                    seen.append(time.time() - float(line["text"]))
                    if len(seen) == lines:
                        break
    finally:
        server.should_exit = True
        thread.join(10)
        store.close()
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        start = time.perf_counter()
        live = record_runs(home, args.runs)
        print(f"recorded {args.runs:,} runs in {time.perf_counter() - start:.1f} s")
        with TestClient(create_app(TOKEN, home)) as client:
            client.headers["Authorization"] = f"Bearer {TOKEN}"
            for path in (
                "/runs",
                "/runs?page=100",
                "/runs?status=failed",
                "/runs?target=swarm",
                "/runs?workload=workload-7",
                "/runs?status=failed&target=local&workload=workload-10",
                "/api/runs",
            ):
                took = median_get(client, path, args.rounds)
                ok &= took < GOAL_PAGE
                print(f"{path:55} {took * 1000:7.1f} ms (goal < {GOAL_PAGE * 1000:.0f} ms)")
        seen = log_latency(home, live, 15)
        worst = max(seen)
        ok &= worst < GOAL_LOG
        print(
            f"live log: a line reaches the stream in {statistics.median(seen) * 1000:.0f} ms "
            f"(median), {worst * 1000:.0f} ms (worst of {len(seen)}; goal < {GOAL_LOG:.0f} s)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
