"""What a Swarm run's end waits for, without a cluster: the manager's engine holding no
container of the run (Swarm removes a removed service's containers after the call returns),
or words saying that Swarm is still removing them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodus_cli.records import RunStore
from nodus_cli.targets.swarm import target as swarm_target
from nodus_cli.targets.swarm.target import SwarmTarget

RUN = "20261204-205529-abcdef"
EXITED = {"Id": "c0ffee" * 10, "Names": ["/nodus-r1-main.1.x7"], "State": "exited"}


class Manager:
    """The manager's calls a clean-up makes: one service, then containers that go after
    ``polls`` looks (never, with None)."""

    def __init__(self, polls: int | None) -> None:
        self.polls = polls
        self.looks = 0
        self.discarded: list[str] = []
        self.removed_volumes: list[str] = []

    def services(self, filters: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
        if self.discarded:
            return []
        return [{"ID": "svc1", "Spec": {"Name": "nodus-r1-main", "Labels": {}}}]

    def discard_service(self, service: dict[str, Any] | str) -> None:
        self.discarded.append(service["ID"] if isinstance(service, dict) else service)

    def objects(self, kind: str, filters: dict[str, list[str]]) -> list[dict[str, Any]]:
        return []

    def containers(self, filters: dict[str, list[str]], all: bool = True) -> list[dict[str, Any]]:
        assert filters == {"label": [f"nodus.run={RUN}"]} and all
        self.looks += 1
        gone = self.polls is not None and self.looks > self.polls
        return [] if gone else [EXITED]

    def volumes(self, filters: dict[str, list[str]] | None = None) -> list[str]:
        # A volume is removed once no container uses it: asked after the containers went.
        return ["nodus-r1-data"] if self.polls is not None and self.looks > self.polls else []

    def remove_volume(self, name: str) -> None:
        self.removed_volumes.append(name)


def _target(tmp_path: Path, manager: Manager) -> SwarmTarget:
    target = SwarmTarget(RunStore.open(tmp_path / "home"))
    target._api = manager  # type: ignore[assignment]
    return target


def test_a_runs_end_waits_until_its_containers_are_gone_from_the_manager(
    tmp_path: Path,
) -> None:
    manager = Manager(polls=3)
    left = _target(tmp_path, manager).cleanup(RUN)
    assert manager.discarded == ["svc1"]
    assert manager.looks == 4  # looked again until the exited container was gone
    assert left.complete
    assert left.removed == ["service nodus-r1-main", "volume nodus-r1-data"]
    assert manager.removed_volumes == ["nodus-r1-data"]


def test_a_container_swarm_is_still_removing_is_said_and_left_for_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(swarm_target, "REMOVAL_SECONDS", 0.2)
    manager = Manager(polls=None)
    left = _target(tmp_path, manager).cleanup(RUN)
    assert not left.complete
    assert left.remaining == [
        "1 container of the run on the manager (nodus-r1-main.1.x7): Swarm is still removing it"
    ]
