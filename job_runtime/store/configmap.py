"""The ConfigMap completed-checkpoint store: the store of jobs run by the operator.

Flink keeps its completed-checkpoint pointers in ZooKeeper or in a ConfigMap
with resource-version guarded updates; this is the same idea. One ConfigMap per
job, ``<job>-checkpoints`` (layout in :mod:`job_runtime.store.configmap_layout`),
holds a small JSON pointer per retained checkpoint, the id counter, and the
fence: the annotation ``checkpointed.io/fence-attempt`` naming the only attempt
allowed to write.

How the rules of :mod:`job_runtime.store.base` are kept:

* **Compare-and-swap.** Every change reads the object and replaces it with the
  ``resourceVersion`` it read; a 409 Conflict means somebody else wrote first,
  so the change is recomputed from a fresh read (bounded retries, jittered
  backoff). Two writers can therefore never lose each other's pointers.
* **Fencing inside the swap.** The fence is checked on the very object being
  written, so a driver of an older attempt (a zombie on a lost node) cannot add,
  prune or take an id once the operator has advanced the fence with
  :func:`advance_attempt`, even if it read the object a moment before. A writer
  with a *newer* attempt than the annotation takes the fence over in the same
  write (attempt numbers come only from the operator).
* **Add, then prune in two phases.** The pointer is committed first; then the
  checkpoints beyond ``retained`` (never the newest) are marked with a
  ``discarding-<id>`` key, their data deleted through the ``discard`` callback,
  and finally pointer and marker removed. Readers skip marked pointers. If the
  deletion fails or the process dies, the marker stays and the next add retries.
* **Ambiguity.** When the commit's answer is lost (timeout, dropped connection,
  5xx) the call raises :class:`AmbiguousWriteError` and deletes nothing; the
  next add reads what actually landed and carries on.
* **Size.** The object's size is computed before every commit; crossing the
  budget (256 KiB by default, a quarter of the 1 MiB limit) raises
  :class:`StoreFullError` instead of risking a rejected write later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from job_runtime.store.base import (
    CheckpointIdCounter,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    Discarder,
    FencedError,
    JobStatus,
    UnreadableCheckpointError,
)
from job_runtime.store.configmap_client import (
    DEFAULT_DEADLINE,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_REQUEST_TIMEOUT,
    ConfigMapAccess,
    configure_for_store,
    core_v1_api,
    new_api_client,
)
from job_runtime.store.configmap_errors import (
    AmbiguousConfigMapWriteError,
    ConfigMapStoreFullError,
    CorruptStoreDataError,
    NoRestorableCheckpointError,
    StoreAccessDeniedError,
    StoreConflictError,
    StoreNotFoundError,
    StoreRejectedError,
    StoreUnavailableError,
)
from job_runtime.store.configmap_layout import (
    DEFAULT_BUDGET_BYTES,
    StoreObject,
    StoreSnapshot,
    build_store_configmap,
    marker_key,
    parse_store,
    pointer_key,
)
from job_runtime.store.file import CorruptPointerError, StoreClosedError
from job_runtime.store.retention import ensure_retained, ids_to_prune

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "AmbiguousConfigMapWriteError",
    "ConfigMapCheckpointIdCounter",
    "ConfigMapCheckpointStore",
    "ConfigMapStoreFullError",
    "CorruptStoreDataError",
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
    "marker_key",
    "new_api_client",
    "open_configmap_store",
    "parse_store",
    "pointer_key",
    "read_snapshot",
]

_log = logging.getLogger(__name__)

MetadataReader = Callable[[str], object]
"""Reads a checkpoint's ``_metadata`` by URI; raises :class:`UnreadableCheckpointError`."""


def _check_fence(obj: StoreObject, attempt: int) -> bool:
    """Refuse an older attempt; a newer one takes the fence over. Returns whether it moved."""
    current = obj.fence_attempt
    if attempt < current:
        raise FencedError(attempt=attempt, current_attempt=current)
    if attempt > current:
        _log.info("attempt %d takes the fence of %s/%s over from attempt %d",
                  attempt, obj.namespace, obj.name, current)
        obj.set_fence_attempt(attempt)
        return True
    return False


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
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    access = ConfigMapAccess(api=api, namespace=namespace, name=name)
    access.update(lambda obj: _check_fence(obj, attempt), operation="advance the fence",
                  retry_ambiguous=True)
    return attempt


def read_snapshot(*, api: Any, namespace: str, name: str) -> StoreSnapshot:
    """One consistent reading of the store (fence, counter, live pointers, size)."""
    return ConfigMapAccess(api=api, namespace=namespace, name=name).read().snapshot()


