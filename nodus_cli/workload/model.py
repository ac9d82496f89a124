"""The normalized workload: plain, frozen data that planners, targets and records consume.

A workload file (or the Python API's keyword arguments) becomes this model through
:mod:`nodus_cli.workload.normalizer`, which checks every rule and collects every problem;
nothing here validates. ``as_json`` gives the documented shape (``nodus validate --json``,
run records) and :func:`from_json` rebuilds a workload from it (reruns, detached runs), so
the two must stay each other's inverse: a test round-trips every field.

Values taken from the host are never part of the model: ``env`` holds what the user wrote,
``${NAME}`` templates included (:mod:`nodus_cli.workload.environment` resolves them when a
run starts).
"""

from __future__ import annotations

from typing import Any, Literal

from nodus_cli.errors import Problem
from nodus_cli.structs import field, fields, struct

ALLOWED_COUNTS = (1, 2, 4, 8)
LEGACY_OPTIMIZATION = ("automatic", "lowest_cost", "lower_cost", "balanced", "faster", "fastest")
ARCHES = ("x86_64", "arm64")

#: Keys that may stand both at the top level (flat shortcut) and in [requirements].
FLAT_SHORTCUTS = (
    "gpu",
    "gpu_count",
    "peak_memory_gb",
    "gpu_interconnect",
    "optimization",
    "share_gpu",
)
#: Keys that belong only in [requirements].
NESTED_ONLY = ("cpu", "memory_gb", "disk_gb", "location", "max_price_per_hour", "arch")
REQUIREMENT_KEYS = FLAT_SHORTCUTS + NESTED_ONLY
#: What to run and how it reaches the outside: at the top level and in a stage.
RUN_KEYS = ("image", "command", "entrypoint", "env", "mounts", "ports", "map")
TOP_LEVEL_ONLY = ("name", "image", "command", "env", "model", "budget", "stages")
#: How a run waits for GPUs other runs hold: its place in line, how long at most.
WAITING_KEYS = ("priority", "wait_timeout")
TOP_LEVEL_KEYS = (
    *TOP_LEVEL_ONLY,
    "entrypoint",
    "mounts",
    "ports",
    "map",
    "output_dir",
    *WAITING_KEYS,
    *FLAT_SHORTCUTS,
    "requirements",
)
STAGE_KEYS = ("name", *RUN_KEYS, "requirements", *FLAT_SHORTCUTS)
#: Requirements every stage takes from the workload.
WHOLE_WORKLOAD = ("location", "max_price_per_hour", "arch")
#: Requirements a stage never takes from the workload (a CPU-only step stays CPU-only).
NOT_INHERITED = ("gpu", "gpu_count", "peak_memory_gb", "memory_gb", "share_gpu")
#: Keys of the workload that a stage cannot set.
WORKLOAD_ONLY = ("model", "budget", "stages", "output_dir", *WAITING_KEYS)
#: Environment variables nodus sets in every container; a workload cannot set them.
RESERVED_ENV = (
    "NODUS_WORK_DIR",
    "NODUS_RUN_ID",
    "NODUS_STAGE",
    "NODUS_ITEM",
    "NODUS_ITEM_INDEX",
    "NODUS_ITEM_COUNT",
)
#: ``priority``: 0 to 100, higher first; what a run gets when its file says nothing.
PRIORITY_RANGE = (0, 100)
DEFAULT_PRIORITY = 50
#: The keys of a ``[map]`` table.
MAP_KEYS = ("items", "over", "parallel")
#: At most this many items in one ``[map]``.
MAX_MAP_ITEMS = 100_000

MountType = Literal["bind", "volume"]
Protocol = Literal["tcp", "udp"]


@struct(frozen=True)
class Requirements:
    """What a stage needs of a machine: GPUs, CPUs, memory, disk, place and price."""

    gpu: str | None = None
    gpu_count: int = 0
    peak_memory_gb: float | None = None
    gpu_interconnect: str = "any"
    cpu: float = 1.0
    memory_gb: float | None = None
    disk_gb: float | None = None
    location: str | None = None
    max_price_per_hour: float | None = None
    arch: str | None = None
    #: Tasks may share a device, sized by ``peak_memory_gb`` (``gpu_count`` is then 1).
    share_gpu: bool = False

    @property
    def wants_gpu(self) -> bool:
        return self.gpu_count > 0

    def as_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "gpu_count": self.gpu_count,
            "peak_memory_gb": self.peak_memory_gb,
            "gpu_interconnect": self.gpu_interconnect,
            "cpu": self.cpu,
            "memory_gb": self.memory_gb,
            "disk_gb": self.disk_gb,
            "location": self.location,
            "max_price_per_hour": self.max_price_per_hour,
            "arch": self.arch,
            "share_gpu": self.share_gpu,
        }


