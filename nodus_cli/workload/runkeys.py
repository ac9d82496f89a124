"""The rules of what a stage runs and what its container reaches: ``command``,
``entrypoint``, ``env``, ``mounts``, ``ports``, ``[map]`` and ``output_dir``.

:class:`RunKeys` is the half of the normalizer that knows these keys, and the reporting
both halves share: every problem carries its key path and line, and a file reports at most
:data:`MAX_PROBLEMS` problems (a 1 MiB file of mistakes stays fast, and a report longer
than that is never read to its end). Paths resolve against ``base_dir`` (the workload
file's folder); whether a host path exists is checked when a run starts, never here: CI
validates workloads without their data.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
import stat
from pathlib import Path
from typing import Any, Literal

from nodus_cli.errors import Problem, Severity
from nodus_cli.workload import environment
from nodus_cli.workload.hints import MAX_NAME
from nodus_cli.workload.model import MAX_MAP_ITEMS, RESERVED_ENV, MapSpec, Mount, Port, Protocol
from nodus_cli.workload.tomlsource import Key, LineIndex, display_key

#: The error for a string with a NUL character (no process argument or path can hold one).
NUL_CHARACTER = "must not contain a NUL character (\\u0000)"

#: A file reports at most this many errors, and as many warnings; the rest are counted in
#: one last problem.
MAX_PROBLEMS = 1000
#: The work directory nodus mounts in every container (``$NODUS_WORK_DIR``); it must stay
#: equal to ``nodus_cli.targets.docker.containers.WORK_DIR_IN_CONTAINER`` (a test checks).
WORK_DIR = "/nodus/work"
#: A ``[map] over`` file is read when the workload is validated: at most this many bytes.
MAX_OVER_BYTES = 16 * 1024 * 1024
MAP_KEYS = ("items", "over", "parallel")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_PORT_NUMBER = re.compile(r"[0-9]{1,5}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MAX_NUMBER = 2**63
_SHELL = "/bin/sh"

Where = Literal["top", "requirements", "stage", "stage_requirements", "map"]


class RunKeys:
    def __init__(self, lines: LineIndex | None, path: str, base_dir: Path) -> None:
        self.lines = lines
        self.path = path
        self.base_dir = base_dir
        self.problems: list[Problem] = []
        self.shown: dict[Severity, int] = {"error": 0, "warning": 0}
        self.hidden: dict[Severity, int] = {"error": 0, "warning": 0}

    # -- reporting -----------------------------------------------------------------

    def error(self, key: Key, message: str) -> None:
        self._add(key, message, "error")

    def warn(self, key: Key, message: str) -> None:
        self._add(key, message, "warning")

    @property
    def full(self) -> bool:
        """Whether no more errors are shown: callers may skip work that only builds one."""
        return self.shown["error"] >= MAX_PROBLEMS

    def _add(self, key: Key, message: str, severity: Severity) -> None:
        if self.shown[severity] >= MAX_PROBLEMS:
            self.hidden[severity] += 1
            return
        self.shown[severity] += 1
        loc = printable(display_key(key))
        self.problems.append(Problem(loc, printable(message), severity, self.line(key)))

    def line(self, key: Key) -> int | None:
        return self.lines.line_of(key) if self.lines is not None else None

    def _at_line(self, key: Key) -> str:
        """`` (line 7)`` when the key's line is known, else nothing."""
        line = self.line(key)
        return f" (line {line})" if line is not None else ""

    def left_out(self) -> Problem | None:
        """The problems past :data:`MAX_PROBLEMS`, counted in one problem."""
        errors, warnings = self.hidden["error"], self.hidden["warning"]
        if not errors and not warnings:
            return None
        counts = " and ".join(
            f"{n:,} more {word}{'s' if n != 1 else ''}"
            for n, word in ((errors, "error"), (warnings, "warning"))
            if n
        )
        return Problem(
            "",
            f"{counts} not shown: nodus reports the first {MAX_PROBLEMS:,} errors and "
            f"{MAX_PROBLEMS:,} warnings of a file; fix these and validate again",
            "error" if errors else "warning",
        )

    def _check_keys(
        self, table: dict[str, Any], prefix: Key, allowed: tuple[str, ...], where: Where
    ) -> None:
        raise NotImplementedError  # the normalizer's

    # -- command and entrypoint ------------------------------------------------------

    def command(self, doc: dict[str, Any], key: Key) -> tuple[list[str] | None, bool]:
        """The command and whether it is a string (run by ``/bin/sh -c``)."""
        if "command" not in doc:
            return None, False
        raw = doc["command"]
        empty = "must not be empty; omit it to run the image's own command"
        if isinstance(raw, str):
            if not raw.strip():
                self.error(key, empty)
                return None, False
            if "\x00" in raw:
                self.error(key, NUL_CHARACTER)
                return None, False
            return [_SHELL, "-c", raw], True
        if isinstance(raw, list):
            if not raw:
                self.error(key, empty)
                return None, False
            arguments = self._strings(raw, key)
            return arguments, False
        self.error(
            key,
            'must be a list of strings, e.g. ["python", "train.py"], or one string run by '
            "/bin/sh -c",
        )
        return None, False

    def entrypoint(self, doc: dict[str, Any], key: Key) -> list[str] | None:
        """``entrypoint``: a list of strings (``[]`` clears the image's ENTRYPOINT)."""
        if "entrypoint" not in doc:
            return None
        raw = doc["entrypoint"]
        if isinstance(raw, str):
            words = raw.split()[:8] if len(raw) <= 1000 else []
            fix = "[" + ", ".join(json.dumps(w, ensure_ascii=False) for w in words) + "]"
            self.error(
                key,
                f"must be a list of strings, not one string: write entrypoint = {fix} "
                "(the image's ENTRYPOINT is replaced by exactly these arguments; [] clears it)",
            )
            return None
        if not isinstance(raw, list):
            self.error(
                key,
                'must be a list of strings, e.g. entrypoint = ["python"], or [] to clear the '
                "image's ENTRYPOINT",
            )
            return None
        return self._strings(raw, key)

    def _strings(self, raw: list[Any], key: Key) -> list[str] | None:
        ok = True
        for index, arg in enumerate(raw):
            if isinstance(arg, str) and "\x00" not in arg:
                continue
            ok = False
            if self.full:  # only counted: skip building the message
                self.hidden["error"] += 1
            elif not isinstance(arg, str):
                self.error(
                    (*key, index), f"every argument must be a string: write {toml(arg, True)}"
                )
            else:
                self.error((*key, index), NUL_CHARACTER)
        return list(raw) if ok else None

    def shell_and_entrypoint(
        self, text: str, command_key: Key, entrypoint: list[str], entrypoint_key: Key
    ) -> None:
        """A command string with an entrypoint: the string's shell replaces the entrypoint.

        Reported at the command when the entrypoint is inherited, else at the entrypoint.
        """
        try:
            import shlex

            words = shlex.split(text) if len(text) <= 1000 else []
        except ValueError:
            words = text.split()
        listed = "[" + ", ".join(json.dumps(w, ensure_ascii=False) for w in words) + "]"
        fix = f", e.g. command = {listed}" if words and len(words) <= 12 else ""
        report_at, other, other_key = command_key, "entrypoint", entrypoint_key
        if len(entrypoint_key) > len(command_key):  # the stage's own entrypoint
            report_at, other, other_key = entrypoint_key, "the command string", command_key
        at = f" ({other}: line {self.line(other_key)})" if self.line(other_key) else ""
        if not entrypoint:
            self.error(
                report_at,
                "a command string already runs via /bin/sh -c, without the image's ENTRYPOINT: "
                f"write command as a list{fix}, or remove entrypoint = []{at}",
            )
            return
        self.error(
            report_at,
            "a command string runs via /bin/sh -c, which replaces the entrypoint: write command "
            f"as a list to pass it to the entrypoint{fix}{at}",
        )

    # -- env ---------------------------------------------------------------------------

    def env(self, raw: Any, key: Key) -> dict[str, str]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.error(key, 'must be a table, e.g. env = { HF_HOME = "/cache" }')
            return {}
        env: dict[str, str] = {}
        for name, value in raw.items():
            path = (*key, name)
            if not _ENV_NAME.match(name):
                self.error(
                    path,
                    "is not a valid environment variable name: use letters, digits and _, "
                    "not starting with a digit",
                )
                continue
            if name in RESERVED_ENV:
                self.error(path, f"{name} is set by nodus in every container; choose another name")
                continue
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                self.error(path, f"must be a string: write {name} = {toml(value, quoted=True)}")
                continue
            if isinstance(value, float) and not math.isfinite(value):
                self.error(path, f'must be a string: write {name} = "{value}"')
                continue
            if isinstance(value, str) and "\x00" in value:
                self.error(path, NUL_CHARACTER)
                continue
            text = value if isinstance(value, str) else str(value)
            if not self._env_value(name, text, path):
                continue
            env[name] = text
        return env

    def _env_value(self, name: str, text: str, path: Key) -> bool:
        """Check a value's templates; warn about secrets written into the file."""
        literal = True
        if "$" in text:
            try:
                parts = environment.parse(text)
            except environment.TemplateError as exc:
                self.error(path, str(exc))
                return False
            literal = not any(isinstance(p, environment.Template) for p in parts)
            bare = environment.bare_references(text)
            if bare:
                first = bare[0]
                self.warn(
                    path,
                    f"${first} is passed as written: neither nodus nor Docker expands it; write "
                    f"${{{first}}} to take {first} from the environment when the run starts, "
                    f"or $${first} to keep the $ and silence this",
                )
        if literal and text and environment.looks_secret(name):
            self.warn(
                path,
                f"{name} looks like a secret written into the file: write "
                f'{name} = "${{{name}}}" to take it from the environment when the run starts '
                "(a literal is stored in the file and in run records)",
            )
        return True

    # -- paths -----------------------------------------------------------------------

    def host_path(self, raw: str, key: Key) -> str | None:
        """A host path as written, absolute: ``~`` is the home folder, a relative path is
        relative to ``base_dir``. None, reported at ``key``, when ``~user`` names no user."""
        text = raw
        if text.startswith("~"):
            text = os.path.expanduser(text)
            if text.startswith("~"):
                self.error(
                    key, f'"{clip(raw)}" starts with an unknown user\'s ~: write the full path'
                )
                return None
        return os.path.normpath(os.path.join(self.base_dir, text))

    def output_dir(self, doc: dict[str, Any]) -> str | None:
        if "output_dir" not in doc:
            return None
        raw, key = doc["output_dir"], ("output_dir",)
        if not isinstance(raw, str):
            self.error(key, 'must be a folder path in quotes, e.g. output_dir = "out"')
            return None
        if not raw.strip():
            self.error(key, 'is empty: write a folder, e.g. output_dir = "out", or omit it')
            return None
        if "\x00" in raw:
            self.error(key, NUL_CHARACTER)
            return None
        path = self.host_path(raw, key)
        if path is None:
            return None
        if os.path.isfile(path):
            self.error(
                key,
                f'"{clip(raw)}" is a file ({path}): output_dir names a folder, which receives '
                "one folder per run; choose another path",
            )
            return None
        return path

    # -- mounts ------------------------------------------------------------------------

    def mounts(self, table: dict[str, Any], prefix: Key) -> list[tuple[Mount, Key]]:
        """The ``mounts`` of one level (workload or stage), each with its key path."""
        if "mounts" not in table:
            return []
        raw, key = table["mounts"], (*prefix, "mounts")
        if isinstance(raw, str):
            self.error(key, f"must be a list: write mounts = [{toml(raw)}]")
            return []
        if isinstance(raw, dict):
            self.error(key, _long_mount(raw) or _MOUNTS_LIST)
            return []
        if not isinstance(raw, list):
            self.error(key, _MOUNTS_LIST)
            return []
        found: list[tuple[Mount, Key]] = []
        for index, item in enumerate(raw):
            entry = (*key, index)
            mount = self._mount(item, entry)
            if mount is not None:
                found.append((mount, entry))
        return found

    def _mount(self, item: Any, key: Key) -> Mount | None:
        if isinstance(item, dict):
            self.error(key, _long_mount(item) or _MOUNT_STRING)
            return None
        if not isinstance(item, str):
            self.error(key, _MOUNT_STRING)
            return None
        if not item.strip():
            self.error(
                key, 'is empty: write "SOURCE:TARGET[:ro]", e.g. "./data:/data", or remove it'
            )
            return None
        if "\x00" in item:
            self.error(key, NUL_CHARACTER)
            return None
        shown = clip(item)
        parts = item.split(":")
        if len(parts) == 1:
            if item.startswith("/"):
                self.error(
                    key,
                    f'"{shown}" names no source: an anonymous volume is not supported; name it, '
                    f'e.g. "cache:{shown}", or mount a host folder, e.g. "./data:{shown}"',
                )
            else:
                self.error(
                    key,
                    f'"{shown}" names no container path: write SOURCE:TARGET[:ro], e.g. '
                    f'"{shown}:/data"',
                )
            return None
        if len(parts) > 3:
            self.error(
                key,
                f'"{shown}" has {len(parts) - 1} colons: write SOURCE:TARGET[:ro] (neither path '
                'may contain ":")',
            )
            return None
        source, target = parts[0], parts[1]
        read_only = self._mount_mode(parts[2], key) if len(parts) == 3 else False
        if read_only is None:
            return None
        source_path = self._mount_source(source, target, key)
        target_path = self._mount_target(target, source, key)
        if source_path is None or target_path is None:
            return None
        line = self.line(key)
        where = f"{self.path}:{line}" if line is not None else self.path
        return Mount(source_path, target_path, read_only, item, f"{where}: {display_key(key)}")

    def _mount_mode(self, mode: str, key: Key) -> bool | None:
        if mode in ("ro", "rw"):
            return mode == "ro"
        if mode.lower() in ("ro", "rw"):
            self.error(key, f"write :{mode.lower()} (lowercase)")
            return None
        if not mode:
            self.error(key, 'ends with ":": write :ro for a read-only mount, or nothing')
            return None
        options = [o.strip() for o in mode.split(",")]
        why = ""
        if any(o in ("z", "Z") for o in options):
            why = (
                " (SELinux relabelling, z or Z, is not done by nodus: label the folder on the host)"
            )
        elif any(o in ("cached", "delegated", "consistent") for o in options):
            why = " (cached, delegated and consistent only tuned Docker Desktop on macOS: omit it)"
        ro = "ro" in options
        fix = "write :ro" if ro else "write :ro for a read-only mount, or nothing"
        self.error(
            key,
            f'the mode "{clip(mode)}" is not supported{why}: nodus accepts :ro (read-only) or '
            f":rw (the default); {fix}",
        )
        return None

    def _mount_source(self, source: str, target: str, key: Key) -> str | None:
        if not source:
            self.error(
                key,
                f'names no source before ":": write a host path, e.g. "./data:{clip(target)}", '
                f'or a volume name, e.g. "cache:{clip(target)}"',
            )
            return None
        if "/" in source or source in (".", "..") or source.startswith("~"):
            return self.host_path(source, key)
        if _VOLUME_NAME.fullmatch(source) is None:
            self.error(
                key,
                f'"{clip(source)}" is not a volume name: a name has letters, digits, "_", "." '
                'or "-", starting with a letter or digit; a host folder needs a "/": write '
                f'"./{clip(source)}:{clip(target)}" for one next to the workload file',
            )
            return None
        return source

    def _mount_target(self, target: str, source: str, key: Key) -> str | None:
        if not target:
            self.error(
                key,
                f'names no container path after ":": write an absolute path, e.g. '
                f'"{clip(source)}:/data"',
            )
            return None
        if not target.startswith("/"):
            self.error(
                key,
                f'the container path "{clip(target)}" is not absolute: write "/{clip(target)}"',
            )
            return None
        path = posixpath.normpath(target)
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        if path == "/":
            self.error(
                key,
                "cannot mount over the container's root folder /: choose a folder, e.g. /data",
            )
            return None
        if path == WORK_DIR or path.startswith(WORK_DIR + "/"):
            inside = "is" if path == WORK_DIR else "is inside"
            self.error(
                key,
                f"{clip(target)} {inside} nodus's own work directory ({WORK_DIR}, "
                "$NODUS_WORK_DIR), which the stages of a run share: mount elsewhere, e.g. /data",
            )
            return None
        return path

    def distinct_mounts(
        self, inherited: list[tuple[Mount, Key]], own: list[tuple[Mount, Key]]
    ) -> tuple[Mount, ...]:
        """The effective list; a container path mounted twice is an error."""
        seen = {mount.target: key for mount, key in inherited}
        for mount, key in own:
            other = seen.setdefault(mount.target, key)
            if other != key and self.full:
                self.hidden["error"] += 1  # only counted: skip building the message
            elif other != key:
                self.error(
                    key,
                    f"{mount.target} is already the target of {display_key(other)}"
                    f"{self._at_line(other)}: a container path takes one mount; remove one "
                    "or choose another path",
                )
        return tuple(mount for mount, _ in (*inherited, *own))

    # -- ports -------------------------------------------------------------------------

    def ports(self, table: dict[str, Any], prefix: Key) -> list[tuple[Port, Key]]:
        if "ports" not in table:
            return []
        raw, key = table["ports"], (*prefix, "ports")
        if isinstance(raw, int | str) and not isinstance(raw, bool):
            self.error(key, f"must be a list: write ports = [{toml(raw)}]")
            return []
        if not isinstance(raw, list):
            self.error(key, 'must be a list, e.g. ports = [8000, "8080:80"]')
            return []
        found: list[tuple[Port, Key]] = []
        for index, item in enumerate(raw):
            port = self._port(item, (*key, index))
            if port is not None:
                found.append((port, (*key, index)))
        return found

    def _port(self, raw: Any, key: Key) -> Port | None:
        if isinstance(raw, bool):
            self.error(
                key,
                f'must be a port number, e.g. 8000, or a string "HOST:CONTAINER", not {toml(raw)}',
            )
            return None
        if isinstance(raw, int):
            number = self._port_number(raw, key)
            return Port(number, number) if number is not None else None
        if isinstance(raw, float):
            if math.isfinite(raw) and raw.is_integer() and 1 <= raw <= 65535:
                self.error(key, f"must be an integer: write {int(raw)}")
            else:
                self.error(key, f"must be a whole port number from 1 to 65535, not {toml(raw)}")
            return None
        if not isinstance(raw, str):
            self.error(
                key,
                'must be a port number, e.g. 8000, or a string "HOST:CONTAINER", e.g. "8080:80"',
            )
            return None
        return self._port_string(raw, key)

    def _port_string(self, raw: str, key: Key) -> Port | None:
        shown = clip(raw)
        text, protocol = raw, "tcp"
        if "/" in text:
            text, _, written = text.rpartition("/")
            if written.lower() not in ("tcp", "udp"):
                self.error(
                    key,
                    f'"/{clip(written)}" is not a protocol nodus publishes: write /tcp (the '
                    "default) or /udp",
                )
                return None
            if written != written.lower():
                self.error(key, f"write /{written.lower()} (lowercase)")
                return None
            protocol = written
        host_ip: str | None = None
        if text.startswith("["):
            end = text.find("]")
            if end < 0 or not text.startswith(":", end + 1):
                self.error(
                    key,
                    f'"{shown}" is not a port: write "[IPv6]:HOST:CONTAINER", e.g. "[::1]:8080:80"',
                )
                return None
            host_ip = self._host_ip(text[1:end], key, shown)
            if host_ip is None:
                return None
            parts = text[end + 2 :].split(":")
            if len(parts) != 2:
                self.error(
                    key,
                    f'"{shown}" is not a port: write "[IPv6]:HOST:CONTAINER", e.g. "[::1]:8080:80"',
                )
                return None
        else:
            parts = text.split(":")
            if len(parts) > 3:
                self.error(
                    key,
                    f'"{shown}" is not a port: write "CONTAINER", "HOST:CONTAINER" or '
                    '"IP:HOST:CONTAINER" (an IPv6 address goes in brackets: "[::1]:8080:80")',
                )
                return None
            if len(parts) == 3:
                host_ip = self._host_ip(parts[0], key, shown)
                if host_ip is None:
                    return None
                parts = parts[1:]
        if any("-" in p for p in parts):
            self.error(
                key,
                f'"{shown}" is a range: port ranges cannot be published; list each port, e.g. '
                "ports = [8000, 8001]",
            )
            return None
        if len(parts) == 2 and not parts[0]:
            address = f"{parts_ip(host_ip)}:" if host_ip else ""
            container = parts[1] or "80"
            self.error(
                key,
                f'"{shown}" names no host port: write one, e.g. "{address}{container}:{container}" '
                "(nodus publishes on the port you choose, never a random one)",
            )
            return None
        numbers = [self._port_text(p, key, shown) for p in parts]
        host, inside = numbers[0], numbers[-1]
        if host is None or inside is None:
            return None
        proto: Protocol = "udp" if protocol == "udp" else "tcp"
        return Port(inside, host, proto, host_ip)

    def _port_text(self, text: str, key: Key, shown: str) -> int | None:
        if _PORT_NUMBER.fullmatch(text) is None:
            self.error(
                key,
                f'"{shown}": "{clip(text)}" is not a port number; write "HOST:CONTAINER" with '
                'numbers from 1 to 65535, e.g. "8080:80"',
            )
            return None
        return self._port_number(int(text), key)

    def _port_number(self, number: int, key: Key) -> int | None:
        if 1 <= number <= 65535:
            return number
        self.error(key, f"{number} is not a port: ports are numbered from 1 to 65535")
        return None

    def _host_ip(self, text: str, key: Key, shown: str) -> str | None:
        import ipaddress  # only when an address is written

        try:
            return str(ipaddress.ip_address(text))
        except ValueError:
            self.error(
                key,
                f'"{shown}": "{clip(text)}" is not an IP address; write "IP:HOST:CONTAINER", '
                'e.g. "127.0.0.1:8080:80", or leave the address out to publish on every one',
            )
            return None

    def distinct_ports(
        self, inherited: list[tuple[Port, Key]], own: list[tuple[Port, Key]]
    ) -> tuple[Port, ...]:
        """The effective list; a host port (and protocol) published twice is an error."""
        seen = {(port.host, port.protocol): key for port, key in inherited}
        for port, key in own:
            other = seen.setdefault((port.host, port.protocol), key)
            if other != key and self.full:
                self.hidden["error"] += 1  # only counted: skip building the message
            elif other != key:
                self.error(
                    key,
                    f"host port {port.host}/{port.protocol} is already published by "
                    f"{display_key(other)}{self._at_line(other)}: a host port takes one entry",
                )
        return tuple(port for port, _ in (*inherited, *own))

    # -- [map] -------------------------------------------------------------------------

    def map(self, raw: Any, key: Key) -> MapSpec | None:
        table = "[stages.map]" if key[0] == "stages" else "[map]"
        if not isinstance(raw, dict):
            self.error(
                key,
                f'must be a table: write {table} with items = ["a", "b"] or over = "inputs.txt" '
                "below it",
            )
            return None
        self._check_keys(raw, key, MAP_KEYS, where="map")
        has_items, has_over = "items" in raw, "over" in raw
        if has_items and has_over:
            self.error(
                (*key, "over"),
                f"{table} has both items (line {self.line((*key, 'items'))}) and over: keep "
                "exactly one (items lists the inputs; over names a file of them, one per line)",
            )
        elif not has_items and not has_over:
            self.error(
                key,
                f'{table} needs its inputs: items = ["a", "b"] or over = "inputs.txt" (a file, '
                "one input per line)",
            )
        parallel = self._parallel(raw["parallel"], (*key, "parallel")) if "parallel" in raw else 0
        items: list[str] | None = None
        over: str | None = None
        if has_items and not has_over:
            items = self._map_items(raw["items"], (*key, "items"), table)
        elif has_over and not has_items:
            over_raw = raw["over"]
            items = self._map_over(over_raw, (*key, "over"))
            over = over_raw if isinstance(over_raw, str) else None
        if items is None or parallel is None:
            return None
        return MapSpec(tuple(items), over, parallel or None)

    def _map_items(self, raw: Any, key: Key, table: str) -> list[str] | None:
        if not isinstance(raw, list):
            self.error(key, 'must be a list of strings, e.g. items = ["shard-0", "shard-1"]')
            return None
        if not raw:
            self.error(key, f"is empty: list at least one item, or remove {table}")
            return None
        if len(raw) > MAX_MAP_ITEMS:
            self.error(
                key,
                f"has {len(raw):,} items; a [map] runs at most {MAX_MAP_ITEMS:,}: split the "
                "inputs over several workloads or runs",
            )
            return None
        items: list[str] = []
        ok = True
        for index, item in enumerate(raw):
            if isinstance(item, str):
                if item and "\x00" not in item:
                    items.append(item)
                    continue
                message = "is empty: remove it" if not item else "must not contain a NUL character"
            elif isinstance(item, int) and not isinstance(item, bool):
                items.append(str(item))
                continue
            elif self.full:  # only counted: skip building the message
                message = ""
            else:
                message = f"every item must be a string or an integer: write {toml(item, True)}"
            ok = False
            self.error((*key, index), message)
        return items if ok else None

    def _map_over(self, raw: Any, key: Key) -> list[str] | None:
        if not isinstance(raw, str) or not raw.strip():
            self.error(
                key,
                'must be a file path in quotes, e.g. over = "inputs.txt" (one input per line, '
                "relative to the workload file)",
            )
            return None
        if "\x00" in raw:
            self.error(key, NUL_CHARACTER)
            return None
        path = self.host_path(raw, key)
        if path is None:
            return None
        named = f'"{clip(raw)}" ({path})'
        try:
            info = os.stat(path)
            if not stat.S_ISREG(info.st_mode):
                self.error(key, f"{named} is not a file: over names a file with one input per line")
                return None
            if info.st_size > MAX_OVER_BYTES:
                self.error(
                    key,
                    f"{named} is {info.st_size:,} bytes; an over file holds at most 16 MiB: "
                    "split the inputs over several workloads or runs",
                )
                return None
            with open(path, "rb") as handle:
                data = handle.read(MAX_OVER_BYTES + 1)
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            self.error(
                key,
                f"cannot read {named}: {reason}; over names a file relative to the workload file",
            )
            return None
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            self.error(key, f"{named} is not UTF-8 text (line {line}): save it as UTF-8")
            return None
        items: list[str] = []
        for number, line_text in enumerate(text.split("\n"), start=1):
            item = line_text.strip()
            if not item:
                continue
            if "\x00" in item:
                self.error(key, f"{named} has a NUL character on line {number}")
                return None
            items.append(item)
        if not items:
            self.error(
                key, f"{named} holds no items: every line is empty; write one input per line"
            )
            return None
        if len(items) > MAX_MAP_ITEMS:
            self.error(
                key,
                f"{named} holds {len(items):,} items; a [map] runs at most {MAX_MAP_ITEMS:,}: "
                "split the inputs over several workloads or runs",
            )
            return None
        return items

    def _parallel(self, raw: Any, key: Key) -> int | None:
        """``parallel``: an integer >= 1 (0 stands for "not set" in the return value)."""
        if isinstance(raw, bool):
            self.error(key, f"must be a whole number of tasks, at least 1, not {toml(raw)}")
            return None
        if isinstance(raw, str):
            digits = raw.strip()
            fix = f": write parallel = {digits}" if digits.isdigit() and len(digits) < 10 else ""
            self.error(key, f"must be a number without quotes{fix}")
            return None
        if isinstance(raw, float):
            if math.isfinite(raw) and raw.is_integer() and raw >= 1:
                self.error(key, f"must be an integer: write parallel = {int(raw)}")
            else:
                self.error(key, f"must be a whole number of tasks, at least 1, not {toml(raw)}")
            return None
        if not isinstance(raw, int):
            self.error(key, "must be a whole number of tasks, at least 1, e.g. parallel = 4")
            return None
        if raw < 1:
            self.error(
                key,
                f"must be at least 1, not {raw}: omit parallel to run as many tasks at once as "
                "capacity allows",
            )
            return None
        if raw >= _MAX_NUMBER:
            self.error(
                key, "is too large: omit parallel to run as many tasks at once as capacity allows"
            )
            return None
        return raw


