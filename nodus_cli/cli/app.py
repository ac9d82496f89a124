"""The ``nodus`` command line: options and help only; each command's work lives below it.

Command bodies import their modules lazily so ``nodus --help`` and ``nodus validate``
never pay for the Docker SDK or the catalog. The annotations are evaluated as
written (no ``from __future__ import annotations``): typer reads every command's at each
start, and strings would cost it an ``eval`` each.
"""

from enum import StrEnum
from typing import Annotated

import typer

from nodus_cli.version import VERSION

app = typer.Typer(
    name="nodus",
    help="Validate, price and run GPU workloads described in TOML files.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
swarm_app = typer.Typer(help="Prepare machines for a Docker Swarm cluster.", no_args_is_help=True)
app.add_typer(swarm_app, name="swarm")


class Format(StrEnum):
    text = "text"
    github = "github"
    json = "json"


def _places() -> list[str]:
    """Every registered target: a new target is accepted by ``--target`` (and named in the
    help) without touching the command line."""
    from nodus_cli.api import target_names

    return target_names()


_RUN = _places()
#: What a plan can be made against: the catalog (the market of quotes) and every target.
PlanTarget = StrEnum("PlanTarget", {name: name for name in ["catalog", *_RUN]})  # type: ignore[misc]
_RUN_PLACES = ", ".join(_RUN)
_PLAN_PLACES = ", ".join(["catalog", *_RUN])


JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
WideOpt = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Every column, in full (by default a terminal's width is fitted: columns "
        "left out, long values shortened with …).",
    ),
]
CatalogOpt = Annotated[
    str | None,
    typer.Option(
        "--catalog",
        metavar="FILE.csv",
        help="Use this catalog instead of the embedded one (also NODUS_CATALOG).",
    ),
]


