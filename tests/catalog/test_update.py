"""``nodus catalog update`` against a real HTTP server on 127.0.0.1.

Every failure leaves the catalog in use byte for byte as it was: each failing case takes
a snapshot of the stored catalog's files before and compares it after.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import skypilot_real as real
import skypilot_samples as samples
from catalog_server import CatalogServer, Route, serving
from interpreter import python

from nodus_cli import catalog, config
from nodus_cli.catalog import sources as catalog_sources
from nodus_cli.catalog import store as catalog_store
from nodus_cli.catalog import update as catalog_update
from nodus_cli.catalog.sources import Source, SourceError

AWS = "/catalogs/v7/aws/vms.csv"
GCP = "/catalogs/v8/gcp/vms.csv"
RUNPOD = "/catalogs/v7/runpod/vms.csv"
AZURE = "/catalogs/v6/azure/vms.csv"
VAST = "/catalogs/v8/vast/vms.csv"
ACME = "/prices/acme.csv"


@pytest.fixture
def server() -> Iterator[CatalogServer]:
    with serving() as s:
        s.routes.update(
            {
                AWS: Route(samples.AWS_V7.encode()),
                GCP: Route(samples.GCP_V8.encode()),
                RUNPOD: Route(samples.RUNPOD_V7.encode()),
                AZURE: Route(samples.AZURE_V6.encode(), etag=None),
                VAST: Route(samples.VAST_V8.encode(), last_modified=None),
                ACME: Route(samples.NODUS_CSV.encode()),
            }
        )
        yield s


def env(tmp_path: Path, **extra: str | None) -> dict[str, str]:
    e = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NODUS_CATALOG", "FORCE_COLOR") and not k.lower().endswith("_proxy")
    }
    e.update(
        {
            "NO_COLOR": "1",
            "NODUS_HOME": str(tmp_path / "state"),
            "NODUS_CONFIG": str(tmp_path / "config.toml"),
            "COLUMNS": "200",
        }
    )
    for key, value in extra.items():
        if value is None:
            e.pop(key, None)
        else:
            e[key] = value
    return e


def nodus(tmp_path: Path, *args: str, **extra: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodus_cli", *args],
        capture_output=True,
        text=True,
        env=env(tmp_path, **extra),
        timeout=120,
        check=False,
    )


def update_json(tmp_path: Path, *args: str, **extra: str | None) -> tuple[int, dict[str, Any]]:
    done = nodus(tmp_path, "catalog", "update", "--json", *args, **extra)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def snapshot(tmp_path: Path) -> dict[str, bytes]:
    folder = tmp_path / "state" / "catalog"
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != ".lock"}


def first_update(tmp_path: Path, server: CatalogServer) -> dict[str, bytes]:
    code, doc = update_json(tmp_path, server.url(AWS), server.url(ACME))
    assert code == 0, doc
    before = snapshot(tmp_path)
    assert "current.json" in before and len(before) == 2
    return before


# -- a successful update ----------------------------------------------------------------------


def test_update_from_every_layout_replaces_the_catalog_in_use(
    tmp_path: Path, server: CatalogServer
) -> None:
    urls = [server.url(p) for p in (AWS, GCP, RUNPOD, AZURE, VAST, ACME)]
    code, doc = update_json(tmp_path, *urls)
    assert code == 0
    assert doc["updated"] is True
    by_name = {s["name"]: s for s in doc["sources"]}
    assert set(by_name) == {"aws", "gcp", "runpod", "azure", "vast", "acme"}
    assert {n: s["rows"] for n, s in by_name.items()} == {
        "aws": 4,
        "gcp": 7,
        "runpod": 3,
        "azure": 3,
        "vast": 2,
        "acme": 3,
    }
    # Every row is accounted for: used in a configuration, or refused with line and reason.
    for s in by_name.values():
        assert s["rows_used"] + s["rows_refused"] == s["rows_read"], s["name"]
        assert s["rows_refused"] == sum(g["rows"] for g in s["refused"])
        assert s["configurations_refused"] == sum(g["configurations"] for g in s["refused"])
    assert by_name["aws"]["rows_read"] == len(samples.AWS_V7.splitlines()) - 1
    assert {g["reason"]: g["lines"] for g in by_name["aws"]["refused"]} == {
        "not a GPU (Inferentia2)": [12],
        "no on-demand price": [17],
    }
    assert by_name["aws"]["format"] == "skypilot" and by_name["acme"]["format"] == "nodus"
    assert by_name["aws"]["etag"] == '"v1"'
    assert by_name["aws"]["last_modified"] == "Tue, 01 Dec 2026 00:00:00 GMT"
    assert by_name["aws"]["fetched_at"] and by_name["aws"]["url"] == urls[0]
    # A bad row is reported with its source and line, and is not fatal.
    assert by_name["acme"]["bad_rows"] == 1
    (bad,) = by_name["acme"]["bad_row_examples"]
    assert bad == f"acme {urls[-1]}:4: price_per_hour is not a number: 'lots'"
    assert doc["rows"] == 22

    # The updated catalog is the one in use now: these sources' suppliers, and the
    # embedded catalog's others.
    shown = json.loads(nodus(tmp_path, "catalog", "--json").stdout)
    assert shown["kind"] == "updated"
    embedded = catalog.embedded().offers
    carried = {"aws", "gcp", "runpod", "azure", "vast"}
    assert shown["rows"] == 22 + sum(1 for o in embedded if o.supplier not in carried)
    assert [s["name"] for s in shown["sources"]] == [
        "aws",
        "gcp",
        "runpod",
        "azure",
        "vast",
        "acme",
    ]
    origins = {o["supplier"]: o["source"] for o in shown["origins"]}
    assert origins["aws"] == "aws" and origins["acme"] == "acme"
    assert origins["lambda"] == "embedded" and origins["oci"] == "embedded"
    human = nodus(tmp_path, "catalog").stdout
    assert "updated catalog" in human
    for line in ("aws", "gcp", urls[0], by_name["aws"]["fetched_at"]):
        assert line in human
    assert "suppliers (where each one's offers come from):" in human
    (lam,) = [ln for ln in human.splitlines() if ln.split()[:1] == ["lambda"]]
    assert "embedded" in lam and "skypilot-org/skypilot-catalog@" in lam
    assert "`nodus catalog update` (stored under NODUS_HOME)" in human

    # State is private.
    folder = tmp_path / "state" / "catalog"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_plain_progress_lines_when_piped(tmp_path: Path, server: CatalogServer) -> None:
    done = nodus(tmp_path, "catalog", "update", server.url(AWS))
    assert done.returncode == 0, done.stderr
    assert f"nodus: fetching aws from {server.url(AWS)}" in done.stderr
    assert (
        "nodus: aws: fetched 4 configurations (skypilot) from 14 of 16 rows; refused 2 rows "
        "(2 configurations)"
    ) in done.stderr
    assert "nodus: replacing aws: 559 configurations from embedded by 4 from aws" in done.stderr
    assert "updated: 4 configurations from 1 source now in use" in done.stdout
    assert "left out: not a GPU (Inferentia2): 1 row (1 configuration), line 12" in done.stdout
    assert "left out: no on-demand price: 1 row (1 configuration), line 17" in done.stdout
    done = nodus(tmp_path, "catalog", "update", server.url(ACME))
    assert done.returncode == 0, done.stderr
    assert (
        "bad rows: price_per_hour is not a number: 'lots': 1 row (1 configuration), line 4"
    ) in done.stdout
    assert "\x1b[" not in done.stderr  # not a terminal: no progress bar


def test_plans_use_the_updated_catalog_and_the_flags_still_win(
    tmp_path: Path, server: CatalogServer
) -> None:
    assert update_json(tmp_path, "--replace", server.url(ACME))[0] == 0
    wf = tmp_path / "w.toml"
    wf.write_text('name = "w"\nimage = "busybox"\ncommand = "true"\ngpu = "L4"\n')
    doc = json.loads(nodus(tmp_path, "plan", "--json", str(wf)).stdout)
    assert doc["inventory"].startswith("updated catalog, 1 source (prices fetched ")
    assert doc["catalog"]["kind"] == "updated"
    assert doc["stages"][0]["selected"]["machine_id"] == "l4x1"
    human = nodus(tmp_path, "plan", str(wf)).stdout
    assert "planned against the updated catalog, 1 source (prices fetched" in human
    # --catalog and NODUS_CATALOG still win over it.
    other = tmp_path / "other.csv"
    other.write_text(samples.NODUS_CSV.replace("l4x1", "other-l4").replace("acme,broken", "#"))
    lines = [ln for ln in other.read_text().splitlines() if not ln.startswith("#")]
    other.write_text("\n".join(lines) + "\n")
    for extra, args in (({}, ["--catalog", str(other)]), ({"NODUS_CATALOG": str(other)}, [])):
        doc = json.loads(nodus(tmp_path, "plan", "--json", str(wf), *args, **extra).stdout)
        assert doc["stages"][0]["selected"]["machine_id"] == "other-l4"
        assert doc["inventory"].startswith("user catalog other.csv")


def test_conditional_requests_keep_the_rows_on_304(tmp_path: Path, server: CatalogServer) -> None:
    before = first_update(tmp_path, server)
    code, doc = update_json(tmp_path, server.url(AWS), server.url(ACME))
    assert code == 0
    aws_requests = server.hits(AWS)
    assert len(aws_requests) == 2
    assert "If-None-Match" not in aws_requests[0].headers
    assert aws_requests[1].headers["If-None-Match"] == '"v1"'
    assert aws_requests[1].headers["If-Modified-Since"] == "Tue, 01 Dec 2026 00:00:00 GMT"
    assert {s["name"]: s["last_result"] for s in doc["sources"]} == {
        "aws": "not modified",
        "acme": "not modified",
    }
    assert {s["name"]: s["rows"] for s in doc["sources"]} == {"aws": 4, "acme": 3}
    after = snapshot(tmp_path)
    offers_files = [n for n in after if n.startswith("offers-")]
    assert offers_files == [n for n in before if n.startswith("offers-")]
    assert after[offers_files[0]] == before[offers_files[0]]  # the same rows, byte for byte
    meta = json.loads(after["current.json"])
    assert meta["sources"][0]["checked_at"] >= meta["sources"][0]["fetched_at"]

    # A new version of the file is fetched again, in full.
    server.routes[AWS] = Route(samples.AWS_V7.replace("0.8048", "0.9").encode(), etag='"v2"')
    code, doc = update_json(tmp_path, server.url(AWS), server.url(ACME))
    assert code == 0
    assert doc["sources"][0]["last_result"] == "fetched"
    prices = {o.price_per_hour for o in catalog.load_user_catalog(_offers_file(tmp_path)).offers}
    assert 0.9 in prices and 0.8048 not in prices


def test_last_modified_alone_is_enough_for_a_304(tmp_path: Path, server: CatalogServer) -> None:
    assert update_json(tmp_path, server.url(AZURE))[0] == 0  # the route sends no ETag
    code, doc = update_json(tmp_path, server.url(AZURE))
    assert code == 0
    second = server.hits(AZURE)[1].headers
    assert "If-None-Match" not in second
    assert second["If-Modified-Since"] == "Tue, 01 Dec 2026 00:00:00 GMT"
    assert doc["sources"][0]["last_result"] == "not modified"


def test_a_source_refreshes_the_suppliers_it_carries_and_leaves_the_others(
    tmp_path: Path, server: CatalogServer
) -> None:
    """Issue 18, defect 9: one 2-row source no longer turns the catalog into 2 rows."""
    first_update(tmp_path, server)  # aws (4 rows) and acme (3)
    mine = samples.NODUS_CSV.splitlines()[0] + (
        "\nmycloud,m1,H100,8,80,192,2048,us-east-1,20.0,,x86_64\n"
        "mycloud,m2,,0,,8,32,us-east-1,0.2,,x86_64\n"
    )
    server.routes["/mycloud.csv"] = Route(mine.encode())
    code, doc = update_json(tmp_path, server.url("/mycloud.csv"))
    assert code == 0, doc
    assert doc["kept_sources"] == ["aws", "acme"] and doc["embedded_rest"] is True
    assert doc["changes"] == [
        {"supplier": "mycloud", "before": None, "after": {"source": "mycloud", "rows": 2}}
    ]
    cat = json.loads(nodus(tmp_path, "catalog", "--json").stdout)
    assert [s["name"] for s in cat["sources"]] == ["mycloud", "aws", "acme"]
    origins = {o["supplier"]: (o["source"], o["rows"]) for o in cat["origins"]}
    assert origins["mycloud"] == ("mycloud", 2) and origins["aws"] == ("aws", 4)
    assert origins["acme"] == ("acme", 3)
    assert len(origins) == 21  # 19 embedded suppliers (aws from its source), acme, mycloud
    embedded = catalog.embedded().offers
    assert cat["rows"] == 2 + 4 + 3 + sum(1 for o in embedded if o.supplier != "aws")
    assert len([n for n in snapshot(tmp_path) if n.startswith("offers-")]) == 1  # old one gone


def test_replace_makes_the_sources_the_whole_catalog_and_says_what_goes(
    tmp_path: Path, server: CatalogServer
) -> None:
    first_update(tmp_path, server)
    done = nodus(tmp_path, "catalog", "update", "--replace", server.url(ACME))
    assert done.returncode == 0, done.stderr
    assert "--replace: the catalog in use will hold only the suppliers these sources carry" in (
        done.stderr
    )
    assert "nodus: removing aws: its 4 configurations from aws (nothing supplies it now)" in (
        done.stderr
    )
    assert "nodus: removing lambda: its 110 configurations from embedded" in done.stderr
    cat = json.loads(nodus(tmp_path, "catalog", "--json").stdout)
    assert [s["name"] for s in cat["sources"]] == ["acme"]
    assert cat["rows"] == 3 and [o["supplier"] for o in cat["origins"]] == ["acme"]
    assert len([n for n in snapshot(tmp_path) if n.startswith("offers-")]) == 1  # old one gone
    # A later update, without --replace, keeps it so: the embedded catalog stays out.
    code, doc = update_json(tmp_path, server.url(AWS))
    assert code == 0 and doc["embedded_rest"] is False and doc["kept_sources"] == ["acme"]


def test_what_an_update_removes_is_said_before_it_is_in_use(
    tmp_path: Path, server: CatalogServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODUS_HOME", str(tmp_path / "state"))
    catalog_update.update([Source("aws", server.url(AWS))], retries=0)
    before = snapshot(tmp_path)
    seen: list[tuple[list[str], bool]] = []

    class Watch(catalog_sources.Silent):
        def changing(self, changes: object) -> None:
            assert isinstance(changes, list)
            removed = [c.supplier for c in changes if c.removed]
            seen.append((removed, snapshot(tmp_path) == before))

    result = catalog_update.update(
        [Source("acme", server.url(ACME))], retries=0, reporter=Watch(), replace=True
    )
    ((removed, untouched),) = seen
    assert untouched  # said while the catalog in use was still the one before
    assert "aws" in removed and "acme" not in removed
    assert [c.supplier for c in result.changes if c.removed] == removed
    assert snapshot(tmp_path) != before


def test_two_sources_may_not_carry_one_supplier(tmp_path: Path, server: CatalogServer) -> None:
    before = first_update(tmp_path, server)
    done = nodus(tmp_path, "catalog", "update", server.url(ACME), f"copy={server.url(ACME)}")
    assert done.returncode == 1
    assert "sources acme and copy both carry the supplier 'acme'" in done.stderr
    assert snapshot(tmp_path) == before


def test_names_come_from_the_path_or_name_equals_url(tmp_path: Path, server: CatalogServer) -> None:
    code, doc = update_json(tmp_path, f"lambda={server.url(AWS)}")
    assert code == 0
    assert doc["sources"][0]["name"] == "lambda"
    assert doc["sources"][0]["suppliers"] == ["lambda"]  # a SkyPilot file: the name is the supplier
    done = nodus(tmp_path, "catalog", "update", server.url(AWS), server.url("/v8/aws/vms.csv"))
    assert done.returncode == 2
    assert "two sources are named 'aws'" in done.stderr
    assert "NAME=URL" in done.stderr


def test_default_sources_come_from_the_configuration(tmp_path: Path, server: CatalogServer) -> None:
    done = nodus(tmp_path, "catalog", "update")
    assert done.returncode == 2
    assert "no sources to update from" in done.stderr and "[catalog] sources" in done.stderr
    (tmp_path / "config.toml").write_text(
        f'[catalog]\nsources = ["{server.url(AWS)}", "mine={server.url(ACME)}"]\n'
    )
    code, doc = update_json(tmp_path)
    assert code == 0
    assert [s["name"] for s in doc["sources"]] == ["aws", "mine"]
    done = nodus(tmp_path, "catalog", "update", "ftp://example.com/x.csv")
    assert done.returncode == 2
    assert "is not an http(s) or file URL, or a path" in done.stderr


# -- failures: named, exit 1, the catalog in use untouched -----------------------------------


def test_a_server_error_is_retried_then_fails_leaving_the_catalog_untouched(
    tmp_path: Path, server: CatalogServer
) -> None:
    before = first_update(tmp_path, server)
    server.routes[AWS] = Route(status=500)
    done = nodus(tmp_path, "catalog", "update", "--retries", "1", server.url(AWS), server.url(ACME))
    assert done.returncode == 1
    assert f"source aws ({server.url(AWS)}) failed after 2 attempts: HTTP 500" in done.stderr
    assert "hint:" in done.stderr and "left as it was" in done.stderr
    assert "attempt 1 failed (HTTP 500 Internal Server Error); retrying" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert len(server.hits(AWS)) == 1 + 2
    assert snapshot(tmp_path) == before


def test_retries_back_off_exponentially_and_stop_at_the_bound(
    tmp_path: Path, server: CatalogServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODUS_HOME", str(tmp_path / "state"))
    server.routes["/busy.csv"] = Route(status=503)
    waits: list[float] = []
    source = Source("busy", server.url("/busy.csv"))
    with catalog_sources.client() as http, pytest.raises(SourceError) as caught:
        catalog_sources.fetch(http, source, retries=3, backoff=0.25, sleep=waits.append)
    assert waits == [0.25, 0.5, 1.0]
    assert len(server.hits("/busy.csv")) == 4
    assert "failed after 4 attempts: HTTP 503" in caught.value.message
    assert caught.value.source == source
    # 404 is not worth another attempt.
    with catalog_sources.client() as http, pytest.raises(SourceError, match="HTTP 404"):
        catalog_sources.fetch(http, Source("x", server.url("/nope.csv")), sleep=waits.append)
    assert len(server.hits("/nope.csv")) == 1


def test_a_malformed_file_fails_and_leaves_the_catalog_untouched(
    tmp_path: Path, server: CatalogServer
) -> None:
    before = first_update(tmp_path, server)
    server.routes[ACME] = Route(b"<!doctype html><html><body>Sign in</body></html>\n", etag='"x"')
    code, doc = update_json(tmp_path, server.url(AWS), server.url(ACME))
    assert code == 1
    assert doc["updated"] is False and doc["source"] == "acme" and doc["url"] == server.url(ACME)
    assert (
        "neither a nodus catalog nor a SkyPilot vms.csv (it looks like an HTML page)"
        in (doc["error"])
    )
    assert snapshot(tmp_path) == before


def test_a_source_with_nothing_usable_fails(tmp_path: Path, server: CatalogServer) -> None:
    before = first_update(tmp_path, server)
    bad = samples.NODUS_CSV.splitlines()[0] + "\nacme,x,H100,8,80,1,1,us,lots,,x86_64\n"
    server.routes[ACME] = Route(bad.encode(), etag='"bad"')
    done = nodus(tmp_path, "catalog", "update", server.url(ACME))
    assert done.returncode == 1
    assert f"source acme ({server.url(ACME)}) gave nothing usable (1 bad row)" in done.stderr
    assert f"acme {server.url(ACME)}:2: price_per_hour is not a number" in done.stderr
    assert snapshot(tmp_path) == before


def test_a_server_that_never_answers_times_out(tmp_path: Path, server: CatalogServer) -> None:
    before = first_update(tmp_path, server)
    server.routes[AWS] = Route(mode="hang")
    start = time.monotonic()
    done = nodus(
        tmp_path, "catalog", "update", "--timeout", "0.3", "--retries", "0", server.url(AWS)
    )
    assert time.monotonic() - start < 20
    assert done.returncode == 1
    assert f"source aws ({server.url(AWS)}) gave up after 1 attempt in 0.3 s" in done.stderr
    assert "no answer within 0.3 s" in done.stderr
    assert snapshot(tmp_path) == before


@pytest.fixture
def mute() -> Iterator[str]:
    """A socket that accepts connections and never answers (nor closes them)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/catalogs/v7/aws/vms.csv"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()


