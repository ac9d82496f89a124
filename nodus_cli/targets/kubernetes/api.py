"""The Kubernetes API server, through the official ``kubernetes`` client: the calls the
target makes, and every failure of one translated once, here, into words with a fix.

Contract: :func:`connect` reads the user's kubeconfig (``KUBECONFIG``, else
``~/.kube/config``; ``[kubernetes] context``), else the in-cluster service account, and
returns a :class:`Cluster`. Its methods return the API's own JSON documents (plain dicts,
as the server sent them: building the client's model objects costs several times what
the listing itself does, benchmarks/README.md) and raise :class:`KubernetesFailure` (a
:class:`NotRunnable`, exit 3) for a refused or failed call, worded by :func:`failure`
(401: credentials, 403: RBAC, 404, unreachable, ...). A missing client is one line
saying how to install it. Kueue's APIs (an add-on, in versions that come and go) are asked
at the newest version of :data:`KUEUE_VERSIONS` or :data:`VISIBILITY_VERSIONS` the cluster
serves, and the one that answered is kept.

Why apart: the rest of the target reads documents and never sees the client's types, so
the parsing, the manifests and the following are tested without a server, and the one
table of failures is tested on its own.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from nodus_cli.config import KubernetesConfig
from nodus_cli.errors import NotRunnable
from nodus_cli.targets.follower import frame_stamp

try:  # an optional extra: the target says how to install it when it is missing
    import kubernetes.client as k8s
    import kubernetes.config as k8s_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError as TransportError
except ImportError:  # pragma: no cover - the test extra installs it
    k8s = None  # type: ignore[assignment]
    k8s_config = None  # type: ignore[assignment]
    ApiException = ConfigException = TransportError = None  # type: ignore[assignment,misc]

__all__ = [
    "INSTALL_HINT",
    "KUEUE_GROUP",
    "KUEUE_VERSIONS",
    "VISIBILITY_GROUP",
    "VISIBILITY_VERSIONS",
    "Cluster",
    "KubernetesFailure",
    "LogLines",
    "connect",
    "failure",
    "kubeconfig_path",
]

#: How to get the client when it is missing.
INSTALL_HINT = "pip install 'nodus-cli[kubernetes]' (the official `kubernetes` client)"
#: Seconds to connect and to read one answer: an API server that does not answer is said
#: as such, not waited for.
TIMEOUT = (5.0, 30.0)
#: Kueue's Workloads: their API group and the versions nodus reads, newest first (Kueue
#: 0.20 serves only v1beta2, Kueue before 0.15 only v1beta1).
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
#: Kueue's visibility API (a LocalQueue's pending Workloads in its order): v1beta2 and
#: v1beta1 in recent Kueue, v1alpha1 in Kueue 0.6 to 0.8.
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1", "v1alpha1")
#: Seconds a followed log may stay quiet before its stream is given up (the client takes
#: no "never"): the rest of it is read once the pod has ended, nothing is lost.
FOLLOW_QUIET_SECONDS = 3600.0
#: Seconds more of a log asked from a time than the clocks say, when nodus knows nothing of
#: the clock of the node that stamps it: what comes twice is dropped, what is asked too late
#: is lost.
LOG_SKEW_SECONDS = 60
#: Seconds more of a log asked from a time when the node's clock is known from the lines
#: its stream brought (a line's stamp against when it came: that reading lags the node's
#: clock only by how long the line took to arrive).
LOG_MARGIN_SECONDS = 2
_IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubernetesFailure(NotRunnable):
    """A call to the API server that failed: what, why, and how to fix it (exit 3)."""

    def __init__(self, message: str, hint: str | None = None, status: int | None = None):
        super().__init__(message, hint=hint)
        #: The HTTP status of the answer (None: no answer).
        self.status = status


def kubeconfig_path() -> Path:
    """The kubeconfig nodus reads: the first file of ``KUBECONFIG``, else ``~/.kube/config``."""
    named = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return Path(named[0]).expanduser() if named else Path("~/.kube/config").expanduser()


def _reason(body: str | None) -> str:
    """The ``message`` of a ``Status`` document the server answered with, else the text."""
    if not body:
        return ""
    try:
        doc = json.loads(body)
    except ValueError:
        return body.strip()[:200]
    return str(doc.get("message") or "") if isinstance(doc, dict) else ""


def failure(
    status: int | None, body: str | None, doing: str, namespace: str, server: str
) -> KubernetesFailure:
    """A failed call in one line with its cause and fix: ``doing`` says what nodus asked
    (``list nodes``), ``status`` the HTTP status (None: no answer at all)."""
    said = _reason(body)
    detail = f": {said}" if said else ""
    if status is None:
        return KubernetesFailure(
            f"the Kubernetes API server at {server} does not answer ({doing}){detail}",
            hint="check the cluster is up and reachable from here (VPN, `kubectl cluster-info`)"
            ", and that [kubernetes] context names the right cluster",
        )
    if status == 401:
        return KubernetesFailure(
            f"the Kubernetes API server refused nodus's credentials ({doing}: 401 "
            f"Unauthorized): the token in your kubeconfig has expired or is wrong{detail}",
            hint="log in again (`gcloud container clusters get-credentials`, `aws eks "
            "update-kubeconfig`, `kubectl login`...) so that the kubeconfig holds a fresh token",
            status=status,
        )
    if status == 403:
        return KubernetesFailure(
            f"the Kubernetes API server forbids nodus to {doing} in namespace {namespace!r} "
            f"(403 Forbidden, RBAC){detail}",
            hint="ask your cluster's admin for the Role docs/targets.md lists (Jobs, Pods, "
            "their logs and Events in the namespace; list Nodes and Pods cluster-wide), or set "
            "[kubernetes] namespace to one you may use",
            status=status,
        )
    if status == 404:
        return KubernetesFailure(
            f"the Kubernetes API server has no such thing ({doing}: 404 Not Found){detail}",
            hint=f"check that namespace {namespace!r} exists (`kubectl get namespace "
            f"{namespace}`) and that the cluster serves batch/v1 Jobs",
            status=status,
        )
    if status == 409:
        return KubernetesFailure(
            f"the Kubernetes API server refused to {doing}: it already exists (409){detail}",
            hint="a Job of that name is still there: `nodus stop RUN_ID` removes it",
            status=status,
        )
    if status == 422:
        return KubernetesFailure(
            f"the Kubernetes API server refused the manifest ({doing}: 422 Invalid){detail}",
            hint="this is nodus's mistake: please report it with the message",
            status=status,
        )
    return KubernetesFailure(
        f"the Kubernetes API server failed to {doing} ({status}){detail}",
        hint="try again; `kubectl get --raw /readyz` shows whether the API server is healthy",
        status=status,
    )


def _missing_client() -> NotRunnable:
    return NotRunnable(
        "the Kubernetes target needs the official `kubernetes` Python client, which is not "
        "installed",
        hint=INSTALL_HINT,
    )


def connect(settings: KubernetesConfig) -> Cluster:
    """The cluster the user's configuration names (see the module's docstring)."""
    if k8s is None or k8s_config is None:
        raise _missing_client()
    configuration = k8s.Configuration()
    path = kubeconfig_path()
    namespace = settings.namespace
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ and not path.is_file()
    if in_cluster:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise NotRunnable(
                f"nodus runs in a pod but cannot read its service account: {exc}",
                hint="mount the service account token, or give nodus a kubeconfig (KUBECONFIG)",
            ) from None
        if namespace is None and _IN_CLUSTER_NAMESPACE.is_file():
            namespace = _IN_CLUSTER_NAMESPACE.read_text().strip() or None
    else:
        if not path.is_file():
            raise NotRunnable(
                f"no kubeconfig: {path} does not exist"
                + ("" if os.environ.get("KUBECONFIG") else " and KUBECONFIG is not set"),
                hint="point KUBECONFIG at your cluster's kubeconfig (or write ~/.kube/config: "
                "`gcloud container clusters get-credentials`, `aws eks update-kubeconfig`...)",
            )
        try:
            contexts, current = k8s_config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                config_file=str(path)
            )
            chosen = settings.context or (current or {}).get("name")
            found = next((c for c in contexts or () if c.get("name") == chosen), None)
            if settings.context is not None and found is None:
                names = ", ".join(c.get("name", "?") for c in contexts or ()) or "none"
                raise NotRunnable(
                    f"[kubernetes] context = {settings.context!r} is not in {path} "
                    f"(its contexts: {names})",
                    hint="set [kubernetes] context to one of them, or remove it to use the "
                    "kubeconfig's current context",
                )
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(path),
                context=settings.context,
                client_configuration=configuration,
                persist_config=False,
            )
        except ConfigException as exc:
            raise NotRunnable(
                f"nodus cannot use the kubeconfig {path}: {exc}",
                hint="check it with `kubectl config view`; set [kubernetes] context if its "
                "current context is not the cluster to use",
            ) from None
        if namespace is None and found is not None:
            namespace = (found.get("context") or {}).get("namespace")
    configuration.retries = 1
    return Cluster(k8s.ApiClient(configuration), namespace or "default")


class LogLines:
    """A pod's log answer as frames, one a line (see :meth:`Cluster.log_frames`);
    :meth:`close` cuts it from any thread."""

    def __init__(self, answer: Any, seen: Callable[[int], None] | None = None) -> None:
        self.answer = answer
        #: Told the stamp (nanoseconds) of each line as it comes.
        self.seen = seen

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        if self.answer is None:
            return
        rest = b""
        for chunk in self.answer.stream(65536):
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                if self.seen is not None and (stamp := frame_stamp(line)) is not None:
                    self.seen(stamp)
                yield 1, line + b"\n"
        if rest:
            yield 1, rest

    def close(self) -> None:
        if self.answer is not None:
            self.answer.close()


class Cluster:
    """The calls the target makes (documents in, documents out; see the module)."""

    def __init__(self, client: Any, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.core = k8s.CoreV1Api(client)
        self.batch = k8s.BatchV1Api(client)
        self.custom = k8s.CustomObjectsApi(client)
        self.server: str = client.configuration.host
        # A subresource of a custom object (a LocalQueue's ``pendingworkloads``) is asked as
        # the name ``QUEUE/pendingworkloads``, its slash kept: no Kubernetes name has one.
        client.configuration.safe_chars_for_path_param = "/"
        #: The version of each API group with versions to choose from that answered.
        self._versions: dict[str, str] = {}
        #: By pod: how far, at least, the clock of the node that stamps its log is ahead of
        #: this machine's (seconds), from the lines its followed log brought.
        self._ahead: dict[str, float] = {}

    def _call(self, doing: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        """One call, its answer's JSON document (``_preload_content=False``: no models)."""
        try:
            answer = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
            return json.loads(answer.data)
        except ApiException as exc:
            status = exc.status or None
            raise failure(status, exc.body, doing, self.namespace, self.server) from None
        except (TransportError, OSError) as exc:
            raise failure(None, str(exc), doing, self.namespace, self.server) from None

    def nodes(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call("list nodes", self.core.list_node)["items"]
        return items

    def pods_everywhere(self) -> list[dict[str, Any]]:
        """Pods of every namespace that may hold a node's resources (not yet ended)."""
        items: list[dict[str, Any]] = self._call(
            "list pods",
            self.core.list_pod_for_all_namespaces,
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
        )["items"]
        return items

    def create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        name = manifest["metadata"]["name"]
        doc: dict[str, Any] = self._call(
            f"create Job {name}",
            self.batch.create_namespaced_job,
            self.namespace,
            manifest,
        )
        return doc

    def job(self, name: str) -> dict[str, Any] | None:
        """The Job, or None when it is gone."""
        try:
            doc: dict[str, Any] = self._call(
                f"read Job {name}", self.batch.read_namespaced_job, name, self.namespace
            )
        except KubernetesFailure as exc:
            if exc.status == 404:
                return None
            raise
        return doc

    def jobs(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call(
            "list Jobs", self.batch.list_namespaced_job, self.namespace, label_selector=selector
        )["items"]
        return items

    def delete_job(self, name: str) -> bool:
        """Delete the Job and its pods (False: it was already gone)."""
        try:
            self._call(
                f"delete Job {name}",
                self.batch.delete_namespaced_job,
                name,
                self.namespace,
                propagation_policy="Background",
            )
        except KubernetesFailure as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def delete_pod(self, name: str) -> bool:
        """Delete one pod (False: it was already gone)."""
        try:
            self._call(f"delete pod {name}", self.core.delete_namespaced_pod, name, self.namespace)
        except KubernetesFailure as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def create_config_map(self, manifest: dict[str, Any]) -> dict[str, Any]:
        name = manifest["metadata"]["name"]
        doc: dict[str, Any] = self._call(
            f"create ConfigMap {name}",
            self.core.create_namespaced_config_map,
            self.namespace,
            manifest,
        )
        return doc

    def config_maps(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call(
            "list ConfigMaps",
            self.core.list_namespaced_config_map,
            self.namespace,
            label_selector=selector,
        )["items"]
        return items

    def delete_config_map(self, name: str) -> bool:
        """Delete one ConfigMap (False: it was already gone)."""
        try:
            self._call(
                f"delete ConfigMap {name}",
                self.core.delete_namespaced_config_map,
                name,
                self.namespace,
            )
        except KubernetesFailure as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def create_secret(self, manifest: dict[str, Any]) -> dict[str, Any]:
        name = manifest["metadata"]["name"]
        doc: dict[str, Any] = self._call(
            f"create Secret {name}", self.core.create_namespaced_secret, self.namespace, manifest
        )
        return doc

    def secrets(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call(
            "list Secrets",
            self.core.list_namespaced_secret,
            self.namespace,
            label_selector=selector,
        )["items"]
        return items

    def delete_secret(self, name: str) -> bool:
        """Delete one Secret (False: it was already gone)."""
        try:
            self._call(
                f"delete Secret {name}", self.core.delete_namespaced_secret, name, self.namespace
            )
        except KubernetesFailure as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call(
            "list pods", self.core.list_namespaced_pod, self.namespace, label_selector=selector
        )["items"]
        return items

    def _served(self, group: str, versions: tuple[str, ...], ask: Any) -> Any:
        """``ask(version)`` with the first of ``versions`` the server serves (404: the next;
        the one that answered is remembered and asked alone from then on)."""
        known = self._versions.get(group)
        missing: KubernetesFailure | None = None
        for version in (known,) if known else versions:
            try:
                answer = ask(version)
            except KubernetesFailure as exc:
                if exc.status != 404:
                    raise
                missing = exc
                continue
            self._versions[group] = version
            return answer
        assert missing is not None
        raise missing

    def workloads(self, selector: str | None = None) -> list[dict[str, Any]]:
        """Kueue's Workloads in the namespace (404: the cluster serves none: no Kueue)."""

        def ask(version: str) -> list[dict[str, Any]]:
            items: list[dict[str, Any]] = self._call(
                "list Kueue Workloads",
                self.custom.list_namespaced_custom_object,
                KUEUE_GROUP,
                version,
                self.namespace,
                "workloads",
                **({"label_selector": selector} if selector else {}),
            )["items"]
            return items

        found: list[dict[str, Any]] = self._served(KUEUE_GROUP, KUEUE_VERSIONS, ask)
        return found

    def pending_workloads(self, queue: str) -> list[dict[str, Any]]:
        """The pending Workloads of LocalQueue ``queue`` in Kueue's order, each with its
        ``positionInLocalQueue`` and ``positionInClusterQueue`` (from 0), from Kueue's
        visibility API (404: not served, 403: not allowed)."""

        def ask(version: str) -> list[dict[str, Any]]:
            items: list[dict[str, Any]] = (
                self._call(
                    f"read the pending Workloads of Kueue LocalQueue {queue}",
                    self.custom.get_namespaced_custom_object,
                    VISIBILITY_GROUP,
                    version,
                    self.namespace,
                    "localqueues",
                    f"{queue}/pendingworkloads",
                ).get("items")
                or []
            )
            return items

        found: list[dict[str, Any]] = self._served(VISIBILITY_GROUP, VISIBILITY_VERSIONS, ask)
        return found

    def events(self, pod: str) -> list[dict[str, Any]]:
        """The events about pod ``pod`` (selected by the server, and again here)."""
        items: list[dict[str, Any]] = self._call(
            "list events",
            self.core.list_namespaced_event,
            self.namespace,
            field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}",
        )["items"]
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == pod]

    def log_frames(self, pod: str, follow: bool, since: str | None = None) -> LogLines:
        """The pod's log as :class:`~nodus_cli.targets.follower.LogFollower` reads it (its
        ``open_log``): one ``(1, b"TIMESTAMP text\\n")`` frame a line (the API server's
        ``timestamps``; a pod's log is one stream), live to the container's end when
        ``follow``, from ``since`` (UNIX seconds) when given. The API server counts whole
        seconds back from its own clock (``sinceSeconds``; the client has no ``sinceTime``),
        and the node's kubelet stamps the lines and counts ``sinceSeconds`` back on its own
        clock: the lines a followed log brought tell how far that clock is ahead of this
        machine's (at least), and the log asked from ``since`` starts
        :data:`LOG_MARGIN_SECONDS` earlier than that clock says (:data:`LOG_SKEW_SECONDS`
        when no line came to tell it); the follower drops what is older than ``since``.
        Empty while the container has not started or once the pod is gone."""
        wait = (TIMEOUT[0], FOLLOW_QUIET_SECONDS) if follow else TIMEOUT
        ask: dict[str, Any] = {"follow": follow, "timestamps": True}
        if since is not None:
            ahead = self._ahead.get(pod) if follow else self._ahead.pop(pod, None)
            margin = LOG_SKEW_SECONDS if ahead is None else LOG_MARGIN_SECONDS
            back = time.time() + (ahead or 0.0) - float(since)
            ask["since_seconds"] = max(1, math.ceil(back) + margin)
        answer: Any
        try:
            answer = self.core.read_namespaced_pod_log(
                pod,
                self.namespace,
                _preload_content=False,
                _request_timeout=wait,
                **ask,
            )
        except ApiException as exc:
            if exc.status in (400, 404):  # not started yet, or gone
                return LogLines(None)
            raise failure(
                exc.status, exc.body, f"read the log of pod {pod}", self.namespace, self.server
            ) from None
        except (TransportError, OSError) as exc:
            raise failure(None, str(exc), "read a log", self.namespace, self.server) from None
        return LogLines(answer, partial(self._saw, pod) if follow else None)

    def _saw(self, pod: str, stamp: int) -> None:
        """A line of ``pod``'s log stamped ``stamp`` (nanoseconds) came now."""
        ahead = stamp / 1e9 - time.time()
        if ahead > self._ahead.get(pod, -math.inf):
            self._ahead[pod] = ahead

    def close(self) -> None:
        self.client.close()
