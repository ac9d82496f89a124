"""Access to the Docker engine, with one clear message when it cannot be reached.

The Docker SDK is imported here and only here, lazily: ``nodus validate`` and
``nodus plan`` never pay for it.
"""

from __future__ import annotations

import os
from typing import Any

from nodus_cli.problems import NodusError


def connect(timeout: int = 60) -> Any:
    """A ``docker.DockerClient`` for ``DOCKER_HOST`` or the local socket, checked with a ping."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:  # pragma: no cover - declared dependency
        raise NodusError("the Docker SDK is not installed: pip install docker") from None
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        raise NodusError(
            f"cannot reach the Docker engine at {where}: {_reason(exc)}",
            hint="is dockerd running (`docker info`)? check DOCKER_HOST and that you may use "
            "the socket (root or the docker group)",
        ) from None
    except OSError as exc:
        raise NodusError(
            f"cannot reach the Docker engine at {where}: {exc}",
            hint="is dockerd running (`docker info`)? check DOCKER_HOST",
        ) from None
    return client


def _reason(exc: Exception) -> str:
    text = str(exc)
    for marker in (
        "Connection refused",
        "No such file or directory",
        "Permission denied",
        "timed out",
    ):
        if marker in text:
            return marker.lower()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def ensure_image(client: Any, image: str, progress: bool = True) -> None:
    """Pull ``image`` when the engine does not have it, showing progress on a terminal."""
    from docker.errors import APIError, ImageNotFound

    try:
        client.images.get(image)
        return
    except ImageNotFound:
        pass
    except APIError as exc:
        raise NodusError(f"cannot inspect image {image}: {exc.explanation or exc}") from None
    repository, tag = _split(image)
    try:
        stream = client.api.pull(repository, tag=tag, stream=True, decode=True)
        _show_pull(image, stream, progress)
        client.images.get(image)
    except (APIError, ImageNotFound) as exc:
        detail = getattr(exc, "explanation", None) or str(exc)
        raise NodusError(
            f"cannot get image {image}: {detail}",
            hint="check the name and tag; for a private registry run `docker login`; "
            "without a registry, `docker load` the image first",
        ) from None


def _split(image: str) -> tuple[str, str | None]:
    if "@" in image:
        return image, None
    name, sep, tag = image.rpartition(":")
    if sep and "/" not in tag:
        return name, tag
    return image, "latest"


def _show_pull(image: str, stream: Any, progress: bool) -> None:
    from nodus_cli.output import error_console

    err = error_console()
    if not progress or not err.is_terminal:
        err.print(f"pulling {image} …")
        for event in stream:
            if "error" in event:
                from docker.errors import APIError

                raise APIError(event["error"])
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), console=err, transient=True
    ) as bar:
        tasks: dict[str, Any] = {}
        for event in stream:
            if "error" in event:
                from docker.errors import APIError

                raise APIError(event["error"])
            layer = event.get("id")
            detail = event.get("progressDetail") or {}
            if layer and detail.get("total"):
                if layer not in tasks:
                    tasks[layer] = bar.add_task(f"{image} {layer}", total=detail["total"])
                bar.update(tasks[layer], completed=detail.get("current", 0))
