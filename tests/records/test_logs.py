"""A run's log as JSON lines: a partial last line waits, and the log stops before the disk
is full."""

from __future__ import annotations

from pathlib import Path

import pytest
from records_support import make_workload

from nodus_cli.records import RunStore


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore.open(tmp_path / "home")


def test_the_log_is_json_lines_and_a_partial_last_line_waits(store: RunStore) -> None:
    rec = store.create_run(make_workload(), "local", 0.0, None)
    log = store.log_writer(rec.id)
    log.write("prep", None, "stdout", "one")
    log.write("train", 3, "stderr", "two")
    log.close()
    path = store.root / "logs" / f"{rec.id}.jsonl"
    with path.open("a") as handle:
        handle.write('{"time": "t", "stage": "x", "text": "unfin')
    lines, offset = store.read_log(rec.id)
    assert [(line.stage, line.item, line.stream, line.text) for line in lines] == [
        ("prep", None, "stdout", "one"),
        ("train", 3, "stderr", "two"),
    ]
    with path.open("a") as handle:
        handle.write('ished"}\n')
    more, _ = store.read_log(rec.id, offset)
    assert [line.text for line in more] == ["unfinished"]


def test_a_damaged_line_is_said_as_such_never_shown_as_output(store: RunStore) -> None:
    rec = store.create_run(make_workload(), "local", 0.0, None)
    log = store.log_writer(rec.id)
    log.write("main", None, "stdout", "before")
    log.close()
    path = store.root / "logs" / f"{rec.id}.jsonl"
    with path.open("a") as handle:
        handle.write('{"time": "t", "stage": "main", "te\x00\x00' + "z" * 500 + "\n")
        handle.write('["not", "an entry"]\n')
    log = store.log_writer(rec.id)
    log.write("main", None, "stdout", "after")
    log.close()
    lines, _ = store.read_log(rec.id)
    damaged = f"warning: a damaged line of the log {rec.id}.jsonl"
    assert [(line.stream, line.text[: len(damaged)]) for line in lines] == [
        ("stdout", "before"),
        ("nodus", damaged),
        ("nodus", damaged),
        ("stdout", "after"),
    ]
    assert lines[1].text.startswith(
        f"warning: a damaged line of the log {rec.id}.jsonl (not a log entry), left out of "
        'the output: \'{"time": "t", "stage": "main", "te\\x00\\x00zzz'
    )
    assert len(lines[1].text) < 250 and lines[1].text.endswith("…'")


def test_a_log_of_an_older_nodus_is_plain_text(store: RunStore) -> None:
    rec = store.create_run(make_workload(), "local", 0.0, None)
    (store.root / "logs" / f"{rec.id}.log").write_text("main | hello\n[1, 2]\n")
    lines, _ = store.read_log(rec.id)
    assert [(line.stream, line.text) for line in lines] == [
        ("stdout", "main | hello"),
        ("stdout", "[1, 2]"),
    ]


def test_the_log_stops_before_the_disk_is_full(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodus_cli.records import logs

    rec = store.create_run(make_workload(), "local", 0.0, None)
    log = store.log_writer(rec.id)
    log.write("main", None, "stdout", "kept")
    monkeypatch.setattr(logs, "_free_bytes", lambda path: 10)
    for i in range(200):
        log.write("main", None, "stdout", f"line {i}")
    assert not log.complete and "nearly" in (log.problem or "")
    lines, _ = store.read_log(rec.id)
    assert lines[0].text == "kept" and "the log ends here" in lines[-1].text
