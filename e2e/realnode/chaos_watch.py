"""The chaos run's watcher: the job's completed checkpoints, as its store records them.

It reads the job's checkpoint ConfigMap (which the drivers write, so it goes on when
the operator is down), so that afterwards every fault can be set against the next
checkpoint the job completed.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field

from e2e.controlplane.rest import ApiError, quote
from e2e.realnode import scenario


@dataclass(frozen=True)
class Seen:
    """A completed checkpoint as the watcher first found it in the store."""

    checkpoint_id: int
    completed: float
    """Its completion time, as the driver recorded it (wall clock of this machine)."""
    attempt: int


@dataclass
class JobWatch:
    """Reads the job's checkpoint store and status twice a second, in a thread.

    The store is read directly rather than through ``status.latestCheckpoint``: the
    operator, which copies it there, is one of the things the chaos kills.
    """

    job: scenario.JobHandle
    interval: float = 0.5
    checkpoints: dict[int, Seen] = field(default_factory=dict)
    drivers: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def store_path(self) -> str:
        return (f"/api/v1/namespaces/{quote(self.job.namespace)}/configmaps/"
                f"{quote(self.job.name)}-checkpoints")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def poll(self) -> None:
        """One reading: new checkpoint pointers, and the driver the status names."""
        store = self.job.rest.get(self.store_path)
        for key, text in (store.get("data") or {}).items():
            if not key.startswith("checkpointID-"):
                continue
            pointer = json.loads(text)
            checkpoint_id = int(pointer["id"])
            if checkpoint_id not in self.checkpoints:
                self.checkpoints[checkpoint_id] = Seen(
                    checkpoint_id=checkpoint_id, completed=float(pointer["timestamp"]),
                    attempt=int(pointer.get("attempt", 0)))
        driver = (self.job.get() or {}).get("status", {}).get("driverPod")
        if driver and (not self.drivers or self.drivers[-1] != driver):
            self.drivers.append(str(driver))

    def latest_id(self) -> int:
        return max(self.checkpoints, default=0)

    def first_completed_after(self, wall: float) -> Seen | None:
        """The first checkpoint that completed after ``wall``: what a fault at that
        moment took to be recovered from (a killed driver or executor fails the
        checkpoint it had in flight, so the next one is taken after the recovery)."""
        after = [seen for seen in self.checkpoints.values() if seen.completed > wall]
        return min(after, key=lambda seen: seen.completed, default=None)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except (ApiError, OSError, ValueError, KeyError) as exc:
                # The apiserver answers throughout; a store briefly missing or a
                # reading that fails is counted, never fatal to the run.
                self.errors[type(exc).__name__] += 1

