"""Errors of the ConfigMap completed-checkpoint store.

Each error names the ConfigMap (``namespace/name``) and says what to do, because
they end up in a driver's log, a job's ``status.lastFailure`` or an Event. They
subclass :class:`~cjob_checkpoint.store.base.StoreError`, so the coordinator treats
them like any other store failure; :class:`FencedError` and
:class:`AmbiguousWriteError` keep their special meaning.
"""

from __future__ import annotations

from typing import Any

from cjob_checkpoint.store.base import (
    AmbiguousWriteError,
    StoreError,
    StoreFullError,
)


def _rebuild(cls: type[Exception], fields: dict[str, Any]) -> Exception:
    return cls(**fields)


class _KeywordError(StoreError):
    """Pickles through its keyword-only constructor (Spark and multiprocessing pickle errors)."""

    _fields: tuple[str, ...] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), {f: getattr(self, f) for f in self._fields}))


class StoreUnavailableError(_KeywordError):
    """The apiserver could not be reached or kept failing; nothing was written.

    Raised after a few retries for reads, and for writes that certainly did not
    reach the apiserver (connection refused, throttled). Transient: the caller may
    try again later.
    """

    reason = "StoreUnavailable"
    _fields = ("namespace", "name", "operation", "cause")

    def __init__(self, *, namespace: str, name: str, operation: str, cause: str) -> None:
        super().__init__(
            f"cannot {operation} ConfigMap {namespace}/{name}: the apiserver is unavailable "
            f"({cause})"
        )
        self.namespace = namespace
        self.name = name
        self.operation = operation
        self.cause = cause


class StoreNotFoundError(_KeywordError):
    """The checkpoint ConfigMap does not exist.

    The operator creates it (see :func:`cjob_checkpoint.store.configmap.ensure_configmap`)
    before it starts a driver; a driver has no right to create it.
    """

    reason = "StoreNotFound"
    _fields = ("namespace", "name")

    def __init__(self, *, namespace: str, name: str) -> None:
        super().__init__(
            f"checkpoint ConfigMap {namespace}/{name} does not exist; the operator creates it "
            f"before starting a driver"
        )
        self.namespace = namespace
        self.name = name


class StoreAccessDeniedError(_KeywordError):
    """The apiserver refused our identity (401) or its rights (403)."""

    reason = "StoreAccessDenied"
    _fields = ("namespace", "name", "operation", "status", "message")

    def __init__(
        self, *, namespace: str, name: str, operation: str, status: int, message: str
    ) -> None:
        super().__init__(
            f"not allowed to {operation} ConfigMap {namespace}/{name} (HTTP {status}): {message}; "
            f"check the driver's service account and Role"
        )
        self.namespace = namespace
        self.name = name
        self.operation = operation
        self.status = status
        self.message = message


class StoreConflictError(_KeywordError):
    """Every compare-and-swap attempt lost against another writer."""

    reason = "StoreConflict"
    _fields = ("namespace", "name", "operation", "attempts")

    def __init__(self, *, namespace: str, name: str, operation: str, attempts: int) -> None:
        super().__init__(
            f"could not {operation} ConfigMap {namespace}/{name}: {attempts} compare-and-swap "
            f"attempts in a row lost against concurrent writers"
        )
        self.namespace = namespace
        self.name = name
        self.operation = operation
        self.attempts = attempts


class StoreRejectedError(_KeywordError):
    """The apiserver refused the write as invalid (for example too large); not retried."""

    reason = "StoreRejected"
    _fields = ("namespace", "name", "operation", "status", "message")

    def __init__(
        self, *, namespace: str, name: str, operation: str, status: int, message: str
    ) -> None:
        super().__init__(
            f"the apiserver rejected the {operation} of ConfigMap {namespace}/{name} "
            f"(HTTP {status}): {message}"
        )
        self.namespace = namespace
        self.name = name
        self.operation = operation
        self.status = status
        self.message = message


class CorruptStoreDataError(_KeywordError):
    """The fence annotation or the ``counter`` key does not hold a number.

    Never repaired by guessing: a guessed counter could reuse checkpoint ids and a
    guessed fence could let a zombie writer in.
    """

    reason = "CorruptStoreData"
    _fields = ("namespace", "name", "key", "value")

    def __init__(self, *, namespace: str, name: str, key: str, value: str) -> None:
        super().__init__(
            f"ConfigMap {namespace}/{name}: {key} must be a number >= 0, found {value[:40]!r}; "
            f"fix it by hand"
        )
        self.namespace = namespace
        self.name = name
        self.key = key
        self.value = value


class ConfigMapStoreFullError(StoreFullError):
    """Committing the pointer would make the ConfigMap larger than its budget."""

    _fields = ("namespace", "name", "size_bytes", "budget_bytes", "pointers")

    def __init__(
        self, *, namespace: str, name: str, size_bytes: int, budget_bytes: int, pointers: int
    ) -> None:
        super().__init__(
            f"ConfigMap {namespace}/{name} would grow to {size_bytes} bytes with {pointers} "
            f"checkpoint pointers, over its budget of {budget_bytes} bytes (a ConfigMap holds "
            f"at most 1 MiB); lower checkpoint.retained or shorten the storage path"
        )
        self.namespace = namespace
        self.name = name
        self.size_bytes = size_bytes
        self.budget_bytes = budget_bytes
        self.pointers = pointers

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), {f: getattr(self, f) for f in self._fields}))


class AmbiguousConfigMapWriteError(AmbiguousWriteError):
    """A write was sent but its answer was lost: it may or may not have been applied.

    Nothing is deleted after such a write; the next write re-reads the ConfigMap
    and carries on from whatever actually landed.
    """

    _fields = ("namespace", "name", "operation", "cause")

    def __init__(self, *, namespace: str, name: str, operation: str, cause: str) -> None:
        super().__init__(
            f"the outcome of the {operation} of ConfigMap {namespace}/{name} is unknown ({cause}); "
            f"no checkpoint data was deleted"
        )
        self.namespace = namespace
        self.name = name
        self.operation = operation
        self.cause = cause

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), {f: getattr(self, f) for f in self._fields}))
