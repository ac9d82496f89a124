"""Plain-text output: colour only where wanted, columns aligned on what the eye sees."""

from __future__ import annotations

import re

import pytest

from nodus_cli.output import Writer, money, use_colour

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_painted_cells_do_not_shift_the_columns(capsys: pytest.CaptureFixture[str]) -> None:
    out = Writer(colour=True)
    out.table(
        ["id", "status", "exit"],
        [["a", out.paint("succeeded", "green"), "0"], ["bb", "failed", "12"]],
        right=(2,),
    )
    out.flush()
    lines = [ANSI.sub("", line) for line in capsys.readouterr().out.splitlines()]
    assert lines == ["id  status     exit", "a   succeeded     0", "bb  failed       12"]


def test_without_colour_nothing_is_painted(capsys: pytest.CaptureFixture[str]) -> None:
    out = Writer(colour=False)
    out.line(out.paint("note:", "yellow") + " plain")
    out.flush()
    assert capsys.readouterr().out == "note: plain\n"


def test_no_color_wins_over_force_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_colour() is False
    monkeypatch.delenv("NO_COLOR")
    assert use_colour() is True


@pytest.mark.parametrize(
    ("value", "shown"), [(None, "-"), (0.0, "$0.00"), (19.12, "$19.12"), (0.0123, "$0.0123")]
)
def test_money(value: float | None, shown: str) -> None:
    assert money(value) == shown
