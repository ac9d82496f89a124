"""The warm-worker protocol as the caller reads it: a worker's first reply is its hello,
and a worker of another protocol version (or one that says no hello at all) is refused
with words that say what and how to fix it. The runtime's side of the table is tested in
tests/functions/test_bootstrap.py; a refused worker on the engine in test_workers.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus_cli.functions import bootstrap
from nodus_cli.targets.local import workers

RUNTIME = Path("/home/me/.nodus/runtime/0123456789abcdef")


def test_a_hello_of_this_protocol_is_accepted() -> None:
    hello = bootstrap.encode(bootstrap.HELLO, protocol=bootstrap.PROTOCOL)
    assert workers.refusal(hello.rstrip(b"\n"), RUNTIME) is None


def test_a_worker_of_another_protocol_version_is_refused_with_words() -> None:
    hello = bootstrap.encode(bootstrap.HELLO, protocol=bootstrap.PROTOCOL + 1)
    words = workers.refusal(hello.rstrip(b"\n"), RUNTIME)
    assert words == (
        f"the worker's runtime speaks warm-worker protocol {bootstrap.PROTOCOL + 1}, and this "
        f"nodus speaks protocol {bootstrap.PROTOCOL}: the runtime in {RUNTIME} is not this "
        "nodus's own; remove that folder, and the next run builds it again"
    )


def test_a_worker_that_says_no_hello_is_refused_with_what_it_said() -> None:
    words = workers.refusal(b"done 0 0", RUNTIME)  # the text protocol before versions
    assert words is not None
    assert words.startswith("the worker's runtime began with 'done 0 0', not a hello, and ")
    done = bootstrap.encode(bootstrap.DONE, item="0", code=0).rstrip(b"\n")
    assert "not a hello" in (workers.refusal(done, RUNTIME) or "")


def test_every_message_is_one_json_line_with_its_kind() -> None:
    line = bootstrap.encode(bootstrap.CALL, item="3", env={"NODUS_ITEM": "x"})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert bootstrap.decode(line) == {"kind": "call", "item": "3", "env": {"NODUS_ITEM": "x"}}


@pytest.mark.parametrize("wrong", [b"done 0 0", b"[1]", b'{"item": "3"}', b'{"kind": 3}'])
def test_a_line_that_is_no_message_is_not_read_as_one(wrong: bytes) -> None:
    with pytest.raises(ValueError, match="not a message of the warm-worker protocol"):
        bootstrap.decode(wrong)
