"""The operator's only conversation with the Kubernetes API.

The operator never touches checkpoint storage itself: deleting a job's checkpoint
data is the job of a cleanup pod in the job's namespace (see
``builders.build_cleanup_pod``), so the operator needs no Secret reads.

:class:`KubeCluster` implements :class:`cjob_operator.cluster.Cluster` with the
official client. The checkpoint ConfigMap is read and fenced through the runtime's
store module (``cjob_checkpoint.store.configmap``), so the operator and the drivers agree
on its layout and on the compare-and-swap rules by sharing the code.

Every call has a bounded timeout (a hung API server becomes an error, not a stuck
reconciler) and every client error is translated into :class:`ClusterError`.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import socket
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import urllib3
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from cjob_checkpoint.store.completed_store import StoreError
from cjob_checkpoint.store.configmap import (
    advance_attempt,
    ensure_configmap,
    hold,
    new_api_client,
    read_snapshot,
    release,
)
from cjob_checkpoint.store.configmap_errors import StoreNotFoundError
from cjob_checkpoint.store.configmap_triggers import REQUEST_ANNOTATION
from cjob_operator.cluster import (
    ClusterError,
    JobRef,
    Manifest,
    StatusConflictError,
    StoreReading,
)
from cjob_spec.names import (
    ANNOTATION_RETAINED,
    API_GROUP,
    API_VERSION,
    LABEL_ATTEMPT,
    LABEL_ROLE,
    PLURAL,
    SNAPSHOT_PLURAL,
)
from cjob_spec.standby_signal import PROMOTION_ANNOTATION, StandbyPromotion
from cjob_spec.status import CheckpointRef
from cjob_spec.times import format_time

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

VERSION = API_VERSION.split("/", 1)[1]
REQUEST_TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds for every call."""
EVENT_COMPONENT = "checkpointed-jobs-operator"
MAX_EVENT_MESSAGE = 1024
STATUS_WRITE_TRIES = 3
MERGE_PATCH = "application/merge-patch+json"
FINAL_STATUSES = frozenset({400, 401, 403, 404, 405, 410, 415, 422})


def _api_message(exc: ApiException) -> str:
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            decoded = json.loads(body)
        except ValueError:
            return body[:500]
        if isinstance(decoded, dict) and decoded.get("message"):
            return str(decoded["message"])
    return str(exc.reason or exc.status)


def _cluster_error(operation: str, exc: Exception) -> ClusterError:
    if isinstance(exc, ApiException):
        return ClusterError(
            operation=operation,
            cause=f"HTTP {exc.status}: {_api_message(exc)}",
            retryable=exc.status not in FINAL_STATUSES,
        )
    return ClusterError(operation=operation, cause=f"{type(exc).__name__}: {exc}")


def _call(operation: str, call: Callable[[], _T], *, ok: frozenset[int] = frozenset()) -> _T | None:
    """Run one client call; HTTP statuses in ``ok`` (409, 404) count as success (None)."""
    try:
        return call()
    except ApiException as exc:
        if exc.status in ok:
            return None
        raise _cluster_error(operation, exc) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise _cluster_error(operation, exc) from None


def connect(*, kubeconfig: str | None = None) -> KubeCluster:
    """A :class:`KubeCluster` with in-cluster credentials in a pod, else the kubeconfig."""
    return KubeCluster(api_client=new_api_client(kubeconfig=kubeconfig))


