"""What a comparison writes into the summary besides its ratio: ours' own rate against
the absolute target, counted only when the runs checkpointed as often as promised; and
which rows and pairs a run of some of the rows keeps."""

from __future__ import annotations

import pytest

from bench import throughput
from bench.common import BenchmarkError
from bench.comparison import Pair, RateTarget, _ratios, rate_entry, select_rows
from bench.rows import Baseline, Measurement


def _ours(rate: float, *, checkpoints: int, processing_seconds: float) -> Measurement:
    return Measurement(label="ours, discard", records=600_000_000,
                       steady_records_per_second=rate, seconds_to_last_record=10.0,
                       wall_seconds=12.0,
                       detail={"checkpoints": checkpoints,
                               "processing_seconds": processing_seconds})


def _baseline() -> Measurement:
    return Measurement(label="SS rocksdb, noop", records=600_000_000,
                       steady_records_per_second=13e6, seconds_to_last_record=55.0,
                       wall_seconds=58.0, detail={"rows_per_batch": 14_000_000})


TARGET = RateTarget(key="throughput_records_per_second", label="ours, discard",
                    records_per_second=10e6, checkpoint_interval_s=1.0)


def test_the_rate_is_the_median_of_ours_over_the_repetitions_and_meets_the_target() -> None:
    runs = [[_ours(rate, checkpoints=5, processing_seconds=3.8), _baseline()]
            for rate in (150e6, 160e6, 140e6)]

    entry = rate_entry(TARGET, runs=runs, records=600_000_000)

    assert entry["value"] == 150e6
    assert entry["target"] == 10e6
    assert entry["met"] is True
    assert "checkpoints" in entry["note"] and "600,000,000 records" in entry["note"]


def test_a_rate_from_runs_that_skipped_checkpoints_does_not_count_as_met() -> None:
    runs = [[_ours(150e6, checkpoints=1, processing_seconds=3.8), _baseline()]
            for _ in range(3)]

    entry = rate_entry(TARGET, runs=runs, records=600_000_000)

    assert entry["met"] is False
    assert "fewer checkpoints" in entry["note"]


def test_a_rate_below_the_target_is_not_met() -> None:
    runs = [[_ours(8e6, checkpoints=80, processing_seconds=75.0), _baseline()]]

    assert rate_entry(TARGET, runs=runs, records=600_000_000)["met"] is False


def test_a_run_of_some_rows_keeps_the_pairs_among_them() -> None:
    rows, pairs = select_rows(throughput.ROWS, throughput.PAIRS,
                              only=["ours, discard", "SS hdfs, noop", "ours, files"])
    assert [r.label for r in rows] == ["ours, discard", "ours, files", "SS hdfs, noop"]
    assert [(p.ours, p.baselines) for p in pairs] == [("ours, discard", ("SS hdfs, noop",))]


def test_without_a_selection_every_row_and_pair_runs() -> None:
    rows, pairs = select_rows(throughput.ROWS, throughput.PAIRS, only=[])
    assert rows == throughput.ROWS and pairs == throughput.PAIRS


def test_an_unknown_row_is_refused_naming_the_rows() -> None:
    with pytest.raises(BenchmarkError) as refused:
        select_rows(throughput.ROWS, throughput.PAIRS, only=["ours, discrad"])
    assert "'ours, discrad'" in str(refused.value) and "'SS hdfs, files'" in str(refused.value)


def test_a_baseline_capped_to_fewer_records_gives_a_steady_ratio_and_no_end_to_end_one(
) -> None:
    capped = Measurement(label="SS rocksdb, noop at 1 s", records=10_000_000,
                         steady_records_per_second=1e6, seconds_to_last_record=20.0,
                         wall_seconds=25.0, detail={})
    pair = Pair(ours="ours, discard", baselines=("SS rocksdb, noop at 1 s",))
    runs = [[_ours(60e6, checkpoints=5, processing_seconds=10.0), capped]]

    assert _ratios(pair, runs, "steady_records_per_second") == [60.0]
    assert _ratios(pair, runs, "end_to_end_records_per_second", same_records=True) == []
    assert [b.records_of(600_000_000) for b in throughput.ROWS
            if isinstance(b, Baseline) and b.search == "interval"] == [10_000_000] * 2
