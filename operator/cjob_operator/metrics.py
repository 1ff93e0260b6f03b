"""Prometheus metrics of the operator (``cjob_operator_*``).

Counters and the histogram are updated as reconciliation passes happen. The per-job
gauges are computed when Prometheus scrapes, from the facts the last pass of each job
recorded: the age of a job's latest checkpoint grows between passes, so it must be
derived from the checkpoint's completion time at scrape time, not stored as a number.

The metrics live in their own registry (plus the process collector), so tests can
create as many ``OperatorMetrics`` as they like without name clashes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cjob_spec.reasons import RESTART_METRIC_REASONS
from cjob_spec.status import Phase

JOBS = "cjob_operator_jobs"
RESTARTS = "cjob_operator_restarts"
RESTORES = "cjob_operator_restore"
RECONCILE_SECONDS = "cjob_operator_reconcile_seconds"
RECONCILE_ERRORS = "cjob_operator_reconcile_errors"
CHECKPOINT_AGE = "cjob_operator_latest_checkpoint_age_seconds"
STORE_BYTES = "cjob_operator_checkpoint_store_bytes"

UNKNOWN_PHASE = "Unknown"
"""Label of jobs that have no phase yet (never reconciled successfully)."""

RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class JobFacts:
    """What the last pass over one job saw."""

    phase: str
    latest_completed_at: float | None
    """Unix time the job's latest checkpoint completed, if it has one."""
    store_bytes: int | None
    """Size of the checkpoint ConfigMap, if it exists."""


class OperatorMetrics:
    """The operator's metrics; every method is thread-safe."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        with_process_metrics: bool = False,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], JobFacts] = {}
        self.restarts = Counter(
            RESTARTS,
            "Attempts that ended and were restarted, by the reason the attempt ended.",
            ["reason"],
            registry=self.registry,
        )
        for reason in RESTART_METRIC_REASONS:
            self.restarts.labels(reason=reason.value)
        self.restores = Counter(
            RESTORES,
            "Driver pods started to restore from a checkpoint.",
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            RECONCILE_SECONDS,
            "Duration of one reconciliation pass over one CheckpointedJob.",
            buckets=RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.reconcile_errors = Counter(
            RECONCILE_ERRORS,
            "Reconciliation passes that stopped on an error, by the step that failed.",
            ["step"],
            registry=self.registry,
        )
        self.registry.register(_JobCollector(self))
        if with_process_metrics:
            ProcessCollector(registry=self.registry)

    # --- recording -----------------------------------------------------------------

    def record_job(
        self,
        *,
        namespace: str,
        name: str,
        phase: Phase | None,
        latest_completed_at: float | None,
        store_bytes: int | None,
    ) -> None:
        facts = JobFacts(
            phase=phase.value if phase is not None else UNKNOWN_PHASE,
            latest_completed_at=latest_completed_at,
            store_bytes=store_bytes,
        )
        with self._lock:
            self._jobs[(namespace, name)] = facts

    def forget_job(self, *, namespace: str, name: str) -> None:
        with self._lock:
            self._jobs.pop((namespace, name), None)

    def count_restart(self, *, reason: str) -> None:
        self.restarts.labels(reason=reason).inc()

    def count_restore(self) -> None:
        self.restores.inc()

    def count_error(self, *, step: str) -> None:
        self.reconcile_errors.labels(step=step).inc()

    def jobs(self) -> dict[tuple[str, str], JobFacts]:
        with self._lock:
            return dict(self._jobs)


_NOT_CHECKPOINTING = frozenset({Phase.SUSPENDED.value, Phase.SUCCEEDED.value, Phase.FAILED.value})
"""Phases of a job that takes no checkpoints by design: its age would only grow, and an
alert on it would page about a job that is fine (a failed one has an alert of its own)."""


class _JobCollector(Collector):
    """Computes the per-job and per-phase gauges at scrape time."""

    def __init__(self, metrics: OperatorMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        jobs = self.metrics.jobs()
        now = self.metrics.clock()
        by_phase = GaugeMetricFamily(
            JOBS, "CheckpointedJobs known to this operator, by phase.", labels=["phase"]
        )
        counts = {phase.value: 0 for phase in Phase}
        counts[UNKNOWN_PHASE] = 0
        for facts in jobs.values():
            counts[facts.phase] = counts.get(facts.phase, 0) + 1
        for phase, count in sorted(counts.items()):
            by_phase.add_metric([phase], count)
        yield by_phase
        age = GaugeMetricFamily(
            CHECKPOINT_AGE,
            "Seconds since the latest completed checkpoint of a job that runs or is to run "
            "again (none for a Suspended, Succeeded or Failed job).",
            labels=["namespace", "cjob_job"],
        )
        size = GaugeMetricFamily(
            STORE_BYTES,
            "Size of the job's checkpoint metadata ConfigMap in bytes.",
            labels=["namespace", "cjob_job"],
        )
        for (namespace, name), facts in sorted(jobs.items()):
            if facts.latest_completed_at is not None and facts.phase not in _NOT_CHECKPOINTING:
                age.add_metric([namespace, name], max(0.0, now - facts.latest_completed_at))
            if facts.store_bytes is not None:
                size.add_metric([namespace, name], facts.store_bytes)
        yield age
        yield size
