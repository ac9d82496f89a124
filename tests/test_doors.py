"""Rooms have doors: a module uses another module's public names only.

Every module of ``nodus_cli`` is read with ``ast``. A name that starts with one underscore
is private to the file that defines it: importing it from another module, or reaching it
as an attribute (``obj._name``) in a file that does not define ``_name`` itself, breaks
the rule. The few underscore names that are public by convention of the standard library
(``os._exit``, a named tuple's ``_replace``) are listed here, with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

from paths import REPO

PACKAGE = REPO / "nodus_cli"

#: Underscore names that are another package's public API by its own convention.
CONVENTIONS = {
    "_exit",  # os._exit: the documented way to leave a forked child
    "_replace",  # a named tuple's copy with changes (collections.namedtuple's API)
    "_asdict",
    "_fields",
    "_make",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_here(tree: ast.AST) -> set[str]:
    """Every private name this file defines: functions, classes, assignments (to a name or
    an attribute), parameters and the strings of ``__slots__``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names |= {
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            }
    return {n for n in names if _private(n)}


def _trespasses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text("utf-8"))
    own = _defined_here(tree)
    where = path.relative_to(REPO)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [
                f"{where}:{node.lineno}: imports {alias.name} from {node.module}"
                for alias in node.names
                if _private(alias.name)
            ]
        elif (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and node.attr not in own
            and node.attr not in CONVENTIONS
        ):
            found.append(f"{where}:{node.lineno}: reaches {ast.unparse(node)}")
    return found


def test_no_module_reaches_another_modules_private_names() -> None:
    found = [t for path in sorted(PACKAGE.rglob("*.py")) for t in _trespasses(path)]
    assert not found, (
        "private names used outside the file that defines them "
        "(give the owner a public name instead):\n" + "\n".join(found)
    )


def test_the_rule_sees_a_trespass(tmp_path: Path) -> None:
    # The checker itself: a private attribute of another file's object is found,
    # one defined in the same file is not.
    inside = tmp_path / "inside.py"
    inside.write_text(
        "class A:\n    def __init__(self):\n        self._x = 1\ndef peek(a):\n    return a._x\n",
        "utf-8",
    )
    outside = tmp_path / "outside.py"
    outside.write_text("from m import _helper\ndef peek(a):\n    return a._lock\n", "utf-8")
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        assert _trespasses(inside) == []
        assert _trespasses(outside) == [
            "outside.py:1: imports _helper from m",
            "outside.py:3: reaches a._lock",
        ]
    finally:
        REPO = saved
