"""The Swarm manager as nodus talks to it: vocabulary, connection and calls.

The engine is the one ``DOCKER_HOST`` names, else the current Docker context's (read
from the Docker CLI's files by :func:`connect`), else the local socket; it must be a
Swarm manager. :class:`SwarmApi` makes its calls over the engine's socket as a local
run's are made (:mod:`nodus_cli.targets.docker.http`, no Docker SDK: importing it costs
more than a Swarm run's own calls), with the errors of
:mod:`nodus_cli.targets.docker.engine`.
"""

from __future__ import annotations

import base64
import contextlib
from typing import Any, Literal

from nodus_cli.errors import NodusError, NotRunnable
from nodus_cli.targets.docker import engine, http

GPU_KIND = "NVIDIA-GPU"
LABEL_GPU = "nodus.gpu"
LABEL_GPU_MEMORY = "nodus.gpu_memory_gb"
LABEL_PRICE = "nodus.price_per_hour"
LABEL_MACHINE = "nodus.machine_id"
LABEL_REGION = "nodus.region"
TERMINAL = ("complete", "failed", "rejected", "shutdown", "orphaned", "remove")
#: Task states that hold the resources the task reserves on its node.
HOLDING = ("assigned", "accepted", "preparing", "ready", "starting", "running")
#: Task states from which the container may have printed something.
STARTED = ("starting", "running", "complete", "failed")
#: Terminal states that are the infrastructure's doing, not the workload's: worth a retry.
INFRA_STATES = ("rejected", "orphaned", "shutdown", "remove")
#: The Swarm objects that carry files into a service's containers.
ObjectKind = Literal["secret", "config"]


# -- the cluster ----------------------------------------------------------------------


