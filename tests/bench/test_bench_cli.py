"""``python -m bench``: its help lists every benchmark, and ``all`` covers every target."""

from __future__ import annotations

import subprocess
import sys

import pytest
from paths import REPO

from bench.__main__ import ALL, BENCHMARKS, all_steps, build_parser


def test_the_help_names_every_benchmark_without_a_traceback() -> None:
    # A benchmark whose summary holds a "%" once made argparse's help crash.
    done = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    for name in BENCHMARKS:
        assert name in done.stdout


def test_all_runs_every_benchmark_with_a_target() -> None:
    names = [step[0] for step in ALL]
    assert set(names) <= set(BENCHMARKS)
    assert {"sync-part", "recovery-operator", "operator", "rocksdb-state"} <= set(names)
    parser = build_parser()
    for args in all_steps(repeat=None):
        assert parser.parse_args(args).benchmark == args[0]


def test_all_passes_repeat_to_every_benchmark_that_takes_it() -> None:
    parser = build_parser()
    repeats = {" ".join(args): getattr(parser.parse_args(args), "repeat", None)
               for args in all_steps(repeat=2)}
    assert {step for step, repeat in repeats.items() if repeat != 2} == {
        "rocksdb-state --size-gb 5", "ss-rocksdb-state --state-gb 5",
        "kafka --records 10000000"}


def test_all_measures_both_realistic_datasets_windows_and_kafka_at_a_scale_of_record() -> None:
    parser = build_parser()
    steps = [parser.parse_args(list(step)) for step in ALL]
    realistic = sorted((ns.dataset, ns.records) for ns in steps
                       if ns.benchmark == "realistic")
    assert realistic == [("clicks", 40_000_000), ("orders", 40_000_000)]
    assert {"windows", "kafka"} <= {ns.benchmark for ns in steps}
    (kafka,) = [ns for ns in steps if ns.benchmark == "kafka"]
    assert kafka.records == 10_000_000


def test_all_measures_every_recovery_target_a_driver_kill_a_subtask_kill_and_a_standby() -> None:
    parser = build_parser()
    recoveries = [parser.parse_args(list(step)) for step in ALL if step[0] == "recovery"]
    assert sorted((ns.kill, ns.standby) for ns in recoveries) == [
        ("driver", False), ("driver", True), ("subtask", False)]


def test_all_compares_ours_and_structured_streamings_rocksdb_state_at_the_same_5_gib() -> None:
    parser = build_parser()
    steps = {step[0]: parser.parse_args(list(step)) for step in ALL}
    assert steps["rocksdb-state"].size_gb == steps["ss-rocksdb-state"].state_gb == 5.0


def test_barriers_refuses_to_report_percentiles_of_runs_that_ended_early() -> None:
    from bench.barriers import check_scale
    from bench.common import BenchmarkError

    check_scale(name="backpressure, aligned", completed=90, runs=2, seconds=25, interval=0.5)
    with pytest.raises(BenchmarkError, match=r"2 run.*: 2 periodic checkpoints where about 100"):
        check_scale(name="backpressure, aligned", completed=2, runs=2, seconds=25,
                    interval=0.5)


def test_overhead_refuses_a_run_too_short_to_hold_its_checkpoints() -> None:
    from bench.common import BenchmarkError, require_checkpoints

    require_checkpoints(benchmark="overhead", run="repetition 1", completed=9, expected=10.0,
                        advice="raise --records")
    with pytest.raises(BenchmarkError, match="raise --records"):
        require_checkpoints(benchmark="overhead", run="repetition 1", completed=1,
                            expected=1.2, advice="raise --records")


def test_all_lists_its_numbered_steps_and_runs_a_part_of_them() -> None:
    from bench.__main__ import selected_steps

    whole = selected_steps(repeat=None, first=1, last=None)
    assert [number for number, _ in whole] == list(range(1, len(ALL) + 1))
    part = selected_steps(repeat=2, first=14, last=None)
    assert part[0] == (14, ["realistic", "--records", "40000000", "--repeat", "2"])
    assert [args[0] for _, args in part] == ["realistic", "realistic", "windows", "kafka",
                                             "joins"]


def test_all_puts_the_searched_comparisons_last_so_two_parts_split_them_from_the_rest() -> None:
    names = [step[0] for step in ALL]
    assert names[-5:] == ["realistic", "realistic", "windows", "kafka", "joins"]


@pytest.mark.parametrize("first, last", [(0, None), (5, 4), (1, len(ALL) + 1)])
def test_all_refuses_a_range_of_steps_that_does_not_exist_in_words(
        first: int, last: int | None) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "all", "--from", str(first),
         *(["--to", str(last)] if last is not None else []), "--list"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "is not a range of steps" in done.stderr
    assert "Traceback" not in done.stderr