# --------------------------------------------------------------------------- store


class ConfigMapCheckpointStore(CompletedCheckpointStore):
    """Completed-checkpoint pointers in a ConfigMap; see the module docstring.

    ``api`` is a ``kubernetes.client.CoreV1Api``. ``budget_bytes`` caps the
    object's size. ``discard_on_terminal`` decides what :meth:`shutdown` does for
    a finished or canceled job; it defaults to ``False`` (see there).
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
        self.retained = ensure_retained(retained)
        self.attempt = attempt
        self.budget_bytes = budget_bytes
        self.discard_on_terminal = discard_on_terminal
        self.clock = clock
        self._access = ConfigMapAccess(api=api, namespace=namespace, name=name,
                                       request_timeout=request_timeout,
                                       max_attempts=max_attempts, deadline=deadline)
        self._closed = False
        self._last_size = 0
        self._size_lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"ConfigMapCheckpointStore({self.namespace}/{self.name}, "
                f"retained={self.retained}, attempt={self.attempt})")

    # ------------------------------------------------------------------ reads

    def snapshot(self) -> StoreSnapshot:
        """Read the ConfigMap once and decode it."""
        snapshot = self._access.read().snapshot()
        self._remember_size(snapshot.size_bytes)
        return snapshot

    def all(self, *, skip_corrupt: bool = False) -> list[CompletedCheckpoint]:
        """Every retained checkpoint not marked for discard, oldest first.

        A damaged pointer raises :class:`CorruptPointerError` unless
        ``skip_corrupt`` (then it is logged and left out).
        """
        snapshot = self.snapshot()
        if snapshot.corrupt:
            if not skip_corrupt:
                raise snapshot.corrupt[0]
            for problem in snapshot.corrupt:
                _log.warning("skipping %s", problem)
        return list(snapshot.checkpoints)

    def latest(self, *, skip_corrupt: bool = False) -> CompletedCheckpoint | None:
        """The newest checkpoint not marked for discard; see :meth:`all`."""
        checkpoints = self.all(skip_corrupt=skip_corrupt)
        return checkpoints[-1] if checkpoints else None

    def marked_for_discard(self) -> list[int]:
        """Ids whose pointer is marked but whose data may not be deleted yet."""
        return list(self.snapshot().marked)

    def size_bytes(self, *, refresh: bool = True) -> int:
        """The ConfigMap's size in bytes (for the ``cjob_checkpoint_store_bytes`` gauge).

        With ``refresh=False`` the size seen by the last read or write is returned
        without asking the apiserver, which suits a metrics callback.
        """
        if refresh:
            return self.snapshot().size_bytes
        with self._size_lock:
            return self._last_size

    def latest_restorable(
        self, *, storage_reader: MetadataReader, fallback: bool
    ) -> tuple[CompletedCheckpoint | None, list[str]]:
        """The newest checkpoint whose ``_metadata`` reads, and notes on what was skipped.

        ``storage_reader`` reads a ``_metadata`` URI (for example
        :func:`job_runtime.storage.checkpoint_storage.read_metadata`) and raises
        :class:`UnreadableCheckpointError` when it cannot. Without ``fallback`` the
        newest checkpoint must be readable, else that error is raised with its
        reason. With ``fallback`` older checkpoints are tried, newest first, and
        every skipped one is described in the notes (for an Event); if none reads,
        :class:`NoRestorableCheckpointError` is raised, because silently starting
        from scratch would replay the whole input. Damaged pointers count as
        unreadable. Other errors (storage outages, denied access) propagate: they
        say nothing about the checkpoint. An empty store gives ``(None, [])``.
        """
        snapshot = self.snapshot()
        candidates: list[CompletedCheckpoint | CorruptPointerError] = [
            *snapshot.checkpoints, *snapshot.corrupt]
        candidates.sort(key=lambda c: c.checkpoint_id, reverse=True)
        notes: list[str] = []
        first: UnreadableCheckpointError | None = None
        for candidate in candidates:
            if isinstance(candidate, CorruptPointerError):
                problem: UnreadableCheckpointError = candidate
            else:
                try:
                    storage_reader(candidate.metadata_path)
                except UnreadableCheckpointError as exc:
                    problem = exc
                else:
                    return candidate, notes
            if not fallback:
                raise problem
            first = first or problem
            notes.append(f"checkpoint {problem.checkpoint_id} is unreadable ({problem.cause}); "
                         f"falling back to an older one")
        if first is not None:
            raise NoRestorableCheckpointError(
                checkpoint_id=first.checkpoint_id, path=first.path,
                cause=f"{first.cause}; no older retained checkpoint is readable either")
        return None, notes

    # ------------------------------------------------------------------ writes

    def add_checkpoint_and_subsume_oldest(
        self, checkpoint: CompletedCheckpoint, *, discard: Discarder
    ) -> list[CompletedCheckpoint]:
        """Commit the pointer, then prune beyond ``retained`` in two phases.

        Raises :class:`FencedError` for an older attempt, :class:`StoreFullError`
        over the budget, and :class:`AmbiguousWriteError` when the commit's answer
        was lost (nothing is discarded then). Once the pointer is committed, a
        pruning step that fails for any reason (unavailable, 403 after an RBAC
        change, 404, 422 from admission) is logged and counted in
        ``prune_failures``: the committed checkpoint stands and the next add
        prunes; only :class:`FencedError` is raised, and it deletes nothing.
        Returns the checkpoints whose data this call deleted.
        """
        self._ensure_open()
        if checkpoint.checkpoint_id < 0:
            raise ValueError(f"checkpoint id must be >= 0, got {checkpoint.checkpoint_id}")
        self._commit(checkpoint)
        try:
            return self.prune(discard=discard)
        except FencedError:
            raise
        except Exception as exc:
            _log.warning("checkpoint %d is committed but pruning stopped (%s); the next add "
                         "retries", checkpoint.checkpoint_id, exc)
            self._pruning_failed()
            return []

    def _commit(self, checkpoint: CompletedCheckpoint) -> None:
        text = checkpoint.to_json()
        checkpoint_id = checkpoint.checkpoint_id

        def change(obj: StoreObject) -> bool:
            moved = _check_fence(obj, self.attempt)
            if (obj.pointer_text(checkpoint_id) == text
                    and checkpoint_id not in obj.marked_ids()):
                # Already there: our earlier write landed although its answer was lost.
                return moved
            obj.put_pointer(checkpoint)
            self._check_budget(obj)
            return True

        written, _ = self._access.update(
            change, operation=f"commit the pointer of checkpoint {checkpoint_id}")
        self._remember_size(written.size_bytes)

    def prune(self, *, discard: Discarder) -> list[CompletedCheckpoint]:
        """Discard the checkpoints beyond ``retained`` and any left marked before.

        Phase one marks them (a fenced compare-and-swap), phase two deletes their
        data through ``discard``, phase three removes pointer and marker (fenced
        again). A ``discard`` that raises leaves its checkpoint marked for the next
        call. Returns the checkpoints whose data was deleted.
        """
        self._ensure_open()
        return self._prune(discard=discard, keep=self.retained)

    def _prune(self, *, discard: Discarder, keep: int) -> list[CompletedCheckpoint]:
        now = self.clock()

        def mark(obj: StoreObject) -> bool:
            changed = _check_fence(obj, self.attempt)
            pointers = obj.pointer_ids()
            marked = obj.marked_ids()
            if keep > 0 and pointers and pointers[-1] in marked:
                # Never discard the newest: a marker on it can only be left over
                # from an interrupted discard-everything shutdown.
                _log.warning("unmarking checkpoint %d of %s/%s: it is the newest",
                             pointers[-1], self.namespace, self.name)
                obj.unmark(pointers[-1])
                changed = True
            live = obj.live_ids()
            doomed = ids_to_prune(live, retained=keep) if keep > 0 else live
            for checkpoint_id in doomed:
                obj.mark(checkpoint_id, attempt=self.attempt, at=now)
                changed = True
            return changed

        marked_obj, _ = self._access.update(mark, operation="mark checkpoints for discard")
        pointers = set(marked_obj.pointer_ids())
        marked = marked_obj.marked_ids()
        removable: list[int] = sorted(marked - pointers)  # markers whose pointer is gone
        discarded: list[CompletedCheckpoint] = []
        for checkpoint_id in sorted(marked & pointers):
            try:
                checkpoint = marked_obj.pointer(checkpoint_id)
            except CorruptPointerError as exc:
                _log.warning("removing a damaged pointer without deleting data: %s", exc)
                removable.append(checkpoint_id)
                continue
            try:
                discard(checkpoint)
            except Exception as exc:
                _log.warning(
                    "could not delete the data of checkpoint %d (%s); it stays marked and is "
                    "retried on the next add: %s",
                    checkpoint_id, checkpoint.metadata_path, exc)
                self._pruning_failed()
                continue
            removable.append(checkpoint_id)
            discarded.append(checkpoint)
        if not removable:
            return discarded

        def remove(obj: StoreObject) -> bool:
            changed = _check_fence(obj, self.attempt)
            still_marked = obj.marked_ids()
            for checkpoint_id in removable:
                # Only while still marked: a re-add in between removed the marker.
                if checkpoint_id in still_marked:
                    obj.remove_pointer(checkpoint_id)
                    changed = True
            return changed

        written, _ = self._access.update(remove, operation="remove discarded checkpoints")
        self._remember_size(written.size_bytes)
        return discarded

    def shutdown(self, status: JobStatus, *, discard: Discarder) -> None:
        """Close the store; the checkpoints stay unless asked otherwise.

        On Kubernetes the checkpoints outlive the driver on purpose: the
        ConfigMap is owned by the CheckpointedJob and goes with it, and the
        operator's cleanup policy decides about the data when the job is
        deleted. Even a finished job may be restored later (after a spec change,
        or to inspect its final state), and a driver cannot know whether the
        operator is about to start another attempt. Only a globally terminal job
        with ``discard_on_terminal`` discards everything (newest included). The
        counter and the fence always stay, so ids never repeat and zombies stay
        fenced.
        """
        if self._closed:
            return
        if status.is_globally_terminal and self.discard_on_terminal:
            self._prune(discard=discard, keep=0)
        self._closed = True

    def _check_budget(self, obj: StoreObject) -> None:
        """Refuse a change that would take the ConfigMap past its size budget, far
        below the apiserver's 1 MiB limit; nothing is written then."""
        size = obj.size_bytes
        if size > self.budget_bytes:
            raise ConfigMapStoreFullError(
                namespace=self.namespace, name=self.name, size_bytes=size,
                budget_bytes=self.budget_bytes, pointers=len(obj.pointer_ids()))

    def _write_restore_report(self, text: str, *, attempt: int) -> None:
        """Set the ``checkpointed.io/restored`` annotation: fenced compare-and-swap.

        The change is decided again on every fresh read (fence, then equal-or-replace),
        so a lost answer is simply retried; a conflict with a concurrent commit costs
        one more round trip and never undoes that commit.
        """
        if attempt != self.attempt:
            raise ValueError(f"a store of attempt {self.attempt} records only its own "
                             f"restore, not attempt {attempt}'s")

        def change(obj: StoreObject) -> bool:
            moved = _check_fence(obj, self.attempt)
            if obj.restore_report_text == text:
                return moved
            obj.set_restore_report_text(text)
            self._check_budget(obj)
            return True

        written, _ = self._access.update(change, operation="record the restored checkpoint",
                                         retry_ambiguous=True)
        self._remember_size(written.size_bytes)

    def _read_restore_report(self) -> str | None:
        return self._access.read().restore_report_text

    # ------------------------------------------------------------------ internals

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError(
                f"the checkpoint store {self.namespace}/{self.name} was shut down")

    def _remember_size(self, size: int) -> None:
        with self._size_lock:
            self._last_size = size


