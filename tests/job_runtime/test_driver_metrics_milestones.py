"""The driver serves its start's milestones as timestamps.

A recovery's length is read from them (a kill to the new driver's first record),
where the record counters, refreshed once a second, would add up to two seconds.
"""

from __future__ import annotations

from job_runtime.metrics import DriverMetrics


def _milestones(metrics: DriverMetrics) -> dict[str, float]:
    return {sample.labels["milestone"]: sample.value
            for family in metrics.registry.collect() for sample in family.samples
            if sample.name == "cjob_job_milestone_timestamp_seconds"}


def test_the_timeline_is_served_as_milestones_in_unix_seconds() -> None:
    metrics = DriverMetrics(job="clicks")
    metrics.milestones({"driverStartedAt": 100.0, "sparkReadyAt": 104.5,
                        "promotedAt": 200.25, "stageLaunchedAt": 103.0,
                        "firstRecordAt": 201.5})
    assert _milestones(metrics) == {"driver_started": 100.0, "spark_ready": 104.5,
                                    "promoted": 200.25, "stage_launched": 103.0,
                                    "first_record": 201.5}


def test_entries_that_are_not_timestamps_are_not_served() -> None:
    metrics = DriverMetrics(job="clicks")
    metrics.milestones({"restoreSecondsMax": 1.25, "somethingNew": 3.0})
    assert _milestones(metrics) == {}


def test_a_later_reading_moves_a_milestone() -> None:
    metrics = DriverMetrics(job="clicks")
    metrics.milestones({"firstRecordAt": 201.5})
    metrics.milestones({"firstRecordAt": 260.0})  # the stage relaunched in this driver
    assert _milestones(metrics) == {"first_record": 260.0}
