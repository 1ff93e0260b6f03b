"""One epoch of the subtasks: Spark's attempt of the barrier stage, as the coordinator
tracks it.

An epoch holds what its subtasks said of themselves: their connections, which of
them are ready, finished their sources or are done, their latest progress, and the
wall-clock times of the epoch's milestones (the status file's timeline). A relaunch
of the stage starts a new epoch, and everything of the old one is dropped with it, so
a message of a zombie subtask of an older epoch can never count towards the new one.
Nothing here locks: the coordinator calls it under its lock.
"""

from __future__ import annotations

import time
from typing import Any

from cjob_checkpoint.metadata import CheckpointMetadata
from job_runtime.coordinator.messages import ChannelAddress, Message, Peers, TaskMetrics
from job_runtime.coordinator.rpc import ConnectionLost, RpcConnection
from job_runtime.sinks.health import SinkHealth

BEFORE_FIRST = -1
"""The number of the epoch before any subtask registered."""


class Epoch:
    def __init__(self, *, number: int, parallelism: int,
                 restore: CheckpointMetadata | None = None) -> None:
        self.number = number
        self.parallelism = parallelism
        self.restore = restore
        """The checkpoint every subtask of this epoch restores (``None``: empty state)."""
        self.connections: dict[int, RpcConnection] = {}
        self.channels: dict[int, ChannelAddress] = {}
        self.progress: dict[int, TaskMetrics] = {}
        self._ready: set[int] = set()
        self._sources_finished: set[int] = set()
        self._done: set[int] = set()
        self.timeline: dict[str, float] = {} if number == BEFORE_FIRST else {
            "epochStartedAt": time.time()}
        """Wall-clock times of the epoch's milestones (registered, ready, first and last
        record, sources finished, done), shown in the status file."""

    @classmethod
    def before_first(cls, *, parallelism: int) -> Epoch:
        return cls(number=BEFORE_FIRST, parallelism=parallelism)

    @property
    def started(self) -> bool:
        return self.number != BEFORE_FIRST

    # ------------------------------------------------------------------ what subtasks say

    def registered(self, subtask: int, conn: RpcConnection, *, channel: ChannelAddress) -> None:
        self.connections[subtask] = conn
        self.channels[subtask] = channel
        if self.all_registered:
            self.timeline.setdefault("allRegisteredAt", time.time())

    @property
    def all_registered(self) -> bool:
        return len(self.connections) == self.parallelism

    def peers(self) -> Peers:
        """Every subtask's channel address in subtask order (all have registered)."""
        return Peers(channels=tuple(self.channels[s] for s in range(self.parallelism)))

    def ready(self, subtask: int) -> None:
        self._ready.add(subtask)
        self.timeline.setdefault("firstReadyAt", time.time())
        if self.all_ready:
            self.timeline.setdefault("allReadyAt", time.time())

    def sources_finished(self, subtask: int) -> None:
        self._sources_finished.add(subtask)
        if self.all_sources_finished:
            self.timeline.setdefault("sourcesFinishedAt", time.time())

    def reported(self, subtask: int, metrics: TaskMetrics) -> None:
        self.progress[subtask] = metrics

    def done(self, subtask: int, metrics: TaskMetrics) -> bool:
        """A subtask ended; whether every subtask has."""
        self.progress[subtask] = metrics
        self._done.add(subtask)
        if len(self._done) < self.parallelism:
            return False
        self.timeline.setdefault("doneAt", time.time())
        return True

    @property
    def all_ready(self) -> bool:
        return len(self._ready) >= self.parallelism

    @property
    def all_sources_finished(self) -> bool:
        return len(self._sources_finished) == self.parallelism

    # ------------------------------------------------------------------ talking to them

    def broadcast(self, message: Message) -> None:
        for conn in list(self.connections.values()):
            try:
                conn.send(message)
            except ConnectionLost:
                pass

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()

    # ------------------------------------------------------------------ views

    def oldest_sink_output_waiting(self) -> float:
        """Seconds the oldest output any subtask's sinks hold back has waited."""
        return max((m.sinks.oldest_pending_seconds for m in self.progress.values()),
                   default=0.0)

    def rejected_connections(self) -> int:
        """Connections the subtasks' channel listeners dropped."""
        return sum(m.rejected_connections for m in self.progress.values())

    def progress_view(self) -> dict[str, Any]:
        """The subtasks' progress summed: records, lag, watermark, sinks, timeline."""
        metrics = list(self.progress.values())
        timeline = dict(self.timeline)
        firsts = [m.first_record_at for m in metrics if m.first_record_at is not None]
        lasts = [m.last_record_at for m in metrics if m.last_record_at is not None]
        if firsts:
            timeline["firstRecordAt"] = min(firsts)
        if lasts:
            timeline["lastRecordAt"] = max(lasts)
        restores = [m.restore_seconds for m in metrics if m.restore_seconds is not None]
        if restores:
            timeline["restoreSecondsMax"] = max(restores)
        watermarks = [m.watermark for m in metrics if m.watermark is not None]
        return {
            "sourceLag": [lag for m in metrics for lag in m.source_backlog],
            # The job's event time is as far as its slowest subtask's.
            "watermark": min(watermarks) if watermarks else None,
            "lateRecords": sum(m.late_records for m in metrics),
            "sinks": sum((m.sinks for m in metrics), SinkHealth()),
            "recordsIn": sum(m.records_in for m in metrics),
            "recordsOut": sum(m.records_out for m in metrics),
            "timeline": timeline,
        }
