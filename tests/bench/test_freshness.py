"""Structured Streaming's rate at batches of T seconds is read off its measured curve:
between the two sizes that bracket T, never extrapolated, and the fastest measured
rate for batch times beyond the curve."""

from __future__ import annotations

import pytest

from bench.freshness import Reading, curve, rate_at
from bench.ss_results import TuningPoint


def point(rows: int, batch_ms: float, rate: float) -> TuningPoint:
    return TuningPoint(rows_per_batch=rows, batch_ms_median=batch_ms, records_per_second=rate)


SEARCH = [point(2_000_000, 2_000, 1_000_000), point(500_000, 1_000, 500_000),
          point(1_000_000, 1_250, 800_000), point(4_000_000, 3_500, 1_140_000)]


def test_the_curve_orders_the_points_by_batch_time() -> None:
    assert [p.batch_seconds for p in curve(SEARCH)] == [1.0, 1.25, 2.0, 3.5]


def test_a_time_between_two_sizes_reads_the_rate_on_the_line_between_them() -> None:
    reading = rate_at(curve(SEARCH), 2.75)
    assert reading.reading is Reading.INTERPOLATED
    assert reading.records_per_second == pytest.approx(1_070_000)


def test_a_time_a_size_took_reads_that_sizes_rate() -> None:
    reading = rate_at(curve(SEARCH), 2.0)
    assert (reading.reading, reading.records_per_second) == (Reading.MEASURED, 1_000_000)


def test_a_time_beyond_the_longest_batch_reads_the_fastest_rate_measured() -> None:
    slower_at_the_end = [*SEARCH, point(8_000_000, 7_000, 1_100_000)]
    reading = rate_at(curve(slower_at_the_end), 10.0)
    assert (reading.reading, reading.records_per_second) == (Reading.FASTEST, 1_140_000)


def test_a_time_shorter_than_every_batch_has_no_reading() -> None:
    reading = rate_at(curve(SEARCH), 0.5)
    assert (reading.reading, reading.records_per_second) == (Reading.NONE, None)
    assert rate_at((), 5.0).reading is Reading.NONE


def test_a_batch_time_measured_twice_keeps_its_faster_rate() -> None:
    twice = curve([point(1_000, 1_000, 10.0), point(2_000, 1_000, 20.0)])
    assert [(p.batch_seconds, p.records_per_second) for p in twice] == [(1.0, 20.0)]
    assert rate_at(twice, 1.0).records_per_second == 20.0


def test_the_realistic_rows_hold_our_median_at_each_interval_against_the_curve() -> None:
    from bench.realistic import freshness_rows, searches_curve
    from bench.ss_results import Tuning

    runs = [{"ours_at_intervals": {"5": {"steady_records_per_second": rate},
                                   "10": {"steady_records_per_second": rate * 2}}}
            for rate in (4e6, 6e6, 5e6)]
    tunings = {"throughput": Tuning(points=tuple(SEARCH[:3]), chosen=2_000_000),
               "interval": Tuning(points=(SEARCH[3],), chosen=500_000)}
    five, ten = freshness_rows(runs, searches_curve(tunings), (5.0, 10.0))
    assert (five.ours_steady, five.ss.reading, five.ss.records_per_second) == \
        (5e6, Reading.FASTEST, 1_140_000)
    assert ten.ratio == pytest.approx(10e6 / 1_140_000)
    assert freshness_rows(runs, searches_curve({"throughput": None, "interval": None}),
                          (5.0,)) == []


def test_the_realistic_benchmark_refuses_a_freshness_that_is_not_seconds() -> None:
    import argparse

    from bench.common import BenchmarkError
    from bench.realistic import add_arguments, resolve_scale

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for bad in ("5,x", "0", "-1"):
        with pytest.raises(BenchmarkError, match="--freshness takes positive seconds"):
            resolve_scale(parser.parse_args(["--freshness", bad]))
    assert resolve_scale(parser.parse_args(["--freshness", "10,1,5"])).freshness == (5.0, 10.0)
    assert resolve_scale(parser.parse_args(["--max-files", "3"])).freshness == ()
