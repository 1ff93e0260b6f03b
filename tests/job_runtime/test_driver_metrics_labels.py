"""The driver's metrics name their job in ``cjob_job``, never in ``job``.

Prometheus owns the ``job`` label: it names the scrape job. A target's own ``job``
is renamed ``exported_job`` or, with ``honorLabels``, overwrites the scrape job's name,
and ``honorLabels`` on a driver (which runs user code) would let that code set any
label, a team's ``namespace`` included. So the job's name travels in ``cjob_job``.
"""

from __future__ import annotations

from types import SimpleNamespace

from job_runtime.metrics import DriverMetrics
from job_runtime.sources.source_contract import SourceBacklog


def _samples(metrics: DriverMetrics) -> list[tuple[str, dict[str, str]]]:
    return [(sample.name, dict(sample.labels))
            for family in metrics.registry.collect() for sample in family.samples]


def _exercised() -> DriverMetrics:
    metrics = DriverMetrics(job="clicks")
    stats = SimpleNamespace(duration_ms=120.0, alignment_ms_max=3.0, sync_ms_max=2.0,
                            prune_failures=1)
    metrics.checkpoint_completed(checkpoint_id=4, timestamp=1700000000.0, size=2048,
                                 stats=stats)
    metrics.progress(records_in=10, records_out=9, failed=1, restarts=0)
    metrics.source_lag([SourceBacklog(topic="clicks", partition=3, records=42)])
    metrics.event_time(watermark=1_700_000_000_000, late_records=5, now=1_700_000_060.0)
    return metrics


def test_no_driver_series_has_a_job_label() -> None:
    offending = [name for name, labels in _samples(_exercised()) if "job" in labels]
    assert offending == []


def test_every_driver_series_names_its_job_in_cjob_job() -> None:
    samples = _samples(_exercised())
    assert samples, "the registry has series"
    unnamed = [name for name, labels in samples
               if labels.get("cjob_job") != "clicks" and not name.endswith("_created")]
    assert unnamed == []


def test_the_records_series_reads_as_the_dashboard_queries_it() -> None:
    values = {name: labels for name, labels in _samples(_exercised())}
    assert values["cjob_job_records_in_total"] == {"cjob_job": "clicks"}
    assert values["cjob_job_records_out_total"] == {"cjob_job": "clicks"}
    assert values["cjob_checkpoint_completed_total"] == {"cjob_job": "clicks"}


def test_the_lag_series_names_job_topic_and_partition_as_the_dashboard_sums_them() -> None:
    lags = [(labels, name) for name, labels in _samples(_exercised())
            if name == "cjob_job_source_lag_records"]
    assert lags == [({"cjob_job": "clicks", "topic": "clicks", "partition": "3"},
                     "cjob_job_source_lag_records")]


def test_event_time_series_give_the_watermark_lag_and_count_late_records_across_restarts() -> None:
    metrics = _exercised()
    values = {name: sample.value for family in metrics.registry.collect()
              for sample in family.samples for name in [sample.name]}
    assert values["cjob_job_watermark_lag_seconds"] == 60.0
    assert values["cjob_job_late_records_total"] == 5
    # Relaunched subtasks count from zero again: what they report is new, and the
    # counter only grows.
    metrics.event_time(watermark=1_700_000_030_000, late_records=2, now=1_700_000_060.0)
    metrics.event_time(watermark=1_700_000_030_000, late_records=4, now=1_700_000_060.0)
    values = {sample.name: sample.value for family in metrics.registry.collect()
              for sample in family.samples}
    assert values["cjob_job_late_records_total"] == 9
    assert values["cjob_job_watermark_lag_seconds"] == 30.0


def test_a_job_without_event_time_serves_no_watermark_series() -> None:
    metrics = DriverMetrics(job="plain")
    metrics.event_time(watermark=None, late_records=0, now=1.0)
    names = {name for name, _ in _samples(metrics)}
    assert "cjob_job_watermark_lag_seconds" not in names


def test_what_only_grows_is_a_counter_that_keeps_counting_across_a_relaunch() -> None:
    # Records in and out, and the barrier stage's relaunches, were gauges of the
    # subtasks' totals: a relaunch (its subtasks count from zero) sent them backwards,
    # and rate() over a gauge is no rate. As counters they only grow.
    metrics = DriverMetrics(job="clicks")
    metrics.progress(records_in=10, records_out=9, failed=0, restarts=0)
    metrics.progress(records_in=25, records_out=20, failed=0, restarts=0)
    metrics.progress(records_in=4, records_out=3, failed=0, restarts=1)
    metrics.progress(records_in=6, records_out=6, failed=0, restarts=1)
    values = {sample.name: sample.value for family in metrics.registry.collect()
              for sample in family.samples}
    assert values["cjob_job_records_in_total"] == 31
    assert values["cjob_job_records_out_total"] == 26
    assert values["cjob_job_subtask_restarts_total"] == 1
    kinds = {family.name: family.type for family in metrics.registry.collect()}
    assert kinds["cjob_job_records_in"] == kinds["cjob_job_records_out"] == "counter"
    assert kinds["cjob_job_subtask_restarts"] == "counter"
