"""Prometheus metrics of the driver (``cjob_job_*`` and ``cjob_checkpoint_*``), served on
its metrics port by :class:`~job_runtime.metrics_server.MetricsServer`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from job_runtime.metrics_server import MetricsServer

MILESTONES = {
    "driverStartedAt": "driver_started",
    "sparkStartingAt": "spark_starting",
    "sparkReadyAt": "spark_ready",
    "promotedAt": "promoted",
    "stageLaunchedAt": "stage_launched",
    "firstRecordAt": "first_record",
    "lastRecordAt": "last_record",
}
"""The driver's status timeline entries served as ``milestone`` label values. A
recovery is read from them (a kill's time to ``first_record``), which is exact where
``cjob_job_records_in_total``, refreshed about once a second, is not."""

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


def count_on(counter: Any, *, total: int, reported: int) -> int:
    """Add to ``counter`` what the subtasks' summed ``total`` grew since the ``reported``
    one, and return the new reported total. A total below the last one means relaunched
    subtasks counting from zero: all of it is new. The work between their last report
    and the relaunch is lost to the count (it is done again, and counted then)."""
    grown = total - reported if total >= reported else total
    if grown > 0:
        counter.inc(grown)
    return total


class PartitionLag(Protocol):
    """A source partition's lag as subtasks report it (``sources.base.SourceBacklog``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def records(self) -> int: ...


class DriverMetrics:
    def __init__(self, *, job: str) -> None:
        self.registry = CollectorRegistry()
        # ``cjob_job``, not ``job``: Prometheus owns ``job`` (the scrape job's name) and
        # would rename ours ``exported_job``, or, with ``honorLabels``, let the driver (which
        # runs user code) overwrite any target label.
        labels = ["cjob_job"]
        self._job = job
        r = self.registry
        self.completed = Counter("cjob_checkpoint_completed", "Completed checkpoints",
                                 labels, registry=r)
        self.failed = Counter("cjob_checkpoint_failed", "Failed or aborted checkpoints",
                              labels, registry=r)
        self.duration = Histogram("cjob_checkpoint_duration_seconds",
                                  "Trigger to completion of a checkpoint", labels,
                                  buckets=_BUCKETS, registry=r)
        self.size = Gauge("cjob_checkpoint_size_bytes", "Size of the latest checkpoint",
                          labels, registry=r)
        self.alignment = Histogram("cjob_checkpoint_alignment_seconds",
                                   "Longest barrier alignment of a checkpoint", labels,
                                   buckets=_BUCKETS, registry=r)
        self.sync = Histogram("cjob_checkpoint_sync_seconds",
                              "Longest synchronous snapshot part of a checkpoint", labels,
                              buckets=_BUCKETS, registry=r)
        self.last_id = Gauge("cjob_checkpoint_last_completed_id",
                             "Id of the latest completed checkpoint", labels, registry=r)
        self.last_ts = Gauge("cjob_checkpoint_last_completed_timestamp_seconds",
                             "Completion time of the latest checkpoint", labels, registry=r)
        # What only grows is a counter (exposed with ``_total``), so that ``rate()`` and
        # ``increase()`` read it across a relaunch of the subtasks, which count from zero.
        self.records_in = Counter("cjob_job_records_in", "Records read by the sources",
                                  labels, registry=r)
        self.records_out = Counter("cjob_job_records_out", "Records written by the sinks",
                                   labels, registry=r)
        self._records_reported = {"in": 0, "out": 0}
        self.restored = Gauge("cjob_job_restored_checkpoint_id",
                              "Checkpoint the job restored (-1 for none)", labels, registry=r)
        self.prune_failures = Counter(
            "cjob_checkpoint_prune_failures",
            "Failed prunes of retained checkpoints (the store retries on the next add)",
            labels, registry=r)
        self.prune_failures.labels(job)
        self.source_lag_records = Gauge(
            "cjob_job_source_lag_records",
            "Records between a source partition's read position and its end as last seen",
            [*labels, "topic", "partition"], registry=r)
        self.watermark_lag = Gauge(
            "cjob_job_watermark_lag_seconds",
            "Wall time minus the job's event-time watermark (the lowest of its windowed "
            "subtasks): how far behind real time its windows fire", labels, registry=r)
        self.late_records = Counter(
            "cjob_job_late_records",
            "Records windows dropped for coming after their window was gone", labels,
            registry=r)
        self._late_reported = 0
        self.sink_pending_intervals = Gauge(
            "cjob_job_sink_pending_intervals",
            "Checkpoint intervals the sinks staged and have not delivered yet", labels,
            registry=r)
        self.sink_pending_bytes = Gauge(
            "cjob_job_sink_pending_bytes",
            "Bytes of the intervals the sinks have not delivered yet", labels, registry=r)
        self.sink_oldest_pending = Gauge(
            "cjob_job_sink_oldest_pending_seconds",
            "How long the oldest interval whose checkpoint completed has waited for its "
            "send (0 while output flows)", labels, registry=r)
        self.sink_dead_letters = Counter(
            "cjob_job_sink_dead_letters",
            "Records the sinks routed to a dead-letter destination", labels, registry=r)
        self._dead_letters_reported = 0
        self.in_run_restarts = Counter("cjob_job_subtask_restarts",
                                       "Relaunches of the barrier stage in this driver",
                                       labels, registry=r)
        self._restarts_reported = 0
        self.milestone = Gauge(
            "cjob_job_milestone_timestamp_seconds",
            "When this driver reached a milestone of its start (Unix time): driver_started, "
            "spark_starting, spark_ready, promoted (a standby), stage_launched, first_record "
            "and last_record (of the current barrier stage)",
            [*labels, "milestone"], registry=r)
        self.restored.labels(job).set(-1)
        self.server: MetricsServer | None = None
        """The metrics port, once :meth:`serve` opened it."""

    def serve(self, port: int) -> None:
        """Serve the metrics on ``port`` of :data:`METRICS_BIND_ADDRESS`, in the background."""
        self.server = MetricsServer(registry=self.registry, port=port)

    def checkpoint_completed(self, *, checkpoint_id: int, timestamp: float, size: int,
                             stats: Any) -> None:
        job = self._job
        self.completed.labels(job).inc()
        self.duration.labels(job).observe(stats.duration_ms / 1000.0)
        self.alignment.labels(job).observe(stats.alignment_ms_max / 1000.0)
        self.sync.labels(job).observe(stats.sync_ms_max / 1000.0)
        self.size.labels(job).set(size)
        self.last_id.labels(job).set(checkpoint_id)
        self.last_ts.labels(job).set(timestamp)
        failures = int(getattr(stats, "prune_failures", 0))
        if failures > 0:
            self.prune_failures.labels(job).inc(failures)

    def milestones(self, timeline: Mapping[str, float]) -> None:
        """Serve the timeline's known milestones; other entries are not timestamps."""
        for key, value in timeline.items():
            name = MILESTONES.get(key)
            if name is not None:
                self.milestone.labels(self._job, name).set(value)

    def source_lag(self, backlog: Iterable[PartitionLag]) -> None:
        """Set each reported partition's lag; a partition no longer reported (read by
        another subtask after a restart, or ended) keeps its last value until then."""
        for lag in backlog:
            self.source_lag_records.labels(self._job, lag.topic, str(lag.partition)).set(lag.records)

    def event_time(self, *, watermark: int | None, late_records: int, now: float) -> None:
        """Watermark lag and late records; a job without event time serves neither."""
        if watermark is None:
            return
        job = self._job
        if -(2**62) < watermark < 2**62:  # not the start or the end of time
            self.watermark_lag.labels(job).set(max(0.0, now - watermark / 1000.0))
        self._late_reported = count_on(self.late_records.labels(job), total=late_records,
                                       reported=self._late_reported)

    def sinks(self, *, pending_intervals: int, pending_bytes: int,
              oldest_pending_seconds: float, dead_letters: int) -> None:
        """What the sinks hold back; dead letters count on from the subtasks' totals."""
        job = self._job
        self.sink_pending_intervals.labels(job).set(pending_intervals)
        self.sink_pending_bytes.labels(job).set(pending_bytes)
        self.sink_oldest_pending.labels(job).set(oldest_pending_seconds)
        self._dead_letters_reported = count_on(self.sink_dead_letters.labels(job),
                                               total=dead_letters,
                                               reported=self._dead_letters_reported)

    def progress(self, *, records_in: int, records_out: int, failed: int,
                 restarts: int) -> None:
        job = self._job
        reported = self._records_reported
        reported["in"] = count_on(self.records_in.labels(job), total=records_in,
                                  reported=reported["in"])
        reported["out"] = count_on(self.records_out.labels(job), total=records_out,
                                   reported=reported["out"])
        if restarts > self._restarts_reported:
            self.in_run_restarts.labels(job).inc(restarts - self._restarts_reported)
            self._restarts_reported = restarts
        current = self.failed.labels(job)._value.get()
        if failed > current:
            current_inc = failed - current
            self.failed.labels(job).inc(current_inc)