class KubeCluster:
    """The :class:`~cjob_operator.cluster.Cluster` of a real API server."""

    def __init__(self, *, api_client: Any, instance: str | None = None) -> None:
        self.api_client = api_client
        self.core: Any = k8s_client.CoreV1Api(api_client)
        self.rbac: Any = k8s_client.RbacAuthorizationV1Api(api_client)
        self.networking: Any = k8s_client.NetworkingV1Api(api_client)
        self.custom: Any = k8s_client.CustomObjectsApi(api_client)
        self.instance = instance or os.environ.get("POD_NAME") or socket.gethostname()

    # --- the CheckpointedJob ---------------------------------------------------------

    def read_job(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._read_custom(PLURAL, f"CheckpointedJob {namespace}/{name}",
                                 namespace=namespace, name=name)

    def _read_custom(self, plural: str, what: str, *, namespace: str,
                     name: str) -> Mapping[str, Any] | None:
        """One of our custom objects as the API server has it now; ``None``: gone."""
        body = _call(
            f"read {what}",
            lambda: self.custom.get_namespaced_custom_object(
                API_GROUP, VERSION, namespace, plural, name, _request_timeout=REQUEST_TIMEOUT
            ),
            ok=frozenset({404}),
        )
        return cast(Mapping[str, Any], body) if body is not None else None

    def write_status(
        self, *, job: Mapping[str, Any], status: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        """A JSON merge patch of the status subresource, guarded by ``resourceVersion``.

        The patch sets every field of ``status`` and nulls the ones that went away, so
        the result is exactly ``status``; the ``resourceVersion`` in the patch turns it
        into a compare-and-swap (409 when the object changed since it was read).
        """
        metadata = job.get("metadata") or {}
        namespace = str(metadata.get("namespace"))
        name = str(metadata.get("name"))
        planned_from = dict(job.get("status") or {})
        resource_version = metadata.get("resourceVersion")
        operation = f"write the status of {namespace}/{name}"
        for _ in range(STATUS_WRITE_TRIES):
            patch = {
                "metadata": {"resourceVersion": resource_version},
                "status": merge_patch(planned_from, status),
            }
            try:
                written = self.custom.patch_namespaced_custom_object_status(
                    API_GROUP, VERSION, namespace, PLURAL, name, patch,
                    _content_type=MERGE_PATCH, _request_timeout=REQUEST_TIMEOUT,
                )
                return cast(Mapping[str, Any], written) if isinstance(written, Mapping) else None
            except ApiException as exc:
                if exc.status != 409:
                    raise _cluster_error(operation, exc) from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise _cluster_error(operation, exc) from None
            # Conflict: fine if only spec or metadata moved (a user edit, kopf's own
            # annotations); the plan was made from this status, so it still holds.
            fresh = self.read_job(namespace=namespace, name=name)
            if fresh is None:
                raise ClusterError(operation=operation, cause="the job was deleted")
            if (fresh.get("status") or {}) != planned_from:
                raise StatusConflictError(namespace=namespace, name=name)
            resource_version = (fresh.get("metadata") or {}).get("resourceVersion")
        raise StatusConflictError(namespace=namespace, name=name)

    # --- snapshots ---------------------------------------------------------------------

    def read_snapshot(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._read_custom(SNAPSHOT_PLURAL, f"CheckpointedJobSnapshot {namespace}/{name}",
                                 namespace=namespace, name=name)

    def list_snapshots(self, *, namespace: str,
                       labels: Mapping[str, str]) -> list[Mapping[str, Any]]:
        selector = _label_selector(labels)
        found = _call(
            f"list CheckpointedJobSnapshots {selector} in {namespace}",
            lambda: self.custom.list_namespaced_custom_object(
                API_GROUP, VERSION, namespace, SNAPSHOT_PLURAL, label_selector=selector,
                _request_timeout=REQUEST_TIMEOUT))
        items = (found or {}).get("items") if isinstance(found, Mapping) else None
        return [item for item in items or [] if isinstance(item, Mapping)]

    def create_snapshot(self, *, manifest: Manifest) -> None:
        namespace, name = _where(manifest)
        _call(f"create CheckpointedJobSnapshot {namespace}/{name}",
              lambda: self.custom.create_namespaced_custom_object(
                  API_GROUP, VERSION, namespace, SNAPSHOT_PLURAL, manifest,
                  _request_timeout=REQUEST_TIMEOUT),
              ok=frozenset({409}))

    def delete_snapshot(self, *, namespace: str, name: str) -> None:
        _call(f"delete CheckpointedJobSnapshot {namespace}/{name}",
              lambda: self.custom.delete_namespaced_custom_object(
                  API_GROUP, VERSION, namespace, SNAPSHOT_PLURAL, name,
                  _request_timeout=REQUEST_TIMEOUT),
              ok=frozenset({404}))

    def write_snapshot_status(self, *, snapshot: Mapping[str, Any],
                              status: Mapping[str, Any]) -> None:
        """A JSON merge patch of the snapshot's status subresource, from what was read.

        No compare-and-swap: one operator (kopf's peering) works on a snapshot, and
        its spec, the only other part that changes, cannot change what is planned."""
        metadata = snapshot.get("metadata") or {}
        namespace = str(metadata.get("namespace"))
        name = str(metadata.get("name"))
        patch = {"status": merge_patch(dict(snapshot.get("status") or {}), status)}
        _call(
            f"write the status of snapshot {namespace}/{name}",
            lambda: self.custom.patch_namespaced_custom_object_status(
                API_GROUP, VERSION, namespace, SNAPSHOT_PLURAL, name, patch,
                _content_type=MERGE_PATCH, _request_timeout=REQUEST_TIMEOUT),
            ok=frozenset({404}),
        )

    # --- the checkpoint store ----------------------------------------------------------

    def read_store(self, *, namespace: str, name: str) -> StoreReading | None:
        try:
            snapshot = read_snapshot(api=self.core, namespace=namespace, name=name)
        except StoreNotFoundError:
            return None
        except StoreError as exc:
            raise ClusterError(
                operation=f"read the checkpoint store {namespace}/{name}", cause=str(exc)
            ) from None
        checkpoints = tuple(
            CheckpointRef(
                id=checkpoint.checkpoint_id,
                path=checkpoint.metadata_path,
                completed_at=datetime.fromtimestamp(checkpoint.timestamp, UTC).replace(
                    microsecond=0),
                size_bytes=checkpoint.size_bytes or None,
            )
            for checkpoint in snapshot.checkpoints)
        if snapshot.holds_problem is not None:
            _log.warning("%s/%s: %s", namespace, name, snapshot.holds_problem)
        if snapshot.restore_report_problem is not None:
            _log.warning("%s/%s: %s", namespace, name, snapshot.restore_report_problem)
        return StoreReading(
            fence_attempt=snapshot.fence_attempt,
            latest=checkpoints[-1] if checkpoints else None,
            latest_attempt=snapshot.checkpoints[-1].attempt if snapshot.checkpoints else None,
            checkpoints=checkpoints,
            holds=snapshot.holds,
            size_bytes=snapshot.size_bytes,
            owners=snapshot.owners,
            restore_report=snapshot.restore_report,
            driver_lost=snapshot.driver_lost,
            promotion=snapshot.promotion,
        )

    def ensure_checkpoint_configmap(
        self,
        *,
        namespace: str,
        name: str,
        job_name: str,
        owner_reference: Mapping[str, Any],
        labels: Mapping[str, str],
    ) -> None:
        try:
            ensure_configmap(
                api=self.core,
                namespace=namespace,
                name=name,
                job_name=job_name,
                owner_reference=owner_reference,
                labels=labels,
            )
        except StoreError as exc:
            raise ClusterError(
                operation=f"create the checkpoint store {namespace}/{name}", cause=str(exc)
            ) from None

    def advance_fence(self, *, namespace: str, name: str, attempt: int) -> None:
        try:
            advance_attempt(api=self.core, namespace=namespace, name=name, attempt=attempt)
        except StoreError as exc:
            raise ClusterError(
                operation=f"advance the fence of {namespace}/{name} to attempt {attempt}",
                cause=str(exc),
                retryable=not isinstance(exc, StoreNotFoundError),
            ) from None

    def hold_checkpoint(self, *, namespace: str, store: str, checkpoint_id: int, holder: str,
                        by: str) -> bool:
        try:
            return hold(api=self.core, namespace=namespace, name=store,
                        checkpoint_id=checkpoint_id, holder=holder, by=by)
        except StoreNotFoundError:
            return False
        except StoreError as exc:
            raise ClusterError(
                operation=f"hold checkpoint {checkpoint_id} in {namespace}/{store} for {by}",
                cause=str(exc)) from None

    def release_checkpoint(self, *, namespace: str, store: str, holder: str) -> None:
        try:
            release(api=self.core, namespace=namespace, name=store, holder=holder)
        except StoreNotFoundError:
            return
        except StoreError as exc:
            raise ClusterError(
                operation=f"release the checkpoint hold of {holder} in {namespace}/{store}",
                cause=str(exc)) from None

    def request_checkpoint(self, *, namespace: str, name: str, nonce: str) -> None:
        patch = {"metadata": {"annotations": {REQUEST_ANNOTATION: nonce}}}
        _call(
            f"request checkpoint {nonce!r} through {namespace}/{name}",
            lambda: self.core.patch_namespaced_config_map(
                name, namespace, patch, _content_type=MERGE_PATCH,
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )

    def promote_standby(self, *, namespace: str, store: str, promotion: StandbyPromotion,
                        role: str) -> None:
        pod = promotion.pod
        assert pod is not None
        annotation = {"metadata": {"annotations": {PROMOTION_ANNOTATION: promotion.encode()}}}
        _call(
            f"promote standby {namespace}/{pod} through {namespace}/{store}",
            lambda: self.core.patch_namespaced_config_map(
                store, namespace, annotation, _content_type=MERGE_PATCH,
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )
        labels = {"metadata": {"labels": {LABEL_ROLE: role,
                                          LABEL_ATTEMPT: str(promotion.attempt)}}}
        _call(
            f"label the promoted standby {namespace}/{pod} as attempt {promotion.attempt}",
            lambda: self.core.patch_namespaced_pod(
                pod, namespace, labels, _content_type=MERGE_PATCH,
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )

    def delete_configmap(self, *, namespace: str, name: str) -> None:
        _call(
            f"delete ConfigMap {namespace}/{name}",
            lambda: self.core.delete_namespaced_config_map(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            ),
            ok=frozenset({404}),
        )

    def retain_configmap(self, *, namespace: str, name: str, message: str) -> None:
        patch = {"metadata": {"ownerReferences": None,
                              "annotations": {ANNOTATION_RETAINED: message}}}
        _call(
            f"keep ConfigMap {namespace}/{name} after its job",
            lambda: self.core.patch_namespaced_config_map(
                name, namespace, patch, _content_type=MERGE_PATCH,
                _request_timeout=REQUEST_TIMEOUT,
            ),
            ok=frozenset({404}),
        )

    # --- pods and the driver's companions ---------------------------------------------------

    def create_pod(self, *, manifest: Manifest) -> None:
        namespace, name = _where(manifest)
        _call(
            f"create pod {namespace}/{name}",
            lambda: self.core.create_namespaced_pod(
                namespace, manifest, _request_timeout=REQUEST_TIMEOUT
            ),
            ok=frozenset({409}),
        )

    def read_pod(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        pod = _call(
            f"read pod {namespace}/{name}",
            lambda: self.core.read_namespaced_pod(name, namespace,
                                                  _request_timeout=REQUEST_TIMEOUT),
            ok=frozenset({404}),
        )
        if pod is None:
            return None
        return cast(Mapping[str, Any], self.api_client.sanitize_for_serialization(pod))

    def read_node(self, *, name: str) -> Mapping[str, Any] | None:
        node = _call(
            f"read node {name}",
            lambda: self.core.read_node(name, _request_timeout=REQUEST_TIMEOUT),
            ok=frozenset({404}),
        )
        if node is None:
            return None
        return cast(Mapping[str, Any], self.api_client.sanitize_for_serialization(node))

    def list_pods(self, *, namespace: str, labels: Mapping[str, str]) -> list[Mapping[str, Any]]:
        selector = _label_selector(labels)
        found = _call(
            f"list pods {selector} in {namespace}",
            lambda: self.core.list_namespaced_pod(namespace, label_selector=selector,
                                                  _request_timeout=REQUEST_TIMEOUT),
        )
        serialized = self.api_client.sanitize_for_serialization(found)
        return [item for item in serialized.get("items") or [] if isinstance(item, Mapping)]

    def delete_pod(self, *, namespace: str, name: str, force: bool) -> None:
        options: dict[str, Any] = {"propagationPolicy": "Background"}
        if force:
            options["gracePeriodSeconds"] = 0
        _call(
            f"delete pod {namespace}/{name}",
            lambda: self.core.delete_namespaced_pod(
                name, namespace, body=options, _request_timeout=REQUEST_TIMEOUT
            ),
            ok=frozenset({404}),
        )

    def ensure_object(self, *, manifest: Manifest) -> None:
        """Create the object; if it exists, patch the parts the operator owns."""
        kind = manifest.get("kind")
        namespace, name = _where(manifest)
        operation = f"create {kind} {namespace}/{name}"
        if kind == "ServiceAccount":
            _call(operation, lambda: self.core.create_namespaced_service_account(
                namespace, manifest, _request_timeout=REQUEST_TIMEOUT), ok=frozenset({409}))
        elif kind == "Secret":
            # Created once; an existing Secret is the job's key already: never read it.
            _call(operation, lambda: self.core.create_namespaced_secret(
                namespace, manifest, _request_timeout=REQUEST_TIMEOUT), ok=frozenset({409}))
        elif kind == "Service":
            _call(operation, lambda: self.core.create_namespaced_service(
                namespace, manifest, _request_timeout=REQUEST_TIMEOUT), ok=frozenset({409}))
        elif kind == "Role":
            created = _call(operation, lambda: self.rbac.create_namespaced_role(
                namespace, manifest, _request_timeout=REQUEST_TIMEOUT), ok=frozenset({409}))
            if created is None:
                _call(f"update Role {namespace}/{name}", lambda: self.rbac.patch_namespaced_role(
                    name, namespace, {"rules": manifest["rules"]},
                    _content_type=MERGE_PATCH, _request_timeout=REQUEST_TIMEOUT))
        elif kind == "RoleBinding":
            created = _call(operation, lambda: self.rbac.create_namespaced_role_binding(
                namespace, manifest, _request_timeout=REQUEST_TIMEOUT), ok=frozenset({409}))
            if created is None:
                _call(
                    f"update RoleBinding {namespace}/{name}",
                    lambda: self.rbac.patch_namespaced_role_binding(
                        name, namespace, {"subjects": manifest["subjects"]},
                        _content_type=MERGE_PATCH, _request_timeout=REQUEST_TIMEOUT),
                )
        elif kind == "NetworkPolicy":
            created = _call(operation, lambda: self.networking.create_namespaced_network_policy(
                namespace, manifest, _request_timeout=REQUEST_TIMEOUT), ok=frozenset({409}))
            if created is None:
                _call(
                    f"update NetworkPolicy {namespace}/{name}",
                    lambda: self.networking.patch_namespaced_network_policy(
                        name, namespace, {"spec": manifest["spec"]},
                        _content_type=MERGE_PATCH, _request_timeout=REQUEST_TIMEOUT),
                )
        else:
            raise ClusterError(operation=operation, cause=f"unsupported kind {kind!r}",
                               retryable=False)

    # --- events ----------------------------------------------------------------------

    def post_event(self, *, job: JobRef, type: str, reason: str, message: str) -> None:
        now = format_time(datetime.now(UTC))
        involved: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": job.kind,
            "name": job.name,
            "namespace": job.namespace,
        }
        if job.uid:
            involved["uid"] = job.uid
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{job.name}.", "namespace": job.namespace},
            "involvedObject": involved,
            "type": type,
            "reason": reason,
            "message": message[:MAX_EVENT_MESSAGE],
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": EVENT_COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        _call(
            f"post event {reason} for {job.namespace}/{job.name}",
            lambda: self.core.create_namespaced_event(
                job.namespace, body, _request_timeout=REQUEST_TIMEOUT
            ),
        )


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) turning ``old`` into ``new``.

    Objects are patched key by key (removed keys become null); anything else,
    lists included, is replaced whole.
    """
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            patch[key] = merge_patch(before, value)
        else:
            patch[key] = copy.deepcopy(value)
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def _label_selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def _where(manifest: Mapping[str, Any]) -> tuple[str, str]:
    metadata = manifest.get("metadata") or {}
    return str(metadata.get("namespace")), str(metadata.get("name"))
