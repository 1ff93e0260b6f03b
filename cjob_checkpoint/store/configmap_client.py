"""Talking to the apiserver about one ConfigMap: reads, compare-and-swap writes, errors.

The store needs to know, for every failed request, whether the apiserver may
have applied it, because an ambiguous commit must never be followed by a
deletion. The answers are sorted into four kinds:

* *conflict* (409): our ``resourceVersion`` was stale; nothing was written, read
  again and retry;
* *not applied* (connection refused, connect timeout, 429): nothing reached the
  apiserver's storage; retrying is safe;
* *ambiguous* (read timeout, connection lost after sending, 5xx): the write may
  have landed;
* *final* (401/403, 404, 422, other 4xx): retrying does not help.

urllib3 retries a lost PUT on its own by default. :func:`configure_for_store`
limits its retries to connection failures, so the store sees every ambiguous
answer and decides itself (an urllib3 retry would be safe anyway: the repeated
PUT carries the same ``resourceVersion``, so at most one of them applies and the
other gets a conflict, which the store reconciles on the next read).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from cjob_checkpoint.store.backend import (
    RetryPolicy,
    SwapConflictError,
    TransientStoreError,
    retrying,
)
from cjob_checkpoint.store.completed_store import StoreError
from cjob_checkpoint.store.configmap_errors import (
    AmbiguousConfigMapWriteError,
    StoreAccessDeniedError,
    StoreConflictError,
    StoreCredentialsError,
    StoreNotFoundError,
    StoreRejectedError,
    StoreUnavailableError,
)
from cjob_checkpoint.store.configmap_layout import StoreObject

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
DEFAULT_REQUEST_TIMEOUT = (5.0, 20.0)
"""(connect, read) seconds for each request: a hung apiserver becomes an answer."""
DEFAULT_MAX_ATTEMPTS = 20
DEFAULT_DEADLINE = 60.0
"""Seconds one operation (a read, or a read-modify-write) may take with all its retries."""
_T = TypeVar("_T")


# --------------------------------------------------------------------------- configuration


def store_retry_policy() -> urllib3.util.Retry:
    """urllib3 retries only for requests that never reached the apiserver."""
    return urllib3.util.Retry(total=3, connect=3, read=0, redirect=0, status=0, other=0,
                              backoff_factor=0.1, raise_on_status=False)


def configure_for_store(configuration: Any) -> Any:
    """Give a ``kubernetes.client.Configuration`` the store's retry policy; returns it.

    Call before the ``ApiClient`` is built: the client reads it once.
    """
    configuration.retries = store_retry_policy()
    return configuration


def is_in_cluster() -> bool:
    """Inside a pod: the service host variable is set and a token is mounted."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        SERVICE_ACCOUNT_TOKEN)


def new_api_client(*, kubeconfig: str | None = None,
                   where: str = "the Kubernetes API") -> Any:
    """An ``ApiClient`` for the store: in-cluster config inside a pod, else kubeconfig.

    Outside a pod (or when a pod gets its identity through ``KUBECONFIG``, as on
    the test process node) the kubeconfig named by ``kubeconfig``, ``$KUBECONFIG``
    or ``~/.kube/config`` is used. Without any, :class:`StoreCredentialsError`
    names ``where`` (the store that was to be reached).
    """
    configuration = k8s_client.Configuration()
    # The client ships without type hints; name its loaders as ``Any``.
    load_incluster: Any = k8s_config.load_incluster_config
    load_kube: Any = k8s_config.load_kube_config
    if kubeconfig is None and is_in_cluster():
        load_incluster(client_configuration=configuration)
    else:
        # Read $KUBECONFIG now: the client reads it once, when it is imported.
        path = kubeconfig or os.environ.get("KUBECONFIG") or None
        try:
            load_kube(config_file=path, client_configuration=configuration)
        except k8s_config.ConfigException as exc:
            raise StoreCredentialsError(where=where, cause=str(exc)) from None
    configure_for_store(configuration)
    return k8s_client.ApiClient(configuration)


# --------------------------------------------------------------------------- errors


