"""Where things are, for tests at any depth of the tests/ tree."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FAKES = TESTS / "fakes"
DOCS = REPO / "docs"
