"""Errors raised through the Python API speak the caller's language, not the file's: a
keyword (``cpu=2``, ``memory_gb=``) where a file has ``cpu = 2`` in ``[requirements]``."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus_cli import Client, InvalidWorkload
from nodus_cli.workload.hints import in_python


def square(x: int) -> int:
    return x * x


def problems(tmp_path: Path, **arguments: object) -> dict[str, str]:
    with Client(home=tmp_path / "home") as client, pytest.raises(InvalidWorkload) as caught:
        client.workload(image="python:3.11-slim", **arguments)
    return {p.loc: p.message for p in caught.value.problems}


def test_another_tools_keyword_is_answered_with_the_keyword_to_pass(tmp_path: Path) -> None:
    said = problems(tmp_path, fn=square, cpus=2, memory_bytes=2 * 1024**3)
    assert said["cpus"] == "unknown key; did you mean `cpu=`? CPUs are `cpu` (here: cpu=2)"
    assert said["memory_bytes"] == (
        "unknown key; did you mean `memory_gb=`? host memory is `memory_gb`, in GB "
        "(here: memory_gb=2)"
    )


def test_values_are_written_as_keywords_with_pythons_booleans(tmp_path: Path) -> None:
    said = problems(tmp_path, num_gpus=0.25, gpu="A100-80GB")
    assert (
        "(here: 0.25 of a GPU is share_gpu=True with peak_memory_gb=<memory" in (said["num_gpus"])
    )
    assert said["gpu"].endswith('pass gpu="A100" with peak_memory_gb=80')


def test_a_keyword_put_in_the_requirements_mapping(tmp_path: Path) -> None:
    said = problems(tmp_path, requirements={"image": "python:3.11-slim"})
    assert said["requirements.image"] == (
        "`image` is a keyword of its own, not a key of requirements={...}: pass image=..."
    )


def test_a_runs_words_for_a_caller_and_quoted_values_as_they_are() -> None:
    assert in_python(
        "out of memory: it reached its 1 GiB memory limit; raise memory_gb in [requirements]"
    ) == ("out of memory: it reached its 1 GiB memory limit; raise `memory_gb=`")
    assert in_python('name: got "a = b in [requirements]"; write name = "x"') == (
        'name: got "a = b in [requirements]"; pass name="x"'
    )


@pytest.mark.parametrize("given", [-1, True, "60s", float("nan")])
def test_keep_warm_is_seconds_at_least_zero(tmp_path: Path, given: object) -> None:
    with Client(home=tmp_path / "home") as client, pytest.raises(InvalidWorkload) as caught:
        client.run(fn=square, args=(2,), image="python:3.11-slim", keep_warm=given)
    said = {p.loc: p.message for p in caught.value.problems}
    assert said["keep_warm"] == (
        f"must be a number of seconds >= 0, not {given!r}: how long a call's warm worker "
        "waits for the next call of its kind (0: a new container for every call)"
    )
    assert not (tmp_path / "home" / "calls").exists()  # nothing was submitted
