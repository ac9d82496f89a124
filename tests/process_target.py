"""The documented third target (docs/targets.md's ``process`` target), registered for a
test: its module taken from the page as written, its registry line added at start-up."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from paths import DOCS

PAGE = (DOCS / "targets.md").read_text("utf-8")


@pytest.fixture
def registered(tmp_path: Path) -> dict[str, str]:
    """The page's module in a package of its own, registered by one line (at start-up)."""
    module = re.search(r'```python\n("""Run each task as a plain process.*?)```', PAGE, re.S)
    assert module is not None, "the target's module is on the page"
    package = tmp_path / "third"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "process.py").write_text(module.group(1))
    # The registry line, as the page shows it, added where Python starts.
    line = re.search(r'^\s+("process": "nodus_cli\.targets\.process:ProcessTarget"),$', PAGE, re.M)
    assert line is not None, "the registry line is on the page"
    entry = line.group(1).replace("nodus_cli.targets.process", "third.process")
    (tmp_path / "sitecustomize.py").write_text(
        f"from nodus_cli.targets import REGISTRY\nREGISTRY.update({{{entry}}})\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_")}
    env.update(
        PYTHONPATH=str(tmp_path),
        NODUS_HOME=str(tmp_path / "home"),
        NODUS_CONFIG=str(tmp_path / "config.toml"),
        NO_COLOR="1",
    )
    return env
