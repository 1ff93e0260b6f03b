"""Matched freshness: ours with checkpoints every T seconds against Structured
Streaming with micro-batches of T seconds.

A micro-batch is Structured Streaming's checkpoint and its output's step: a query whose
batches take T seconds shows its results T seconds apart and replays up to T seconds
of input after a failure, as ours does with checkpoints T seconds apart. Its rate
rises with the batch's size (each batch pays a fixed cost), so at each T it runs at
its rate for batches of T seconds, not at its fastest.

That rate is read off the curve its throughput search measured (one point per size
tried: the median batch time and the steady rate), linearly between the two points
whose batch times bracket T. Nothing is extrapolated: below the shortest batch
measured there is no reading (the equal-interval search answers for 1 s); above the
longest, the fastest rate measured stands in, which a user wanting batches of T
seconds could have, and which the search found at or near its plateau.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Iterable, Sequence

from bench.ss_results import TuningPoint

INTERVALS = (1.0, 5.0, 10.0)
"""Checkpoint intervals (seconds) of ours, each against batches of that length."""


class Reading(enum.StrEnum):
    """How a rate at a batch time was read off the curve."""

    INTERPOLATED = "interpolated"
    """Between the two sizes whose batch times bracket it."""
    MEASURED = "measured"
    """A size whose median batch took exactly that long."""
    FASTEST = "fastest measured"
    """Longer than any batch measured: the fastest rate measured stands in."""
    NONE = "shorter than any batch measured"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CurvePoint:
    batch_seconds: float
    records_per_second: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class RateAt:
    """Structured Streaming's rate with batches of ``seconds``, and how it was read."""

    seconds: float
    records_per_second: float | None
    reading: Reading


def curve(points: Iterable[TuningPoint]) -> tuple[CurvePoint, ...]:
    """The search's points as rate against batch time, shortest batch first (a time
    measured twice keeps the faster rate)."""
    best: dict[float, float] = {}
    for point in points:
        seconds = point.batch_ms_median / 1000.0
        if seconds > 0 and point.records_per_second > 0:
            best[seconds] = max(best.get(seconds, 0.0), point.records_per_second)
    return tuple(CurvePoint(batch_seconds=s, records_per_second=r)
                 for s, r in sorted(best.items()))


def rate_at(points: Sequence[CurvePoint], seconds: float) -> RateAt:
    """The rate at batches of ``seconds`` (see the module docstring)."""
    if seconds <= 0:
        raise ValueError(f"a batch time must be positive, got {seconds}")
    if not points or seconds < points[0].batch_seconds:
        return RateAt(seconds=seconds, records_per_second=None, reading=Reading.NONE)
    if seconds > points[-1].batch_seconds:
        return RateAt(seconds=seconds, reading=Reading.FASTEST,
                      records_per_second=max(p.records_per_second for p in points))
    for low, high in itertools.pairwise(points):
        if low.batch_seconds <= seconds <= high.batch_seconds:
            if seconds in (low.batch_seconds, high.batch_seconds):
                exact = low if seconds == low.batch_seconds else high
                return RateAt(seconds=seconds, records_per_second=exact.records_per_second,
                              reading=Reading.MEASURED)
            share = (seconds - low.batch_seconds) / (high.batch_seconds - low.batch_seconds)
            rate = low.records_per_second + share * (high.records_per_second
                                                     - low.records_per_second)
            return RateAt(seconds=seconds, records_per_second=rate,
                          reading=Reading.INTERPOLATED)
    return RateAt(seconds=seconds, records_per_second=points[0].records_per_second,
                  reading=Reading.MEASURED)  # a single point, at exactly that time
