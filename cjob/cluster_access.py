"""``kubectl cjob``'s only conversation with the Kubernetes API.

The plugin is a client of what the operator already serves: the CheckpointedJob (its
spec to change, its status to read, its scale subresource), the job's checkpoint
ConfigMap (the completed-checkpoint store, read with the store's own parser so the
plugin and the drivers agree on its layout), CheckpointedJobSnapshot objects, Events
and the driver pod's log. It never reaches checkpoint storage: like the operator, it
holds no storage credentials.

It connects as kubectl does: ``--kubeconfig``, else ``$KUBECONFIG`` (a list of files
merged), else ``~/.kube/config``, else the pod's service account; ``--context`` picks a
context, whose namespace is the default of ``-n``. Every call has a bounded timeout,
and every failure becomes a :class:`PluginError` whose message is one line a user can
act on (the job that does not exist, the permission that is missing, the server that
cannot be reached), never a client's stack trace.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from cjob_checkpoint.store.configmap_layout import StoreSnapshot, parse_store
from cjob_checkpoint.store.configmap_triggers import ACK_ANNOTATION
from cjob_spec.names import (
    API_GROUP,
    KIND,
    PLURAL,
    SNAPSHOT_KIND,
    SNAPSHOT_PLURAL,
    checkpoint_configmap_name,
)

VERSION = "v1alpha1"
REQUEST_TIMEOUT = (5.0, 30.0)
"""Connect and read timeouts of one call: a hung API server is an error, not a hang."""
MERGE_PATCH = "application/merge-patch+json"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

T = TypeVar("T")


class PluginError(Exception):
    """A failure said in one line; ``exit_code`` is what the command exits with."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class NotFoundError(PluginError):
    """The object asked for does not exist (kubectl exits 1 for that, as here)."""


