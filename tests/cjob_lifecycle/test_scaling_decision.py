"""The autoscaler's decision: a subtask's capacity measured while the job is behind,
enough subtasks for what arrives and the backlog within targetLag, bounded, and
rounded up to a divisor of maxParallelism."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cjob_lifecycle.observed import MetricSample
from cjob_lifecycle.scaling_decision import aligned, decide
from cjob_spec.durations import Duration
from cjob_spec.model import AutoscalerMode, AutoscalerSpec
from cjob_spec.status import ScalingReason

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SPEC = AutoscalerSpec(mode=AutoscalerMode.RECOMMEND, min=1, max=0,
                      target_lag=Duration.parse("60s"), target_utilization=0.5)


def samples(*, rate: float, lag: tuple[float, float] | None, seconds: float = 60,
            attempt: int = 3) -> list[MetricSample]:
    """Two readings ``seconds`` apart: ``rate`` records/s read, the lag from ... to."""
    first_lag, last_lag = lag if lag is not None else (None, None)
    return [MetricSample(at=T0, attempt=attempt, records_in=1000.0, lag_records=first_lag),
            MetricSample(at=T0 + timedelta(seconds=seconds), attempt=attempt,
                         records_in=1000.0 + rate * seconds, lag_records=last_lag)]


def decided(found: list[MetricSample], *, current: int = 2, known: float | None = None,
            spec: AutoscalerSpec = SPEC, slot_limit: int | None = None):  # type: ignore[no-untyped-def]
    return decide(found, spec=spec, current=current, attempt=3, max_parallelism=128,
                  slot_limit=slot_limit, known_capacity=known)


def test_a_job_behind_measures_its_capacity_and_scales_up_for_arrival_and_backlog() -> None:
    # 2 subtasks read 1000/s (500 each) while the lag grows 6000 -> 12000 over 60 s:
    # 1100/s arrive, and 12000 behind must go within 60 s: 1300/s, at 50 % of 500/s.
    decision = decided(samples(rate=1000, lag=(6000, 12000)))
    assert decision.capacity_per_subtask == pytest.approx(500)
    assert decision.input_rate == pytest.approx(1000)
    assert decision.lag_records == 12000
    assert (decision.reason, decision.recommended) == (ScalingReason.SCALE_UP, 8)  # 6 -> 8
    assert "12000 behind" in decision.message


def test_a_job_that_keeps_up_scales_down_on_the_capacity_measured_when_it_was_behind() -> None:
    decision = decided(samples(rate=300, lag=(0, 0)), current=8, known=500)
    # 300/s at 50 % of 500/s needs 2 (1.2 rounded up), which divides 128.
    assert (decision.reason, decision.recommended) == (ScalingReason.SCALE_DOWN, 2)
    assert decision.capacity_per_subtask == 500
    assert "measured when last behind" in decision.message


def test_without_a_measured_capacity_a_job_that_keeps_up_stays_as_it_is() -> None:
    decision = decided(samples(rate=300, lag=(0, 10)))
    assert (decision.reason, decision.recommended) == (ScalingReason.CAPACITY_UNKNOWN, 2)


def test_too_few_samples_or_a_source_without_lag_decide_nothing() -> None:
    assert decided(samples(rate=1000, lag=(6000, 12000), seconds=10)).reason \
        is ScalingReason.NOT_ENOUGH_DATA
    assert decided(samples(rate=1000, lag=(6000, 12000), attempt=2)).reason \
        is ScalingReason.NOT_ENOUGH_DATA  # another attempt's readings
    assert decided(samples(rate=1000, lag=None)).reason is ScalingReason.NO_LAG_METRIC


def test_the_choice_stays_within_min_max_and_the_masters_slots() -> None:
    bounded = AutoscalerSpec(mode=AutoscalerMode.APPLY, min=3, max=6,
                             target_lag=Duration.parse("60s"), target_utilization=0.5)
    assert decided(samples(rate=1000, lag=(6000, 12000)), spec=bounded).recommended == 6
    assert "bounded from 6" not in decided(samples(rate=1000, lag=(6000, 12000)),
                                           spec=bounded).message
    assert decided(samples(rate=10, lag=(0, 0)), spec=bounded, known=500).recommended == 4
    assert decided(samples(rate=1000, lag=(6000, 12000)), slot_limit=4).recommended == 4


@pytest.mark.parametrize(("wanted", "upper", "expected"),
                         [(3, 128, 4), (5, 128, 8), (8, 128, 8), (5, 6, 5), (100, 128, 128)])
def test_a_parallelism_is_rounded_up_to_divide_the_key_groups_where_it_can(
        wanted: int, upper: int, expected: int) -> None:
    assert aligned(wanted, max_parallelism=128, upper=upper) == expected


def test_readings_before_the_sources_knew_their_lag_and_old_ones_are_left_out() -> None:
    early = [MetricSample(at=T0 - timedelta(seconds=300), attempt=3, records_in=0.0,
                          lag_records=50_000.0),
             MetricSample(at=T0 - timedelta(seconds=5), attempt=3, records_in=900.0,
                          lag_records=None)]
    decision = decided([*early, *samples(rate=1000, lag=(6000, 12000))])
    # The five-minute-old reading (another backlog) and the one without lag do not
    # count: the same decision as from the last minute alone.
    assert (decision.reason, decision.recommended) == (ScalingReason.SCALE_UP, 8)
    assert decision.input_rate == pytest.approx(1000)
