"""A Python function call on Kubernetes: the call travels in a Secret, the outcome comes
back through the pod's log.

A pod has none of the caller's folders, so nothing goes through a host path:

- **The runtime and the call** (nodus's bootstrap and the caller's cloudpickle, the
  pickled function and the item's arguments) are one Secret per task
  (:func:`call_secret`), named as its Job, labelled with the run and owned by the Job (the
  cluster deletes it with the Job), mounted read-only at :data:`MOUNT`: the runtime's
  files at :data:`~nodus_cli.functions.layout.RUNTIME_IN_CONTAINER`, the call's in
  :data:`PARTS`, which the runtime joins in the container (``bootstrap.py --unpack``).
- **The outcome** (``outcome.json`` and the result or the exception) is printed by the
  runtime after the call as frames of base64 lines, which
  :class:`~nodus_cli.targets.calls.Framed` cuts out of the pod's log into the call's
  folder here, so the outcome is read as on the local target. The function's own output
  passes on as the task's.

A map of a function is one Indexed Job (:mod:`.indexed`) when every call of it fits in
one Secret with the runtime (:func:`items_fit`): :func:`items_secret` holds the function,
each item's arguments (``nodus-part.items__INDEX__args.pickle.0``) and its ``NODUS_ITEM``
(``...__item.0``); :func:`attach_items` mounts the runtime's files as for one call and the
whole Secret at :data:`ALL_PARTS` (a Job of the same size whatever the count of items),
and the runtime is told ``-`` for its item: it reads its index from ``NODUS_ITEM_INDEX``
(the pod's completion index, through the downward API), so no shell is needed. Each
pod's log carries its own call's outcome, cut into that item's folder by
:class:`FramedItem`, which ends the item as :func:`~nodus_cli.targets.calls.ended` says.
A map whose calls do not fit together runs one Job (and Secret) per call.

A Secret holds at most :data:`SECRET_LIMIT` (1 MiB, the API server's limit): a function
whose pickle with its arguments and the runtime does not fit is refused before anything
is created (:func:`check`), in words naming the limit. A result comes back through the
log, up to :data:`RESULT_LIMIT`.

Why apart from :mod:`.target`: what a call adds to a task's Job (a Secret, a volume, a
command) is a pure function of the call's folder, tested without a cluster.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_cli.errors import InvalidInput
from nodus_cli.functions import runtime
from nodus_cli.functions.layout import RUNTIME_IN_CONTAINER, CallFolder
from nodus_cli.targets import calls
from nodus_cli.targets.base import ItemContext, Task, TaskEnd, TaskState
from nodus_cli.targets.docker.containers import LABEL_RUN, LABEL_STAGE
from nodus_cli.targets.kubernetes.manifest import label_value

if TYPE_CHECKING:
    from nodus_cli.workload import Stage, Workload

__all__ = [
    "ALL_PARTS",
    "CALL_IN_POD",
    "MOUNT",
    "PARTS",
    "RESULT_LIMIT",
    "SECRET_LIMIT",
    "FramedItem",
    "attach",
    "attach_items",
    "call_secret",
    "check",
    "items_fit",
    "items_secret",
    "missing_python",
]

#: Where a call's Secret is mounted in its pod.
MOUNT = str(Path(RUNTIME_IN_CONTAINER).parent)
#: Where the call's parts are (``nodus-part.NAME.0``: the runtime's ``--unpack`` names).
PARTS = f"{MOUNT}/parts"
#: Where every part of an Indexed Job's calls is mounted (the whole Secret).
ALL_PARTS = "/var/run/nodus/calls"
#: Where the runtime joins the call in the pod.
CALL_IN_POD = "/tmp/nodus-call"
#: The most a Secret holds (the API server refuses more), less room for its metadata.
SECRET_LIMIT = 1024 * 1024 - 8 * 1024
#: The most a result (or an exception) may pickle to, back through the log.
RESULT_LIMIT = 17 * 2**20
_MISSING = "executable file not found"


def _parts(index: int) -> tuple[str, str]:
    """The names of the call's parts (``__`` for ``/``: where the runtime joins them)."""
    return "nodus-part.function.pickle.0", f"nodus-part.items__{index}__args.pickle.0"


def _item_part(index: int) -> str:
    """The part that holds item ``index``'s ``NODUS_ITEM`` (the runtime sets it)."""
    return f"nodus-part.items__{index}__item.0"


def _files(folder: CallFolder, index: int) -> dict[str, Path]:
    """The call's files by their part's name."""
    function, args = _parts(index)
    return {function: folder.function, args: folder.args(index)}


def _runtime_size() -> int:
    return sum(len(data) for data in runtime.files().values())


