"""Images on a Docker engine: an image a run needs is there before anything starts.

Contract: :func:`ensure` returns once the engine has the image, pulling it (progress shown
by the caller's ``pulls``) when it does not; a pull that fails or makes no progress for
``NODUS_PULL_TIMEOUT`` seconds is one :class:`~nodus_cli.errors.NodusError` that says
what to do (``docker load`` without a registry).
"""

from __future__ import annotations

import os

from nodus_cli.errors import NodusError
from nodus_cli.targets.base import Pulls, plain_pulls
from nodus_cli.targets.docker import engine

__all__ = ["ensure", "pull_timeout"]


def ensure(eng: engine.Engine, image: str, pulls: Pulls = plain_pulls) -> None:
    """Pull ``image`` when the engine does not have it, its progress shown by ``pulls``.

    A pull that fails, or that makes no progress for ``NODUS_PULL_TIMEOUT`` seconds
    (default 120), is one clear error: nothing has started yet.
    """
    try:
        if eng.image_present(image):
            return
    except engine.EngineUnreachable as exc:
        raise exc.as_nodus_error() from None
    except engine.EngineFailure as exc:
        raise NodusError(f"cannot inspect image {image}: {exc}") from None
    idle = pull_timeout()
    try:
        with pulls(image) as shown:
            eng.pull(image, shown.event, idle_timeout=idle)
        if not eng.image_present(image):
            raise engine.EngineError(404, "the engine reports the pull done but has no such image")
    except engine.EngineTimeout:
        raise NodusError(
            f"cannot get image {image}: the engine made no progress pulling it for {idle:g} s",
            hint="is a registry reachable from the Docker engine? without one, `docker load` "
            "the image first (NODUS_PULL_TIMEOUT sets this limit)",
        ) from None
    except (engine.EngineError, engine.EngineUnreachable) as exc:
        detail = exc.message if isinstance(exc, engine.EngineError) else exc.reason
        raise NodusError(
            f"cannot get image {image}: {detail}",
            hint="check the name and tag; for a private registry run `docker login`; "
            "without a registry, `docker load` the image first",
        ) from None


def pull_timeout() -> float:
    try:
        value = float(os.environ.get("NODUS_PULL_TIMEOUT", engine.PULL_IDLE_TIMEOUT))
    except ValueError:
        return engine.PULL_IDLE_TIMEOUT
    return value if value > 0 else engine.PULL_IDLE_TIMEOUT