_MOUNTS_LIST = 'must be a list of "SOURCE:TARGET[:ro]" strings, e.g. mounts = ["./data:/data:ro"]'
_MOUNT_STRING = 'must be one string "SOURCE:TARGET[:ro]", e.g. "./data:/data:ro"'


def _long_mount(table: dict[str, Any]) -> str | None:
    """Docker's long syntax (a table): the one string to write instead."""
    source = next((table[k] for k in ("source", "src", "host_path") if k in table), None)
    target = next(
        (table[k] for k in ("target", "destination", "dst", "container_path") if k in table), None
    )
    read_only = any(table.get(k) is True for k in ("read_only", "readonly", "ro"))
    if not isinstance(source, str) or not isinstance(target, str):
        return 'write it as one string "SOURCE:TARGET[:ro]", e.g. "./data:/data:ro"'
    written = f"{source}:{target}" + (":ro" if read_only else "")
    return f'write it as one string SOURCE:TARGET[:ro]: "{clip(written)}"'


def parts_ip(address: str) -> str:
    """An address as it stands before ``:PORT`` (IPv6 in brackets)."""
    return f"[{address}]" if ":" in address else address


def toml(value: Any, quoted: bool = False) -> str:
    """A value as it would be written in TOML (``quoted``: as a string)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = f"{value:g}" if math.isfinite(value) else str(value)
    elif isinstance(value, int | str):
        text = str(value)
    else:
        return '"..."'
    if quoted or isinstance(value, str):
        return json.dumps(clip(text), ensure_ascii=False)
    return text


def printable(text: str) -> str:
    """One line of text: control characters from the file are shown escaped."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def clip(text: str, limit: int = MAX_NAME) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