def _reasons(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (urllib3 wraps the real cause in ``reason``)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        reason = getattr(current, "reason", None)
        current = reason if isinstance(reason, BaseException) else current.__cause__
    return seen


def is_not_sent(exc: BaseException) -> bool:
    """The request certainly never reached the apiserver (the connection failed)."""
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

    for reason in _reasons(exc):
        if isinstance(reason, NewConnectionError | ConnectTimeoutError | ConnectionRefusedError):
            return True
    return False


def _api_message(exc: ApiException) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            decoded = json.loads(body)
        except (ValueError, TypeError):
            return str(body)[:300]
        if isinstance(decoded, dict) and decoded.get("message"):
            return str(decoded["message"])
    return str(getattr(exc, "reason", "") or exc)


# --------------------------------------------------------------------------- access


class ConfigMapAccess:
    """Read, create and compare-and-swap one ConfigMap, sorting failures as above."""

    def __init__(
        self,
        *,
        api: Any,
        namespace: str,
        name: str,
        request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        deadline: float = DEFAULT_DEADLINE,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.request_timeout = request_timeout
        self.max_attempts = max_attempts
        self.deadline = deadline

    def __repr__(self) -> str:
        return f"ConfigMapAccess({self.namespace}/{self.name})"

    # ------------------------------------------------------------------ one request

    def _final_error(self, exc: ApiException, *, operation: str) -> Exception:
        status = int(getattr(exc, "status", 0) or 0)
        message = _api_message(exc)
        if status == 404:
            return StoreNotFoundError(namespace=self.namespace, name=self.name)
        if status in (401, 403):
            return StoreAccessDeniedError(namespace=self.namespace, name=self.name,
                                          operation=operation, status=status, message=message)
        return StoreRejectedError(namespace=self.namespace, name=self.name, operation=operation,
                                  status=status, message=message)

    def _call(self, call: Callable[[], Any], *, operation: str, write: bool) -> dict[str, Any]:
        """Run one request; return the decoded object or raise a sorted failure."""
        try:
            response = call()
        except ApiException as exc:
            status = int(getattr(exc, "status", 0) or 0)
            if status == 409:
                raise SwapConflictError(_api_message(exc)) from None
            if status == 429:
                raise TransientStoreError(f"HTTP 429: {_api_message(exc)}") from None
            if status >= 500 or status == 0:
                cause = f"HTTP {status}: {_api_message(exc)}"
                if write:
                    raise AmbiguousConfigMapWriteError(
                        namespace=self.namespace, name=self.name, operation=operation,
                        cause=cause) from None
                raise TransientStoreError(cause) from None
            raise self._final_error(exc, operation=operation) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            cause = f"{type(exc).__name__}: {exc}"
            if not write or is_not_sent(exc):
                raise TransientStoreError(cause) from None
            raise AmbiguousConfigMapWriteError(namespace=self.namespace, name=self.name,
                                               operation=operation, cause=cause) from None
        raw = response.data
        decoded: dict[str, Any] = json.loads(raw) if raw else {}
        return decoded

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(max_attempts=self.max_attempts, deadline=self.deadline)

    def gave_up(self, *, operation: str, conflicts: bool, attempts: int,
                cause: str) -> StoreError:
        """The error for an operation that ran out of tries or time."""
        if conflicts:
            return StoreConflictError(namespace=self.namespace, name=self.name,
                                      operation=operation, attempts=attempts)
        return StoreUnavailableError(namespace=self.namespace, name=self.name,
                                     operation=operation, cause=cause)

    def _retrying(self, step: Callable[[], _T], *, operation: str) -> _T:
        """Run ``step`` until it neither conflicts nor meets a transient failure.

        At most ``max_attempts`` tries, and none starts after ``deadline`` seconds:
        each request is bounded by ``request_timeout``, and without an overall bound
        a hung apiserver would hold the caller for ``max_attempts`` read timeouts.
        """
        return retrying(step, policy=self.retry_policy, operation=operation,
                        where=f"{self.namespace}/{self.name}", gave_up=self.gave_up)

    def read_once(self) -> StoreObject:
        """One read; :class:`TransientStoreError` when it may be retried."""
        obj = self._call(
            lambda: self.api.read_namespaced_config_map(
                self.name, self.namespace, _preload_content=False,
                _request_timeout=self.request_timeout),
            operation="read", write=False)
        return StoreObject(obj)

    def replace_once(self, body: Mapping[str, Any], *, operation: str) -> StoreObject:
        """One replace with the body's ``resourceVersion``: a compare-and-swap."""
        obj = self._call(
            lambda: self.api.replace_namespaced_config_map(
                self.name, self.namespace, dict(body), _preload_content=False,
                _request_timeout=self.request_timeout),
            operation=operation, write=True)
        return StoreObject(obj)

    # ------------------------------------------------------------------ public

    def read(self) -> StoreObject:
        """Read the ConfigMap, retrying transient failures a few times."""
        return self._retrying(self.read_once, operation="read")

    def create(self, body: Mapping[str, Any]) -> StoreObject | None:
        """Create the ConfigMap; ``None`` if it already exists (never overwritten)."""

        def step() -> StoreObject | None:
            try:
                obj = self._call(
                    lambda: self.api.create_namespaced_config_map(
                        self.namespace, dict(body), _preload_content=False,
                        _request_timeout=self.request_timeout),
                    operation="create", write=True)
            except SwapConflictError:
                return None  # 409 on create is AlreadyExists
            return StoreObject(obj)

        return self._retrying(step, operation="create")

    def update(
        self,
        change: Callable[[StoreObject], bool],
        *,
        operation: str,
        retry_ambiguous: bool = False,
    ) -> tuple[StoreObject, bool]:
        """Read-modify-write with the ``resourceVersion`` read: a compare-and-swap.

        ``change`` edits the object in place and returns whether there is anything
        to write; it may raise to abort (a fence check, a size budget). It runs
        again on a fresh read after every conflict. Returns the object as written
        (or as read, when nothing changed) and whether a write happened.

        An ambiguous write raises :class:`AmbiguousConfigMapWriteError` unless
        ``retry_ambiguous``: only safe for changes whose ``change`` decides again
        from the fresh read, such as the counter's increment.
        """

        def step() -> tuple[StoreObject, bool]:
            current = self.read_once()
            if not change(current):
                return current, False
            try:
                written = self.replace_once(current.body(), operation=operation)
            except AmbiguousConfigMapWriteError as exc:
                if not retry_ambiguous:
                    raise
                raise TransientStoreError(exc.cause) from None
            return written, True

        return self._retrying(step, operation=operation)


def core_v1_api(api_client: Any) -> Any:
    """``CoreV1Api`` over ``api_client``."""
    return cast(Any, k8s_client.CoreV1Api(api_client))
