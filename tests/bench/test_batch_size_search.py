"""How the Structured Streaming baselines' ``rowsPerBatch`` is chosen.

A micro-batch is Structured Streaming's checkpoint: its offsets and state are
committed once per batch. Ours checkpoints every second, so the fair baseline is the
fastest batch size whose batches still fit the 1 s trigger, not one batch for the
whole input (which is faster and never checkpoints within the run).
"""

from __future__ import annotations

import itertools

from bench.batch_size_search import PLATEAU_GAIN, BatchSizeSearch, ThroughputSearch
from bench.ss_results import TuningPoint

SEARCH = BatchSizeSearch(start=500_000, limit=200_000_000, budget_ms=1000.0)


def point(size: int, batch_ms: float) -> TuningPoint:
    return TuningPoint(rows_per_batch=size, batch_ms_median=batch_ms,
                       records_per_second=size / batch_ms * 1000.0)


def probe(search: BatchSizeSearch, ms_per_row: float) -> list[TuningPoint]:
    """Run the search against an engine whose batches take ``ms_per_row`` each row."""
    points: list[TuningPoint] = []
    while (size := search.next_size(points)) is not None:
        assert size not in [p.rows_per_batch for p in points], "a size is tried once"
        points.append(point(size, 50.0 + size * ms_per_row))
        assert len(points) < 40, "the search ends"
    return points


# --- the chosen size -------------------------------------------------------------------


def test_a_faster_batch_that_overruns_the_trigger_is_not_chosen() -> None:
    points = [point(4_000_000, 800.0), point(20_000_000, 1_400.0)]
    assert SEARCH.chosen(points) == 4_000_000


def test_the_fastest_of_the_batches_that_fit_is_chosen() -> None:
    points = [point(1_000_000, 400.0), point(2_000_000, 600.0), point(3_000_000, 990.0)]
    assert SEARCH.chosen(points) == 2_000_000


def test_when_no_batch_fits_the_shortest_is_chosen() -> None:
    points = [point(200_000, 1_300.0), point(100_000, 1_100.0)]
    assert SEARCH.chosen(points) == 100_000


def test_when_the_per_batch_work_alone_overruns_the_trigger_the_size_is_chosen_for_speed() -> None:
    # Python per-key state at 10k keys: about 3 s per batch whatever its size, down to
    # the floor. No size keeps a 1 s checkpoint interval; a user tuning for throughput
    # takes the fastest size whose batches are about as short as any can be, not the
    # smallest size (a tenth of the rate for the same interval).
    points = [point(100_000, 3_355.0), point(50_000, 3_272.0), point(25_000, 3_190.0),
              point(12_500, 3_149.0), point(10_000, 3_162.0)]
    assert SEARCH.chosen(points) == 100_000


# --- the search ------------------------------------------------------------------------


def test_it_starts_at_the_first_size() -> None:
    assert SEARCH.next_size([]) == 500_000


def test_it_doubles_while_batches_fit() -> None:
    assert SEARCH.next_size([point(500_000, 200.0)]) == 1_000_000


def test_after_an_overrun_it_tries_between_the_last_fit_and_the_overrun() -> None:
    assert SEARCH.next_size([point(4_000_000, 800.0), point(8_000_000, 1_500.0)]) == 6_000_000


def test_it_stops_once_the_fit_and_the_overrun_are_close() -> None:
    points = [point(4_000_000, 800.0), point(8_000_000, 1_500.0), point(6_000_000, 1_100.0),
              point(5_000_000, 970.0)]
    assert SEARCH.next_size(points) is None


def test_it_halves_when_the_first_size_overruns_by_far() -> None:
    assert SEARCH.next_size([point(500_000, 2_400.0)]) == 250_000


def test_a_noisy_overrun_does_not_stop_the_doubling_while_the_rate_still_grows() -> None:
    # Per-batch costs dominate small batches, and one slow batch reads as an overrun.
    assert SEARCH.next_size([point(500_000, 1_042.0)]) == 1_000_000
    points = [point(500_000, 700.0), point(1_000_000, 1_050.0)]
    assert SEARCH.next_size(points) == 2_000_000


def test_doubling_stops_at_a_clear_overrun_even_while_the_rate_grows() -> None:
    # Larger batches always amortise the per-batch cost better; past the noise band an
    # overrun is an overrun.
    points = [point(8_000_000, 805.0), point(16_000_000, 1_680.0)]
    assert SEARCH.next_size(points) == 12_000_000


def test_doubling_stops_at_an_overrun_that_gained_little() -> None:
    points = [point(8_000_000, 805.0), point(16_000_000, 1_500.0)]
    assert SEARCH.next_size(points) == 12_000_000


def test_on_an_engine_with_a_large_fixed_cost_per_batch_it_finds_the_large_fit() -> None:
    # 650 ms per batch whatever its size, then 25 ns per row: about 14M rows fit.
    points: list[TuningPoint] = []
    noisy = {500_000: 1_042.0}  # one unlucky first measurement
    while (size := SEARCH.next_size(points)) is not None:
        points.append(point(size, noisy.get(size, 650.0 + size * 0.000025)))
        assert len(points) < 40
    assert 11_000_000 <= SEARCH.chosen(points) <= 14_000_000


def test_it_never_passes_the_limit() -> None:
    search = BatchSizeSearch(start=500_000, limit=3_000_000, budget_ms=1000.0)
    assert search.next_size([point(2_000_000, 300.0)]) == 3_000_000
    assert search.next_size([point(2_000_000, 300.0), point(3_000_000, 400.0)]) is None


