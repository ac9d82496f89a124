"""The runtime nodus brings into a container: the bootstrap and the caller's cloudpickle.

An image needs nothing but ``python3`` (or ``python``) of the caller's ``major.minor``:
no nodus and no cloudpickle. The runtime is :mod:`nodus_cli.functions.bootstrap` (standard
library only) beside a copy of the cloudpickle package the caller pickles with: pickles
are read by the release that wrote them, and the copy, first on ``sys.path``, shadows any
cloudpickle in the image.

On the local target it is a folder, ``NODUS_HOME/runtime/KEY`` (KEY: a digest of its
files, so a new nodus or cloudpickle makes a new folder and running calls keep theirs),
built once, atomically, and mounted read-only; its modules are compiled for the caller's
Python, which the image's must be. On Swarm the same files travel as configs
(:func:`files`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import threading
from functools import cache
from pathlib import Path

__all__ = ["BOOTSTRAP", "INTERPRETERS", "command", "ensure", "files", "worker_command"]

#: The bootstrap as it runs in the container.
BOOTSTRAP = "bootstrap.py"
#: Tried in this order: what an image names its Python.
INTERPRETERS = ("python3", "python")
_HERE = Path(__file__).resolve().parent


@cache
def files() -> dict[str, bytes]:
    """The runtime's files by their path in the runtime folder (``cloudpickle/...``)."""
    import cloudpickle

    found = {BOOTSTRAP: (_HERE / "bootstrap.py").read_bytes()}
    package = Path(cloudpickle.__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        found[f"cloudpickle/{path.relative_to(package).as_posix()}"] = path.read_bytes()
    return found


def key() -> str:
    digest = hashlib.sha256()
    for name, data in files().items():
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:16]


_lock = threading.Lock()


def ensure(home: Path) -> Path:
    """``NODUS_HOME/runtime/KEY``, built when missing (by one thread, and atomically for
    other processes); its path."""
    folder = home / "runtime" / key()
    if (folder / BOOTSTRAP).is_file():
        return folder
    with _lock:
        if not (folder / BOOTSTRAP).is_file():
            _build(folder)
    return folder


def _build(folder: Path) -> None:
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    building = folder.parent / f".{folder.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    shutil.rmtree(building, ignore_errors=True)
    for name, data in files().items():
        path = building / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    import compileall

    compileall.compile_dir(building / "cloudpickle", quiet=1)  # for the caller's Python
    for path in [building, *building.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    try:
        building.rename(folder)
    except OSError:  # another process built it meanwhile
        shutil.rmtree(building, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.chmod(folder, 0o755)


def command(interpreter: str, runtime: str, call: str, item: int) -> list[str]:
    """The container's command for one call of item ``item``."""
    return [interpreter, "-u", f"{runtime}/{BOOTSTRAP}", call, str(item)]


def worker_command(interpreter: str, runtime: str, call: str, name: str) -> list[str]:
    """The container's command for a warm worker."""
    return [interpreter, "-u", f"{runtime}/{BOOTSTRAP}", "--worker", call, name]