def check(workload: Workload, home: Path) -> None:
    """Refuse a function run whose call does not fit in a Secret (:data:`SECRET_LIMIT`)."""
    for item in calls.call_items(workload, home):
        call = sum(_size(p) for p in _files(item.folder, item.index).values())
        total = call + _runtime_size()
        if total > SECRET_LIMIT:
            which = f" (item {item.index})" if item.mapped else ""
            raise InvalidInput(
                f"{item.function.name}: the function and its arguments{which} pickle to "
                f"{call / 1024:.0f} KiB, and with nodus's runtime to {total / 1024:.0f} "
                f"KiB: over the 1 MiB a Kubernetes Secret may hold, which carries the call "
                "to its pod",
                hint="pass what the function can fetch itself (a URL, a path on a volume "
                "the pod mounts) instead of the data, or run it on the local target",
            )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def items_fit(stage: Stage, home: Path) -> bool:
    """Every call of the map ``stage`` fits in one Secret with the runtime (its calls'
    folder written)."""
    if stage.function is None or stage.map is None:
        return False
    folder = CallFolder(home, stage.function.call)
    if not folder.exists():
        return False
    total = _runtime_size() + _size(folder.function)
    for index, value in enumerate(stage.map.items):
        total += _size(folder.args(index)) + len(value.encode()) + 2 * 64  # and their keys
        if total > SECRET_LIMIT:
            return False
    return True


def call_secret(
    task: Task, home: Path, name: str, namespace: str, job: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The Secret that carries ``task``'s call and the runtime, named ``name`` (its Job's);
    ``job``: the Job as the server answered (its ``uid``), which then owns it."""
    folder = calls.folder_of(task, home)
    files = _files(folder, calls.item_of(task))
    data = {key: _b64(path.read_bytes()) for key, path in files.items()}
    return _secret(task, name, namespace, job, data)


def items_secret(
    tasks: Sequence[Task], home: Path, name: str, namespace: str, job: dict[str, Any] | None
) -> dict[str, Any]:
    """The Secret of every call of a map's Indexed Job ``name`` (see the module)."""
    folder = calls.folder_of(tasks[0], home)
    data = {}
    for task in tasks:
        assert task.item is not None
        for key, path in _files(folder, task.item.index).items():
            data[key] = _b64(path.read_bytes())
        data[_item_part(task.item.index)] = _b64(task.item.value.encode())
    return _secret(tasks[0], name, namespace, job, data)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _secret(
    task: Task, name: str, namespace: str, job: dict[str, Any] | None, data: dict[str, str]
) -> dict[str, Any]:
    """The runtime's files and ``data``, as Secret ``name`` owned by ``job``."""
    data = {f"rt-{n}": _b64(content) for n, content in enumerate(runtime.files().values())} | data
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {
            LABEL_RUN: label_value(task.run_id),
            LABEL_STAGE: label_value(task.stage.name),
        },
    }
    uid = ((job or {}).get("metadata") or {}).get("uid")
    if uid:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}
        ]
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta, "data": data}


def attach(manifest: dict[str, Any], task: Task, python: str) -> None:
    """Make ``manifest`` (the task's Job) run the call: the runtime as its command, the
    Secret of the same name mounted at :data:`MOUNT`."""
    index = calls.item_of(task)
    parts = [{"key": key, "path": f"{Path(PARTS).name}/{key}"} for key in _parts(index)]
    _attach(manifest, python, parts, PARTS, str(index))


def attach_items(manifest: dict[str, Any], python: str) -> None:
    """Make ``manifest`` (a map's Indexed Job) run each pod's own call (see the module)."""
    _attach(manifest, python, [], ALL_PARTS, "-")
    name = manifest["metadata"]["name"]
    pod = manifest["spec"]["template"]["spec"]
    pod["containers"][0]["volumeMounts"].append(
        {"name": "calls", "mountPath": ALL_PARTS, "readOnly": True}
    )
    pod["volumes"].append({"name": "calls", "secret": {"secretName": name, "defaultMode": 0o444}})


def _attach(
    manifest: dict[str, Any], python: str, parts: list[dict[str, str]], where: str, item: str
) -> None:
    """The runtime as the command (its item ``item`` from the parts at ``where``), its
    files and ``parts`` of the Secret named as the Job mounted at :data:`MOUNT`."""
    name = manifest["metadata"]["name"]
    runtime_dir = Path(RUNTIME_IN_CONTAINER).name
    items = [
        {"key": f"rt-{n}", "path": f"{runtime_dir}/{path}"}
        for n, path in enumerate(runtime.files())
    ]
    pod = manifest["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container["command"] = [
        python,
        "-u",
        f"{RUNTIME_IN_CONTAINER}/{runtime.BOOTSTRAP}",
        "--unpack",
        where,
        CALL_IN_POD,
        item,
        str(RESULT_LIMIT),
    ]
    container.pop("args", None)
    container["volumeMounts"].append({"name": "call", "mountPath": MOUNT, "readOnly": True})
    pod["volumes"].append(
        {
            "name": "call",
            "secret": {"secretName": name, "items": items + parts, "defaultMode": 0o444},
        }
    )


class FramedItem(calls.Framed):
    """An item of a map's Indexed Job: its pod's output cut into its call's folder
    (:class:`~nodus_cli.targets.calls.Framed`), its end read from the outcome there."""

    def __init__(self, task: Task, ctx: ItemContext, home: Path) -> None:
        super().__init__(ctx, calls.folder_of(task, home).item(calls.item_of(task)))
        self.task = task
        self._item_ctx = ctx

    def ended(self, end: TaskEnd) -> None:
        self._item_ctx.ended(calls.ended(self.task, end, self.item))


def missing_python(end: TaskEnd) -> bool:
    """The pod's command could not start: the image has no such interpreter."""
    return end.state != TaskState.STOPPED and _MISSING in (end.message or "")
