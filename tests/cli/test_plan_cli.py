"""``nodus plan`` (and ``nodus run --dry-run``) as a user runs it: a subprocess per call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from catalog_support import HEADER
from paths import REPO

from nodus_cli import catalog, records
from nodus_cli.workload import load_file

MARKET = """\
aws,p5.48xlarge,H100,8,80,192,2048,us-east-1,98.32,20.99,x86_64
lambda,gpu_8x_h100_sxm5,NVIDIA H100 80GB HBM3,8,79.6,208,1800,us-west-1,23.92,,x86_64
lambda,gpu_1x_h100_pcie,H100-PCIe,1,80,26,200,europe-central-1,2.49,,x86_64
runpod,4x_H100_SECURE,H100,4,80,64,500,EU-RO-1,10.00,,x86_64
aws,p4d.24xlarge,A100,8,40,96,1152,us-east-1,32.77,,x86_64
runpod,1x_B200_SECURE,B200,1,180,28,283,US,5.99,,x86_64
aws,g5.xlarge,A10G,1,22.4,4,16,us-east-1,1.006,,x86_64
"""


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("NODUS_CATALOG", "FORCE_COLOR")}
    e.update(
        {
            "NO_COLOR": "1",
            "NODUS_HOME": str(tmp_path / "state"),
            "NODUS_CONFIG": str(tmp_path / "config.toml"),
            "COLUMNS": "80",
        }
    )
    e.update(extra)
    return e


def nodus(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodus_cli", *args],
        capture_output=True,
        text=True,
        env=env(tmp_path, **extra),
        timeout=120,
        check=False,
    )


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def market(tmp_path: Path, rows: str = MARKET) -> str:
    return write(tmp_path, "market.csv", HEADER + rows)


def workload_file(tmp_path: Path, body: str, name: str = "w.toml") -> str:
    head = 'name = "w"\nimage = "busybox:1"\ncommand = "true"\n'
    return write(tmp_path, name, head + body)


def assert_no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stdout + done.stderr
    assert "internal error" not in done.stderr


def plan_json(tmp_path: Path, *args: str, **extra: str) -> tuple[int, dict[str, Any]]:
    done = nodus(tmp_path, "plan", "--json", *args, **extra)
    assert_no_traceback(done)
    return done.returncode, json.loads(done.stdout)


# -- a feasible plan -----------------------------------------------------------------------------


def test_plan_json_follows_spec_3_1(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, 'gpu = "H100"\ngpu_count = 8\n[requirements]\nlocation = "us"')
    code, doc = plan_json(tmp_path, wf, "--catalog", market(tmp_path))
    assert code == 0
    assert doc["workload"] == "w"
    assert doc["feasible"] is True
    assert doc["requirements"]["gpu"] == "H100"
    assert doc["requirements"]["gpu_count"] == 8
    (stage,) = doc["stages"]
    assert stage["name"] == "main"
    assert stage["basis"] == "hourly_price"
    assert stage["eligible"] == 2
    assert stage["excluded"] == {"gpu": 3, "gpu_count": 2}
    assert [c["machine_id"] for c in stage["candidates"]] == ["gpu_8x_h100_sxm5", "p5.48xlarge"]
    selected = stage["selected"]
    assert {
        k: selected[k]
        for k in (
            "supplier",
            "machine_id",
            "region",
            "gpu",
            "gpu_count",
            "gpu_memory_gb",
            "vcpus",
            "memory_gb",
            "price_per_hour",
            "estimated_cost",
        )
    } == {
        "supplier": "lambda",
        "machine_id": "gpu_8x_h100_sxm5",
        "region": "us-west-1",
        "gpu": "H100",
        "gpu_count": 8,
        "gpu_memory_gb": 80.0,
        "vcpus": 208,
        "memory_gb": 1800.0,
        "price_per_hour": 23.92,
        "estimated_cost": None,
    }


def test_json_lists_every_candidate_and_the_table_the_top_n(tmp_path: Path) -> None:
    rows = "".join(
        f"acme,m{i:02d},L4,1,24,8,32,us-east-1,{1 + i / 100:.2f},,x86_64\n" for i in range(12)
    )
    wf = workload_file(tmp_path, 'gpu = "L4"')
    cat = market(tmp_path, rows)
    _, doc = plan_json(tmp_path, wf, "--catalog", cat)
    assert len(doc["stages"][0]["candidates"]) == 12
    done = nodus(tmp_path, "plan", wf, "--catalog", cat, "--top", "3")
    assert done.returncode == 0
    assert "m00" in done.stdout and "m02" in done.stdout
    assert "m03" not in done.stdout
    assert "9 more" in done.stdout


def test_human_plan_shows_requirements_ranking_basis_and_selection(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, 'gpu = "H100"\ngpu_count = 8\n[requirements]\nlocation = "us"')
    done = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path))
    assert_no_traceback(done)
    assert done.returncode == 0
    out = done.stdout
    assert 'requirements: gpu = "H100", gpu_count = 8' in out
    assert 'location = "us"' in out
    assert "excluded: gpu 3, gpu_count 2" in out
    assert "ranked by hourly price" in out
    assert "selected: lambda gpu_8x_h100_sxm5 in us-west-1" in out
    # Full machine IDs and regions even on an 80-column terminal.
    assert "gpu_8x_h100_sxm5" in out and "p5.48xlarge" in out
    # Never a claim about the lowest cost or the shortest runtime.
    assert "not a promise of the lowest total cost" in out
    lowered = out.lower()
    assert "cheapest" not in lowered and "fastest" not in lowered
    assert "\x1b[" not in out  # NO_COLOR


def test_force_colour(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, 'gpu = "H100"')
    env_extra = {"FORCE_COLOR": "1", "NO_COLOR": ""}
    done = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path), **env_extra)
    assert "\x1b[" in done.stdout


def test_run_dry_run_equals_plan(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, 'gpu = "H100"')
    cat = market(tmp_path)
    planned = nodus(tmp_path, "plan", "--json", wf, "--catalog", cat)
    dry = nodus(tmp_path, "run", "--dry-run", "--target", "catalog", "--json", wf, "--catalog", cat)
    assert planned.returncode == dry.returncode == 0
    a, b = json.loads(planned.stdout), json.loads(dry.stdout)
    # The prices' age (in days, to 0.001: 86 s) may tick over between the two calls.
    assert a["catalog"].pop("age_days") == pytest.approx(b["catalog"].pop("age_days"), abs=0.002)
    assert a == b


def test_nodus_catalog_variable(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, 'gpu = "B200"')
    code, doc = plan_json(tmp_path, wf, NODUS_CATALOG=market(tmp_path))
    assert code == 0
    assert doc["stages"][0]["selected"]["machine_id"] == "1x_B200_SECURE"
    assert doc["inventory"].startswith("user catalog")


def test_the_embedded_catalog_plans_every_example() -> None:
    """Each example under examples/ is valid and plans against the embedded catalog."""
    examples = sorted((REPO / "examples").glob("*.toml"))
    if not examples:
        pytest.skip("no examples yet")
    offers = catalog.embedded().offers
    from nodus_cli.planning.planner import plan_workload

    for path in examples:
        result = load_file(path)
        assert result.workload is not None, path
        p = plan_workload(result.workload, offers)
        assert p.feasible, (path, [s.explanation for s in p.stages])


def test_plan_against_the_embedded_catalog(tmp_path: Path) -> None:
    wf = workload_file(
        tmp_path,
        'gpu = "H100"\ngpu_count = 8\npeak_memory_gb = 80\n[requirements]\nlocation = "us"\n',
    )
    code, doc = plan_json(tmp_path, wf)
    assert code == 0
    stage = doc["stages"][0]
    assert stage["eligible"] > 0
    for c in stage["candidates"]:
        assert c["gpu"] == "H100" and c["gpu_count"] >= 8 and c["gpu_memory_gb"] >= 80
    prices = [c["price_per_hour"] for c in stage["candidates"]]
    assert prices == sorted(prices)
    assert doc["inventory"].startswith("embedded catalog")


def test_the_header_names_the_catalog_and_the_date_of_its_prices(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, "[requirements]\ncpu = 2")
    as_of = catalog.embedded().meta["prices_as_of"]
    out = nodus(tmp_path, "plan", wf).stdout
    assert out.splitlines()[0].startswith(
        f"w: planned against the embedded catalog (prices as of {as_of}), "
    )
    assert str(catalog.embedded_path()) not in out  # no site-packages path
    cat = market(tmp_path)
    out = nodus(tmp_path, "plan", wf, "--catalog", cat).stdout
    today = datetime.now(UTC).date()
    assert f"planned against the user catalog market.csv (file of {today})" in out
    _, doc = plan_json(tmp_path, wf)
    assert doc["catalog"]["kind"] == "embedded"
    assert doc["catalog"]["prices_as_of"] == as_of
    assert doc["catalog"]["name"] == "nodus embedded catalog, 19 suppliers"


def test_stale_prices_are_a_warning_that_names_the_update_command(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, "[requirements]\ncpu = 2")
    (tmp_path / "config.toml").write_text("[catalog]\nmax_age_days = 0.001\n")
    done = nodus(tmp_path, "plan", wf, "--wide")  # the warning on one line, not wrapped at 80
    assert done.returncode == 0
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("warning:")]
    assert "the prices in use (embedded catalog (prices as of" in line
    assert "more than max_age_days = 0.001: run `nodus catalog update`" in line
    code, doc = plan_json(tmp_path, wf)
    assert code == 0
    (warning,) = doc["warnings"]
    assert "nodus catalog update" in warning
    assert doc["catalog"]["stale"] is True and doc["catalog"]["max_age_days"] == 0.001
    # A file given with --catalog: refresh the file, or drop the flag and update. Its
    # prices are as of the day it was written: yesterday, so that just after midnight
    # (UTC) it is still older than max_age_days.
    written = market(tmp_path)
    yesterday = time.time() - 86400
    os.utime(written, (yesterday, yesterday))
    code, doc = plan_json(tmp_path, wf, "--catalog", written)
    (warning,) = doc["warnings"]
    assert "drop --catalog and run `nodus catalog update`" in warning
    # Young enough: no warning.
    (tmp_path / "config.toml").write_text("[catalog]\nmax_age_days = 100000\n")
    code, doc = plan_json(tmp_path, wf)
    assert doc["warnings"] == [] and doc["catalog"]["stale"] is False
    assert "warning:" not in nodus(tmp_path, "plan", wf).stdout


def test_the_configured_price_ceiling_is_shown_and_named(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("[limits]\nmax_price_per_hour = 5.0\n")
    wf = workload_file(tmp_path, 'gpu = "H100"\n[requirements]\nmax_price_per_hour = 50.0')
    done = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path), "--wide")
    assert done.returncode == 0
    out = done.stdout
    assert f"price ceiling: $5.00/h, [limits] max_price_per_hour in {cfg}" in out
    assert "excluded by the ceiling [limits] max_price_per_hour in" in out
    assert "selected: lambda gpu_1x_h100_pcie" in out
    code, doc = plan_json(tmp_path, wf, "--catalog", market(tmp_path))
    assert doc["limits"] == {
        "max_price_per_hour": 5.0,
        "source": f"[limits] max_price_per_hour in {cfg}",
    }
    # When it empties the list: exit 3, and the words name the configuration file.
    wf = workload_file(tmp_path, 'gpu = "H100"\ngpu_count = 8', name="eight.toml")
    code, doc = plan_json(tmp_path, wf, "--catalog", market(tmp_path))
    assert code == 3
    assert f"the ceiling [limits] max_price_per_hour in {cfg}" in doc["stages"][0]["explanation"]
    # A broken [limits] is an error that says where and what to write.
    cfg.write_text("[limits]\nmax_price_per_hour = -1\n")
    done = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path))
    assert_no_traceback(done)
    assert done.returncode == 1
    assert "limits.max_price_per_hour must be a positive number" in done.stderr


def test_a_cpu_only_workload_with_a_catalog_file(tmp_path: Path) -> None:
    rows = MARKET + "acme,cpu-16,,0,,16,64,us-east-1,0.40,,x86_64\n"
    cat = market(tmp_path, rows)
    wf = workload_file(tmp_path, "[requirements]\ncpu = 8")
    code, doc = plan_json(tmp_path, wf, "--catalog", cat)
    stage = doc["stages"][0]
    assert code == 0 and stage["selected"]["machine_id"] == "cpu-16"
    assert stage["excluded"] == {"gpu": 7}  # every machine with GPUs: a CPU-only one fits
    # Too big for the CPU-only machine: a GPU machine, and the plan says why.
    wf = workload_file(tmp_path, "[requirements]\ncpu = 32", name="big.toml")
    done = nodus(tmp_path, "plan", wf, "--catalog", cat, "--wide")  # each note on one line
    assert done.returncode == 0
    assert (
        "note: this stage needs no GPU, but cpu = 32 ruled out every CPU-only configuration "
        "(1 in the inventory), so it is planned on machines with GPUs; the selected machine "
        "carries GPUs it will not use"
    ) in done.stdout
    assert "selected: runpod 4x_H100_SECURE" in done.stdout


def test_a_cpu_only_workload_on_the_embedded_catalog(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, '[requirements]\ncpu = 8\nmemory_gb = 32\nlocation = "us"')
    code, doc = plan_json(tmp_path, wf)
    assert code == 0
    stage = doc["stages"][0]
    assert stage["selected"]["gpu"] is None
    assert stage["selected"]["machine_id"] == "cpu3g-8-32"
    assert all(c["gpu"] is None for c in stage["candidates"])
    assert any("because CPU-only configurations fit" in n for n in stage["notes"])
    out = nodus(tmp_path, "plan", wf).stdout
    assert "selected: runpod cpu3g-8-32 in US: no GPU, 8 vCPU, 32 GB memory" in out


# -- nothing eligible: exit 3 with the requirement and the nearest offers -----------------------


def test_location_empties_the_list(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, 'gpu = "H100"\ngpu_count = 8\n[requirements]\nlocation = "eu"')
    done = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path), "--wide")
    assert_no_traceback(done)
    assert done.returncode == 3
    out = done.stdout
    assert 'location: no 8× H100 configuration is in location "eu"' in out
    assert "the cheapest 8× H100 outside it is lambda gpu_8x_h100_sxm5 in us-west-1" in out
    assert "nearest offers:" in out
    assert "aws p5.48xlarge in us-east-1" in out
    assert "exit 3" in out


def test_gpu_count_empties_the_list(tmp_path: Path) -> None:
    rows = MARKET.replace("aws,p5.48xlarge,H100,8", "aws,p5.48xlarge,H100,2").replace(
        "lambda,gpu_8x_h100_sxm5,NVIDIA H100 80GB HBM3,8", "lambda,gpu_2x,H100,2"
    )
    wf = workload_file(tmp_path, 'gpu = "H100"\ngpu_count = 8')
    code, doc = plan_json(tmp_path, wf, "--catalog", market(tmp_path, rows))
    assert code == 3
    assert doc["feasible"] is False
    stage = doc["stages"][0]
    assert stage["selected"] is None
    assert stage["candidates"] == []
    assert stage["emptied_by"] == "gpu_count"
    assert "the largest H100 count that meets the other requirements is 4" in stage["explanation"]
    assert stage["nearest"][0]["machine_id"] == "4x_H100_SECURE"


@pytest.mark.parametrize(
    ("body", "emptied", "words"),
    [
        ('gpu = "RTX 4090"', "gpu", "no configuration in this inventory has RTX 4090 GPUs"),
        ('gpu = "H100"\npeak_memory_gb = 94', "peak_memory_gb", "the most on offer is 80 GB"),
        ('gpu = "A10G"\n[requirements]\ncpu = 8', "cpu", "has 8 vCPUs"),
        ('gpu = "A10G"\n[requirements]\nmemory_gb = 64', "memory_gb", "64 GB of memory"),
        ('gpu = "A10G"\n[requirements]\ndisk_gb = 64', None, None),  # no disk listed: kept
        ('gpu = "H100"\n[requirements]\narch = "arm64"', "arch", "is arm64"),
        ('gpu = "B200"\nimage = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"', "image", "12.8"),
        ('gpu = "A10G"\n[requirements]\nmax_price_per_hour = 0.5', "max_price_per_hour", "$0.50"),
        ('gpu = "H100"\n[requirements]\nlocation = "mars"', "location", "matches no region"),
    ],
)
def test_each_requirement_exits_3_with_its_name(
    tmp_path: Path, body: str, emptied: str | None, words: str | None
) -> None:
    text = 'name = "w"\ncommand = "true"\n' + body
    if "image" not in body:
        text = 'image = "busybox:1"\n' + text
    wf = write(tmp_path, "w.toml", text)
    code, doc = plan_json(tmp_path, wf, "--catalog", market(tmp_path))
    stage = doc["stages"][0]
    if emptied is None:
        assert code == 0
        return
    assert code == 3
    assert stage["emptied_by"] == emptied
    assert stage["explanation"].startswith(f"{emptied}: ")
    assert words in stage["explanation"]
    assert emptied in stage["excluded"]


def test_budget_with_run_records_exits_3(tmp_path: Path) -> None:
    """Measured runtimes come from the run records under NODUS_HOME."""
    wf = workload_file(tmp_path, 'gpu = "A10G"\nbudget = 1.0')
    cat = market(tmp_path)
    w = load_file(Path(wf)).workload
    assert w is not None
    store = records.RunStore.open(tmp_path / "state")
    (a10g,) = [o for o in catalog.load_user_catalog(Path(cat)).offers if o.gpu == "A10G"]
    run = store.create_run(w, "local", a10g.price_per_hour, wf)
    store.save_stage(
        run.id,
        0,
        records.StageRecord(
            "main", records.StageStatus.SUCCEEDED, 0, runtime_seconds=7200.0, config=a10g.as_json()
        ),
    )
    store.finish_run(run.id, records.RunStatus.SUCCEEDED, 0, 2.0)
    code, doc = plan_json(tmp_path, wf, "--catalog", cat)
    assert code == 3
    stage = doc["stages"][0]
    assert stage["emptied_by"] == "budget"
    assert stage["excluded"]["budget"] == 1
    assert "the lowest estimate is $2.01" in stage["explanation"]
    # Every eligible configuration (the only A10G) is measured: ranked by the estimate.
    without_budget = write(tmp_path, "w.toml", Path(wf).read_text().replace("budget = 1.0", ""))
    w = load_file(Path(without_budget)).workload
    assert w is not None
    run = store.create_run(w, "local", a10g.price_per_hour, wf)
    store.save_stage(
        run.id,
        0,
        records.StageRecord(
            "main", records.StageStatus.SUCCEEDED, 0, runtime_seconds=3600.0, config=a10g.as_json()
        ),
    )
    code, doc = plan_json(tmp_path, without_budget, "--catalog", cat)
    assert code == 0
    stage = doc["stages"][0]
    assert stage["basis"] == "runtime_estimate"
    # The budget is not part of the fingerprint: both runs measure this workload, and the
    # estimate takes their median (2 h and 1 h -> 1.5 h at $1.006/h).
    assert stage["selected"]["runtime_seconds"] == pytest.approx(5400.0)
    assert stage["selected"]["estimated_cost"] == pytest.approx(1.509)
    out = nodus(tmp_path, "plan", without_budget, "--catalog", cat).stdout
    assert "ranked by estimated cost (measured runtime × hourly price)" in out
    assert "est. cost" in out


def test_a_broken_state_folder_does_not_break_planning(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "runs.sqlite3").write_bytes(b"this is not a database" * 100)
    wf = workload_file(tmp_path, 'gpu = "H100"')
    code, doc = plan_json(tmp_path, wf, "--catalog", market(tmp_path))
    assert code == 0
    assert doc["stages"][0]["basis"] == "hourly_price"


# -- bad input never shows a traceback -------------------------------------------------------------


def test_a_bad_catalog_row_is_reported_with_its_line(tmp_path: Path) -> None:
    rows = MARKET + "acme,m1,H100,8,80,96,1000,us-east-1,not-a-price,,x86_64\n"
    wf = workload_file(tmp_path, 'gpu = "H100"')
    done = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path, rows))
    assert_no_traceback(done)
    assert done.returncode == 1
    assert "market.csv:9: price_per_hour is not a number: 'not-a-price'" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    "content",
    [
        "",  # empty
        "a,b,c\n1,2,3\n",  # wrong columns
        "\x00\x01\x02garbage",  # binary
        HEADER + 'acme,"unterminated\n',  # an open quote
    ],
)
def test_broken_catalog_files(tmp_path: Path, content: str) -> None:
    path = tmp_path / "broken.csv"
    path.write_text(content, encoding="utf-8")
    wf = workload_file(tmp_path, 'gpu = "H100"')
    for args in (
        ["plan", wf, "--catalog", str(path)],
        ["plan", "--json", wf, "--catalog", str(path)],
    ):
        done = nodus(tmp_path, *args)
        assert_no_traceback(done)
        assert done.returncode in (1, 3), done.stderr
        if done.returncode == 1:
            assert "broken.csv" in done.stderr


def test_missing_catalog_file(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, 'gpu = "H100"')
    done = nodus(tmp_path, "plan", wf, "--catalog", str(tmp_path / "nope.csv"))
    assert_no_traceback(done)
    assert done.returncode == 1
    assert "nope.csv" in done.stderr


def test_missing_and_invalid_workload_files(tmp_path: Path) -> None:
    done = nodus(tmp_path, "plan", str(tmp_path / "nope.toml"))
    assert_no_traceback(done)
    assert done.returncode == 2
    wf = workload_file(tmp_path, "gpu_count = 3")
    done = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path))
    assert_no_traceback(done)
    assert done.returncode == 1
    assert "gpu_count" in done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
@pytest.mark.parametrize("command", [["plan"], ["run"], ["run", "--dry-run"]])
def test_a_named_pipe_is_not_a_regular_file_as_validate_says(
    tmp_path: Path, command: list[str]
) -> None:
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    done = nodus(tmp_path, *command, str(fifo))  # never opened: a pipe could block forever
    assert_no_traceback(done)
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"error: {fifo} is not a regular file (a named pipe): name a workload file (*.toml)"
    )
    assert "no such file" not in done.stderr
    assert "is not a regular file" in nodus(tmp_path, "validate", str(fifo)).stdout


def test_a_machine_id_in_the_gpu_field_says_what_it_carries(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, 'gpu = "p4d.24xlarge"')
    done = nodus(tmp_path, "plan", wf)
    assert_no_traceback(done)
    assert done.returncode == 1
    assert "machine ID" in done.stderr
    assert "8× A100" in done.stderr
    assert 'gpu = "A100", gpu_count = 8' in done.stderr


def test_a_catalog_given_to_the_local_target_is_pointed_out(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, "[requirements]\ncpu = 1")
    done = nodus(
        tmp_path,
        "run",
        "--dry-run",
        "--target",
        "local",
        "--json",
        wf,
        "--catalog",
        market(tmp_path),
    )
    assert_no_traceback(done)
    assert "is not used by --target local" in " ".join(done.stderr.split())  # wrapped at 80
    assert json.loads(done.stdout)["target"] == "local"


def test_run_dry_run_plans_against_the_target_run_would_use(tmp_path: Path) -> None:
    wf = workload_file(tmp_path, "[requirements]\ncpu = 1")
    dry = nodus(tmp_path, "run", "--dry-run", "--json", wf)
    planned = nodus(tmp_path, "plan", "--json", wf, "--target", "local")
    assert dry.returncode == planned.returncode == 0
    assert json.loads(dry.stdout)["target"] == "local" == json.loads(planned.stdout)["target"]
    assert json.loads(dry.stdout)["stages"][0]["selected"]["supplier"] == "local"


def test_plan_says_what_validate_warns_about_and_the_spending_limits(tmp_path: Path) -> None:
    wf = write(
        tmp_path,
        "w.toml",
        'image = "img:1"\ngpu = "H100"\n[[stages]]\nname = "a"\ncommand = "true"\n',
    )
    config = write(tmp_path, "config.toml", "[limits]\nmax_spend_per_day = 50.0\n")
    done = nodus(tmp_path, "plan", wf, NODUS_CONFIG=config)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert f'{wf}:2: gpu: gpu = "H100" at the top level reaches no stage' in text
    assert "spending limits: $50.00 per UTC day" in text
    _, doc = plan_json(tmp_path, wf, NODUS_CONFIG=config)
    assert any("reaches no stage" in w for w in doc["warnings"])
    assert any(n.startswith("spending limits: $50.00 per UTC day") for n in doc["notes"])
