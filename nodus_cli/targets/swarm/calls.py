"""A Python function call on Swarm: the call travels with the service, the outcome comes
back through its log.

A node has none of the caller's folders, so nothing goes through a host path:

- **The runtime** (the bootstrap and the caller's cloudpickle) becomes Swarm configs,
  one per file, made once per run and mounted at ``/nodus/runtime`` in each of its tasks.
- **The call** (the pickled function and the item's arguments) becomes Swarm secrets:
  encrypted in the cluster's store, mounted only into the task's container, cut into
  parts of at most :data:`PART_BYTES` (Swarm's limit is 500 KB each); the runtime joins
  them in the container (``bootstrap.py --unpack``).
- **The outcome** (``outcome.json`` and the result or the exception) is printed by the
  runtime after the call as frames of base64 lines; :class:`~nodus_cli.targets.calls.Framed`
  cuts them out of the
  task's output and writes them into the call's folder here, so the outcome is read as
  on the local target. The function's own output passes on as the task's.

A call carries at most :data:`VALUE_LIMIT` bytes each way (pickled; a 16 MiB value fits):
a larger function with its arguments is refused before the run starts
(:func:`check`), a larger result fails the call, both naming the limit. Secrets and
configs are labelled with the run: each task's secrets go with its service, the rest
with the run (:func:`remove_all`).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_cli.errors import InvalidInput
from nodus_cli.functions import runtime
from nodus_cli.functions.layout import RUNTIME_IN_CONTAINER, CallFolder
from nodus_cli.structs import field, replace, struct
from nodus_cli.targets import calls
from nodus_cli.targets.base import (
    Task,
    TaskContext,
    TaskEnd,
    TaskState,
)
from nodus_cli.targets.docker import engine
from nodus_cli.targets.docker.containers import LABEL_RUN, ContainerSpec

if TYPE_CHECKING:
    from nodus_cli.targets.swarm.api import ObjectKind, SwarmApi
    from nodus_cli.workload import Workload

__all__ = ["PART_BYTES", "VALUE_LIMIT", "Carrier", "Carry", "check", "remove_all"]

#: The most a call carries each way, pickled (at least 16 MiB of value).
VALUE_LIMIT = 17 * 2**20
#: One secret's size (Swarm refuses more than 500 KB).
PART_BYTES = 500 * 1000
#: Where the parts are mounted in the container, and where they are joined.
PARTS_IN_CONTAINER = "/run/secrets"
CALL_IN_TASK = "/tmp/nodus-call"
#: Labels the kind of a secret or config nodus made for a call.
LABEL_PART = "nodus.part"
_MISSING = "executable file not found"


def check(workload: Workload, home: Path) -> None:
    """Refuse a function run whose call cannot travel: over :data:`VALUE_LIMIT`."""
    for item in calls.call_items(workload, home):
        total = _size(item.folder.function) + _size(item.folder.args(item.index))
        if total > VALUE_LIMIT:
            which = f" (item {item.index})" if item.mapped else ""
            raise InvalidInput(
                f"{item.function.name}: the function and its arguments{which} pickle to "
                f"{total / 2**20:.1f} MiB, over the {VALUE_LIMIT >> 20} MiB a call may "
                "carry to a Swarm service",
                hint="pass what the function can fetch itself (a path on a shared volume, "
                "a URL) instead of the data, or run it on the local target, which passes "
                "1 GiB and more",
            )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


@struct
class Carry:
    """What one task's service carries: the runtime's configs and the call's secrets."""

    configs: list[dict[str, Any]]
    secrets: list[dict[str, Any]] = field(default_factory=list)
    python: str = runtime.INTERPRETERS[0]
    item: int = 0

    def spec(self, spec: ContainerSpec) -> ContainerSpec:
        argv = [
            self.python,
            "-u",
            f"{RUNTIME_IN_CONTAINER}/{runtime.BOOTSTRAP}",
            "--unpack",
            PARTS_IN_CONTAINER,
            CALL_IN_TASK,
            str(self.item),
            str(VALUE_LIMIT),
        ]
        return replace(spec, entrypoint=argv, command=[])

    def attach(self, body: dict[str, Any]) -> None:
        container = body["TaskTemplate"]["ContainerSpec"]
        container["Configs"] = list(self.configs)
        container["Secrets"] = list(self.secrets)


#: Runs the task's service: ``run(task, ctx, live, carry)`` (the target's own ``_run``).
RunService = Callable[[Task, TaskContext, Any, Carry], TaskEnd]