def test_a_source_that_never_answers_is_bounded_retries_included(tmp_path: Path, mute: str) -> None:
    """Defect 10: the whole attempt, retries included, within [catalog] timeout, which the
    message names; the default is well under a minute."""
    assert config.CatalogConfig().timeout == 30.0
    (tmp_path / "config.toml").write_text("[catalog]\ntimeout = 1.5\n")
    start = time.monotonic()
    done = nodus(tmp_path, "catalog", "update", mute)  # the default 3 retries
    took = time.monotonic() - start
    assert done.returncode == 1
    assert took < 15  # 1.5 s and the interpreter's start
    assert f"source aws ({mute}) gave up after" in done.stderr
    assert "in 1.5 s, the time a source may take" in done.stderr
    assert "attempt 1 failed (no answer within 0.375 s); retrying" in done.stderr
    assert "`timeout = 60` in [catalog] of config.toml, or --timeout" in done.stderr


def test_the_bound_covers_every_attempt_and_pause(mute: str) -> None:
    waits: list[float] = []
    start = time.monotonic()
    with catalog_sources.client() as http, pytest.raises(SourceError) as caught:
        catalog_sources.fetch(
            http, Source("aws", mute), timeout=1.0, retries=3, backoff=0.1, sleep=waits.append
        )
    assert time.monotonic() - start < 1.5
    # Each attempt waits its share of the time left (1/4, then 1/3 of what is left, ...);
    # the third pause would end past the bound: no fourth attempt.
    assert waits == [0.1, 0.2]
    assert "gave up after 3 attempts in 1 s, the time a source may take" in caught.value.message


