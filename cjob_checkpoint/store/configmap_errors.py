"""Errors of the ConfigMap completed-checkpoint store.

Each error names the ConfigMap (``namespace/name``) and says what to do, because
they end up in a driver's log, a job's ``status.lastFailure`` or an Event. They
subclass :class:`~cjob_checkpoint.store.completed_store.StoreError`, so the coordinator treats
them like any other store failure; :class:`FencedError` and
:class:`AmbiguousWriteError` keep their special meaning.
"""

from __future__ import annotations

from cjob_checkpoint.keyword_error import keyword_error
from cjob_checkpoint.store.completed_store import (
    AmbiguousWriteError,
    StoreError,
    StoreFullError,
)


@keyword_error
class StoreCredentialsError(StoreError):
    """No credentials for any API server: not in a pod, and no kubeconfig.

    A setup mistake, not an outage: no retry or restart finds credentials."""

    reason = "StoreCredentialsMissing"
    where: str
    cause: str

    def describe(self) -> str:
        return (f"cannot reach {self.where}: no Kubernetes credentials (not in a pod, and no "
                f"kubeconfig in $KUBECONFIG or ~/.kube/config: {self.cause})")


@keyword_error
class StoreUnavailableError(StoreError):
    """The apiserver could not be reached or kept failing; nothing was written.

    Raised after a few retries for reads, and for writes that certainly did not
    reach the apiserver (connection refused, throttled). Transient: the caller may
    try again later.
    """

    reason = "StoreUnavailable"
    namespace: str
    name: str
    operation: str
    cause: str

    def describe(self) -> str:
        return (
            f"cannot {self.operation} ConfigMap {self.namespace}/{self.name}: the apiserver is "
            f"unavailable ({self.cause})"
        )


@keyword_error
class StoreNotFoundError(StoreError):
    """The checkpoint ConfigMap does not exist.

    The operator creates it (see :func:`cjob_checkpoint.store.configmap.ensure_configmap`)
    before it starts a driver; a driver has no right to create it.
    """

    reason = "StoreNotFound"
    namespace: str
    name: str

    def describe(self) -> str:
        return (
            f"checkpoint ConfigMap {self.namespace}/{self.name} does not exist; the operator "
            f"creates it before starting a driver"
        )


@keyword_error
class StoreAccessDeniedError(StoreError):
    """The apiserver refused our identity (401) or its rights (403)."""

    reason = "StoreAccessDenied"
    namespace: str
    name: str
    operation: str
    status: int
    message: str

    def describe(self) -> str:
        return (
            f"not allowed to {self.operation} ConfigMap {self.namespace}/{self.name} (HTTP "
            f"{self.status}): {self.message}; check the driver's service account and Role"
        )


@keyword_error
class StoreConflictError(StoreError):
    """Every compare-and-swap attempt lost against another writer."""

    reason = "StoreConflict"
    namespace: str
    name: str
    operation: str
    attempts: int

    def describe(self) -> str:
        return (
            f"could not {self.operation} ConfigMap {self.namespace}/{self.name}: {self.attempts} "
            f"compare-and-swap attempts in a row lost against concurrent writers"
        )


@keyword_error
class StoreRejectedError(StoreError):
    """The apiserver refused the write as invalid (for example too large); not retried."""

    reason = "StoreRejected"
    namespace: str
    name: str
    operation: str
    status: int
    message: str

    def describe(self) -> str:
        return (
            f"the apiserver rejected the {self.operation} of ConfigMap {self.namespace}/"
            f"{self.name} (HTTP {self.status}): {self.message}"
        )


@keyword_error
class CorruptStoreDataError(StoreError):
    """The fence annotation or the ``counter`` key does not hold a number.

    Never repaired by guessing: a guessed counter could reuse checkpoint ids and a
    guessed fence could let a zombie writer in.
    """

    reason = "CorruptStoreData"
    namespace: str
    name: str
    key: str
    value: str

    def describe(self) -> str:
        return (
            f"ConfigMap {self.namespace}/{self.name}: {self.key} must be a number >= 0, found "
            f"{self.value[:40]!r}; fix it by hand"
        )


@keyword_error
class ConfigMapStoreFullError(StoreFullError):
    """Committing the pointer would make the ConfigMap larger than its budget."""

    namespace: str
    name: str
    size_bytes: int
    budget_bytes: int
    pointers: int

    def describe(self) -> str:
        return (
            f"ConfigMap {self.namespace}/{self.name} would grow to {self.size_bytes} bytes with "
            f"{self.pointers} checkpoint pointers, over its budget of {self.budget_bytes} bytes "
            f"(a ConfigMap holds at most 1 MiB); lower checkpoint.retained or shorten the "
            f"storage path"
        )


@keyword_error
class AmbiguousConfigMapWriteError(AmbiguousWriteError):
    """A write was sent but its answer was lost: it may or may not have been applied.

    Nothing is deleted after such a write; the next write re-reads the ConfigMap
    and carries on from whatever actually landed.
    """

    namespace: str
    name: str
    operation: str
    cause: str

    def describe(self) -> str:
        return (
            f"the outcome of the {self.operation} of ConfigMap {self.namespace}/{self.name} is "
            f"unknown ({self.cause}); no checkpoint data was deleted"
        )
