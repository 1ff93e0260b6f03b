"""The per-job reconciliation loop and the wake-ups that drive it.

Each CheckpointedJob gets one asyncio loop (a kopf daemon). It runs a pass, then waits
until either something about the job changes (its spec, its driver pods, its
checkpoint ConfigMap: the event handlers call :meth:`Wakeups.wake`), the delay the
plan asked for expires (restart backoff, start timeout, resync), or the operator stops.
The pass itself is blocking API work and runs in a worker thread, so the event loop
(and kopf's watches) never stall.

One loop per job also serialises the passes of a job: two events arriving together
cause one more pass, not two concurrent ones.

A CheckpointedJobSnapshot gets a loop too, which polls while its copy runs and ends
once the snapshot is Completed or Failed; its deletion path is kopf's delete handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cjob_operator.cluster import ClusterError
from cjob_operator.read_cache import WatchedVersions
from cjob_operator.reconcile import Outcome, Reconciler
from cjob_operator.snapshot_reconcile import SnapshotPass, SnapshotReconciler

_log = logging.getLogger(__name__)

Key = tuple[str, str]


@dataclass(frozen=True)
class LoopSettings:
    settle_seconds: float = 0.1
    """After a wake-up, wait this long so a burst of events causes one pass."""
    idle_seconds: float = 300.0
    """Longest wait when the plan asks for nothing (a finished job): a safety resync."""


class Wakeups:
    """Wake-up events of the running job loops, keyed by (namespace, name).

    Also remembers the last seen generation and deletion mark of every job, so the
    operator's own status writes (which change neither) do not wake the job again.
    """

    def __init__(self) -> None:
        self._events: dict[Key, asyncio.Event] = {}
        self._seen: dict[Key, tuple[object, object]] = {}

    def register(self, key: Key) -> asyncio.Event:
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = asyncio.Event()
        return event

    def unregister(self, key: Key) -> None:
        self._events.pop(key, None)
        self._seen.pop(key, None)

    def wake(self, namespace: str | None, name: str | None) -> bool:
        """Wake the loop of ``namespace/name``; False if it has none (yet)."""
        if not namespace or not name:
            return False
        event = self._events.get((namespace, name))
        if event is None:
            return False
        event.set()
        return True

    def wake_on_job_change(self, body: Mapping[str, Any]) -> bool:
        """Wake a job's loop when its spec generation or deletion mark changed."""
        metadata = body.get("metadata") or {}
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        marks = (metadata.get("generation"), metadata.get("deletionTimestamp"))
        if self._seen.get(key) == marks:
            return False
        self._seen[key] = marks
        return self.wake(*key)


async def _wait(event: asyncio.Event, stopped: Any, timeout: float) -> None:
    """Until ``event`` is set, ``stopped`` is set, or ``timeout`` seconds pass."""
    waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(event.wait())]
    stop_wait = getattr(stopped, "wait", None)
    if callable(stop_wait):
        waiters.append(asyncio.ensure_future(_await(stop_wait())))
    try:
        await asyncio.wait(waiters, timeout=max(0.0, timeout),
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await waiter


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


async def run_job_loop(
    *,
    reconciler: Reconciler,
    wakeups: Wakeups,
    namespace: str,
    name: str,
    pods: Callable[[], Iterable[Mapping[str, Any]]],
    stopped: Any,
    settings: LoopSettings | None = None,
    watched: Callable[[], WatchedVersions] | None = None,
) -> Outcome | None:
    """Reconcile ``namespace/name`` until the job is gone or the operator stops.

    ``pods`` returns the job's pods from the index at the moment of each pass;
    ``watched`` what the watches last delivered of the job and its store, which lets
    a pass plan from its previous readings when nothing changed.
    Returns the last outcome (None when stopped before the first pass).
    """
    settings = settings or LoopSettings()
    key = (namespace, name)
    event = wakeups.register(key)
    outcome: Outcome | None = None
    try:
        while not stopped:
            event.clear()
            snapshot = list(pods())
            call = functools.partial(reconciler.reconcile, namespace=namespace, name=name,
                                     pods=snapshot)
            if watched is not None:
                call = functools.partial(call, watched=watched())
            outcome = await asyncio.to_thread(call)
            if outcome.gone or outcome.finalized:
                return outcome
            delay = outcome.requeue_after
            await _wait(event, stopped, settings.idle_seconds if delay is None else delay)
            if event.is_set() and not stopped:
                await _wait(asyncio.Event(), stopped, settings.settle_seconds)
        return outcome
    finally:
        wakeups.unregister(key)


async def finalize_job(
    *,
    reconciler: Reconciler,
    namespace: str,
    name: str,
    pods: Iterable[Mapping[str, Any]],
) -> Outcome:
    """One pass of the deletion path (the caller retries until ``finalized``)."""
    return await asyncio.to_thread(
        reconciler.reconcile, namespace=namespace, name=name, pods=list(pods)
    )


SNAPSHOT_RETRY_SECONDS = 5.0
"""After an API error, a snapshot's next pass waits this long."""


async def run_snapshot_loop(*, reconciler: SnapshotReconciler, namespace: str, name: str,
                            stopped: Any) -> SnapshotPass | None:
    """Reconcile snapshot ``namespace/name`` until it is Completed or Failed (then it
    never changes), deleted, or the operator stops; API errors are tried again."""
    result: SnapshotPass | None = None
    while not stopped:
        try:
            result = await asyncio.to_thread(reconciler.reconcile, namespace=namespace,
                                             name=name)
        except ClusterError as exc:
            _log.warning("snapshot %s/%s: %s; trying again", namespace, name, exc)
            delay = SNAPSHOT_RETRY_SECONDS
        else:
            if result.released or result.requeue_after is None:
                return result
            delay = result.requeue_after
        await _wait(asyncio.Event(), stopped, delay)
    return result


async def finalize_snapshot(*, reconciler: SnapshotReconciler, namespace: str,
                            name: str) -> SnapshotPass:
    """One pass of a deleted snapshot's path (the caller retries until ``released``)."""
    return await asyncio.to_thread(reconciler.reconcile, namespace=namespace, name=name,
                                   deleting=True)