def _version(value: bool) -> None:
    if value:
        print(f"nodus {VERSION}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Validate, price and run GPU workloads described in TOML files."""


@app.command()
def validate(
    paths: Annotated[
        list[str], typer.Argument(metavar="PATH...", help="Workload files or folders (*.toml).")
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document on stdout (--format json).")
    ] = False,
    fmt: Annotated[
        Format,
        typer.Option(
            "--format", help="text, github (Actions annotations) or json (same as --json)."
        ),
    ] = Format.text,
    strict: Annotated[
        bool, typer.Option("--strict", help="Warnings count as errors: exit 1 on any warning.")
    ] = False,
) -> None:
    """Check workload files; exit 0 when all are valid, 1 when any is invalid."""
    from nodus_cli.cli.commands import validate as command

    chosen = "json" if as_json else fmt.value
    raise typer.Exit(command.run(paths, chosen, strict))


@app.command()
def gpus(
    name: Annotated[
        str | None, typer.Argument(metavar="NAME", help="A GPU model, in any accepted spelling.")
    ] = None,
    supplier: Annotated[
        str | None, typer.Option(metavar="NAME", help="Only this supplier's offers.")
    ] = None,
    location: Annotated[
        str | None,
        typer.Option(
            metavar="WHERE", help='Only offers in this region or area ("us-east-1", "us", "eu").'
        ),
    ] = None,
    count: Annotated[
        int | None, typer.Option(metavar="N", help="Only machines with this many GPUs.")
    ] = None,
    catalog: CatalogOpt = None,
    top: Annotated[
        int | None,
        typer.Option(
            "--top",
            metavar="N",
            min=1,
            help="Rows shown, cheapest first: models (default: all) or NAME's offers "
            "(default: 20). --json lists all.",
        ),
    ] = None,
    wide: WideOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """The canonical GPU models, cheapest per GPU-hour first, or one model's offers."""
    from nodus_cli.cli.commands import gpus as command

    raise typer.Exit(
        command.run(name, supplier, location, count, catalog, as_json, top=top, wide=wide)
    )


@app.command()
def plan(
    file: Annotated[str, typer.Argument(metavar="FILE", help="The workload file.")],
    target: Annotated[
        PlanTarget, typer.Option(help=f"Inventory to plan against: {_PLAN_PLACES}.")
    ] = PlanTarget("catalog"),
    catalog: CatalogOpt = None,
    top: Annotated[
        int,
        typer.Option(
            "--top", metavar="N", min=0, help="Candidates shown per stage (--json lists all)."
        ),
    ] = 5,
    wide: WideOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Price every configuration that can run the workload; exit 3 when none can."""
    from nodus_cli.cli.commands import plan as command

    raise typer.Exit(command.run(file, target.value, catalog, top, as_json, wide=wide))


RetriesOpt = Annotated[
    int,
    typer.Option(
        min=0,
        max=10,
        help="Re-run a task the machine failed (engine lost, node gone), never one that "
        "exited by itself; same GPU model and count.",
    ),
]
DetachOpt = Annotated[
    bool,
    typer.Option("--detach", "-d", help="Start it in the background and print the run id."),
]


@app.command()
def run(
    file: Annotated[str, typer.Argument(metavar="FILE", help="The workload file.")],
    target: Annotated[
        PlanTarget | None,
        typer.Option(
            help=f"Where to run: {_RUN_PLACES} (default: local); with --dry-run also catalog "
            "(the plan against the market, as `nodus plan`)."
        ),
    ] = None,
    catalog: CatalogOpt = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Plan against the target it would run on; run nothing."),
    ] = False,
    detach: DetachOpt = False,
    retries: RetriesOpt = 0,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            "-e",
            metavar="NAME[=VALUE]",
            help="Add to every stage's environment: NAME passes this environment's value "
            "(never stored), NAME=VALUE a literal. Repeatable.",
        ),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            metavar="DIR",
            help="Copy the work folder's contents to DIR/RUN_ID after the run (output_dir).",
        ),
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=100,
            help="Its place when it waits for GPUs held by other runs: 0 to 100, higher "
            "first (default: the workload's priority, else 50).",
        ),
    ] = None,
    no_wait: Annotated[
        bool,
        typer.Option(
            "--no-wait", help="Refuse at once (exit 3) when its GPUs are held, never queue."
        ),
    ] = False,
    wait_timeout: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Give up waiting for GPUs after this long (90s, 30m, 2h): exit 3.",
        ),
    ] = None,
    top: Annotated[int, typer.Option(help="Candidates shown per stage with --dry-run.")] = 5,
    wide: WideOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the workload: each stage as a container with exactly the GPUs asked for.

    When the GPUs it needs are held by other runs, it waits for them in line (queued),
    unless --no-wait."""
    place = (target or PlanTarget("local")).value
    if dry_run:  # plans against the target `run` would use
        from nodus_cli.cli.commands import plan as planning

        raise typer.Exit(planning.run(file, place, catalog, top, as_json, wide, dry_run=True))
    from nodus_cli.cli.commands import run as command

    waiting = command.Waiting(priority, not no_wait, wait_timeout)
    raise typer.Exit(
        command.run(file, place, catalog, detach, retries, as_json, env or None, output, waiting)
    )


@app.command()
def rerun(
    run_id: Annotated[
        str, typer.Argument(metavar="RUN_ID", help="A recorded run (see `nodus runs`).")
    ],
    detach: DetachOpt = False,
    retries: RetriesOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Run a recorded run again from its normalized workload (${NAME} resolved anew)."""
    from nodus_cli.cli.commands import run as command

    raise typer.Exit(command.rerun(run_id, detach, retries, as_json))


@app.command()
def runs(
    run_id: Annotated[
        str | None,
        typer.Argument(metavar="[RUN_ID]", help="Show one run: its stages and every item."),
    ] = None,
    top: Annotated[
        int,
        typer.Option(
            "--top", metavar="N", min=1, help="How many runs to show, newest first (--json too)."
        ),
    ] = 20,
    limit: Annotated[
        int | None,
        typer.Option("--limit", "-n", hidden=True, min=1, help="The former name of --top."),
    ] = None,
    wide: WideOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Recorded runs, newest first; or one run in detail."""
    from nodus_cli.cli.commands import runs as command

    raise typer.Exit(command.list_runs(top if limit is None else limit, as_json, run_id, wide))


@app.command()
def logs(
    run_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[RUN_ID]", help="A recorded run (a unique prefix); default: the newest."
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the run ends.")
    ] = False,
    stage: Annotated[
        str | None, typer.Option(metavar="NAME", help="Only this stage's lines.")
    ] = None,
    item: Annotated[
        int | None, typer.Option(metavar="N", help="Only item N of a fan-out stage.")
    ] = None,
    tail: Annotated[
        int | None, typer.Option(metavar="N", help="Only the last N lines (then follow).")
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="JSON lines: one object per line (time, stage, item, stream, text).",
        ),
    ] = False,
) -> None:
    """A run's output (stdout, stderr and nodus's own lines)."""
    from nodus_cli.cli.commands import runs as command

    raise typer.Exit(command.show_logs(run_id, as_json, follow, stage, item, tail))


@app.command()
def stop(
    run_ids: Annotated[
        list[str], typer.Argument(metavar="RUN_ID...", help="Runs to stop (unique prefixes).")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Stop running runs: remove their containers or services, free their GPUs.

    Exit 0 when it stopped something, 1 when no run named was running, 2 for an unknown id.
    """
    from nodus_cli.cli.commands import runs as command

    raise typer.Exit(command.stop_runs(run_ids, as_json))


@app.command()
def spend(
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON document on stdout: today's and this month's spend, "
            "per workload and per target, with the limits.",
        ),
    ] = False,
) -> None:
    """What the recorded runs cost today and this month (UTC), per workload and per
    target, against the spending limits ([limits] in config.toml)."""
    from nodus_cli.cli.commands import spend as command

    raise typer.Exit(command.run(as_json))


@app.command()
def dashboard(
    host: Annotated[
        str,
        typer.Option(
            help="The address to listen on: 127.0.0.1 (this machine only) by default. Any "
            "other (0.0.0.0: every network) lets others reach the page; they still need "
            "the access token, which is always on.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(min=0, max=65535, help="The port (0: any free one)."),
    ] = 8765,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the page in the web browser.")
    ] = False,
) -> None:
    """A local web page: GPUs and who holds them, the queue, runs and their logs live,
    spend, and plans. Prints its address with an access token (every request needs it);
    stopping a run is its one action. Ctrl-C ends it."""
    from nodus_cli.cli.commands import dashboard as command

    raise typer.Exit(command.run(host, port, open_browser))


NodesTarget = StrEnum("NodesTarget", {name: name for name in _RUN})  # type: ignore[misc]


@app.command()
def nodes(
    target: Annotated[
        NodesTarget,
        typer.Option(
            help=f"Whose machines: {_RUN_PLACES} (local: this machine, one entry per GPU "
            "model, with the tasks queued for them)."
        ),
    ] = NodesTarget("swarm"),
    as_json: JsonOpt = False,
) -> None:
    """The nodes of the Docker Swarm cluster (or this machine) and what they hold now."""
    from nodus_cli.cli.commands import nodes as command

    raise typer.Exit(command.run(as_json, target.value))


catalog_app = typer.Typer(
    help="Where the catalog in use comes from: path, sources, date. "
    "`nodus catalog update` refreshes the prices.",
)
app.add_typer(catalog_app, name="catalog")


@catalog_app.callback(invoke_without_command=True)
def catalog_info(ctx: typer.Context, catalog: CatalogOpt = None, as_json: JsonOpt = False) -> None:
    """Where the catalog in use comes from: path, sources, date."""
    if ctx.invoked_subcommand is not None:
        return
    from nodus_cli.cli.commands import catalog as command

    raise typer.Exit(command.run(catalog, as_json))


@catalog_app.command("update")
def catalog_update(
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="SOURCE...",
            help="URLs or paths of nodus-format CSV files or SkyPilot vms.csv files, "
            "optionally NAME=URL (default: [catalog] sources in config.toml).",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="Seconds one source may take, retries included (default: [catalog] timeout, 30).",
        ),
    ] = None,
    retries: Annotated[
        int,
        typer.Option(min=0, max=10, help="Retries after a timeout, connection error, 5xx or 429."),
    ] = 3,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="Make these sources the whole catalog (default: each replaces the suppliers "
            "it carries; the others stay).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Fetch current prices and make them the catalog in use (all sources or nothing)."""
    from nodus_cli.cli.commands import catalog as command

    raise typer.Exit(command.update(sources, as_json, timeout, retries, replace))


@swarm_app.command("init-node")
def swarm_init_node(
    price: Annotated[
        float | None, typer.Option(help="This machine's price in USD per hour (node label).")
    ] = None,
    machine_id: Annotated[
        str | None, typer.Option(help="Catalog machine ID this node is (prices it).")
    ] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Write daemon.json and set the node labels.")
    ] = False,
    daemon_json: Annotated[str, typer.Option(help="Docker daemon configuration file.")] = (
        "/etc/docker/daemon.json"
    ),
    as_json: JsonOpt = False,
) -> None:
    """Prepare this machine as a GPU node: generic resources, NVIDIA runtime, node labels."""
    from nodus_cli.cli.commands import nodes as command

    raise typer.Exit(command.init_node(price, machine_id, apply, daemon_json, as_json))


@app.command(name="_exec", hidden=True)
def _exec(
    run_id: str,
    retries: Annotated[int, typer.Option()] = 0,
    catalog: CatalogOpt = None,
) -> None:
    """Run a recorded run in the background (used by --detach)."""
    from nodus_cli.cli.commands import run as command

    raise typer.Exit(command.execute_recorded(run_id, retries, catalog))