def test_a_download_cut_short_is_never_used(tmp_path: Path, server: CatalogServer) -> None:
    before = first_update(tmp_path, server)
    body = samples.AWS_V7.replace("0.8048", "0.7777").encode()
    server.routes[AWS] = Route(body, mode="partial", etag='"v3"')
    done = nodus(tmp_path, "catalog", "update", "--retries", "0", server.url(AWS))
    assert done.returncode == 1
    assert (
        f"partial download: received {len(body) // 2:,} of the {len(body):,} bytes its "
        "Content-Length announces"
    ) in done.stderr
    assert snapshot(tmp_path) == before


def test_one_failing_source_means_no_source_is_stored(
    tmp_path: Path, server: CatalogServer
) -> None:
    before = first_update(tmp_path, server)
    server.routes[GCP] = Route(status=502)
    done = nodus(tmp_path, "catalog", "update", "--retries", "0", server.url(GCP), server.url(AWS))
    assert done.returncode == 1 and "source gcp" in done.stderr
    assert snapshot(tmp_path) == before


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_proxy_environment_is_honoured(tmp_path: Path, server: CatalogServer) -> None:
    proxy = f"http://127.0.0.1:{_closed_port()}"
    # The server's host is in NO_PROXY: fetched directly.
    done = nodus(
        tmp_path,
        "catalog",
        "update",
        "--retries",
        "0",
        server.url(AWS),
        HTTP_PROXY=proxy,
        NO_PROXY="127.0.0.1,localhost",
    )
    assert done.returncode == 0, done.stderr
    before = snapshot(tmp_path)
    # It is not: sent to the proxy, which does not answer.
    done = nodus(tmp_path, "catalog", "update", "--retries", "0", server.url(AWS), HTTP_PROXY=proxy)
    assert done.returncode == 1
    assert f"through the proxy {proxy}" in done.stderr
    assert "NO_PROXY" in done.stderr  # the hint says how to bypass it
    assert snapshot(tmp_path) == before
    assert len(server.hits(AWS)) == 1  # the second request never reached the server


