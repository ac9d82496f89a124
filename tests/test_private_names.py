"""The Python API and the command line use other modules' public names only: no
``client._store``, no ``call._item`` reached from another module (issue 31). A module's
own private names (an attribute it assigns, a field or method it defines) are its own
business; everything else it reads through a public method or property.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from paths import REPO

CHECKED = [REPO / "nodus_cli" / "api", REPO / "nodus_cli" / "cli"]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own(tree: ast.AST) -> set[str]:
    """The private names a module defines: attributes it assigns, fields, functions."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)  # a struct's private field, given by keyword
    return {n for n in found if _private(n)}


def reaches(path: Path) -> list[str]:
    """Where ``path`` uses a private name of another module, one line each."""
    tree = ast.parse(path.read_text("utf-8"))
    own = _own(tree)
    wrong = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            wrong += [
                f"{path.name}:{node.lineno}: imports {a.name} from {node.module}"
                for a in node.names
                if _private(a.name)
            ]
        elif (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and node.attr not in own
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            wrong.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return wrong


@pytest.mark.parametrize("folder", CHECKED, ids=lambda p: p.name)
def test_no_module_reaches_into_another_s_private_names(folder: Path) -> None:
    wrong = [line for path in sorted(folder.rglob("*.py")) for line in reaches(path)]
    assert not wrong, "private names of other modules:\n" + "\n".join(wrong)


def test_the_check_sees_a_private_name_of_another_module(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f(client):\n    return client._store.get(1)\n")
    assert reaches(module) == ["m.py:2: client._store"]
    module.write_text(
        "class A:\n    def __init__(self):\n        self._x = 1\n\n"
        "def f(a: A) -> int:\n    return a._x\n"
    )
    assert reaches(module) == []
