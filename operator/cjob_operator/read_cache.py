"""The last reading of each job and of its store, and when a pass may plan from it.

A pass reads the job or the store from the API server only when its watch delivered
a version the last reading does not already cover; otherwise it plans from that
reading. With a thousand jobs, every pod event and every resync would otherwise cost
two GETs that only return what the operator already knows. A reading is trusted for
``reuse_seconds`` at most, so a watch that silently lost an event cannot hide it
forever, and a pass that acts reads afresh (see :mod:`cjob_operator.reconcile`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cjob_operator.cluster import Cluster, StoreReading
from cjob_spec.names import checkpoint_configmap_name

JobKey = tuple[str, str]
"""A job's namespace and name."""


@dataclass(frozen=True)
class WatchedVersions:
    """The ``resourceVersion`` of the job and of its store as the operator's watches
    last delivered them (None: not known)."""

    job: str | None = None
    store: str | None = None
    """None: the watch knows no such ConfigMap (the store does not exist)."""


@dataclass(frozen=True)
class ReadSettings:
    reuse_seconds: float = 600.0
    """Longest a reading is planned from while the watches report no change; then the
    pass reads again, so a watch that silently lost an event cannot hide it forever."""


@dataclass(frozen=True)
class _JobMemo:
    """A reading of the job, kept small: at a thousand jobs each kilobyte kept per job
    is a megabyte of the operator's memory. It is kept as compact JSON without
    ``metadata.managedFields`` (kilobytes the plan never reads), and decoded per pass."""

    encoded: bytes
    versions: frozenset[str]
    """Versions this body is at least as new as: the one read or written, and the one
    the watch had delivered when it was read."""
    read_at: float

    @classmethod
    def of(cls, body: Mapping[str, Any], *, versions: frozenset[str],
           read_at: float) -> _JobMemo:
        kept = dict(body)
        metadata = dict(kept.get("metadata") or {})
        metadata.pop("managedFields", None)
        kept["metadata"] = metadata
        encoded = json.dumps(kept, separators=(",", ":"), default=str).encode()
        return cls(encoded=encoded, versions=versions, read_at=read_at)

    @property
    def body(self) -> Mapping[str, Any]:
        body: Mapping[str, Any] = json.loads(self.encoded)
        return body


@dataclass(frozen=True)
class _StoreMemo:
    reading: StoreReading | None
    version: str | None
    """The store's version the watch had delivered when it was read (None: none)."""
    read_at: float


def resource_version(body: Mapping[str, Any] | None) -> str | None:
    metadata = (body or {}).get("metadata") or {}
    version = metadata.get("resourceVersion")
    return str(version) if version else None


class ReadCache:
    """Reads jobs and stores through ``cluster``, or answers from the last reading.

    Not thread-safe by itself: the reconciler reads one job from one thread at a time.
    """

    def __init__(self, *, cluster: Cluster, settings: ReadSettings) -> None:
        self.cluster = cluster
        self.settings = settings
        self._jobs: dict[JobKey, _JobMemo] = {}
        self._stores: dict[JobKey, _StoreMemo] = {}

    def read_job(
        self, key: JobKey, watched: WatchedVersions | None, *, reuse: bool
    ) -> tuple[Mapping[str, Any] | None, bool]:
        """The job, and whether it came from the last reading instead of the API."""
        memo = self._jobs.get(key)
        seen = watched.job if watched is not None else None
        if reuse and memo is not None and seen is not None and seen in memo.versions \
                and self._fresh(memo.read_at):
            return memo.body, True
        body = self.cluster.read_job(namespace=key[0], name=key[1])
        versions = {v for v in (resource_version(body), seen) if v}
        if body is None or not versions:
            self._jobs.pop(key, None)
        else:
            self._jobs[key] = _JobMemo.of(body, versions=frozenset(versions),
                                          read_at=time.monotonic())
        return body, False

    def read_store(
        self, key: JobKey, watched: WatchedVersions | None, *, reuse: bool
    ) -> tuple[StoreReading | None, bool]:
        """The job's store, and whether it came from the last reading instead of the API."""
        memo = self._stores.get(key)
        if reuse and memo is not None and watched is not None \
                and watched.store == memo.version and self._fresh(memo.read_at):
            return memo.reading, True
        reading = self.cluster.read_store(
            namespace=key[0], name=checkpoint_configmap_name(key[1])
        )
        if watched is None:
            self._stores.pop(key, None)
        else:
            self._stores[key] = _StoreMemo(reading=reading, version=watched.store,
                                           read_at=time.monotonic())
        return reading, False

    def remember_written(self, key: JobKey, written: Mapping[str, Any] | None) -> None:
        """The job as the status write left it is what the next pass plans from."""
        memo = self._jobs.get(key)
        version = resource_version(written)
        if memo is None or written is None or version is None:
            self._jobs.pop(key, None)
            return
        self._jobs[key] = _JobMemo.of(written, versions=memo.versions | {version},
                                      read_at=memo.read_at)

    def forget_store(self, key: JobKey) -> None:
        """The pass changed the store: its reading is stale."""
        self._stores.pop(key, None)

    def forget(self, key: JobKey) -> None:
        """Read the job and its store afresh next time."""
        self._jobs.pop(key, None)
        self._stores.pop(key, None)

    def _fresh(self, read_at: float) -> bool:
        return time.monotonic() - read_at < self.settings.reuse_seconds
