"""The command line as a careful user reads it.

At ``COLUMNS=80`` every line ``plan``, ``gpus`` and ``runs`` print fits 80 columns, and
``--wide`` (or a pipe, where COLUMNS is unset) shows every value in full. ``--top N`` is
the one name for "show N rows". Every ``--json`` document carries ``"version"`` and its
numbers with the documented types. Every option says what it does. A hint names the file
the user gave, not a placeholder. Each call is a subprocess, as a user runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer
from catalog_support import HEADER
from interpreter import python
from paths import FAKES, REPO
from process_target import registered  # noqa: F401 - the documented "process" target

from nodus_cli.catalog import Offer
from nodus_cli.cli.app import app
from nodus_cli.records import RunStatus, RunStore, StageRecord, StageStatus, TaskRecord
from nodus_cli.text import display_width
from nodus_cli.workload import load_text

#: Long machine IDs and regions, as real catalogs have them.
LONG_IDS = (
    "crusoecloud__8xA100_80GB__96__960",
    "datacrunch__8xA100_80GB__176__960",
    "hyperstack__8xA100_80GB__224__1800",
    "massedcompute_A100-80GBx8_on_demand_bare_metal",
)
MARKET = f"""\
crusoecloud,{LONG_IDS[0]},A100-80GB,8,80,96,960,us-southcentral1-a,14.32,,x86_64
primeintellect,{LONG_IDS[1]},A100,8,80,176,960,FIN-02,11.84,,x86_64
primeintellect,{LONG_IDS[2]},A100,8,80,224,1800,CANADA-1,14.20,6.10,x86_64
shadeform,{LONG_IDS[3]},A100,8,80,128,1024,desmoines-usa-1,13.80,,x86_64
vast,8x-A100_SXM4-32-65536,A100,8,80,32,64,"British Columbia, CA, NA",10.50,,x86_64
aws,p4d.24xlarge,A100,8,40,96,1152,us-east-1,32.77,,x86_64
aws,g5.xlarge,A10G,1,22.4,4,16,us-east-1,1.006,,x86_64
acme,cpu-16,,0,,16,64,us-east-1,0.40,,x86_64
"""
LONG_NAME = "nightly-evaluation-of-the-multilingual-retrieval-model-on-every-shard"


def nodus(
    tmp_path: Path, *args: str, columns: str | None = "80", **extra: str
) -> subprocess.CompletedProcess[str]:
    """``python -m nodus_cli ARGS`` at ``columns`` wide (None: COLUMNS unset, as in a pipe)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NODUS_CATALOG", "FORCE_COLOR", "COLUMNS") and not k.startswith("NODUS_")
    }
    env.update(
        NO_COLOR="1",
        NODUS_HOME=str(tmp_path / "state"),
        NODUS_CONFIG=str(tmp_path / "config.toml"),
        **extra,
    )
    if columns is not None:
        env["COLUMNS"] = columns
    done = subprocess.run(
        [sys.executable, "-m", "nodus_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def fits(text: str, width: int = 80) -> None:
    long = [
        f"{display_width(line)}: {line}"
        for line in text.splitlines()
        if display_width(line) > width
    ]
    assert not long, "lines wider than the terminal:\n" + "\n".join(long)


def market(tmp_path: Path) -> str:
    path = tmp_path / "market.csv"
    path.write_text(HEADER + MARKET, encoding="utf-8")
    return str(path)


def workload(tmp_path: Path, body: str, name: str = "w.toml", title: str = LONG_NAME) -> str:
    path = tmp_path / name
    path.write_text(f'name = "{title}"\nimage = "busybox:1"\ncommand = "true"\n{body}', "utf-8")
    return str(path)


def table_rows(text: str, marker: str) -> list[str]:
    return [line for line in text.splitlines() if marker in line]


def between(text: str, header: str, end: tuple[str, ...]) -> list[str]:
    """The rows of the table whose header line starts with ``header``: the lines after it
    up to the first that starts with one of ``end`` (or an empty line)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.lstrip().startswith(end):
            break
        rows.append(line)
    return rows


# -- plan ----------------------------------------------------------------------------------


def test_a_catalog_plan_with_long_machine_ids_fits_80_columns(tmp_path: Path) -> None:
    wf = workload(tmp_path, 'gpu = "A100"\ngpu_count = 8\npeak_memory_gb = 80\n')
    done = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path))
    assert done.returncode == 0, done.stderr
    fits(done.stdout)
    out = done.stdout
    assert "…" in out  # machine IDs were clipped to fit
    assert "--wide shows them all" in out
    # The selected configuration is named in full (wrapped, never clipped).
    assert "selected: vast 8x-A100_SXM4-32-65536 in British Columbia, CA, NA" in " ".join(
        line.strip() for line in out.splitlines()
    )
    # --wide: every column and every machine ID in full, on one line each.
    wide = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path), "--wide").stdout
    assert "…" not in wide and "--wide shows" not in wide
    for machine in LONG_IDS:
        (row,) = table_rows(wide, f" {machine} ")
        assert "$/GPU·h" in wide and "vCPU" in wide
        assert display_width(row) > 80
    # A pipe (no COLUMNS): no width to fit, every value in full for grep.
    piped = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path), columns=None).stdout
    assert all(table_rows(piped, f" {machine} ") for machine in LONG_IDS)


def test_a_fan_out_plan_fits_80_columns(tmp_path: Path) -> None:
    items = ", ".join(f'"shard-{i:05d}-of-the-multilingual-corpus.jsonl"' for i in range(12))
    wf = workload(
        tmp_path,
        'gpu = "A100"\npeak_memory_gb = 20\nshare_gpu = true\nbudget = 40\n'
        f"[map]\nitems = [{items}]\nparallel = 8\n",
    )
    done = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path))
    assert done.returncode == 0, done.stderr
    fits(done.stdout)
    assert "ranked by price per task-hour" in done.stdout
    assert "fan-out: 12 items" in done.stdout


def test_a_plan_with_warnings_and_notes_fits_80_columns(tmp_path: Path) -> None:
    # Stale prices (a warning), a vast size that is a minimum, disk not listed, a CPU-only
    # stage that falls back to a GPU machine (notes), and a measured runtime (two more
    # columns).
    (tmp_path / "config.toml").write_text(
        "[catalog]\nmax_age_days = 0.001\n[limits]\nmax_price_per_hour = 40.0\n"
    )
    wf = workload(
        tmp_path,
        "budget = 100\n"
        '[[stages]]\nname = "prepare-every-input-shard"\n[stages.requirements]\ncpu = 64\n'
        'disk_gb = 500\n[[stages]]\nname = "score"\ngpu = "A100"\ngpu_count = 8\n',
    )
    cat = market(tmp_path)
    text = load_text(Path(wf).read_text(), wf)
    assert text.workload is not None
    store = RunStore.open(tmp_path / "state")
    for offer in (o for o in _offers(cat) if o.gpu == "A100" and o.gpu_memory_gb == 80):
        run = store.create_run(text.workload, "local", offer.price_per_hour, wf)
        stage = StageRecord(
            "score", StageStatus.SUCCEEDED, 0, runtime_seconds=12345.0, config=offer.as_json()
        )
        store.save_stage(run.id, 1, stage)
        store.finish_run(run.id, RunStatus.SUCCEEDED, 0, 40.0)
    done = nodus(tmp_path, "plan", wf, "--catalog", cat)
    assert done.returncode == 0, done.stderr
    fits(done.stdout)
    out = done.stdout
    assert out.count("warning:") == 1 and out.count("note:") >= 3
    assert "est. cost" in out and "price ceiling: $40.00/h" in out
    wide = nodus(tmp_path, "plan", wf, "--catalog", cat, "--wide").stdout
    assert "runtime" in wide and "12,345 s" in wide


def test_a_plan_with_nothing_eligible_fits_80_columns(tmp_path: Path) -> None:
    wf = workload(tmp_path, 'gpu = "A100"\ngpu_count = 8\n[requirements]\nlocation = "asia"\n')
    done = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path))
    assert done.returncode == 3
    fits(done.stdout)
    assert "nearest offers:" in done.stdout
    assert "No eligible configuration for stage main (location) (exit 3)." in done.stdout


def test_plan_top(tmp_path: Path) -> None:
    wf = workload(tmp_path, 'gpu = "A100"\ngpu_count = 8\n')
    out = nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path), "--top", "2").stdout
    rows = between(out, "     #", ("…", "selected:"))
    assert [row.replace("→", "").split()[0] for row in rows] == ["1", "2"]
    assert "… 4 more (--top N shows more, --json lists all)" in out
    doc = json.loads(nodus(tmp_path, "plan", wf, "--catalog", market(tmp_path), "--json").stdout)
    assert len(doc["stages"][0]["candidates"]) == 6  # --json lists all


def _offers(cat: str) -> tuple[Offer, ...]:
    from nodus_cli import catalog

    return catalog.load_user_catalog(Path(cat)).offers


# -- gpus ----------------------------------------------------------------------------------


def test_gpus_fits_80_columns_cheapest_first(tmp_path: Path) -> None:
    done = nodus(tmp_path, "gpus")
    assert done.returncode == 0
    fits(done.stdout)
    rows = [row for row in between(done.stdout, "model", ("…",)) if " GB " in row]
    # The lowest price per GPU-hour of each model, "-" for a model with no offer.
    prices = [next((t for t in row.split() if t.startswith("$") or t == "-"), "") for row in rows]
    offered = [float(p.lstrip("$").replace(",", "")) for p in prices if p.startswith("$")]
    assert len(offered) > 20 and offered == sorted(offered)
    assert prices[len(offered) :] and all(p == "-" for p in prices[len(offered) :])
    wide = nodus(tmp_path, "gpus", "--wide").stdout
    assert "vendor" in wide and "machine" in wide and "region" in wide


def test_gpus_name_fits_80_columns(tmp_path: Path) -> None:
    done = nodus(tmp_path, "gpus", "A100", "--catalog", market(tmp_path))
    assert done.returncode == 0
    fits(done.stdout)
    assert "6 offers from 5 suppliers" in done.stdout
    wide = nodus(tmp_path, "gpus", "A100", "--catalog", market(tmp_path), "--wide").stdout
    for machine in LONG_IDS:
        assert f" {machine} " in wide
    assert "spot $/h" in wide and "$6.10" in wide
    # The embedded catalog: hundreds of A100 offers, the 20 cheapest shown.
    embedded = nodus(tmp_path, "gpus", "A100")
    fits(embedded.stdout)
    assert "more offers (--top N shows more, --json lists all)" in embedded.stdout


def test_gpus_top(tmp_path: Path) -> None:
    out = nodus(tmp_path, "gpus", "--top", "3", "--catalog", market(tmp_path)).stdout
    rows = between(out, "model", ("…",))
    assert len(rows) == 3
    assert [row.split()[0] for row in rows[:2]] == ["A10G", "A100"]  # $1.01, then $1.31
    assert "more models (--top N shows more, --json lists all)" in out
    out = nodus(tmp_path, "gpus", "A100", "--top", "2", "--catalog", market(tmp_path)).stdout
    rows = [line for line in out.splitlines() if line.startswith(("vast", "primeintellect"))]
    assert [r.split()[0] for r in rows] == ["vast", "primeintellect"]  # $1.31, $1.48 per GPU
    assert "… 4 more offers" in out
    out = nodus(tmp_path, "gpus", "A100", "--top", "5", "--catalog", market(tmp_path)).stdout
    assert "… 1 more offer (--top N" in out  # one, not "1 more offers"
    assert nodus(tmp_path, "gpus", "--top", "0").returncode == 2


# -- runs ----------------------------------------------------------------------------------

FOUR_STAGES = f"""
name = "{LONG_NAME}"
image = "busybox:1"
command = "true"
[[stages]]
name = "prepare-every-input-shard"
[[stages]]
name = "embed-with-the-large-model"
[stages.map]
items = ["s3://a-bucket/with/a/long/prefix/shard-00001.jsonl", "s3://a-bucket/with/a/long/prefix/shard-00002.jsonl"]
[[stages]]
name = "score"
[[stages]]
name = "write-the-report"
"""


def recorded_runs(tmp_path: Path) -> list[str]:
    """Three finished runs of a long-named four-stage workload, on two targets."""
    w = load_text(FOUR_STAGES, "w.toml").workload
    assert w is not None
    store = RunStore.open(tmp_path / "state")
    offer = _offers(market(tmp_path))[0]
    ids = []
    for target, status, code in (
        ("local", RunStatus.SUCCEEDED, 0),
        ("swarm", RunStatus.BUDGET_EXHAUSTED, 4),
        ("local", RunStatus.FAILED, 1),
    ):
        run = store.create_run(w, target, offer.price_per_hour, str(tmp_path / "w.toml"))
        store.set_running(run.id)
        store.save_stage(
            run.id,
            0,
            StageRecord(
                "prepare-every-input-shard", StageStatus.SUCCEEDED, 0, config=offer.as_json()
            ),
        )
        store.save_tasks(
            run.id,
            1,
            [
                TaskRecord(0, w.stages[1].map.items[0], StageStatus.SUCCEEDED, 0),  # type: ignore[union-attr]
                TaskRecord(1, w.stages[1].map.items[1], StageStatus.FAILED, 1),  # type: ignore[union-attr]
            ],
        )
        store.finish_run(run.id, status, code, 12.5)
        ids.append(run.id)
    return ids


def test_runs_fits_80_columns(tmp_path: Path) -> None:
    ids = recorded_runs(tmp_path)
    done = nodus(tmp_path, "runs")
    assert done.returncode == 0, done.stderr
    fits(done.stdout)
    for run_id in ids:
        assert run_id in done.stdout  # never clipped: the other commands take it
    assert LONG_NAME not in done.stdout and "nightly-eval" in done.stdout
    wide = nodus(tmp_path, "runs", "--wide").stdout
    assert wide.count(LONG_NAME) == 3
    assert "embed-with-the-large-model:" in wide and "write-the-report:skipped" in wide
    assert "target" in wide and "budget_exhausted" in wide
    detail = nodus(tmp_path, "runs", ids[0])
    assert detail.returncode == 0
    fits(detail.stdout)
    wide = nodus(tmp_path, "runs", ids[0], "--wide").stdout
    assert "s3://a-bucket/with/a/long/prefix/shard-00002.jsonl" in wide


def test_runs_top_and_its_former_names(tmp_path: Path) -> None:
    recorded_runs(tmp_path)
    for flag in ("--top", "--limit", "-n"):
        doc = json.loads(nodus(tmp_path, "runs", flag, "1", "--json").stdout)
        assert len(doc["runs"]) == 1
        listed = nodus(tmp_path, "runs", flag, "2").stdout
        assert len([line for line in listed.splitlines() if line.startswith("20")]) == 2
    helped = nodus(tmp_path, "runs", "--help").stdout
    assert "--top" in helped and "--limit" not in helped  # the former names still work
    assert nodus(tmp_path, "runs", "--top", "0").returncode == 2  # not "no runs recorded"


# -- JSON: a version in every document, numbers as documented -------------------------------


def versioned(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(done.stdout)
    assert doc["version"] == 1, doc
    assert next(iter(doc)) == "version"  # first, where a reader looks
    return doc


def floats(doc: dict[str, Any], *keys: str) -> None:
    for key in keys:
        assert doc[key] is None or type(doc[key]) is float, (key, doc[key])


OFFER_FLOATS = ("gpu_memory_gb", "memory_gb", "price_per_hour", "price_per_gpu_hour")


def test_plan_gpus_and_catalog_json_carry_a_version(tmp_path: Path) -> None:
    cat = market(tmp_path)
    wf = workload(tmp_path, 'gpu = "A100"\ngpu_count = 8\n')
    plan = versioned(nodus(tmp_path, "plan", wf, "--catalog", cat, "--json"))
    for candidate in plan["stages"][0]["candidates"]:
        floats(candidate, *OFFER_FLOATS)
    # run --dry-run prints the plan: the same document.
    dry = versioned(nodus(tmp_path, "run", wf, "--dry-run", "--json", "--target", "local"))
    assert dry["target"] == "local"
    gpus = versioned(nodus(tmp_path, "gpus", "--json", "--catalog", cat))
    assert all(type(m) is float for g in gpus["gpus"] for m in g["memory_gb"])
    one = versioned(nodus(tmp_path, "gpus", "A100", "--json", "--catalog", cat))
    assert one["offers"] and all(floats(o, *OFFER_FLOATS) is None for o in one["offers"])
    versioned(nodus(tmp_path, "catalog", "--json"))
    versioned(nodus(tmp_path, "catalog", "--json", "--catalog", cat))
    checked = versioned(nodus(tmp_path, "validate", wf, "--json"))
    assert checked["valid"] is True


def test_catalog_update_json_carries_a_version(tmp_path: Path) -> None:
    import skypilot_samples as samples
    from catalog_server import Route, serving

    with serving() as server:
        server.routes["/acme.csv"] = Route(samples.NODUS_CSV.encode())
        done = nodus(tmp_path, "catalog", "update", f"acme={server.url('/acme.csv')}", "--json")
        assert done.returncode == 0, done.stderr
        assert versioned(done)["updated"] is True
        failed = nodus(
            tmp_path, "catalog", "update", server.url("/missing.csv"), "--json", "--retries", "0"
        )
        assert failed.returncode == 1
        assert versioned(failed)["updated"] is False


def test_runs_and_stop_json_carry_a_version(tmp_path: Path) -> None:
    ids = recorded_runs(tmp_path)
    listed = versioned(nodus(tmp_path, "runs", "--json"))
    config = listed["runs"][0]["stages"][0]["configuration"]
    floats(config, *OFFER_FLOATS)
    one = versioned(nodus(tmp_path, "runs", ids[0], "--json"))
    assert [t["index"] for t in one["stages"][1]["tasks"]] == [0, 1]
    stopped = nodus(tmp_path, "stop", ids[0], "--json")
    assert stopped.returncode == 1  # it was not running
    assert versioned(stopped)["runs"][0]["result"] == "not_running"
    assert nodus(tmp_path, "stop", "nonexistent", "--json").returncode == 2
    versioned(nodus(tmp_path, "spend", "--json"))


def test_nodes_json_carries_a_version_and_floats(tmp_path: Path) -> None:
    from fake_engine import FakeEngine, ping, reply

    gib = 1024**3
    gpus = [{"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": f"GPU-{i}"}} for i in range(8)]
    node = {
        "ID": "p4x7pcq2yq1n0m3z5u2d9k8a1",
        "Status": {"State": "ready"},
        "Spec": {
            "Role": "manager",
            "Availability": "active",
            "Labels": {"nodus.gpu": "H100", "nodus.gpu_memory_gb": "80"},
        },
        "Description": {
            "Hostname": "gpu-node-1",
            "Resources": {
                "NanoCPUs": 192 * 10**9,
                "MemoryBytes": 2048 * gib,
                "GenericResources": gpus,
            },
        },
    }
    with FakeEngine() as fake:
        fake.route("GET", "/_ping", ping("1.45"))
        fake.route("GET", r"/v1\.4\d/nodes", reply(200, [node]))
        fake.route("GET", r"/v1\.4\d/tasks", reply(200, []))
        doc = versioned(nodus(tmp_path, "nodes", "--json", DOCKER_HOST=fake.host))
    (found,) = doc["nodes"]
    floats(found, "cpus", "memory_gb", "gpu_memory_gb", "price_per_hour")
    assert (found["gpu"], found["gpu_memory_gb"], found["gpus"]) == ("H100", 80.0, 8)


def test_swarm_init_node_json_carries_a_version(tmp_path: Path) -> None:
    env = {"PATH": f"{FAKES / 'bin'}{os.pathsep}{os.environ['PATH']}", "NODUS_FAKE_GPUS": "h100x8"}
    doc = versioned(nodus(tmp_path, "swarm", "init-node", "--json", "--price", "98.32", **env))
    assert doc["labels"]["nodus.gpu"] == "H100" and doc["applied"] == []
    assert all(type(g["memory_gb"]) is float for g in doc["gpus"])


def test_run_rerun_and_detach_json_carry_a_version(
    registered: dict[str, str],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    work = tmp_path / "w.toml"
    work.write_text('image = "unused"\ncommand = ["sh", "-c", "echo hello"]\n')

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nodus_cli", *args],
            capture_output=True,
            text=True,
            env=registered,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )

    ran = versioned(cli("run", str(work), "--target", "process", "--json"))
    assert ran["status"] == "succeeded" and type(ran["cost"]) is float
    again = versioned(cli("rerun", ran["id"], "--json"))
    assert again["status"] == "succeeded" and again["id"] != ran["id"]
    detached = versioned(cli("run", str(work), "--target", "process", "--detach", "--json"))
    assert set(detached) >= {"id", "status", "pid", "exit_code", "message"}


def test_the_json_page_parses_and_matches_what_the_commands_print(tmp_path: Path) -> None:
    import re

    page = (REPO / "docs" / "json.md").read_text("utf-8")
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", page, re.S)]
    assert len(blocks) >= 15
    documents = [b for b in blocks if "version" in b]
    assert all(b["version"] == 1 and next(iter(b)) == "version" for b in documents)
    # The documented top-level fields of plan, gpus, catalog and validate are the ones printed.
    cat = market(tmp_path)
    wf = workload(tmp_path, 'gpu = "A100"\ngpu_count = 8\n')
    for args in (
        ["plan", wf, "--catalog", cat],
        ["gpus"],
        ["gpus", "A100"],
        ["catalog"],
        ["validate", wf],
    ):
        printed = set(versioned(nodus(tmp_path, *args, "--json")))
        assert any(set(b) == printed for b in documents), args


# -- help and hints ------------------------------------------------------------------------


def test_plan_gpus_and_runs_start_without_rich_docker_or_httpx(tmp_path: Path) -> None:
    wf = workload(tmp_path, 'gpu = "A100"\ngpu_count = 8\n')
    for args in (["plan", wf, "--catalog", market(tmp_path)], ["gpus", "A100"], ["runs"]):
        code = (
            "import sys\nfrom nodus_cli.__main__ import main\n"
            f"main({args!r})\n"
            "print(sorted(m for m in ('rich', 'docker', 'httpx') if m in sys.modules), "
            "file=sys.stderr)\n"
        )
        done = python(code, {**os.environ, "NODUS_HOME": str(tmp_path / "state"), "COLUMNS": "80"})
        assert done.stderr.strip().splitlines()[-1] == "[]", (args, done.stderr)


def test_every_option_and_argument_says_what_it_does() -> None:
    root = typer.main.get_command(app)

    def walk(command: Any, path: str) -> Any:
        yield path, command
        for name, sub in (getattr(command, "commands", None) or {}).items():
            yield from walk(sub, f"{path} {name}")

    missing = []
    for path, command in walk(root, "nodus"):
        if command.name == "_exec":  # internal: started by --detach, never by a user
            continue
        if not (command.help or "").strip():
            missing.append(path)
        missing += [
            f"{path} {param.name}" for param in command.params if not (param.help or "").strip()
        ]
    assert not missing, f"no help text: {missing}"


def test_a_refusal_hints_the_plan_of_the_file_the_user_gave(tmp_path: Path) -> None:
    folder = tmp_path / "my workloads"
    folder.mkdir()
    (folder / "big.toml").write_text(
        'image = "busybox:1"\ncommand = "true"\ngpu = "H100"\ngpu_count = 8\n'
    )
    env = {"PATH": f"{FAKES / 'bin'}{os.pathsep}{os.environ['PATH']}", "NODUS_FAKE_GPUS": "mixed"}
    done = nodus(folder, "run", "big.toml", **env)
    assert done.returncode == 3
    assert "hint: `nodus plan big.toml` shows the configurations elsewhere" in done.stderr
    done = nodus(tmp_path, "run", str(folder / "big.toml"), **env)
    assert f"hint: `nodus plan '{folder / 'big.toml'}'`" in done.stderr  # quoted for a shell
    assert "FILE" not in done.stderr


def test_the_catalog_and_its_sources_fit_80_columns_without_clipping_a_source(
    tmp_path: Path,
) -> None:
    done = nodus(tmp_path, "catalog")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    # where each supplier's rows come from, whole: repo@commit, then the path beneath it
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["aws"])
    import re

    assert re.search(r"embedded  skypilot-org/skypilot-catalog@[0-9a-f]{12}$", lines[at])
    assert re.fullmatch(r" +catalogs/v\d+/aws/vms\.csv", lines[at + 1])
    assert "…" not in done.stdout
    wide = nodus(tmp_path, "catalog", columns="200").stdout  # one line a supplier when it fits
    assert re.search(r"skypilot-catalog@[0-9a-f]{12} catalogs/v\d+/aws/vms\.csv", wide)