class SwarmApi(engine.Engine):
    """The Swarm calls of the target, over the engine's socket, with nodus's errors."""

    _node_id: str | None = None
    #: The manager check's node list, for the first listing after it: one call, not two.
    _checked_nodes: list[dict[str, Any]] | None = None

    @property
    def node_id(self) -> str:
        """The Swarm node id of the engine nodus talks to."""
        if self._node_id is None:
            self._node_id = str((self.info().get("Swarm") or {}).get("NodeID") or "")
        return self._node_id

    def info(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.request("GET", "/info")
        return doc

    def nodes(self) -> list[dict[str, Any]]:
        found, self._checked_nodes = self._checked_nodes, None
        if found is None:
            found = self.request("GET", "/nodes")
        return found or []

    def node(self, node_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = self.request("GET", f"/nodes/{node_id}")
        return doc

    def update_node(self, node_id: str, version: int, spec: dict[str, Any]) -> None:
        self.request("POST", f"/nodes/{node_id}/update", {"version": version}, body=spec)

    def tasks(self, filters: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.request("GET", "/tasks", {"filters": filters})
        return found or []

    def services(self, filters: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.request("GET", "/services", {"filters": filters})
        return found or []

    def create_service(self, body: dict[str, Any]) -> str:
        """Create the service :func:`~.services.service_args` describes; its id.

        The registry credentials of the Docker CLI's configuration go with it, as with
        ``docker service create``: the nodes pull the image with them."""
        image = body["TaskTemplate"]["ContainerSpec"]["Image"]
        doc = self.request("POST", "/services/create", body=body, headers=self.registry_auth(image))
        return str(doc["ID"])

    def remove_service(self, service_id: str) -> None:
        """Remove a service; one that is gone already is fine."""
        self.request("DELETE", f"/services/{service_id}", allow=(404,))

    def service(self, service_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = self.request("GET", f"/services/{service_id}")
        return doc

    def discard_service(self, service: dict[str, Any] | str) -> None:
        """Stop a service's tasks and remove it; one that is gone already is fine.

        A job is first updated to zero completions: that stops its running task and
        drops its pending one, which removing it alone does not do before Docker 24
        (its task would keep running, or start later).
        """
        try:
            doc = self.service(service) if isinstance(service, str) else service
        except engine.EngineError as exc:
            if exc.status == 404:
                return
            raise
        spec = doc.get("Spec") or {}
        job = (spec.get("Mode") or {}).get("ReplicatedJob")
        if job is not None and job.get("TotalCompletions") != 0:
            # The service as it is, but for the completions (as `docker service update`).
            stopped = dict(spec, Mode={"ReplicatedJob": dict(job, TotalCompletions=0)})
            version = (doc.get("Version") or {}).get("Index", 0)
            with contextlib.suppress(engine.EngineError):
                self.request(
                    "POST", f"/services/{doc['ID']}/update", {"version": version}, body=stopped
                )
        self.remove_service(doc["ID"])

    def volumes(self, filters: dict[str, list[str]] | None = None) -> list[str]:
        """Names of this engine's volumes (matching ``filters``)."""
        doc = self.request("GET", "/volumes", {"filters": filters}) or {}
        return [str(v["Name"]) for v in doc.get("Volumes") or []]

    def remove_volume(self, name: str) -> None:
        self.request("DELETE", f"/volumes/{http.path_of(name)}", {"force": True})

    def create_object(
        self, kind: ObjectKind, name: str, data: bytes, labels: dict[str, str]
    ) -> str:
        """Create a Swarm secret or config holding ``data``; its id."""
        body = {"Name": name, "Labels": labels, "Data": base64.b64encode(data).decode()}
        doc = self.request("POST", f"/{kind}s/create", body=body)
        return str(doc["ID"])

    def objects(self, kind: ObjectKind, filters: dict[str, list[str]]) -> list[dict[str, Any]]:
        """The secrets or configs matching ``filters``."""
        found: list[dict[str, Any]] = self.request("GET", f"/{kind}s", {"filters": filters})
        return found or []

    def remove_object(self, kind: ObjectKind, object_id: str) -> None:
        """Remove a secret or config; one that is gone already is fine."""
        self.request("DELETE", f"/{kind}s/{object_id}", allow=(404,))

    def service_logs(self, service_id: str, follow: bool, since: str | None = None) -> Any:
        """A service's output, ``(stream, b"TIMESTAMP text")`` frames; ``close()`` cuts it.

        Its tasks are never TTYs, so the output is multiplexed (stdout and stderr frames).
        A finished job's log comes at once: a node that stops answering must not keep
        nodus waiting long for the rest of it.
        """
        return self.log_frames(f"/services/{service_id}/logs", follow, since, tail="all")


def connect() -> SwarmApi:
    """The engine of ``DOCKER_HOST``, else of the current Docker context, else the socket."""
    host, tls = engine.endpoint()
    return SwarmApi(host=host, tls=tls)


def manager_client() -> SwarmApi:
    """The engine, checked to be a Swarm manager (one cheap call: listing the nodes)."""
    api = connect()
    try:
        api._checked_nodes = api.nodes()
    except engine.EngineUnreachable as exc:
        raise exc.as_nodus_error() from None
    except engine.EngineTimeout as exc:
        raise NodusError(f"the Docker engine at {api.where} does not answer: {exc}") from None
    except engine.EngineError as exc:
        if exc.status != 503:
            raise NodusError(f"the Docker engine at {api.where}: {exc.message}") from None
        if "worker" in exc.message.lower():
            raise NotRunnable(
                f"the Docker engine at {api.where} is a Swarm worker; nodus needs a manager "
                "to see the nodes",
                hint="point DOCKER_HOST (or the Docker context) at a manager node",
            ) from None
        raise NotRunnable(
            f"the Docker engine at {api.where} is not part of a Swarm cluster",
            hint="point DOCKER_HOST (or the Docker context) at a Swarm manager, or create a "
            "cluster with `docker swarm init`, then prepare GPU nodes with "
            "`nodus swarm init-node`",
        ) from None
    return api