# -- the stored catalog ---------------------------------------------------------------------------


def _offers_file(tmp_path: Path) -> Path:
    meta = json.loads((tmp_path / "state" / "catalog" / "current.json").read_text())
    return tmp_path / "state" / "catalog" / meta["offers_file"]


def test_a_broken_stored_catalog_is_reported_and_replaced(
    tmp_path: Path, server: CatalogServer
) -> None:
    first_update(tmp_path, server)
    _offers_file(tmp_path).unlink()
    wf = tmp_path / "w.toml"
    wf.write_text('name = "w"\nimage = "busybox"\ncommand = "true"\n')
    done = nodus(tmp_path, "plan", str(wf))
    assert done.returncode == 1
    assert "the updated catalog" in done.stderr and "is missing" in done.stderr
    assert "nodus catalog update" in done.stderr
    assert update_json(tmp_path, server.url(ACME))[0] == 0  # an update repairs it
    assert nodus(tmp_path, "plan", str(wf)).returncode == 0


def test_the_store_round_trips_offers_exactly(
    tmp_path: Path, server: CatalogServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODUS_HOME", str(tmp_path / "state"))
    sources = [Source("gcp", server.url(GCP)), Source("vast", server.url(VAST))]
    result = catalog_update.update(sources, retries=0)
    stored = catalog_store.read()
    assert stored is not None
    assert stored.catalog.offers == tuple(o for r in result.results for o in r.offers)
    assert stored.offers_by_source["vast"] == result.results[1].offers
    assert stored.cells("gcp") == result.results[0].rows  # kept as they are on a 304
    assert stored.cells("nope") == []
    assert all(o.size_is_minimum for o in stored.offers_by_source["vast"])
    assert catalog.load().kind == catalog.UPDATED
    assert config.home() == tmp_path / "state"


# -- nodus validate, plan and --help never import httpx ---------------------------------------


def test_httpx_is_imported_only_by_the_update(tmp_path: Path) -> None:
    wf = tmp_path / "w.toml"
    wf.write_text('name = "w"\nimage = "busybox"\ncommand = "true"\n')
    code = f"""
import contextlib, io, sys
import nodus_cli
assert "httpx" not in sys.modules, "import nodus_cli"
from nodus_cli.__main__ import main
for args in (["--help"], ["validate", {str(wf)!r}], ["plan", {str(wf)!r}],
             ["plan", "--json", {str(wf)!r}], ["catalog"]):
    with contextlib.redirect_stdout(io.StringIO()):
        main(args)
    assert "httpx" not in sys.modules, args
print("ok")
"""
    done = python(code, env(tmp_path))
    assert done.stdout.strip() == "ok", done.stderr


# -- local files (issue 18, defect 8) ---------------------------------------------------------


def test_a_local_file_is_a_source(tmp_path: Path) -> None:
    folder = tmp_path / "downloads" / "aws"
    folder.mkdir(parents=True)
    (folder / "vms.csv").write_text(real.read("aws_v8.csv"), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "nodus_cli", "catalog", "update", "--json", "./aws/vms.csv"],
        capture_output=True,
        text=True,
        env=env(tmp_path),
        cwd=folder.parent,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (source,) = json.loads(done.stdout)["sources"]
    assert source["name"] == "aws" and source["suppliers"] == ["aws"]
    assert source["url"] == (folder / "vms.csv").resolve().as_uri()
    assert source["rows_read"] == 11 and source["rows_refused"] == 0
    # Unchanged, it is not read again; a file:// URL works as well as a path.
    code, doc = update_json(tmp_path, f"aws={(folder / 'vms.csv').as_uri()}")
    assert code == 0 and doc["sources"][0]["last_result"] == "not modified"


def test_a_downloaded_vms_csv_must_be_named(tmp_path: Path) -> None:
    (tmp_path / "vms.csv").write_text(real.read("lambda_v8.csv"), encoding="utf-8")
    done = nodus(tmp_path, "catalog", "update", str(tmp_path / "vms.csv"))
    assert done.returncode == 2
    assert "does not say whose prices it holds" in done.stderr
    assert f"hint: name its supplier: aws={tmp_path / 'vms.csv'}" in done.stderr
    code, doc = update_json(tmp_path, f"lambda={tmp_path / 'vms.csv'}")
    assert code == 0, doc
    assert doc["sources"][0]["suppliers"] == ["lambda"]


def test_paths_in_the_configuration_are_from_its_folder(tmp_path: Path) -> None:
    (tmp_path / "prices").mkdir()
    (tmp_path / "prices" / "acme.csv").write_text(samples.NODUS_CSV, encoding="utf-8")
    (tmp_path / "config.toml").write_text('[catalog]\nsources = ["prices/acme.csv"]\n')
    code, doc = update_json(tmp_path)
    assert code == 0, doc
    assert doc["sources"][0]["name"] == "acme"
    done = nodus(tmp_path, "catalog", "update", str(tmp_path / "nope" / "x.csv"))
    assert done.returncode == 1
    assert f"source x ({tmp_path / 'nope' / 'x.csv'}) cannot be read: No such file" in done.stderr