@struct(frozen=True)
class Mount:
    """One ``mounts`` entry (Docker ``-v`` syntax: ``SOURCE:TARGET[:ro|:rw]``).

    ``source`` is an absolute host path (a relative one was resolved against the workload
    file's folder, or the working directory for the Python API) or a volume name (no
    ``/``): a named volume, created when missing and kept after the run. Whether a host
    path exists is checked when a run starts, not when the file is validated (CI checks
    out workloads without their data); ``where`` names the entry for that message
    (``"train.toml:7: mounts[0]"``).
    """

    source: str
    target: str
    read_only: bool = False
    #: Provenance, not meaning: two mounts of the same source, target and mode are equal
    #: whatever file (or line) wrote them, so a workload written again compares equal.
    written: str = field(default="", compare=False)
    where: str | None = field(default=None, compare=False)

    @property
    def type(self) -> MountType:
        return "bind" if self.source.startswith("/") else "volume"

    def as_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "read_only": self.read_only,
            "type": self.type,
            "written": self.written,
            "where": self.where,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Mount:
        return cls(
            str(doc["source"]),
            str(doc["target"]),
            bool(doc.get("read_only", False)),
            str(doc.get("written") or ""),
            doc.get("where"),
        )


@struct(frozen=True)
class Port:
    """One ``ports`` entry: ``8000`` publishes container port 8000 on host port 8000;
    ``"8080:80"`` container port 80 on host port 8080; ``"127.0.0.1:8080:80"`` on that
    host address only; a ``/udp`` suffix for UDP."""

    container: int
    host: int
    protocol: Protocol = "tcp"
    host_ip: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "container": self.container,
            "host": self.host,
            "protocol": self.protocol,
            "host_ip": self.host_ip,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Port:
        protocol: Protocol = "udp" if doc.get("protocol") == "udp" else "tcp"
        return cls(int(doc["container"]), int(doc["host"]), protocol, doc.get("host_ip"))


@struct(frozen=True)
class MapSpec:
    """Fan-out: the stage's command runs once per item, each in its own container."""

    items: tuple[str, ...]
    #: The ``over`` file as written (None when the items were listed inline); provenance,
    #: not meaning: the items are what the file held when it was read.
    over: str | None = field(default=None, compare=False)
    #: At most this many tasks at once (None: as many as capacity allows).
    parallel: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"items": list(self.items), "over": self.over, "parallel": self.parallel}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> MapSpec:
        parallel = doc.get("parallel")
        return cls(
            tuple(str(i) for i in doc["items"]),
            doc.get("over"),
            int(parallel) if parallel is not None else None,
        )


@struct(frozen=True)
class FunctionCall:
    """A stage that calls a Python function instead of running a command (the Python
    API's ``client.run(fn=...)``, ``client.map(fn=...)``; never a file key).

    What a target needs to run it: the call's folder under ``NODUS_HOME/calls`` (the
    pickled function and each item's arguments, where the outcome is written back), and
    the Python the image must have (the caller's ``major.minor``: pickled code runs on
    that version only). The function is named ``module.qualname``.
    """

    name: str
    #: The call folder's name (``NODUS_HOME/calls/CALL``).
    call: str
    #: ``"3.11"``: the major.minor version the image's Python must have.
    python: str
    #: Seconds a single call's warm worker waits idle for the next call of its kind
    #: (``keep_warm``; 0: a container of its own, ended with the call).
    keep_warm: float = 0.0

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "call": self.call, "python": self.python}
        if self.keep_warm:
            doc["keep_warm"] = self.keep_warm
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FunctionCall:
        warm = doc.get("keep_warm")
        return cls(
            str(doc["name"]),
            str(doc["call"]),
            str(doc["python"]),
            float(warm) if isinstance(warm, int | float) else 0.0,
        )


@struct(frozen=True)
class Stage:
    """One stage of a workload, normalized: its image, command, environment and needs."""

    name: str
    image: str
    #: The command: a list as written, or ``["/bin/sh", "-c", TEXT]`` for a string (``shell``).
    command: list[str] | None
    env: dict[str, str]
    requirements: Requirements
    #: Replaces the image's ENTRYPOINT (``[]`` clears it); None keeps the image's.
    entrypoint: list[str] | None = None
    mounts: tuple[Mount, ...] = ()
    ports: tuple[Port, ...] = ()
    map: MapSpec | None = None
    #: The command was one string: it runs via ``/bin/sh -c`` whatever the ENTRYPOINT.
    shell: bool = False
    #: The Python function this stage calls (then ``command`` is None), or None.
    function: FunctionCall | None = None

    def as_json(self, env: bool = True) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "image": self.image, "command": self.command}
        if env:
            doc["env"] = dict(self.env)
        doc["requirements"] = self.requirements.as_json()
        doc["entrypoint"] = self.entrypoint
        doc["mounts"] = [m.as_json() for m in self.mounts]
        doc["ports"] = [p.as_json() for p in self.ports]
        doc["map"] = self.map.as_json() if self.map is not None else None
        doc["shell"] = self.shell
        if self.function is not None:  # only function stages carry the key
            doc["function"] = self.function.as_json()
        return doc


