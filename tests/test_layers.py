"""The layers of docs/architecture.md, kept true: every import of every module is read
(with ``ast``, lazy imports inside functions included) and checked against the order.

A module may import from its own layer and the layers below it, never above; the modules
import no circle; the command line reaches the rest through the Python API only; nothing
below the command line touches the terminal. A failure names the module, the line and
the import, and the rule it breaks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from paths import DOCS, REPO

from nodus_cli.targets import REGISTRY

PACKAGE = REPO / "nodus_cli"

#: The layers, lowest first: each a list of module prefixes (docs/architecture.md).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "nodus_cli.errors",
            "nodus_cli.structs",
            "nodus_cli.text",
            "nodus_cli.lazy",
            "nodus_cli.collector",
            "nodus_cli.lanes",
            "nodus_cli.data",
            "nodus_cli.version",
        ),
    ),
    ("config", ("nodus_cli.config",)),
    ("hardware", ("nodus_cli.hardware",)),
    ("catalog", ("nodus_cli.catalog",)),
    ("workload", ("nodus_cli.workload",)),
    ("planning", ("nodus_cli.planning",)),
    ("functions", ("nodus_cli.functions",)),
    ("records", ("nodus_cli.records",)),
    ("targets", ("nodus_cli.targets",)),
    ("run", ("nodus_cli.run",)),
    ("api", ("nodus_cli.api",)),
    ("dashboard", ("nodus_cli.dashboard",)),
    ("cli", ("nodus_cli.cli", "nodus_cli.__main__")),
    ("door", ("nodus_cli",)),
]

#: What the command line may import besides the API: the vocabulary it renders.
CLI_MAY_USE = (
    "nodus_cli.api",
    "nodus_cli.cli",
    "nodus_cli.dashboard",
    "nodus_cli.errors",
    "nodus_cli.structs",
    "nodus_cli.text",
    "nodus_cli.workload",
    "nodus_cli",
)
#: Libraries only the command line draws with.
TERMINAL = ("rich", "typer", "click")


@dataclass(frozen=True, slots=True)
class Import:
    module: str  # the importing module
    target: str  # the module imported (a package means its __init__)
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        return f"{self.module} (line {self.line}) imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                for sub in ast.walk(inner):
                    if hasattr(sub, "lineno"):
                        lines.add(sub.lineno)
    return lines


def imports_of(name: str, path: Path, known: set[str]) -> Iterator[Import]:
    tree = ast.parse(path.read_text("utf-8"))
    typed = _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, node.lineno, node.lineno in typed)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                # `from nodus_cli.x import y`: y may be a module (then that is the import).
                full = f"{source}.{alias.name}"
                target = full if full in known else source
                yield Import(name, target, node.lineno, node.lineno in typed)


def layer_of(module: str) -> int:
    best, index = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, index = len(prefix), i
    return index


def every_import() -> list[Import]:
    found = modules()
    known = set(found)
    return [i for name, path in found.items() for i in imports_of(name, path, known)]


def ours(i: Import) -> bool:
    return i.target == "nodus_cli" or i.target.startswith("nodus_cli.")


def test_every_module_is_in_a_layer() -> None:
    homeless = [name for name in modules() if layer_of(name) < 0]
    assert not homeless, f"modules in no layer of docs/architecture.md: {homeless}"


def test_no_module_imports_upward() -> None:
    upward = [
        f"{i}: layer {LAYERS[layer_of(i.module)][0]} may not use "
        f"layer {LAYERS[layer_of(i.target)][0]}"
        for i in every_import()
        if ours(i) and layer_of(i.target) > layer_of(i.module)
    ]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_the_modules_import_no_circle() -> None:
    graph: dict[str, set[str]] = {}
    for i in every_import():
        # Imports under `if TYPE_CHECKING:` count too: a circle a reader must follow to
        # understand either module is a circle, whether or not Python runs it.
        if ours(i) and i.target != i.module:
            graph.setdefault(i.module, set()).add(i.target)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    shown = [" -> ".join(c) for c in cycles if " -> ".join(c) not in _BEING_UNDONE]
    assert not shown, "import circles:\n" + "\n".join(shown)


#: Circles whose undoing is under way in a branch (removed when it lands).
_BEING_UNDONE: set[str] = set()


def test_the_command_line_goes_through_the_python_api() -> None:
    wrong = [
        f"{i}: a command renders what nodus_cli.api returns; it does not reach into "
        f"{i.target.split('.')[1]}"
        for i in every_import()
        if i.module.startswith("nodus_cli.cli")
        and ours(i)
        and not any(i.target == p or i.target.startswith(p + ".") for p in CLI_MAY_USE)
    ]
    assert not wrong, "\n".join(wrong)


#: What the dashboard may import: the Python API and the vocabulary every layer shares.
DASHBOARD_MAY_USE = (
    "nodus_cli.api",
    "nodus_cli.dashboard",
    "nodus_cli.errors",
    "nodus_cli.structs",
    "nodus_cli.text",
    "nodus_cli.config",
    "nodus_cli",
)
#: The web libraries only the dashboard imports.
WEB = ("starlette", "uvicorn")


def test_the_dashboard_goes_through_the_python_api() -> None:
    wrong = [
        f"{i}: the dashboard is a client of nodus_cli.api, as the command line is; it does "
        f"not reach into {i.target.split('.')[1]}"
        for i in every_import()
        if i.module.startswith("nodus_cli.dashboard")
        and ours(i)
        and not any(i.target == p or i.target.startswith(p + ".") for p in DASHBOARD_MAY_USE)
    ]
    assert not wrong, "\n".join(wrong)


def test_only_the_dashboard_imports_the_web_libraries() -> None:
    wrong = [
        str(i)
        for i in every_import()
        if i.target.split(".")[0] in WEB and not i.module.startswith("nodus_cli.dashboard")
    ]
    assert not wrong, "web libraries imported outside nodus_cli.dashboard:\n" + "\n".join(wrong)


def test_only_the_kubernetes_target_imports_the_kubernetes_client() -> None:
    wrong = [
        str(i)
        for i in every_import()
        if i.target.split(".")[0] == "kubernetes" and i.module != "nodus_cli.targets.kubernetes.api"
    ]
    assert not wrong, (
        "the kubernetes client (an optional extra) imported outside "
        "nodus_cli.targets.kubernetes.api:\n" + "\n".join(wrong)
    )


def test_the_command_line_reaches_the_dashboard_from_its_command_only() -> None:
    wrong = [
        str(i)
        for i in every_import()
        if i.module.startswith("nodus_cli.cli")
        and i.target.startswith("nodus_cli.dashboard")
        and i.module != "nodus_cli.cli.commands.dashboard"
    ]
    assert not wrong, "\n".join(wrong)


def test_no_command_imports_another() -> None:
    wrong = [
        str(i)
        for i in every_import()
        if i.module.startswith("nodus_cli.cli.commands.")
        and i.target.startswith("nodus_cli.cli.commands.")
        and i.target != i.module
    ]
    assert not wrong, "commands import each other:\n" + "\n".join(wrong)


def test_nothing_below_the_command_line_touches_the_terminal() -> None:
    wrong = [
        str(i)
        for i in every_import()
        if layer_of(i.module) < layer_of("nodus_cli.cli")
        and (
            i.target.split(".")[0] in TERMINAL
            or i.target.startswith("nodus_cli.cli")
            or i.target == "nodus_cli.__main__"
        )
    ]
    assert not wrong, "the domain imports the screen:\n" + "\n".join(wrong)


def test_planning_never_opens_the_run_store_and_targets_never_drive_runs() -> None:
    wrong = [
        str(i)
        for i in every_import()
        if (i.module.startswith("nodus_cli.planning") and i.target.startswith("nodus_cli.records"))
        or (i.module.startswith("nodus_cli.targets") and i.target.startswith("nodus_cli.run"))
    ]
    assert not wrong, "\n".join(wrong)


def _target_of(module: str) -> str | None:
    """The target a module belongs to (``local`` for ``nodus_cli.targets.local.queue``):
    the registry names each target's module; what they share (``targets.base``,
    ``targets.docker``, the package itself) is no target's."""
    for name, where in REGISTRY.items():
        home = where.partition(":")[0]
        if module == home or module.startswith(home + "."):
            return name
    return None


