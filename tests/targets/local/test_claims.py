"""The words a queued task and a plan show (targets/local/claims.py), without an engine."""

from __future__ import annotations

from nodus_cli.targets.local.claims import Claims
from nodus_cli.targets.local.queue import Holder, Picture, Request, Use
from nodus_cli.text import ordinal


def _claims() -> Claims:
    def no_engine() -> object:
        raise AssertionError("these words need no engine")

    return Claims(no_engine, list, "/home/me/.nodus")  # type: ignore[arg-type]


def test_ordinals_read_as_english() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th",
    ]  # fmt: skip


def test_what_a_task_wants_names_the_count_or_the_shared_memory() -> None:
    assert Claims.wants("L4", Request(("a", "b"), 2, None)) == "2× L4"
    assert Claims.wants("L4", Request(("a",), 1, 10.0)) == "10 GB of one L4 (shared)"


def test_an_entry_the_engine_does_not_show_is_just_queued() -> None:
    assert _claims().entry_words("c1", None) == "queued"
    assert _claims().entry_words("c1", Picture({}, [])) == "queued"


def test_refusal_points_at_a_holder_of_this_home_with_a_plain_stop() -> None:
    mine = Holder("c1", "nodus-x", "20250101-000000-abcdef", "/home/me/.nodus", None, None, 1.0)
    held = Picture({"GPU-a": Use(whole=[mine])}, [])
    error = _claims().refusal("train", "L4", Request(("GPU-a",), 1, None), held)
    assert "stage 'train' needs 1× L4; held by run 20250101-000000-abcdef" in error.message
    assert "of NODUS_HOME" not in error.message  # the caller's own home goes unsaid
    assert error.hint is not None and "`nodus stop RUN_ID`" in error.hint


def test_refusal_by_a_warm_worker_says_it_gives_the_gpu_to_a_waiting_run() -> None:
    warm = Holder("c1", "nodus-warm-123-0", None, "/srv/ci", None, None, 1.0)
    held = Picture({"GPU-a": Use(whole=[warm])}, [])
    error = _claims().refusal("train", "L4", Request(("GPU-a",), 1, None), held)
    assert "held by warm worker nodus-warm-123-0 of NODUS_HOME /srv/ci since" in error.message
    assert error.hint is not None
    assert error.hint.startswith(
        "run without --no-wait to wait for them (queued): a warm worker gives its GPUs back "
        "as soon as a run waits for them"
    )
    assert "nodus stop None" not in error.hint
