"""The autoscaler's readings of a driver's metrics: the page the runtime's own metrics
serve, read at most every few seconds per job, kept for a while, and a driver that
cannot be reached is no reading."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cjob_operator.scaling_samples import ScalingSamples, parse_sample
from prometheus_client import generate_latest

from job_runtime.metrics import DriverMetrics

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
POD = {"metadata": {"name": "clicks-attempt-2"}, "status": {"podIP": "10.1.2.3"}}


@dataclass(frozen=True)
class Lag:
    topic: str
    partition: int
    records: int


def page(*, records_in: int, lags: tuple[int, ...] | None) -> str:
    metrics = DriverMetrics(job="clicks-uid")
    metrics.progress(records_in=records_in, records_out=0, failed=0, restarts=0)
    if lags is not None:
        metrics.source_lag([Lag("clicks", i, lag) for i, lag in enumerate(lags)])
    return generate_latest(metrics.registry).decode()


def test_a_drivers_page_gives_its_records_read_and_its_lag_summed_over_partitions() -> None:
    sample = parse_sample(page(records_in=5000, lags=(100, 250, 0)), at=T0, attempt=2)
    assert sample is not None
    assert (sample.records_in, sample.lag_records, sample.attempt) == (5000, 350, 2)
    without = parse_sample(page(records_in=7, lags=None), at=T0, attempt=2)
    assert without is not None and without.lag_records is None
    assert parse_sample("# nothing of a driver\n", at=T0, attempt=2) is None


def test_readings_are_taken_at_most_every_few_seconds_and_kept_for_a_while() -> None:
    asked: list[str] = []
    pages = iter([page(records_in=n, lags=(10,)) for n in (100, 200, 300)])

    def fetch(url: str) -> str:
        asked.append(url)
        return next(pages)

    samples = ScalingSamples(port=8090, fetch=fetch, every_seconds=10, keep_seconds=60)
    key = ("team", "clicks")
    assert len(samples.observe(key, pod=POD, attempt=2, now=T0)) == 1
    assert len(samples.observe(key, pod=POD, attempt=2, now=T0 + timedelta(seconds=5))) == 1
    kept = samples.observe(key, pod=POD, attempt=2, now=T0 + timedelta(seconds=10))
    assert [s.records_in for s in kept] == [100, 200]
    assert asked == ["http://10.1.2.3:8090/metrics"] * 2
    later = samples.observe(key, pod=POD, attempt=2, now=T0 + timedelta(seconds=65))
    assert [s.records_in for s in later] == [200, 300]   # the first is older than 60 s


def test_an_unreachable_driver_or_one_without_an_address_is_no_reading() -> None:
    def refused(url: str) -> str:
        raise ConnectionRefusedError(url)

    samples = ScalingSamples(port=8090, fetch=refused)
    assert samples.observe("k", pod=POD, attempt=1, now=T0) == ()
    assert samples.observe("k", pod={"status": {}}, attempt=1, now=T0) == ()
    assert samples.observe("k", pod=None, attempt=1, now=T0) == ()
