"""The dashboard over Starlette's TestClient: the token gate, the cross-site check on
the stop action, the pages and their ``/api/`` twins (shaped as the command line's
``--json``), unknown runs, oversized and malformed plan uploads, a target that fails."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from records_support import make_workload, priced_stage
from starlette.testclient import TestClient

from nodus_cli.api import MAX_GPU_SAMPLES, Client, GpuSample
from nodus_cli.dashboard import create_app
from nodus_cli.dashboard.app import MAX_UPLOAD
from nodus_cli.errors import NodusError
from nodus_cli.records import RunStatus, RunStore
from nodus_cli.targets.base import NodeInfo

TOKEN = "t0ken-for-tests"
ORIGIN = "http://testserver"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NODUS_HOME", str(tmp_path))
    store = RunStore.open(tmp_path)
    for i in range(3):
        record = store.create_run(make_workload(), "local", 2.0, None)
        status = RunStatus.SUCCEEDED if i != 1 else RunStatus.FAILED
        store.finish_run(record.id, status, 0 if i != 1 else 1, 0.5 * i)
    store.close()
    return tmp_path


@pytest.fixture
def web(home: Path) -> Iterator[TestClient]:
    with TestClient(create_app(TOKEN, home), follow_redirects=False) as client:
        yield client


def signed_in(web: TestClient) -> TestClient:
    first = web.get(f"/runs?token={TOKEN}")
    assert first.status_code == 303
    return web


def test_a_request_without_the_token_is_refused_with_words(web: TestClient) -> None:
    for path in ("/", "/runs", "/api/runs", "/static/dashboard.js"):
        answer = web.get(path)
        assert answer.status_code == 401
        assert "needs its access token" in answer.text
        assert "Authorization: Bearer" in answer.text
    assert web.get("/runs?token=wrong").status_code == 401
    assert web.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_the_token_once_in_the_address_leaves_a_strict_http_only_cookie(web: TestClient) -> None:
    first = web.get(f"/runs?status=failed&token={TOKEN}")
    assert first.status_code == 303
    assert first.headers["location"] == "/runs?status=failed"  # the token leaves the address
    cookie = first.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    again = web.get("/runs?status=failed")
    assert again.status_code == 200
    assert "Runs" in again.text


def test_a_bearer_token_serves_the_api(web: TestClient, home: Path) -> None:
    answer = web.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200
    assert len(answer.json()["runs"]) == 3


def test_api_runs_are_shaped_as_nodus_runs_json(web: TestClient, home: Path) -> None:
    signed_in(web)
    doc = web.get("/api/runs").json()
    with Client(home=home) as client:
        cli = [r.as_json() for r in client.runs(20)]
    assert doc["runs"] == cli
    one = web.get(f"/api/runs/{cli[0]['id']}").json()
    with Client(home=home) as client:
        expected = {"version": 1, **client.get(cli[0]["id"]).result(tasks=True).as_json(True)}
    assert one == expected


def test_the_runs_filters_and_pages(web: TestClient, home: Path) -> None:
    signed_in(web)
    failed = web.get("/api/runs?status=failed").json()["runs"]
    assert [r["status"] for r in failed] == ["failed"]
    assert web.get("/api/runs?workload=rec").json()["runs"]
    assert web.get("/api/runs?workload=other").json()["runs"] == []
    assert web.get("/api/runs?target=swarm").json()["runs"] == []
    page = web.get("/runs?status=failed")
    assert "status-failed" in page.text and "status-succeeded" not in page.text
    bad = web.get("/runs?status=exploded")
    assert bad.status_code == 400
    assert "no run status &#x27;exploded&#x27;" in bad.text


def test_an_unknown_run_is_a_404_page(web: TestClient) -> None:
    signed_in(web)
    page = web.get("/runs/19990101-000000-abcdef")
    assert page.status_code == 404
    assert "no run &#x27;19990101-000000-abcdef&#x27;" in page.text
    assert web.get("/api/runs/nope").status_code == 404
    assert web.get("/no/such/page").status_code == 404


def test_the_run_page_shows_stages_and_follows_the_log(web: TestClient, home: Path) -> None:
    signed_in(web)
    run_id = web.get("/api/runs").json()["runs"][0]["id"]
    page = web.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert "prep" in page.text and "train" in page.text
    assert f'data-stream="/runs/{run_id}/events"' in page.text
    events = web.get(f"/runs/{run_id}/events")  # an ended run: its log, then the end
    assert events.headers["content-type"].startswith("text/event-stream")
    assert "event: end" in events.text


def test_the_run_page_charts_gpu_use_over_time_and_the_api_gives_it(
    web: TestClient, home: Path
) -> None:
    store = RunStore.open(home)
    record = store.create_run(make_workload(), "local", 2.0, None)
    store.finish_run(record.id, RunStatus.SUCCEEDED, 0, 0.1)
    a, b = "GPU-aaaaaaaa-0000-0000-0000-000011112222", "GPU-bbbbbbbb-0000-0000-0000-000033334444"
    store.add_gpu_samples(
        record.id,
        [GpuSample(100.0 + t, u, 10.0 * t, 500.0 * t) for t in range(5) for u in (a, b)]
        + [GpuSample(106.0, a, None, 4000.0)],  # a reading the driver gave no utilization for
    )
    store.close()
    signed_in(web)
    with Client(home=home) as client:
        kept = client.get(record.id).gpu_samples()
    assert len(kept) == 11 and kept[0] == GpuSample(100.0, a, 0.0, 0.0)
    doc = web.get(f"/api/runs/{record.id}/gpu").json()
    assert doc["version"] == 1 and doc["id"] == record.id
    assert doc["max_points_per_gpu"] == MAX_GPU_SAMPLES
    assert [g["uuid"] for g in doc["gpus"]] == [a, b]
    assert doc["gpus"][0]["samples"][1] == {
        "time": 101.0,
        "utilization": 10.0,
        "memory_used_mib": 500.0,
    }
    assert doc["gpus"][0]["samples"][-1]["utilization"] is None
    assert len(doc["gpus"][1]["samples"]) == 5
    page = web.get(f"/runs/{record.id}").text
    assert "GPU use over time" in page
    charts = re.findall(r'<svg class="chart timeline".*?</svg>', page)
    assert len(charts) == 2  # utilisation and memory, one line per GPU in each
    assert [c.count("<polyline") for c in charts] == [2, 2]
    assert "11112222" in charts[0] and "33334444" in charts[0]
    assert "max 40%" in charts[0] and "max 4000 MiB" in charts[1]
    assert "over 6 s" in charts[1]
    other = web.get("/api/runs").json()["runs"][-1]["id"]  # a run nothing was sampled for
    assert web.get(f"/api/runs/{other}/gpu").json()["gpus"] == []
    assert "no GPU use was sampled for this run" in web.get(f"/runs/{other}").text
    assert "charted once it ends" not in page  # said only of a run still going


def test_a_running_runs_page_says_its_readings_come_as_its_tasks_end(
    web: TestClient, home: Path
) -> None:
    store = RunStore.open(home)
    record = store.create_run(make_workload(), "local", 2.0, None)
    store.claim(record.id, os.getpid())  # supervised by a process that lives: this one
    store.set_running(record.id)
    store.close()
    signed_in(web)
    page = web.get(f"/runs/{record.id}").text
    assert "stop this run" in page
    assert "charted once it ends" in page and "no GPU use was sampled" in page
    assert web.get("/api/runs/nope/gpu").status_code == 404


def test_stop_needs_the_dashboards_own_origin(web: TestClient) -> None:
    signed_in(web)
    run_id = web.get("/api/runs").json()["runs"][0]["id"]
    foreign = web.post(f"/runs/{run_id}/stop", headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert "did not come from the dashboard's own pages" in foreign.text
    bare = web.post(f"/runs/{run_id}/stop")  # the cookie, but no Origin nor Referer
    assert bare.status_code == 403
    referer = web.post(f"/runs/{run_id}/stop", headers={"Referer": "http://evil.example/x"})
    assert referer.status_code == 403


def test_stop_of_an_ended_run_says_so(web: TestClient) -> None:
    signed_in(web)
    run_id = web.get("/api/runs").json()["runs"][0]["id"]
    page = web.post(f"/runs/{run_id}/stop", headers={"Origin": ORIGIN})
    assert page.status_code == 409
    assert "not running" in page.text or "already" in page.text
    api = web.post(
        f"/api/runs/{run_id}/stop", headers={"Authorization": f"Bearer {TOKEN}"}
    )  # a program: the bearer token, no Origin
    assert api.status_code == 409
    assert api.json()["result"] == "not_running"


def test_the_plan_page_plans_a_text_and_writes_nothing(web: TestClient, home: Path) -> None:
    signed_in(web)
    before = sorted(p.name for p in home.rglob("*"))
    text = 'name = "p"\nimage = "nodus-test/busybox:1"\ncommand = "true"\ngpu = "H100"\n'
    doc = web.post("/api/plan?target=catalog", content=text, headers={"Origin": ORIGIN}).json()
    assert doc["workload"] == "p" and doc["target"] == "catalog"
    (home / "p.toml").write_text(text)
    cli = subprocess.run(
        [sys.executable, "-m", "nodus_cli", "plan", "--json", str(home / "p.toml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    (home / "p.toml").unlink()
    assert set(doc) == set(json.loads(cli.stdout)), cli.stderr  # nodus plan --json's shape
    assert doc["stages"][0]["candidates"]
    page = web.post(
        "/plan",
        data={"text": text, "name": "p.toml", "target": "catalog"},
        headers={"Origin": ORIGIN},
    )
    assert page.status_code == 200 and "feasible" in page.text
    assert sorted(p.name for p in home.rglob("*")) == before


def test_a_bad_workload_on_the_plan_page_lists_its_problems(web: TestClient) -> None:
    signed_in(web)
    page = web.post(
        "/plan",
        data={"text": 'name = "p"\ngpu_type = "H100"\n', "target": "catalog"},
        headers={"Origin": ORIGIN},
    )
    assert page.status_code == 422
    assert "gpu_type" in page.text


def test_an_oversized_plan_upload_is_refused_with_words(web: TestClient) -> None:
    signed_in(web)
    big = "#" * (MAX_UPLOAD + 10)
    page = web.post("/plan", content=big, headers={"Origin": ORIGIN})
    assert page.status_code == 413
    assert "over 1024 KiB" in page.text
    api = web.post("/api/plan", content=b"\xff\xfe", headers={"Origin": ORIGIN})
    assert api.status_code == 400
    assert "not UTF-8" in api.json()["error"]


def test_a_target_that_fails_says_so_and_the_rest_works(
    web: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def nodes(self: Client) -> list[NodeInfo]:
        if self.target != "local":
            raise NodusError(f"the {self.target} target cannot be reached", hint="start it")
        details = {
            "queued": 1,
            "holders": [
                {
                    "gpu": "GPU-aaaa",
                    "run": "20261204-000000-abc123",
                    "container": "c1",
                    "shared_gb": None,
                    "since": "2026-12-04T00:00:00+00:00",
                }
            ],
            "waiting": [
                {
                    "run": "20261204-000001-def456",
                    "task": "main",
                    "priority": 5,
                    "since": "2026-12-04T00:00:01+00:00",
                    "need": "1 L4",
                    "reason": "queued, 1st in line (held by run 20261204-000000-abc123)",
                }
            ],
        }
        return [NodeInfo("box", "box", "ready", 8, 32, "L4", 24, 2, 1, 0.0, details)]

    monkeypatch.setattr(Client, "list_nodes", nodes)
    signed_in(web)
    page = web.get("/")
    assert page.status_code == 200
    assert "the swarm target cannot be reached" in page.text
    assert "20261204-000000-abc123" in page.text  # who holds the GPU
    assert "1st in line" in page.text
    doc = web.get("/api/gpus").json()
    assert doc["queue"][0]["priority"] == 5
    local = next(t for t in doc["targets"] if t["target"] == "local")
    assert local["error"] is None and local["nodes"][0]["free_gpus"] == 1


def test_damaged_records_are_said_on_the_page(web: TestClient, home: Path) -> None:
    signed_in(web)
    (home / "runs.sqlite3").write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        (home / f"runs.sqlite3{suffix}").unlink(missing_ok=True)
    page = web.get("/runs")
    assert page.status_code == 503
    assert "runs.sqlite3" in page.text


def test_spend_over_time(web: TestClient) -> None:
    signed_in(web)
    doc = web.get("/api/spend").json()
    assert len(doc["days"]) == 30
    assert doc["days"][-1]["cost"] == pytest.approx(1.5)
    assert "<svg" in web.get("/spend").text


def test_a_cost_on_a_node_whose_price_is_not_set_is_unknown_on_the_pages_and_in_the_api(
    web: TestClient, home: Path
) -> None:
    store = RunStore.open(home)
    try:
        record = store.create_run(make_workload(), "kubernetes", 0.0, None)
        store.finish_run(record.id, RunStatus.SUCCEEDED, 0, 1.2)
        priced_stage(store, record.id, known=True, idx=0)
        priced_stage(store, record.id, known=False, idx=1)
    finally:
        store.close()
    signed_in(web)
    listed = web.get("/api/runs").json()["runs"]
    assert [r["cost_known"] for r in listed] == [False, True, True, True]
    assert [s["cost_known"] for s in listed[0]["stages"]] == [True, False]
    assert web.get(f"/api/runs/{record.id}").json()["cost_known"] is False
    runs_page = web.get("/runs").text
    assert runs_page.count("+ unknown") == 1 and "<td>$1.20 + unknown</td>" in runs_page
    run_page = web.get(f"/runs/{record.id}").text
    assert "<td>$1.20 + unknown</td>" in run_page  # the run's cost
    assert "<td>unknown</td>" in run_page  # the stage on the node without a price
    spend = web.get("/api/spend").json()
    assert (spend["month"]["unknown_runs"], spend["day"]["unknown_runs"]) == (1, 1)
    page = web.get("/spend").text
    assert (
        "1 run this month (1 today) ran on nodes whose price is not set: their cost is not "
        "counted, nor held to a limit or budget (set [kubernetes] price_per_hour or "
        "[kubernetes] prices in"
    ) in page
    assert "$2.70 + unknown" in page  # today's spend: 0.5 + 1.0 + 1.2, and what is unknown


def test_spend_says_nothing_unknown_when_every_price_is_set(web: TestClient) -> None:
    signed_in(web)
    assert "unknown" not in web.get("/spend").text
    assert "unknown" not in web.get("/runs").text


def test_nodus_dashboard_names_a_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "nodus_cli", "dashboard", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr
    assert "--port" in done.stderr
    assert "Traceback" not in done.stderr


def test_what_a_run_says_is_escaped_and_the_pages_fetch_nothing_elsewhere(
    web: TestClient, home: Path
) -> None:
    store = RunStore.open(home)
    text = 'name = "x"\nimage = "nodus-test/busybox:1"\ncommand = "true"\n'
    record = store.create_run(make_workload(text), "local", 0.0, None)
    store.finish_run(record.id, RunStatus.FAILED, 1, 0.0, message="<script>alert(1)</script>")
    store.close()
    signed_in(web)
    page = web.get(f"/runs/{record.id}").text
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    for path in ("/runs", f"/runs/{record.id}", "/spend", "/plan"):
        # every link, script, style sheet and form of the page is the dashboard's own
        outside = re.findall(
            r'(?:src|href|action|data-stream)="(?!/[^/])[^"]*"', web.get(path).text
        )
        assert outside == [], (path, outside)
    assert "EventSource" in web.get("/static/dashboard.js").text


def test_the_address_is_printed_and_a_wider_host_is_said(tmp_path: Path) -> None:
    env = {**os.environ, "NODUS_HOME": str(tmp_path)}
    server = subprocess.Popen(
        [sys.executable, "-m", "nodus_cli", "dashboard", "--host", "0.0.0.0", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None and server.stderr is not None
        line = server.stdout.readline()
        assert re.fullmatch(
            r"nodus dashboard: open http://0\.0\.0\.0:\d+/\?token=[\w-]{40,}\n", line
        ), line
        note = server.stderr.readline()
        assert "other machines can reach it" in note and "needs the token" in note
    finally:
        server.terminate()
        server.wait(30)
