"""The ConfigMap completed-checkpoint store: the store of jobs run by the operator.

Flink keeps its completed-checkpoint pointers in ZooKeeper or in a ConfigMap
with resource-version guarded updates; this is the same idea. One ConfigMap per
job, ``<job>-checkpoints`` (layout in :mod:`cjob_checkpoint.store.configmap_layout`),
holds a small JSON pointer per retained checkpoint, the id counter, and the
fence: the annotation ``checkpointed.io/fence-attempt`` naming the only attempt
allowed to write.

The rules (compare-and-swap, fencing inside the swap, add then prune in two
phases, no deletion after an ambiguous write) are kept once, by
:mod:`cjob_checkpoint.store.backed`; :class:`ConfigMapBackend` only reads the object
and replaces it with the ``resourceVersion`` it read (a 409 Conflict means
somebody else wrote first). What is particular to a ConfigMap:

* **Ambiguity.** A lost answer (timeout, dropped connection, 5xx) to a write is
  an :class:`AmbiguousWriteError`; see :mod:`cjob_checkpoint.store.configmap_client`.
* **Size.** The object's size is computed before every commit; crossing the
  budget (256 KiB by default, a quarter of the 1 MiB limit) raises
  :class:`StoreFullError` instead of risking a rejected write later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from cjob_checkpoint.store.backed import (
    BackedCheckpointIdCounter,
    BackedCheckpointStore,
    advance_fence,
    hold_checkpoint,
    release_checkpoint,
)
from cjob_checkpoint.store.backend import RetryPolicy
from cjob_checkpoint.store.completed_store import (
    FencedError,
    NoRestorableCheckpointError,
    StoreError,
)
from cjob_checkpoint.store.configmap_client import (
    DEFAULT_DEADLINE,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_REQUEST_TIMEOUT,
    ConfigMapAccess,
    configure_for_store,
    core_v1_api,
    new_api_client,
)
from cjob_checkpoint.store.configmap_errors import (
    AmbiguousConfigMapWriteError,
    ConfigMapStoreFullError,
    CorruptStoreDataError,
    StoreAccessDeniedError,
    StoreConflictError,
    StoreNotFoundError,
    StoreRejectedError,
    StoreUnavailableError,
)
from cjob_checkpoint.store.configmap_layout import (
    DEFAULT_BUDGET_BYTES,
    StoreObject,
    StoreSnapshot,
    build_store_configmap,
    marker_key,
    parse_store,
    pointer_key,
)
from cjob_checkpoint.store.restorable import MetadataReader
from cjob_checkpoint.store.state import StoreState

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "AmbiguousConfigMapWriteError",
    "ConfigMapBackend",
    "ConfigMapCheckpointIdCounter",
    "ConfigMapCheckpointStore",
    "ConfigMapStoreFullError",
    "CorruptStoreDataError",
    "MetadataReader",
    "NoRestorableCheckpointError",
    "StoreAccessDeniedError",
    "StoreConflictError",
    "StoreNotFoundError",
    "StoreRejectedError",
    "StoreSnapshot",
    "StoreUnavailableError",
    "advance_attempt",
    "configure_for_store",
    "ensure_configmap",
    "hold",
    "marker_key",
    "new_api_client",
    "open_configmap_store",
    "parse_store",
    "pointer_key",
    "read_snapshot",
    "release",
]


# --------------------------------------------------------------------------- backend


class ConfigMapBackend:
    """A store's state in one ConfigMap, swapped with its ``resourceVersion``."""

    def __init__(self, *, access: ConfigMapAccess,
                 budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.access = access
        self.budget_bytes = budget_bytes
        self._size_lock = threading.Lock()
        self._last_size = 0

    @property
    def where(self) -> str:
        return f"{self.access.namespace}/{self.access.name}"

    @property
    def retry_policy(self) -> RetryPolicy:
        return self.access.retry_policy

    @property
    def last_size(self) -> int:
        """The object's size as last read or written."""
        with self._size_lock:
            return self._last_size

    def observe(self, obj: StoreObject) -> StoreState:
        with self._size_lock:
            self._last_size = obj.size_bytes
        return obj.state()

    def read(self) -> StoreState:
        return self.observe(self.access.read_once())

    def compare_and_swap(self, *, expected: StoreState, new: StoreState,
                         operation: str) -> StoreState:
        changed = self._origin(expected).with_state(new)
        return self.observe(self.access.replace_once(changed.body(), operation=operation))

    def locate(self, checkpoint_id: int) -> str:
        return f"configmap:{self.where}#{pointer_key(checkpoint_id)}"

    def check_budget(self, state: StoreState) -> None:
        """Refuse a state that would take the ConfigMap past its size budget, far
        below the apiserver's 1 MiB limit; nothing is written then."""
        size = self._origin(state).with_state(state).size_bytes
        if size > self.budget_bytes:
            raise ConfigMapStoreFullError(
                namespace=self.access.namespace, name=self.access.name, size_bytes=size,
                budget_bytes=self.budget_bytes, pointers=len(state.pointer_ids()))

    def gave_up(self, *, operation: str, conflicts: bool, attempts: int,
                cause: str) -> StoreError:
        return self.access.gave_up(operation=operation, conflicts=conflicts,
                                   attempts=attempts, cause=cause)

    @staticmethod
    def _origin(state: StoreState) -> StoreObject:
        origin = state.origin
        if not isinstance(origin, StoreObject):
            raise TypeError("a ConfigMap backend swaps only states it read itself")
        return origin


# --------------------------------------------------------------------------- operator side


def ensure_configmap(
    *,
    api: Any,
    namespace: str,
    name: str,
    job_name: str,
    owner_reference: Mapping[str, Any] | None,
    labels: Mapping[str, str] | None = None,
) -> bool:
    """Create the job's empty store if it is missing; returns whether it was created.

    An existing ConfigMap is never changed (it may hold the pointers of a job that
    is being restarted). ``owner_reference`` (the CheckpointedJob's, as a dict with
    ``apiVersion``, ``kind``, ``name``, ``uid``) makes the garbage collector delete
    the store with the job. The fence starts at attempt 0.
    """
    access = ConfigMapAccess(api=api, namespace=namespace, name=name)
    body = build_store_configmap(namespace=namespace, name=name, job_name=job_name,
                                 owner_reference=owner_reference, labels=labels)
    return access.create(body) is not None


def advance_attempt(*, api: Any, namespace: str, name: str, attempt: int) -> int:
    """Make ``attempt`` the only attempt allowed to write; older writers are fenced.

    The operator calls this before it creates the driver of ``attempt``. It is a
    compare-and-swap on the fence annotation, idempotent for the current attempt,
    and never moves the fence backwards: an older ``attempt`` than the one
    recorded raises :class:`FencedError`. A lost answer is retried (setting the
    same value twice is harmless). Returns ``attempt``.
    """
    backend = ConfigMapBackend(access=ConfigMapAccess(api=api, namespace=namespace, name=name))
    return advance_fence(backend, attempt, where=backend.where)


def hold(*, api: Any, namespace: str, name: str, checkpoint_id: int, holder: str,
         by: str) -> bool:
    """Keep checkpoint ``checkpoint_id`` from being pruned for ``holder`` (a snapshot's
    uid); ``False`` if it is no longer live (see :func:`hold_checkpoint`)."""
    backend = ConfigMapBackend(access=ConfigMapAccess(api=api, namespace=namespace, name=name))
    return hold_checkpoint(backend, where=backend.where, checkpoint_id=checkpoint_id,
                           holder=holder, by=by)


def release(*, api: Any, namespace: str, name: str, holder: str) -> bool:
    """Let go of ``holder``'s hold, if it has one."""
    backend = ConfigMapBackend(access=ConfigMapAccess(api=api, namespace=namespace, name=name))
    return release_checkpoint(backend, where=backend.where, holder=holder)


def read_snapshot(*, api: Any, namespace: str, name: str) -> StoreSnapshot:
    """One consistent reading of the store (fence, counter, live pointers, size)."""
    return ConfigMapAccess(api=api, namespace=namespace, name=name).read().snapshot()


# --------------------------------------------------------------------------- store, counter


class ConfigMapCheckpointStore(BackedCheckpointStore):
    """Completed-checkpoint pointers in a ConfigMap; see the module docstring.

    ``api`` is a ``kubernetes.client.CoreV1Api``. ``budget_bytes`` caps the
    object's size. ``discard_on_terminal`` decides what :meth:`shutdown` does for
    a finished or canceled job; it defaults to ``False``: on Kubernetes the
    checkpoints outlive the driver on purpose (the ConfigMap is owned by the
    CheckpointedJob and goes with it, and the operator's cleanup policy decides
    about the data), and a driver cannot know whether another attempt follows.
    """

    def __init__(
        self,
        *,
        api: Any,
        namespace: str,
        name: str,
        retained: int,
        attempt: int,
        budget_bytes: int = DEFAULT_BUDGET_BYTES,
        discard_on_terminal: bool = False,
        request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        deadline: float = DEFAULT_DEADLINE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.budget_bytes = budget_bytes
        self._access = ConfigMapAccess(api=api, namespace=namespace, name=name,
                                       request_timeout=request_timeout,
                                       max_attempts=max_attempts, deadline=deadline)
        self._backend = ConfigMapBackend(access=self._access, budget_bytes=budget_bytes)
        super().__init__(backend=self._backend, where=self._backend.where, retained=retained,
                         attempt=attempt, discard_on_terminal=discard_on_terminal, clock=clock)

    def snapshot(self) -> StoreSnapshot:
        """Read the ConfigMap once and decode it."""
        obj = self._access.read()
        self._backend.observe(obj)
        return obj.snapshot()

    def marked_for_discard(self) -> list[int]:
        return self.marked_ids()

    def size_bytes(self, *, refresh: bool = True) -> int:
        """The ConfigMap's size in bytes (for the ``cjob_checkpoint_store_bytes`` gauge).

        With ``refresh=False`` the size seen by the last read or write is returned
        without asking the apiserver, which suits a metrics callback.
        """
        if refresh:
            return self.snapshot().size_bytes
        return self._backend.last_size


class ConfigMapCheckpointIdCounter(BackedCheckpointIdCounter):
    """The next checkpoint id in the ConfigMap's ``counter`` key, fenced like the store."""

    def __init__(
        self,
        *,
        api: Any,
        namespace: str,
        name: str,
        attempt: int,
        start: int = 1,
        request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        deadline: float = DEFAULT_DEADLINE,
    ) -> None:
        self.namespace = namespace
        self.name = name
        backend = ConfigMapBackend(access=ConfigMapAccess(
            api=api, namespace=namespace, name=name, request_timeout=request_timeout,
            max_attempts=max_attempts, deadline=deadline))
        super().__init__(backend=backend, where=backend.where, attempt=attempt, start=start)


# --------------------------------------------------------------------------- driver entry


def open_configmap_store(
    *,
    namespace: str,
    name: str,
    retained: int,
    attempt: int,
    api_client: Any | None = None,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
) -> tuple[ConfigMapCheckpointStore, ConfigMapCheckpointIdCounter]:
    """The driver's store and counter for ``configmap:NAMESPACE/NAME``.

    Without ``api_client`` the configuration is loaded in-cluster when running in
    a pod with a mounted service-account token, else from ``$KUBECONFIG``. The
    ConfigMap must exist (the operator creates it); this is checked here so a
    missing store or missing rights fail the driver at start, not at its first
    checkpoint.
    """
    client = (api_client if api_client is not None
              else new_api_client(where=f"configmap:{namespace}/{name}"))
    api = core_v1_api(client)
    store = ConfigMapCheckpointStore(api=api, namespace=namespace, name=name,
                                     retained=retained, attempt=attempt,
                                     budget_bytes=budget_bytes)
    counter = ConfigMapCheckpointIdCounter(api=api, namespace=namespace, name=name,
                                           attempt=attempt)
    snapshot = store.snapshot()
    if attempt < snapshot.fence_attempt:
        raise FencedError(attempt=attempt, current_attempt=snapshot.fence_attempt)
    return store, counter