class Carrier:
    """The function calls of one Swarm target: the runtime's configs per run, each task's
    secrets, and the frames of each outcome."""

    def __init__(self, api: Callable[[], SwarmApi], home: Path) -> None:
        self.api = api
        self.home = home
        self._configs: dict[str, list[dict[str, Any]]] = {}  # run -> config references
        self._lock = threading.Lock()
        self.interpreters: dict[str, str] = {}

    def run(self, task: Task, ctx: TaskContext, live: Any, run: RunService) -> TaskEnd:
        """Run the call's service (``run``) and say how the call ended."""
        folder = calls.folder_of(task, self.home)
        index = calls.item_of(task)
        item = folder.item(index)
        image = task.stage.image
        python = self.interpreters.get(image, runtime.INTERPRETERS[0])
        end = self._run_once(task, ctx, live, run, folder, index, python)
        if _missing(end) and python != "python":
            self.interpreters[image] = "python"
            live.service_id, live.stopping = None, False
            end = self._run_once(task, ctx, live, run, folder, index, "python")
        if _missing(end):
            return TaskEnd(TaskState.CANNOT_START, 127, calls.no_python(task))
        return calls.ended(task, end, item)

    def _run_once(
        self,
        task: Task,
        ctx: TaskContext,
        live: Any,
        run: RunService,
        folder: CallFolder,
        index: int,
        python: str,
    ) -> TaskEnd:
        carry = Carry(self._runtime(task.run_id), python=python, item=index)
        made: list[str] = []
        try:
            carry.secrets = self._parts(task, folder, index, made)
            return run(task, calls.Framed(ctx, folder.item(index)), live, carry)
        finally:
            if live.service_id is not None:  # a secret in use cannot be removed
                with contextlib.suppress(engine.EngineFailure):
                    self.api().discard_service(live.service_id)
            for secret_id in made:
                with contextlib.suppress(engine.EngineFailure):
                    self.api().remove_object("secret", secret_id)

    def _runtime(self, run_id: str) -> list[dict[str, Any]]:
        """The run's configs of the runtime's files (made on first use)."""
        with self._lock:
            found = self._configs.get(run_id)
            if found is not None:
                return found
            api = self.api()
            refs = []
            tag = secrets.token_hex(3)
            for n, (path, data) in enumerate(runtime.files().items()):
                name = f"nodus-{run_id}-rt{n}-{tag}"
                labels = {LABEL_RUN: run_id, LABEL_PART: "runtime"}
                made = api.create_object("config", name, data, labels)
                refs.append(_reference("Config", made, name, f"{RUNTIME_IN_CONTAINER}/{path}"))
            self._configs[run_id] = refs
            return refs

    def _parts(
        self, task: Task, folder: CallFolder, index: int, made: list[str]
    ) -> list[dict[str, Any]]:
        """The call's files as secrets of at most PART_BYTES; their references."""
        api = self.api()
        refs: list[dict[str, Any]] = []
        tag = secrets.token_hex(3)
        files = {
            "function.pickle": folder.function,
            f"items__{index}__args.pickle": folder.args(index),
        }
        for name, path in files.items():
            with open(path, "rb") as handle:
                n = 0
                while True:
                    data = handle.read(PART_BYTES)
                    if not data and n > 0:
                        break
                    secret = f"nodus-{task.run_id}-{index}-{len(refs)}-{tag}"
                    labels = {LABEL_RUN: task.run_id, LABEL_PART: "call"}
                    secret_id = api.create_object("secret", secret, data, labels)
                    made.append(secret_id)
                    refs.append(_reference("Secret", secret_id, secret, f"nodus-part.{name}.{n}"))
                    n += 1
                    if len(data) < PART_BYTES:
                        break
        return refs


def remove_all(api: SwarmApi, run_id: str) -> list[str]:
    """Every secret and config of the run (its services are gone): what was removed."""
    removed = []
    kinds: tuple[ObjectKind, ...] = ("secret", "config")
    for kind in kinds:
        for doc in api.objects(kind, {"label": [f"{LABEL_RUN}={run_id}"]}):
            with contextlib.suppress(engine.EngineFailure):
                api.remove_object(kind, doc["ID"])
                removed.append(f"{kind} {(doc.get('Spec') or {}).get('Name') or doc['ID']}")
    return removed


def _reference(kind: str, object_id: str, name: str, filename: str) -> dict[str, Any]:
    """How a container spec names a secret or config (``kind``: Secret or Config) and the
    file it becomes in the container: root's, read-only."""
    file = {"Name": filename, "UID": "0", "GID": "0", "Mode": 0o444}
    return {f"{kind}ID": object_id, f"{kind}Name": name, "File": file}


def _missing(end: TaskEnd) -> bool:
    return end.state != TaskState.STOPPED and _MISSING in (end.message or "")
