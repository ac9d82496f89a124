"""Plain-text output: colour only where wanted, columns aligned on what the eye sees, and
everything fitted to the terminal's width (wrapped prose, tables that drop and clip)."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

from nodus_cli.cli.output import Writer, stderr_line, terminal_width, use_colour
from nodus_cli.text import clipped, cost_text, display_width, money, plural, wrap

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


def test_a_cost_whose_price_was_not_set_is_unknown_not_0() -> None:
    assert cost_text(0.0) == "$0.00"
    assert cost_text(0.0, known=False) == "unknown"
    assert cost_text(1.2, known=False) == "$1.20 + unknown"
    assert cost_text(1.2, known=True) == "$1.20"


# -- fitting the terminal ------------------------------------------------------------------


def test_the_width_is_columns_else_the_terminal_else_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert terminal_width() == 80
    # No COLUMNS and not a terminal (a pipe, a file): no limit, every value in full.
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert terminal_width() is None
    assert Writer(colour=False).width is None
    monkeypatch.setenv("COLUMNS", "not a number")
    assert terminal_width() is None
    monkeypatch.setenv("COLUMNS", "120")
    assert Writer(colour=False, wide=True).width is None  # --wide lifts the limit


def test_prose_wraps_at_word_boundaries_with_a_hanging_indent() -> None:
    text = "  note: disk_gb: configurations that list no disk size were kept (disk can be attached)"
    lines = wrap(text, 40)
    assert all(len(line) <= 40 for line in lines)
    assert lines[0].startswith("  note: ") and all(ln.startswith("    ") for ln in lines[1:])
    assert " ".join(ln.strip() for ln in lines) == text.strip()  # every word, in order
    assert wrap("short", 40) == ["short"]


def test_a_word_longer_than_a_line_is_cut_where_the_line_ends() -> None:
    url = "https://example.com/" + "a" * 100
    lines = wrap(f"see {url} now", 40)
    assert all(len(line) <= 40 for line in lines)
    assert "".join(ln.strip() for ln in lines).replace(" ", "") == f"see{url}now"


def test_a_colour_open_at_a_break_is_closed_and_reopened() -> None:
    out = Writer(colour=True, width=30)
    out.line(out.paint("a dim sentence that goes on and on for a while", "dim"))
    assert len(out.lines) == 2
    assert all(line.startswith(("\x1b[2m", "  \x1b[2m")) for line in out.lines)
    assert all(line.endswith("\x1b[0m") for line in out.lines)
    assert all(display_width(line) <= 30 for line in out.lines)


def test_keep_never_breaks_a_phrase() -> None:
    out = Writer(colour=False, width=30)
    out.line("requirements: gpu = 1, gpu_interconnect = any, cpu = 2", keep=(" = ",))
    assert all(len(line) <= 30 for line in out.lines)
    assert not any(
        line.rstrip().endswith("=") or line.lstrip().startswith("=") for line in out.lines
    )


ROWS = [
    ["20261201-101500-abcdef", "a-very-long-workload-name-indeed", "succeeded", "0", "$1.00"],
    ["20261201-101501-123456", "short", "failed", "12", "$0.50"],
]
HEADERS = ["id", "workload", "status", "exit", "cost"]


def test_a_table_drops_columns_in_order_then_clips() -> None:
    out = Writer(colour=False, width=60)
    out.table(HEADERS, ROWS, right=(3, 4), drop=(3,), clip=(1,))
    assert out.narrowed
    header, first, second = out.lines
    assert header.split() == ["id", "workload", "status", "cost"]  # exit went first
    assert all(len(line) <= 60 for line in out.lines)
    assert "20261201-101500-abcdef" in first  # never clipped: not in clip
    assert "  a-very-long-workl…  " in first  # 74 columns wide in full: 14 fewer
    assert second.endswith("$0.50")  # still right-aligned after the drop
    assert len(first) == len(second) == 60


def test_a_table_keeps_every_column_when_it_fits_or_when_wide() -> None:
    for out in (Writer(colour=False, width=200), Writer(colour=False, width=40, wide=True)):
        out.table(HEADERS, ROWS, right=(3, 4), drop=(3,), clip=(1,))
        assert not out.narrowed
        assert out.lines[0].split() == HEADERS
        assert "a-very-long-workload-name-indeed" in out.lines[1]


def test_a_streamed_table_lays_out_on_its_look_ahead_and_loses_no_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    later = ["20261201-101502-999999", "a-much-longer-workload", "succeeded", "0", "$12345.00"]
    out = Writer(colour=False, width=80)
    out.stream_table(HEADERS, iter([*ROWS[1:], later]), right=(3, 4), look_ahead=1, clip=(1,))
    out.flush()
    header, first, last = capsys.readouterr().out.splitlines()
    assert header.split() == HEADERS
    assert first.startswith("20261201-101501-123456  short     failed")  # fitted to row 1
    assert last.startswith("20261201-101502-999999  a-much-…  succeeded")  # clip column
    assert last.endswith("  $12345.00")  # a price is never cut: the row runs longer
    assert out.narrowed
    piped = Writer(colour=False)  # a pipe: every value in full
    piped.stream_table(HEADERS, iter([*ROWS[1:], later]), right=(3, 4), look_ahead=1, clip=(1,))
    piped.flush()
    assert "a-much-longer-workload" in capsys.readouterr().out
    assert not piped.narrowed


def test_clipping_stops_at_the_header_and_spares_other_columns() -> None:
    out = Writer(colour=False, width=20)
    out.table(HEADERS, ROWS, right=(3, 4), clip=(1,))
    # It cannot fit 20 columns without touching the id: it is as narrow as it may be.
    assert "a-very-…" in out.lines[1]
    assert "20261201-101500-abcdef" in out.lines[1] and "succeeded" in out.lines[1]


def test_a_painted_cell_is_clipped_on_what_the_eye_sees() -> None:
    painted = Writer(colour=True).paint("budget_exhausted", "yellow")
    short = clipped(painted, 8)
    assert display_width(short) == 8 and ANSI.sub("", short) == "budget_…"
    assert short.endswith("\x1b[0m")


def test_a_path_keeps_its_end() -> None:
    shard = "s3://bucket/prefix/shard-00001.jsonl"
    assert clipped(shard, 20, keep_end=True) == "…x/shard-00001.jsonl"
    out = Writer(colour=False, width=30)
    out.table(["#", "item"], [["0", "s3://bucket/a/long/" + shard[12:]]], clip=(1,), keep_end=(1,))
    assert out.lines[1].startswith("0  …") and out.lines[1].endswith("/prefix/shard-00001.jsonl")
    assert len(out.lines[1]) == 30


def test_wide_characters_count_twice() -> None:
    assert display_width("日本語") == 6
    assert display_width("2× A100 → …") == 11
    assert display_width(clipped("日本語のワークロード", 7)) <= 7


@pytest.mark.parametrize(
    ("count", "shown"), [(0, "0 offers"), (1, "1 offer"), (2, "2 offers"), (1234, "1234 offers")]
)
def test_plural(count: int, shown: str) -> None:
    assert plural(count, "offer") == shown
    assert plural(count, "offer", grouped=True) == shown.replace("1234", "1,234")
    assert plural(1, "GPU model") == "1 GPU model"


def test_notes_on_stderr_fit_the_terminal_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "nodus: note: --catalog market.csv is not used by --target local (this machine)"
    monkeypatch.setenv("COLUMNS", "40")
    stderr_line(text)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(len(line) <= 40 for line in lines)
    monkeypatch.delenv("COLUMNS")  # captured stderr is not a terminal: one line, in full
    stderr_line(text)
    assert capsys.readouterr().err == text + "\n"


def test_every_table_is_drawn_by_the_writer_never_by_rich() -> None:
    # One way to draw a table (cli/output.py): Writer.table fits 80 columns and NO_COLOR.
    package = Path(__file__).resolve().parents[2] / "nodus_cli"
    drawn = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if "rich.table" in path.read_text("utf-8")
    ]
    assert drawn == []