def _api_message(exc: Any) -> str:
    """The ``message`` of the API's Status body, or the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or "no message").replace("\n", " ")


class ClusterAccess:
    """One connection to one cluster, for one namespace (``-n``), or all of them."""

    def __init__(self, *, kubeconfig: str | None, context: str | None,
                 namespace: str | None) -> None:
        try:
            from kubernetes import client, config
        except ImportError:
            raise PluginError("kubectl cjob needs the Kubernetes client: pip install "
                              "'checkpointed-jobs[kubectl]'") from None
        self._client = client
        self._api_exception: type[Exception] = client.exceptions.ApiException
        api_client, default_namespace, self.server = _connect(
            config=config, client=client, kubeconfig=kubeconfig, context=context)
        self.namespace = namespace or default_namespace
        # The client's generated signatures return ``object``; these calls answer dicts.
        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)

    # ----------------------------------------------------------------- calls

    def _call(self, call: Callable[[], T], *, what: str) -> T:
        """``call()``, its failures said in one line naming ``what`` was asked."""
        import urllib3

        try:
            return call()
        except self._api_exception as exc:
            status = getattr(exc, "status", 0)
            message = _api_message(exc)
            if status == 404:
                raise NotFoundError(f"{what}: not found") from None
            if status in (401, 403):
                raise PluginError(f"{what}: not allowed: {message}") from None
            raise PluginError(f"{what}: the API server answered {status}: {message}") \
                from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise PluginError(f"{what}: cannot reach the API server at {self.server}: "
                              f"{type(exc).__name__}") from None

    # ----------------------------------------------------------------- jobs

    def job(self, name: str) -> dict[str, Any]:
        try:
            found: dict[str, Any] = self._call(
                lambda: self.custom.get_namespaced_custom_object(
                    API_GROUP, VERSION, self.namespace, PLURAL, name,
                    _request_timeout=REQUEST_TIMEOUT),
                what=f"get {KIND} {name}")
        except NotFoundError:
            raise NotFoundError(f"no {KIND} {name!r} in namespace {self.namespace!r} "
                                f"(kubectl cjob list -n {self.namespace})") from None
        return found

    def jobs(self, *, all_namespaces: bool) -> list[dict[str, Any]]:
        if all_namespaces:
            listed = self._call(lambda: self.custom.list_cluster_custom_object(
                API_GROUP, VERSION, PLURAL, _request_timeout=REQUEST_TIMEOUT),
                what=f"list {KIND}s")
        else:
            listed = self._call(lambda: self.custom.list_namespaced_custom_object(
                API_GROUP, VERSION, self.namespace, PLURAL, _request_timeout=REQUEST_TIMEOUT),
                what=f"list {KIND}s in namespace {self.namespace}")
        items: list[dict[str, Any]] = listed.get("items", [])
        return sorted(items, key=lambda j: (j["metadata"].get("namespace", ""),
                                            j["metadata"]["name"]))

    def patch_job(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A merge patch of the job (its spec: the operator acts on what changed)."""
        patched: dict[str, Any] = self._call(
            lambda: self.custom.patch_namespaced_custom_object(
                API_GROUP, VERSION, self.namespace, PLURAL, name, patch,
                _content_type=MERGE_PATCH, _request_timeout=REQUEST_TIMEOUT),
            what=f"change {KIND} {name}")
        return patched

    def scale(self, name: str, replicas: int) -> dict[str, Any]:
        """Through the scale subresource, as ``kubectl scale`` and autoscalers do."""
        scaled: dict[str, Any] = self._call(
            lambda: self.custom.patch_namespaced_custom_object_scale(
                API_GROUP, VERSION, self.namespace, PLURAL, name,
                {"spec": {"replicas": replicas}}, _content_type=MERGE_PATCH,
                _request_timeout=REQUEST_TIMEOUT),
            what=f"scale {KIND} {name}")
        return scaled

    def events(self, name: str, *, kind: str = KIND) -> list[dict[str, Any]]:
        """The Events about one object of ours, oldest first."""
        from cjob.views import event_time

        listed = self._call(lambda: self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name},"
                                           f"involvedObject.kind={kind}",
            _request_timeout=REQUEST_TIMEOUT), what=f"list the Events of {kind} {name}")
        events: list[dict[str, Any]] = [
            self.core.api_client.sanitize_for_serialization(e) for e in listed.items]
        return sorted(events, key=lambda e: (event_time(e) is not None,
                                             event_time(e) or 0))

    # ----------------------------------------------------------------- the store

    def _read(self, call: Callable[[], Any], *, what: str) -> dict[str, Any] | None:
        """One object as plain data (the client's models turned into the API's JSON), or
        None when it does not exist."""
        try:
            found = self._call(call, what=what)
        except NotFoundError:
            return None
        body: dict[str, Any] = self.core.api_client.sanitize_for_serialization(found)
        return body

    def _store_object(self, job_name: str) -> dict[str, Any] | None:
        name = checkpoint_configmap_name(job_name)
        return self._read(lambda: self.core.read_namespaced_config_map(
            name, self.namespace, _request_timeout=REQUEST_TIMEOUT),
            what=f"read ConfigMap {name}")

    def store(self, job_name: str) -> StoreSnapshot | None:
        """One reading of the job's completed-checkpoint store; None before the operator
        made it (a job that never started)."""
        body = self._store_object(job_name)
        return None if body is None else parse_store(body)

    def checkpoint_acknowledged(self, job_name: str, nonce: str) -> int | None:
        """The id of the checkpoint the driver took for request ``nonce``, once it says
        it completed (``<nonce>:<id>`` on the store's acknowledgement annotation)."""
        body = self._store_object(job_name) or {}
        ack = ((body.get("metadata") or {}).get("annotations") or {}).get(ACK_ANNOTATION)
        if not ack:
            return None
        acked, _, checkpoint_id = ack.rpartition(":")
        return int(checkpoint_id) if acked == nonce and checkpoint_id.isdigit() else None

    # ----------------------------------------------------------------- snapshots

    def create_snapshot(self, *, name: str, job_name: str,
                        checkpoint_id: int | None) -> dict[str, Any]:
        spec: dict[str, Any] = {"jobName": job_name}
        if checkpoint_id is not None:
            spec["checkpoint"] = checkpoint_id
        body = {"apiVersion": f"{API_GROUP}/{VERSION}", "kind": SNAPSHOT_KIND,
                "metadata": {"name": name, "namespace": self.namespace}, "spec": spec}
        created: dict[str, Any] = self._call(
            lambda: self.custom.create_namespaced_custom_object(
                API_GROUP, VERSION, self.namespace, SNAPSHOT_PLURAL, body,
                _request_timeout=REQUEST_TIMEOUT),
            what=f"create {SNAPSHOT_KIND} {name}")
        return created

    def snapshot(self, name: str) -> dict[str, Any] | None:
        return self._read(lambda: self.custom.get_namespaced_custom_object(
            API_GROUP, VERSION, self.namespace, SNAPSHOT_PLURAL, name,
            _request_timeout=REQUEST_TIMEOUT), what=f"get {SNAPSHOT_KIND} {name}")

    # ----------------------------------------------------------------- pods

    def pod(self, name: str) -> dict[str, Any] | None:
        return self._read(lambda: self.core.read_namespaced_pod(
            name, self.namespace, _request_timeout=REQUEST_TIMEOUT), what=f"get pod {name}")

    def create_pod(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        self._call(lambda: self.core.create_namespaced_pod(
            self.namespace, body, _request_timeout=REQUEST_TIMEOUT), what=f"create pod {name}")

    def delete_pod(self, name: str) -> None:
        """Delete a pod the plugin made, at once; one already gone is fine."""
        try:
            self._call(lambda: self.core.delete_namespaced_pod(
                name, self.namespace, grace_period_seconds=0,
                _request_timeout=REQUEST_TIMEOUT), what=f"delete pod {name}")
        except NotFoundError:
            pass

    def logs(self, *, pod: str, container: str, follow: bool,
             tail: int | None) -> Iterator[str]:
        """The container's log, line by line; with ``follow``, until the container ends."""
        what = f"read the log of pod {pod}"
        options: dict[str, Any] = {"container": container, "follow": follow,
                                   "_preload_content": False}
        if tail is not None:
            options["tail_lines"] = tail
        if not follow:
            options["_request_timeout"] = REQUEST_TIMEOUT
        response = self._call(lambda: self.core.read_namespaced_pod_log(
            pod, self.namespace, **options), what=what)
        import urllib3

        pending = b""
        try:
            for chunk in response.stream(amt=65536, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", errors="replace")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise PluginError(f"{what}: the connection to the API server broke: "
                              f"{type(exc).__name__}") from None
        finally:
            response.release_conn()
        if pending:
            yield pending.decode("utf-8", errors="replace")


def _connect(*, config: Any, client: Any, kubeconfig: str | None,
             context: str | None) -> tuple[Any, str, str]:
    """The API client, the context's namespace and the server's address."""
    from cjob_checkpoint.store.configmap_client import is_in_cluster

    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    if path is None and context is None and is_in_cluster() \
            and not Path(os.path.expanduser("~/.kube/config")).exists():
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        namespace = (SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
                     if SERVICE_ACCOUNT_NAMESPACE.exists() else "default")
        return client.ApiClient(configuration), namespace, configuration.host
    if kubeconfig is not None and not Path(kubeconfig).is_file():
        raise PluginError(f"--kubeconfig {kubeconfig}: no such file")
    try:
        contexts, active = config.list_kube_config_contexts(config_file=path)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise PluginError(f"no usable kubeconfig ({path or '~/.kube/config'}): "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; "
                          f"name one with --kubeconfig or KUBECONFIG") from None
    names = [c["name"] for c in contexts or []]
    if context is not None and context not in names:
        raise PluginError(f"--context {context}: no such context in the kubeconfig "
                          f"(it has: {', '.join(names) or 'none'})")
    chosen = next((c for c in contexts if c["name"] == context), None) if context else active
    if not chosen:
        raise PluginError("the kubeconfig names no current context; pick one with --context")
    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=path, context=chosen["name"],
                                client_configuration=configuration)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise PluginError(f"context {chosen['name']}: {str(exc).splitlines()[0]}") from None
    namespace = (chosen.get("context") or {}).get("namespace") or "default"
    return client.ApiClient(configuration), namespace, configuration.host
