"""What a container publishes: ``ports``, as Docker writes them (``8000``, ``"8080:80"``,
``"127.0.0.1:8080:80/udp"``, ``"[::1]:8080:80"``).

Contract: :func:`ports` returns each valid entry of one level (the workload or a stage)
with its key path; :func:`distinct` joins a stage's entries to those it inherits and
reports a host port (and protocol) published twice. nodus publishes on the host port
written, never a random one, so every entry names its host port; a port range is refused.
A stage with ``[map]`` cannot publish (:data:`WITH_MAP`): its tasks would all need the same
host port.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Any

from nodus_cli.workload.lineindex import Key
from nodus_cli.workload.model import Port, Protocol
from nodus_cli.workload.report import ProblemReport, clip, toml

__all__ = ["WITH_MAP", "WITH_MAP_WHY", "distinct", "ports"]

#: Why a stage with ``[map]`` cannot publish ports, and the error that says so.
WITH_MAP_WHY = (
    "a stage with [map] cannot publish ports: its tasks run at once and every one would "
    "need the same host port"
)
WITH_MAP = f"{WITH_MAP_WHY}; publish ports from a stage without [map]"

_PORT_NUMBER = re.compile(r"[0-9]{1,5}")


def ports(report: ProblemReport, table: dict[str, Any], prefix: Key) -> list[tuple[Port, Key]]:
    """The ``ports`` of one level (workload or stage), each with its key path."""
    if "ports" not in table:
        return []
    raw, key = table["ports"], (*prefix, "ports")
    if isinstance(raw, int | str) and not isinstance(raw, bool):
        report.error(key, f"must be a list: write ports = [{toml(raw)}]")
        return []
    if not isinstance(raw, list):
        report.error(key, 'must be a list, e.g. ports = [8000, "8080:80"]')
        return []
    found: list[tuple[Port, Key]] = []
    for index, item in enumerate(raw):
        port = _port(report, item, (*key, index))
        if port is not None:
            found.append((port, (*key, index)))
    return found


def _port(report: ProblemReport, raw: Any, key: Key) -> Port | None:
    if isinstance(raw, bool):
        report.error(
            key,
            f'must be a port number, e.g. 8000, or a string "HOST:CONTAINER", not {toml(raw)}',
        )
        return None
    if isinstance(raw, int):
        number = _port_number(report, raw, key)
        return Port(number, number) if number is not None else None
    if isinstance(raw, float):
        if math.isfinite(raw) and raw.is_integer() and 1 <= raw <= 65535:
            report.error(key, f"must be an integer: write {int(raw)}")
        else:
            report.error(key, f"must be a whole port number from 1 to 65535, not {toml(raw)}")
        return None
    if not isinstance(raw, str):
        report.error(
            key,
            'must be a port number, e.g. 8000, or a string "HOST:CONTAINER", e.g. "8080:80"',
        )
        return None
    return _port_string(report, raw, key)


def _port_string(report: ProblemReport, raw: str, key: Key) -> Port | None:
    shown = clip(raw)
    text, protocol = raw, "tcp"
    if "/" in text:
        text, _, written = text.rpartition("/")
        if written.lower() not in ("tcp", "udp"):
            report.error(
                key,
                f'"/{clip(written)}" is not a protocol nodus publishes: write /tcp (the '
                "default) or /udp",
            )
            return None
        if written != written.lower():
            report.error(key, f"write /{written.lower()} (lowercase)")
            return None
        protocol = written
    host_ip: str | None = None
    if text.startswith("["):
        bracketed = f'"{shown}" is not a port: write "[IPv6]:HOST:CONTAINER", e.g. "[::1]:8080:80"'
        end = text.find("]")
        if end < 0 or not text.startswith(":", end + 1):
            report.error(key, bracketed)
            return None
        host_ip = _host_ip(report, text[1:end], key, shown)
        if host_ip is None:
            return None
        parts = text[end + 2 :].split(":")
        if len(parts) != 2:
            report.error(key, bracketed)
            return None
    else:
        parts = text.split(":")
        if len(parts) > 3:
            report.error(
                key,
                f'"{shown}" is not a port: write "CONTAINER", "HOST:CONTAINER" or '
                '"IP:HOST:CONTAINER" (an IPv6 address goes in brackets: "[::1]:8080:80")',
            )
            return None
        if len(parts) == 3:
            host_ip = _host_ip(report, parts[0], key, shown)
            if host_ip is None:
                return None
            parts = parts[1:]
    if any("-" in p for p in parts):
        report.error(
            key,
            f'"{shown}" is a range: port ranges cannot be published; list each port, e.g. '
            "ports = [8000, 8001]",
        )
        return None
    if len(parts) == 2 and not parts[0]:
        address = f"{_bracketed(host_ip)}:" if host_ip else ""
        container = parts[1] or "80"
        report.error(
            key,
            f'"{shown}" names no host port: write one, e.g. "{address}{container}:{container}" '
            "(nodus publishes on the port you choose, never a random one)",
        )
        return None
    numbers = [_port_text(report, p, key, shown) for p in parts]
    host, inside = numbers[0], numbers[-1]
    if host is None or inside is None:
        return None
    proto: Protocol = "udp" if protocol == "udp" else "tcp"
    return Port(inside, host, proto, host_ip)


def _port_text(report: ProblemReport, text: str, key: Key, shown: str) -> int | None:
    if _PORT_NUMBER.fullmatch(text) is None:
        report.error(
            key,
            f'"{shown}": "{clip(text)}" is not a port number; write "HOST:CONTAINER" with '
            'numbers from 1 to 65535, e.g. "8080:80"',
        )
        return None
    return _port_number(report, int(text), key)


def _port_number(report: ProblemReport, number: int, key: Key) -> int | None:
    if 1 <= number <= 65535:
        return number
    report.error(key, f"{number} is not a port: ports are numbered from 1 to 65535")
    return None


def _host_ip(report: ProblemReport, text: str, key: Key, shown: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        report.error(
            key,
            f'"{shown}": "{clip(text)}" is not an IP address; write "IP:HOST:CONTAINER", '
            'e.g. "127.0.0.1:8080:80", or leave the address out to publish on every one',
        )
        return None


def distinct(
    report: ProblemReport, inherited: list[tuple[Port, Key]], own: list[tuple[Port, Key]]
) -> tuple[Port, ...]:
    """The effective list; a host port (and protocol) published twice is an error."""
    return report.unique(inherited, own, _host_port, _same_host_port)


def _host_port(port: Port) -> tuple[int, str]:
    return port.host, port.protocol


def _same_host_port(port: Port, other: str) -> str:
    return (
        f"host port {port.host}/{port.protocol} is already published by {other}: a host port "
        "takes one entry"
    )


def _bracketed(address: str) -> str:
    """An address as it stands before ``:PORT`` (IPv6 in brackets)."""
    return f"[{address}]" if ":" in address else address
