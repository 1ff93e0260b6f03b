"""The parallelism a job should run at, from samples of its throughput and lag.

What a subtask can read is measured while the job is behind (its lag stays above a
second of reading over the whole window): then it reads as fast as it can, so the
read rate over the parallelism is a subtask's capacity. The job needs enough
subtasks to read what arrives (the read rate plus the lag's growth) and the backlog
within ``targetLag``, each at ``targetUtilization`` of its capacity. A job that keeps
up says nothing about its capacity, so the capacity measured when it last fell behind
stands (the status carries it); before it ever fell behind, nothing but the current
parallelism can be recommended. The choice is rounded up to a divisor of
``maxParallelism`` where one lies within the bounds, so that every subtask owns as
many key groups as the next.

Pure: samples in, a decision out; the operator collects the samples, the planner
applies the decision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cjob_lifecycle.observed import MetricSample
from cjob_spec.model import AutoscalerSpec
from cjob_spec.status import ScalingReason

MIN_WINDOW_SECONDS = 30.0
"""Samples must span this long before a rate means anything."""
WINDOW_SECONDS = 60.0
"""The rates are those of the latest readings this long (older ones describe another
moment of the job: a backlog since read, a start before the lag was known)."""
BEHIND_SECONDS = 1.0
"""A lag above this many seconds of reading, all through the window, is being behind."""


@dataclass(frozen=True, kw_only=True)
class ScalingDecision:
    reason: ScalingReason
    recommended: int
    message: str
    input_rate: float | None = None
    lag_records: int | None = None
    capacity_per_subtask: float | None = None
    """Measured in this window, or the one it was given."""


def aligned(parallelism: int, *, max_parallelism: int, upper: int) -> int:
    """The smallest divisor of ``max_parallelism`` from ``parallelism`` up to ``upper``,
    else ``parallelism``."""
    for candidate in range(parallelism, upper + 1):
        if max_parallelism % candidate == 0:
            return candidate
    return parallelism


def decide(samples: Sequence[MetricSample], *, spec: AutoscalerSpec, current: int,
           attempt: int, max_parallelism: int, slot_limit: int | None,
           known_capacity: float | None) -> ScalingDecision:
    """The parallelism ``spec`` asks for, given the samples of ``attempt`` (running at
    ``current``); ``slot_limit`` bounds it (a ``local[N]`` master)."""
    window = sorted((s for s in samples if s.attempt == attempt), key=lambda s: s.at)
    if window:
        newest = window[-1].at
        window = [s for s in window if (newest - s.at).total_seconds() <= WINDOW_SECONDS]
    if any(s.lag_records is not None for s in window):
        # The sources report lag once they have fetched; readings before that say nothing.
        window = [s for s in window if s.lag_records is not None]
    if len(window) < 2 or (window[-1].at - window[0].at).total_seconds() < MIN_WINDOW_SECONDS:
        return ScalingDecision(reason=ScalingReason.NOT_ENOUGH_DATA, recommended=current,
                               message=f"fewer than {MIN_WINDOW_SECONDS:.0f}s of samples of "
                                       f"attempt {attempt}", capacity_per_subtask=known_capacity)
    first, last = window[0], window[-1]
    seconds = (last.at - first.at).total_seconds()
    rate = max(0.0, (last.records_in - first.records_in) / seconds)
    if last.lag_records is None or first.lag_records is None:
        return ScalingDecision(reason=ScalingReason.NO_LAG_METRIC, recommended=current,
                               message="the job's sources report no lag (Kafka sources do)",
                               input_rate=rate, capacity_per_subtask=known_capacity)
    lag = last.lag_records
    arrival = max(0.0, rate + (lag - first.lag_records) / seconds)
    behind = rate > 0 and min(first.lag_records, lag) > rate * BEHIND_SECONDS
    capacity = rate / current if behind else known_capacity
    lag_records = int(lag)
    if capacity is None or capacity <= 0:
        return ScalingDecision(reason=ScalingReason.CAPACITY_UNKNOWN, recommended=current,
                               message=f"keeps up ({rate:.0f} records/s, {lag_records} "
                                       f"behind); a subtask's capacity is measured once it "
                                       f"falls behind", input_rate=rate,
                               lag_records=lag_records)
    need = arrival + lag / spec.target_lag.seconds
    raw = max(1, math.ceil(need / (capacity * spec.target_utilization)))
    upper = spec.upper(max_parallelism)
    if slot_limit is not None:
        upper = min(upper, slot_limit)
    lower = min(spec.min, upper)
    bounded = min(max(raw, lower), upper)
    chosen = aligned(bounded, max_parallelism=max_parallelism, upper=upper)
    reason = (ScalingReason.SCALE_UP if chosen > current else
              ScalingReason.SCALE_DOWN if chosen < current else ScalingReason.STEADY)
    message = (f"{rate:.0f} records/s read, {arrival:.0f}/s arriving, {lag_records} behind; "
               f"a subtask reads {capacity:.0f}/s"
               f"{'' if behind else ' (measured when last behind)'}: {chosen} keep up and "
               f"read the backlog within {spec.target_lag.text} at "
               f"{spec.target_utilization:.0%}"
               + (f" (bounded from {raw})" if raw != bounded else ""))
    return ScalingDecision(reason=reason, recommended=chosen, message=message, input_rate=rate,
                           lag_records=lag_records, capacity_per_subtask=capacity)
