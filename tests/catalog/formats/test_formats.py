"""The format interface: the registry, a new format in one module, the row rules every
format's rows go through, and accounts that add up."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import skypilot_samples as samples
from hypothesis import given, settings
from hypothesis import strategies as st

from nodus_cli.catalog import formats, rows
from nodus_cli.catalog.formats import FormatError, nodus, skypilot
from nodus_cli.catalog.formats.skypilot import reading
from nodus_cli.catalog.sources import Source
from nodus_cli.catalog.update import parse


def test_every_format_is_found_by_its_first_line() -> None:
    assert [f.name for f in formats.formats()] == ["nodus", "skypilot"]
    nodus_header = samples.NODUS_CSV.splitlines()[0].split(",")
    found = formats.detect(nodus_header)
    assert found is not None and found.name == "nodus"
    found = formats.detect(samples.AWS_V7.splitlines()[0].split(","))
    assert found is not None and found.name == "skypilot"
    assert formats.detect(["a", "b"]) is None


@pytest.fixture
def mycloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A format of its own, ``a;machine;gpu;price`` lines: one module, one line in MODULES."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mycloud_format.py").write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass
            from nodus_cli.catalog.formats import Converted, Refused

            @dataclass(frozen=True)
            class MyCloud:
                name: str = "mycloud"

                def detect(self, header):
                    return header == ["machine;gpu;price"]

                def convert(self, text, supplier):
                    out = Converted(self.name, "machine;gpu;price")
                    for number, line in enumerate(text.splitlines()[1:], start=2):
                        out.rows_read += 1
                        machine, gpu, price = line.split(";")
                        if gpu == "TPU":
                            out.refused.append(Refused(number, "not a GPU", (number,)))
                            continue
                        cells = (supplier, machine, "moon-1", gpu, "1", "", "8", "32", "",
                                 "", price, "", "")
                        out.add(cells, (number,))
                    return out

            FORMAT = MyCloud()
            """
        )
    )
    monkeypatch.syspath_prepend(str(package))
    import mycloud_format

    monkeypatch.setitem(sys.modules, "nodus_cli.catalog.formats.mycloud", mycloud_format)
    monkeypatch.setattr(formats, "MODULES", (*formats.MODULES, "mycloud"))
    formats.formats.cache_clear()
    yield "mycloud"
    formats.formats.cache_clear()


def test_a_new_format_is_one_module_and_one_line(mycloud: str) -> None:
    body = b"machine;gpu;price\nm1;H100;2.5\nm2;TPU;1.0\nm3;Z9000;1.0\n"
    checked = parse(Source("moon", "https://example.com/moon.txt"), body)
    assert checked.format == "mycloud"
    (row,) = checked.rows
    assert row[:4] == ("moon", "m1", "moon-1", "H100")  # the same row rules as any format
    assert {(r.line, r.reason.split(" (")[0], r.bad) for r in checked.refused} == {
        (3, "not a GPU", False),
        (4, "unknown GPU 'Z9000'", True),
    }
    assert checked.rows_read == 3 == checked.rows_used + checked.rows_refused


def test_the_nodus_format_names_what_its_header_lacks() -> None:
    with pytest.raises(FormatError, match=r"lacks the column\(s\) gpu_count") as caught:
        nodus.FORMAT.convert("supplier,machine_id,gpu\n", "")
    assert caught.value.line == 1
    converted = nodus.FORMAT.convert(samples.NODUS_CSV, "ignored")
    assert converted.rows_read == 4
    checked = formats.check(converted)
    assert [r[1] for r in checked.rows] == ["cpu-8", "h100x8", "l4x1"]  # the file's order
    (bad,) = checked.refused
    assert (bad.line, bad.lines, bad.bad) == (4, (4,), True)


def test_a_spot_only_row_is_refused_and_counted_not_bad() -> None:
    text = samples.NODUS_CSV.splitlines()[0] + "\nacme,p5e,H200,8,141,192,2048,us,,30.5,x86_64\n"
    checked = formats.check(nodus.FORMAT.convert(text, ""))
    (refused,) = checked.refused
    assert (refused.reason, refused.bad, refused.lines) == ("no on-demand price", False, (2,))
    assert checked.rows_refused == 1 and checked.rows_used == 0


# -- the row rules: one set, whether a machine's rows are checked together or one by one -------

_NUMBER = st.sampled_from(["", "0", "1.5", " 2 ", "-1", "abc", "nan", "inf", "1e3", "0.0"])
_REGION = st.sampled_from(["us-east-1", " eu ", "", "ap-south-1"])
_MACHINES = st.sampled_from(
    [
        ("aws", "p5.48xlarge", "H100", "8", "80", "192", "2048", "", "x86_64", ""),
        ("aws", "x", "Z9000", "1", "", "", "", "", "", ""),
        ("vast", "1x-H200-32-65536", "H200", "1", "141", "32", "64", "", "", ""),
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    _MACHINES,
    st.lists(st.tuples(_REGION, _NUMBER, _NUMBER), min_size=1, max_size=6),
)
def test_a_machines_rows_together_are_its_rows_one_by_one(
    machine: tuple[str, ...], offers: list[tuple[str, str, str]]
) -> None:
    regions, prices, spots = (list(column) for column in zip(*offers, strict=True))
    together = rows.check_offers(machine, regions, prices, spots)
    one_by_one = [rows.check_offers(machine, [r], [p], [s])[0] for r, p, s in offers]
    shown = [str(x) if isinstance(x, ValueError) else x for x in together]
    assert shown == [str(x) if isinstance(x, ValueError) else x for x in one_by_one]


# -- the SkyPilot reader: the fast one and the csv module's read the same -----------------


@pytest.mark.parametrize(
    "text",
    [samples.AWS_V7, samples.GCP_V8, samples.RUNPOD_V7, samples.AZURE_V6, samples.VAST_V8],
    ids=["aws", "gcp", "runpod", "azure", "vast"],
)
def test_the_fast_reader_reads_what_the_csv_module_reads(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = formats.check(skypilot.FORMAT.convert(text, "x"))

    def refuse(lines: list[str], layout: object) -> object:
        raise IndexError  # as a short line does: the csv module reads the file

    monkeypatch.setattr(reading, "_fast_rows", refuse)
    slow = formats.check(skypilot.FORMAT.convert(text, "x"))
    assert sorted(fast.rows) == sorted(slow.rows)
    assert sorted((r.line, r.reason) for r in fast.refused) == sorted(
        (r.line, r.reason) for r in slow.refused
    )
    assert fast.rows_read == slow.rows_read == len(text.strip().splitlines()) - 1