# --------------------------------------------------------------------------- counter


class ConfigMapCheckpointIdCounter(CheckpointIdCounter):
    """The next checkpoint id in the ConfigMap's ``counter`` key, fenced like the store.

    Every increment is a compare-and-swap. The counter never goes backwards and is
    at least one more than the newest pointer (marked or not), so losing or
    damaging nothing short of the whole ConfigMap can reuse an id. An increment
    whose answer is lost is simply retried from a fresh read: at worst an id is
    skipped, which is harmless.
    """

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
        self.attempt = attempt
        self.start = start
        self._access = ConfigMapAccess(api=api, namespace=namespace, name=name,
                                       request_timeout=request_timeout,
                                       max_attempts=max_attempts, deadline=deadline)

    def __repr__(self) -> str:
        return (f"ConfigMapCheckpointIdCounter({self.namespace}/{self.name}, "
                f"attempt={self.attempt})")

    def _next(self, obj: StoreObject) -> int:
        return obj.snapshot().next_checkpoint_id(start=self.start)

    def get_and_increment(self) -> int:
        taken: list[int] = []

        def change(obj: StoreObject) -> bool:
            _check_fence(obj, self.attempt)
            value = self._next(obj)
            obj.set_counter(value + 1)
            taken[:] = [value]
            return True

        self._access.update(change, operation="increment the checkpoint counter",
                            retry_ambiguous=True)
        return taken[0]

    def get(self) -> int:
        return self._next(self._access.read())

    def set_count(self, count: int) -> None:
        def change(obj: StoreObject) -> bool:
            moved = _check_fence(obj, self.attempt)
            if count > self._next(obj):
                obj.set_counter(count)
                return True
            return moved

        self._access.update(change, operation="move the checkpoint counter forward",
                            retry_ambiguous=True)


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
    client = api_client if api_client is not None else new_api_client()
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
