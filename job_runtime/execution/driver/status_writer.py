"""The thread that keeps the driver's status file current (see ``status_file``).

It also feeds the driver's metrics from the same reading of the coordinator, so
the file and the metrics endpoint never disagree about a count.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from cjob_checkpoint.driver_status import (
    CheckpointCounts,
    DriverStatus,
    LatestCheckpoint,
    RestoredFrom,
    write_status_file,
)
from job_runtime.coordinator.coordinator import CheckpointCoordinator
from job_runtime.execution.driver.logger import log
from job_runtime.execution.process_clock import process_started_at
from job_runtime.metrics import DriverMetrics


class StatusWriter:
    """Writes the driver's progress as a :class:`DriverStatus`, once a second."""

    def __init__(self, *, path: str, coordinator: CheckpointCoordinator,
                 metrics: DriverMetrics | None, attempt: int,
                 fallback_notes: tuple[str, ...]) -> None:
        self.path = path
        self.coordinator = coordinator
        self.metrics = metrics
        self.attempt = attempt
        self.fallback_notes = fallback_notes
        # Driver milestones (process start, Spark start and ready), merged with the
        # coordinator's epoch milestones into ``timeline``.
        self.timeline: dict[str, float] = {"driverStartedAt": process_started_at()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="status-writer")
        self._thread.start()

    def status(self, *, state: str, history: bool = False,
               progress: dict[str, Any] | None = None) -> DriverStatus:
        """The status now; ``progress`` is the coordinator's snapshot when the caller
        took one already (it locks the coordinator and sums every subtask's report)."""
        coordinator = self.coordinator
        if progress is None:
            progress = coordinator.snapshot_progress()
        latest = coordinator.latest
        restored = coordinator.restored_from
        summary = progress["checkpoints"]
        return DriverStatus(
            state=state, pid=os.getpid(), updated_at=time.time(), attempt=self.attempt,
            epoch=progress["epoch"],
            subtask_restarts=max(0, coordinator.epochs_started - 1),
            records_in=progress["recordsIn"], records_out=progress["recordsOut"],
            checkpoints=CheckpointCounts(
                completed=summary["completed"], failed=summary["failed"],
                duration_ms_p50=summary["durationMsP50"],
                duration_ms_p99=summary["durationMsP99"], sync_ms_p99=summary["syncMsP99"],
                alignment_ms_p99=summary["alignmentMsP99"], recent=tuple(summary["recent"])),
            latest_checkpoint=None if latest is None else LatestCheckpoint(
                id=latest.checkpoint_id, path=latest.metadata_path,
                completed_at=latest.timestamp, size_bytes=latest.size_bytes),
            restored_from=None if restored is None else RestoredFrom(
                id=restored.checkpoint_id, path=restored.metadata_path),
            timeline={**self.timeline, **progress.get("timeline", {})},
            rejected_connections=progress["rejectedConnections"],
            watermark=progress["watermark"], late_records=progress["lateRecords"],
            fallback_notes=self.fallback_notes,
            checkpoint_history=(tuple(coordinator.stats.history_dicts()) if history
                                else None))

    def write(self, *, state: str, history: bool = False) -> None:
        progress = self.coordinator.snapshot_progress()
        status = self.status(state=state, history=history, progress=progress)
        if self.metrics is not None:
            self.metrics.progress(records_in=status.records_in, records_out=status.records_out,
                                  failed=status.checkpoints.failed,
                                  restarts=status.subtask_restarts)
            self.metrics.milestones(status.timeline)
            self.metrics.source_lag(progress["sourceLag"])
            self.metrics.event_time(watermark=progress["watermark"],
                                    late_records=progress["lateRecords"], now=time.time())
            held = progress["sinks"]
            self.metrics.sinks(pending_intervals=held.pending_intervals,
                               pending_bytes=held.pending_bytes,
                               oldest_pending_seconds=held.oldest_pending_seconds,
                               dead_letters=held.dead_letters)
        if self.path:
            write_status_file(self.path, status)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.write(state="running")
            except Exception as exc:
                log.debug("status write failed: %s", exc)

    def stop(self, *, state: str) -> None:
        self._stop.set()
        try:
            self.write(state=state, history=True)
        except Exception as exc:
            log.warning("final status write failed: %s", exc)
