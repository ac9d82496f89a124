"""targets.follower.LogFollower: a task's output streamed live, then completed from the
engine's log once the task ended, against a scripted engine (tests/fake_engine.py)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from fake_engine import FakeEngine, chunked, frames, stall

from nodus_cli.targets.docker import engine
from nodus_cli.targets.follower import LogFollower, _nanoseconds
from nodus_cli.targets.swarm import SwarmApi


def test_log_timestamps_parse_to_nanoseconds() -> None:
    assert _nanoseconds(b"1970-01-01T00:00:01.5Z") == 1_500_000_000
    assert _nanoseconds(b"1970-01-01T00:00:02.000000001Z") == 2_000_000_001
    assert _nanoseconds(b"1970-01-01T00:00:03Z") == 3_000_000_000
    assert _nanoseconds(b"garbage") is None


Frame = bytes | tuple[int, bytes]  # a stdout frame, or (1 stdout | 2 stderr, frame)


def _service_logs(live: list[Frame] | None, whole: list[Frame]) -> Any:
    """Scripted service logs: ``live`` then silence when followed (``None``: not even the
    headers), the ``whole`` log otherwise."""

    def answer(h: Any) -> None:
        follow = "follow=1" in h.path
        if follow and live is None:
            stall()(h)
            return
        sent = (live or []) if follow else whole
        body = frames(*(f if isinstance(f, tuple) else (1, f) for f in sent))
        chunked([body], "application/vnd.docker.multiplexed-stream", then_stall=follow)(h)

    return answer


def test_the_follow_stream_is_cut_and_the_rest_read_from_the_log() -> None:
    # Swarm's follow stream of service logs never ends, even once the job has: nodus
    # cuts it from another thread, then reads the whole log and shows what it missed.
    a, b, c = (f"2024-05-01T10:00:0{i}.000000001Z line{i}\n".encode() for i in (1, 2, 3))
    shown: list[str] = []
    with FakeEngine() as fake:
        fake.route("GET", r"/v1\.4\d/services/s1/logs", _service_logs([a, b], [a, b, c]))
        follower = LogFollower(
            partial(SwarmApi(fake.host).service_logs, "s1"), lambda _, ln: shown.append(ln)
        )
        follower.start()
        deadline = time.monotonic() + 5
        while len(shown) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert shown == ["line1", "line2"]  # live, while the stream stays open
        started = time.monotonic()
        follower.finish(complete=True)
        assert time.monotonic() - started < 1.5  # cut at once, not left to time out
        assert follower.followed.is_set()  # the live stream's reading is over
    assert shown == ["line1", "line2", "line3"]
    follows = [path for _, path in fake.requests if "follow=1" in path]
    assert len(follows) == 1 and "timestamps=1" in follows[0]
    (final,) = [path for _, path in fake.requests if "follow=0" in path]
    assert "since=1714557600.000000001" in final  # OVERLAP (2 s) before line2


def test_each_stream_keeps_its_own_unterminated_line() -> None:
    # The engine delivers the two streams' frames in no fixed order: stdout's last,
    # unterminated line may come before stderr lines written earlier. Neither is glued
    # to the other, and each line reaches the run on its own stream.
    tail = (1, b"2024-05-01T10:00:01.000000003Z tail")
    err1 = (2, b"2024-05-01T10:00:01.000000001Z e1\n")
    err2 = (2, b"2024-05-01T10:00:01.000000002Z e2\n")
    out1 = (1, b"2024-05-01T10:00:01.000000000Z o1\n")
    shown: list[tuple[str, str]] = []
    with FakeEngine() as fake:
        fake.route(
            "GET",
            r"/v1\.4\d/services/s1/logs",
            _service_logs([out1, tail, err1], [out1, err1, err2, tail]),
        )
        follower = LogFollower(
            partial(SwarmApi(fake.host).service_logs, "s1"),
            lambda kind, ln: shown.append((kind, ln)),
        )
        follower.start()
        deadline = time.monotonic() + 5
        while len(shown) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        follower.finish(complete=True)
    assert shown == [("stdout", "o1"), ("stderr", "e1"), ("stderr", "e2"), ("stdout", "tail")]


def test_a_follow_stream_still_unanswered_does_not_hold_up_the_end() -> None:
    line = b"2024-05-01T10:00:01.000000001Z only line\n"
    shown: list[str] = []
    with FakeEngine() as fake:
        fake.route("GET", r"/v1\.4\d/services/s1/logs", _service_logs(None, [line]))
        follower = LogFollower(
            partial(SwarmApi(fake.host).service_logs, "s1"), lambda _, ln: shown.append(ln)
        )
        follower.start()
        time.sleep(0.2)  # the follow request is under way, its answer not begun
        started = time.monotonic()
        follower.finish(complete=True)
        assert time.monotonic() - started < 1
    assert shown == ["only line"]


def test_a_container_log_stream_that_ends_early_is_completed_from_the_log() -> None:
    # Docker 20.10 can end a container's follow stream before its last lines when the
    # container wrote much just before it exited: the stream ends, cleanly, and the rest
    # never comes. Once the container has exited nodus reads its log again.
    stamped = [f"2024-05-01T10:00:0{i}.000000001Z line{i}\n".encode() for i in range(1, 6)]
    early = frames(*((1, f) for f in stamped[:2]))
    whole = frames(*((1, f) for f in stamped))
    shown: list[str] = []
    with FakeEngine() as fake:

        def answer(h: Any) -> None:
            body = early if "follow=1" in h.path else whole
            chunked([body], "application/vnd.docker.multiplexed-stream")(h)

        fake.route("GET", r"/v1\.4\d/containers/c1/logs", answer)
        live = LogFollower(
            partial(engine.Engine(fake.host).logs, "c1"), lambda _, ln: shown.append(ln)
        )
        live.start()
        assert live.followed.wait(5)  # the live stream ended by itself, three lines short
        assert shown == ["line1", "line2"]
        live.finish(complete=True)
    assert shown == ["line1", "line2", "line3", "line4", "line5"]
    (followed,) = [path for _, path in fake.requests if "follow=1" in path]
    assert "timestamps=1" in followed and "stdout=1" in followed and "stderr=1" in followed
    (final,) = [path for _, path in fake.requests if "follow=0" in path]
    assert "since=1714557600.000000001" in final and "timestamps=1" in final


def test_an_incomplete_ending_shows_only_what_arrived() -> None:
    # A task whose container is gone (or the engine with it) cannot be read again.
    line = b"2024-05-01T10:00:01.000000001Z partial"
    shown: list[str] = []
    with FakeEngine() as fake:
        fake.route(
            "GET",
            r"/v1\.4\d/containers/c1/logs",
            chunked([frames((1, line))], "application/vnd.docker.multiplexed-stream"),
        )
        live = LogFollower(
            partial(engine.Engine(fake.host).logs, "c1"), lambda _, ln: shown.append(ln)
        )
        live.start()
        assert live.followed.wait(5)
        live.finish(complete=False)
    assert shown == ["partial"]  # the unterminated last line still shown, once
    assert [path for _, path in fake.requests if "follow=0" in path] == []


class _Frames(list[tuple[int, bytes]]):
    """A log answer: its frames, and a ``close()`` as a stream's."""

    def close(self) -> None:
        pass


def test_a_final_log_that_starts_earlier_than_asked_shows_nothing_twice() -> None:
    # A server that counts in whole seconds (Kubernetes' sinceSeconds) answers the final
    # read from earlier than asked: the frames before the overlap were shown live already.
    lines = [f"2024-05-01T10:00:0{i}.000000001Z line{i}\n".encode() for i in range(1, 7)]
    shown: list[str] = []
    asked: list[str | None] = []

    def open_log(follow: bool, since: str | None) -> _Frames:
        if follow:
            return _Frames([(1, line) for line in lines[:5]])
        asked.append(since)
        return _Frames([(1, line) for line in lines])  # the whole log, whatever was asked

    follower = LogFollower(open_log, lambda _, ln: shown.append(ln))
    follower.start()
    follower.followed.wait(timeout=5)
    follower.finish(complete=True)
    assert shown == [f"line{i}" for i in range(1, 7)]
    assert asked == ["1714557603.000000001"]  # two seconds before line5