def test_no_target_imports_another() -> None:
    wrong = [
        f"{i}: a target builds on what the targets share (targets.base, targets.docker, "
        "targets.cluster) and "
        "the layers below (this machine's GPUs are nodus_cli.hardware's), never on another "
        "target"
        for i in every_import()
        if ours(i)
        and _target_of(i.module) is not None
        and _target_of(i.target) is not None
        and _target_of(i.module) != _target_of(i.target)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_cluster_layer_imports_no_target() -> None:
    wrong = [
        f"{i}: the cluster layer is what every cluster target shares; a target imports it, "
        "never the other way round"
        for i in every_import()
        if i.module.startswith("nodus_cli.targets.cluster")
        and ours(i)
        and _target_of(i.target) is not None
    ]
    assert not wrong, "\n".join(wrong)


def test_the_rule_on_targets_knows_the_targets() -> None:
    assert _target_of("nodus_cli.targets.local.machine") == "local"
    assert _target_of("nodus_cli.targets.swarm") == "swarm"
    assert _target_of("nodus_cli.targets.cluster.following") is None
    assert _target_of("nodus_cli.targets.docker.engine") is None
    assert _target_of("nodus_cli.targets.base") is None
    assert _target_of("nodus_cli.targets") is None
    assert _target_of("nodus_cli.hardware.smi") is None


#: The most lines a module of nodus_cli may have: a longer one holds more than one concept.
MAX_MODULE_LINES = 700


def test_no_module_is_over_the_length_limit() -> None:
    long = []
    for name, path in modules().items():
        n = len(path.read_text("utf-8").splitlines())
        if n > MAX_MODULE_LINES:
            long.append(f"{name} ({path.relative_to(REPO)}) has {n} lines")
    assert not long, (
        f"modules over {MAX_MODULE_LINES} lines (split each by concept, one module a noun):\n"
        + "\n".join(long)
    )


@pytest.mark.parametrize("layer", [name for name, _ in LAYERS])
def test_the_architecture_page_names_every_layer(layer: str) -> None:
    page = (DOCS / "architecture.md").read_text("utf-8")
    if layer == "door":
        assert "nodus_cli/__init__.py" in page
        return
    prefixes = dict(LAYERS)[layer]
    assert any(f"`{p.replace('nodus_cli.', '')}" in page for p in prefixes), (
        f"docs/architecture.md does not describe the {layer} layer"
    )