def test_it_never_goes_below_the_floor() -> None:
    search = BatchSizeSearch(start=20_000, limit=1_000_000, budget_ms=1000.0, floor=10_000)
    assert search.next_size([point(20_000, 3_000.0)]) == 10_000
    following = search.next_size([point(20_000, 3_000.0), point(10_000, 2_000.0)])
    assert following is None or following > 20_000  # up again: see the per-batch work tests


def test_on_a_linear_engine_it_finds_a_size_within_a_fifth_of_the_best_fit() -> None:
    ms_per_row = 0.00019  # 5M rows/s: the best fit is about 5,000,000 rows
    points = probe(SEARCH, ms_per_row)
    best_fit = (1000.0 - 50.0) / ms_per_row
    chosen = SEARCH.chosen(points)
    assert 0.8 * best_fit <= chosen <= best_fit
    assert len(points) <= 10


def test_on_a_slow_engine_it_comes_down_below_the_first_size() -> None:
    ms_per_row = 0.005  # 200k rows/s
    chosen = SEARCH.chosen(probe(SEARCH, ms_per_row))
    assert 0.5 * (950.0 / ms_per_row) <= chosen <= 950.0 / ms_per_row


def test_on_an_engine_whose_per_batch_work_overruns_the_trigger_it_searches_upward() -> None:
    # 3 s per batch, then 2M rows/s: once the floor shows no size fits 1 s, the search
    # looks for the largest size whose batches stay within the noise band of the
    # shortest one (here about 1.8M rows), as it would for the trigger.
    search = BatchSizeSearch(start=100_000, limit=2_000_000, budget_ms=1000.0)
    points: list[TuningPoint] = []
    while (size := search.next_size(points)) is not None:
        assert size not in [p.rows_per_batch for p in points], "a size is tried once"
        points.append(point(size, 3_000.0 + size * 0.0005))
        assert len(points) < 40, "the search ends"
    best = (1.3 * (3_000.0 + 10_000 * 0.0005) - 3_000.0) / 0.0005
    assert 0.8 * best <= search.chosen(points) <= best


# --- the throughput search: Structured Streaming at its fastest ---------------------------

FILE = 200_000


def throughput_probe(search: ThroughputSearch, *, fixed_ms: float,
                     ms_per_row: float) -> list[TuningPoint]:
    """The throughput search against an engine whose batches cost ``fixed_ms`` plus
    ``ms_per_row`` each row."""
    points: list[TuningPoint] = []
    while (size := search.next_size(points)) is not None:
        assert size not in [p.rows_per_batch for p in points], "a size is tried once"
        assert size % search.step == 0, "a size is whole files"
        points.append(point(size, fixed_ms + size * ms_per_row))
        assert len(points) < 40, "the search ends"
    return points


def test_the_throughput_search_doubles_past_batches_that_fit_a_second_to_the_plateau() -> None:
    # Spark's shape here: about a second per batch, then 1.3 us a row. The interval
    # search stops near 100k rows; the rate keeps rising until the rows dominate.
    search = ThroughputSearch(start=400_000, limit=10_000_000, step=FILE)
    points = throughput_probe(search, fixed_ms=1000.0, ms_per_row=0.0013)
    sizes = [p.rows_per_batch for p in points]
    assert sizes == [400_000, 800_000, 1_600_000, 3_200_000, 6_400_000, 10_000_000]
    assert search.chosen(points) == 10_000_000
    rates = [p.records_per_second for p in points]
    assert rates == sorted(rates)


def test_the_throughput_search_stops_once_doubling_gains_less_than_five_percent() -> None:
    search = ThroughputSearch(start=400_000, limit=100_000_000, step=FILE)
    points = throughput_probe(search, fixed_ms=1000.0, ms_per_row=0.0013)
    *rising, last = points
    assert last.records_per_second < PLATEAU_GAIN * max(p.records_per_second for p in rising)
    for before, after in itertools.pairwise(rising):
        assert after.records_per_second >= PLATEAU_GAIN * before.records_per_second
    assert search.chosen(points) == max(points, key=lambda p: p.records_per_second).rows_per_batch
    assert search.chosen(points) >= 12_000_000, "near the plateau, not at 1 s batches"


def test_the_throughput_search_takes_the_fastest_size_when_a_larger_one_was_slower() -> None:
    search = ThroughputSearch(start=FILE, limit=10_000_000, step=FILE)
    points = [point(200_000, 1000.0), point(400_000, 1100.0), point(800_000, 3000.0)]
    assert search.next_size(points) is None
    assert search.chosen(points) == 400_000


def test_the_throughput_search_rounds_the_first_size_to_whole_files_and_doubles_from_it() -> None:
    # 500k with files of 200k is two files: the size measured is 400k, and the next 800k
    # (the old search took a rounded start for coming down and stopped there).
    search = ThroughputSearch(start=500_000, limit=10_000_000, step=FILE)
    assert search.next_size([]) == 400_000
    assert search.next_size([point(400_000, 1500.0)]) == 800_000


def test_the_throughput_search_never_passes_a_quarter_of_the_input() -> None:
    search = ThroughputSearch(start=FILE, limit=1_100_000, step=FILE)
    points = throughput_probe(search, fixed_ms=1000.0, ms_per_row=0.0001)
    assert [p.rows_per_batch for p in points] == [200_000, 400_000, 800_000, 1_000_000]


def test_the_throughput_search_measures_one_file_when_the_limit_is_below_a_file() -> None:
    search = ThroughputSearch(start=500_000, limit=50_000, step=FILE)
    assert search.next_size([]) == FILE
    assert search.next_size([point(FILE, 900.0)]) is None