@struct(frozen=True)
class Workload:
    """A workload file, normalized: its stages in order and the settings of the whole run."""

    name: str
    image: str | None
    command: list[str] | None
    env: dict[str, str]
    model: str | None
    budget: float | None
    requirements: Requirements
    stages: list[Stage]
    optimization: str = "automatic"
    declared_stages: bool = False
    #: Where the work directory's contents are copied after the run (absolute), or None.
    output_dir: str | None = None
    #: Its place when it waits for GPUs: 0 to 100, higher first (``priority``).
    priority: int = DEFAULT_PRIORITY
    #: Seconds it may wait for GPUs before it gives up (``wait_timeout``); None: no limit.
    wait_timeout: float | None = None
    #: False: refused at once when its GPUs are held (``--no-wait``, ``queue=False``),
    #: never waiting in the queue. Not a file key: the caller decides.
    queue: bool = True

    def as_json(self, env: bool = True) -> dict[str, Any]:
        """The normalized workload; ``env=False`` leaves out the environment.

        ``nodus validate --json`` leaves ``env`` out: CI logs should not echo environment
        values (tokens end up there).
        """
        doc: dict[str, Any] = {"name": self.name, "image": self.image, "command": self.command}
        if env:
            doc["env"] = dict(self.env)
        doc.update(
            {
                "model": self.model,
                "budget": self.budget,
                "optimization": self.optimization,
                "output_dir": self.output_dir,
                "priority": self.priority,
                "wait_timeout": self.wait_timeout,
                "requirements": self.requirements.as_json(),
                "stages": [s.as_json(env=env) for s in self.stages],
            }
        )
        if env:  # the record's copy: how the caller asked it to wait, not a file key
            doc["queue"] = self.queue
        return doc

    @property
    def wants_gpu(self) -> bool:
        return any(s.requirements.wants_gpu for s in self.stages)


def from_json(doc: dict[str, Any]) -> Workload:
    """Rebuild a normalized workload saved as :meth:`Workload.as_json` (with env)."""

    def reqs(raw: dict[str, Any]) -> Requirements:
        return Requirements(**{f.name: raw[f.name] for f in fields(Requirements) if f.name in raw})

    def stage(s: dict[str, Any]) -> Stage:
        entrypoint = s.get("entrypoint")
        return Stage(
            s["name"],
            s["image"],
            s.get("command"),
            dict(s.get("env") or {}),
            reqs(s["requirements"]),
            entrypoint=list(entrypoint) if entrypoint is not None else None,
            mounts=tuple(Mount.from_json(m) for m in s.get("mounts") or ()),
            ports=tuple(Port.from_json(p) for p in s.get("ports") or ()),
            map=MapSpec.from_json(s["map"]) if s.get("map") else None,
            shell=bool(s.get("shell", False)),
            function=FunctionCall.from_json(s["function"]) if s.get("function") else None,
        )

    return Workload(
        name=doc["name"],
        image=doc.get("image"),
        command=doc.get("command"),
        env=dict(doc.get("env") or {}),
        model=doc.get("model"),
        budget=doc.get("budget"),
        requirements=reqs(doc["requirements"]),
        stages=[stage(s) for s in doc["stages"]],
        optimization=doc.get("optimization", "automatic"),
        declared_stages=len(doc["stages"]) != 1 or doc["stages"][0]["name"] != "main",
        output_dir=doc.get("output_dir"),
        priority=int(doc.get("priority", DEFAULT_PRIORITY)),
        wait_timeout=doc.get("wait_timeout"),
        queue=bool(doc.get("queue", True)),
    )


@struct
class Result:
    """What normalizing a file produced: a workload when there are no errors."""

    path: str
    workload: Workload | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def valid(self) -> bool:
        return self.workload is not None

    def as_json(self) -> dict[str, Any]:
        """One file entry of ``nodus validate --json``."""
        return {
            "path": self.path,
            "valid": self.valid,
            "errors": [p.as_json() for p in self.errors],
            "warnings": [p.as_json() for p in self.warnings],
            "workload": self.workload.as_json(env=False) if self.workload else None,
        }
