"""The searches for a Structured Streaming baseline's batch size.

:class:`ThroughputSearch` finds its fastest size, the headline baseline: a user who
picks Structured Streaming for throughput runs batches as large as pay off. Below it,
:class:`BatchSizeSearch` holds the batches to our checkpoint interval, a second
question (freshness and replay cost), labelled as such wherever it is reported.

For the interval search: a micro-batch is Structured Streaming's checkpoint: it commits its offsets and its
state once per batch. Ours checkpoints every trigger interval (1 s), so the baseline
a user tuning for throughput *under the same checkpoint interval* would run is the
fastest batch size whose batches still fit that interval. A larger batch is faster
still (fewer per-batch costs), but checkpoints less often: that is the throughput
search's question.

The search doubles the size while batches fit (or overran by less than 30 % while
the rate still grew by a tenth: a noisy batch of a small size), then narrows between
the largest size that fitted and the smallest that overran until they are within a
fifth of each other; if nothing fits, it halves below the smallest size tried.

A baseline whose batches overrun the trigger even at the smallest size (its per-batch
work alone takes longer, as Python per-key state at thousands of keys does) cannot
keep the interval at all. Its user would take the fastest size whose batches are
about as short as any can be: once the floor shows that nothing fits, the budget
becomes the shortest batch measured times the noise band, and the search goes up
again under it. It is pure (the points measured so far in, the next size out) so it
is tested without Spark.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Protocol

from bench.ss_results import TuningPoint

CLOSE_ENOUGH = 0.2
"""Stop narrowing once the overrun is within this fraction above the fit."""
STILL_GAINING = 1.10
"""Doubling goes on past a noisy overrun while the rate grows by this factor."""
NOISE_BAND = 1.3
"""An overrun by less than this factor of the trigger may be one noisy batch."""
PLATEAU_GAIN = 1.05
"""The throughput search doubles while a size's rate beats every smaller one's by this."""
SEARCHES = ("throughput", "interval")
"""The searches a baseline's ``--search`` names: its fastest size (the headline), or the
fastest that fits our checkpoint interval (the labelled second row)."""


class SizeSearch(Protocol):
    """What a Structured Streaming side's tuning loop asks of a search."""

    def next_size(self, points: Sequence[TuningPoint]) -> int | None: ...

    def chosen(self, points: Sequence[TuningPoint]) -> int: ...

    def note(self, point: TuningPoint) -> str: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class ThroughputSearch:
    """Structured Streaming's fastest batch size: doubled until its rate stops rising.

    A batch pays a fixed cost (planning, the state store's commit, the offset and
    commit logs: about a second here) plus its rows, so the rate rises with the size
    until the rows dominate, then flattens. The search doubles from ``start`` while the
    newest size's rate beats every smaller size's by :data:`PLATEAU_GAIN`, and stops at
    the first that does not, or at ``limit`` (a quarter of the input, so the chosen size
    still gives the measured run several batches). Sizes are whole multiples of
    ``step`` (the records of one input file, when the batch size is a number of files):
    the size measured is the size recorded, and rounding cannot make a doubling
    smaller than the size it doubles. The chosen size is the fastest measured.
    """

    start: int
    limit: int
    step: int = 1

    def __post_init__(self) -> None:
        if self.step < 1 or self.start < 1 or self.limit < 1:
            raise ValueError(f"start, limit and step must be positive, got {self.start}, "
                             f"{self.limit} and {self.step}")

    def whole(self, size: int) -> int:
        """``size`` down to a whole number of steps, at least one, at most the limit's."""
        top = max(self.step, self.limit // self.step * self.step)
        return min(top, max(self.step, size // self.step * self.step))

    def next_size(self, points: Sequence[TuningPoint]) -> int | None:
        if not points:
            return self.whole(self.start)
        top = max(points, key=lambda p: p.rows_per_batch)
        smaller = [p.records_per_second for p in points if p.rows_per_batch < top.rows_per_batch]
        if smaller and top.records_per_second < PLATEAU_GAIN * max(smaller):
            return None
        following = self.whole(2 * top.rows_per_batch)
        return following if following > top.rows_per_batch else None

    def chosen(self, points: Sequence[TuningPoint]) -> int:
        if not points:
            raise ValueError("no batch size was measured")
        return max(points, key=lambda p: p.records_per_second).rows_per_batch

    def note(self, point: TuningPoint) -> str:
        return ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchSizeSearch:
    start: int
    """The first size tried."""
    limit: int
    """The largest size tried: the run's record count (a larger batch is never full)."""
    budget_ms: float
    """The longest batch that fits: the trigger interval."""
    floor: int = 10_000
    """The smallest size tried."""

    def budget(self, points: Sequence[TuningPoint]) -> float:
        """The longest batch that fits: the trigger, unless no size down to the floor
        fits it; then the shortest batch measured, with the noise band's allowance."""
        if not points or any(p.batch_ms_median <= self.budget_ms for p in points):
            return self.budget_ms
        if min(p.rows_per_batch for p in points) > self.floor:
            return self.budget_ms  # still coming down: a smaller size may fit
        return max(self.budget_ms, NOISE_BAND * min(p.batch_ms_median for p in points))

    def fits(self, point: TuningPoint, *, budget_ms: float | None = None) -> bool:
        return point.batch_ms_median <= (self.budget_ms if budget_ms is None else budget_ms)

    def note(self, point: TuningPoint) -> str:
        return "" if self.fits(point) else " (overruns the trigger)"

    def next_size(self, points: Sequence[TuningPoint]) -> int | None:
        """The next size to measure, or ``None`` once the search is over."""
        if not points:
            return max(self.floor, min(self.start, self.limit))
        budget = self.budget(points)
        relaxed = budget > self.budget_ms
        tried = {p.rows_per_batch for p in points}
        top = max(points, key=lambda p: p.rows_per_batch)
        coming_down = min(tried) < min(self.start, self.limit) and not relaxed
        if (not coming_down and top.rows_per_batch < self.limit
                and self._still_doubling(top, points, budget_ms=budget)):
            return min(2 * top.rows_per_batch, self.limit)
        fitted = [p.rows_per_batch for p in points if self.fits(p, budget_ms=budget)]
        if not fitted:
            smallest = min(tried)
            return None if smallest <= self.floor else max(self.floor, smallest // 2)
        low = max(fitted)
        overran = [p.rows_per_batch for p in points
                   if not self.fits(p, budget_ms=budget) and p.rows_per_batch > low]
        if not overran:
            return None
        high = min(overran)
        if high - low <= CLOSE_ENOUGH * low:
            return None
        middle = _round(low + (high - low) / 2)
        return None if middle in tried or not low < middle < high else middle

    def _still_doubling(self, top: TuningPoint, points: Sequence[TuningPoint], *,
                        budget_ms: float) -> bool:
        """Double on while the largest size fits, or while it overran but still gained.

        Small batches cost mostly their fixed per-batch work, whose noise can push one
        over the trigger; the rate still growing with the size says the search has not
        reached the sizes where rows, not batches, cost the time. An overrun beyond the
        noise band ends the doubling, although larger batches always amortise the
        per-batch work better; at the first size, the search then comes down.
        """
        if self.fits(top, budget_ms=budget_ms):
            return True
        if top.batch_ms_median >= NOISE_BAND * budget_ms:
            return False
        smaller = [p.records_per_second for p in points if p.rows_per_batch < top.rows_per_batch]
        if not smaller:
            return True
        return top.records_per_second >= STILL_GAINING * max(smaller)

    def chosen(self, points: Sequence[TuningPoint]) -> int:
        """The fastest size whose batches fit the budget; if none fit, the one with the
        shortest."""
        if not points:
            raise ValueError("no batch size was measured")
        budget = self.budget(points)
        fitted = [p for p in points if self.fits(p, budget_ms=budget)]
        if not fitted:
            return min(points, key=lambda p: p.batch_ms_median).rows_per_batch
        return max(fitted, key=lambda p: p.records_per_second).rows_per_batch


def _round(size: float) -> int:
    """``size`` to two significant digits: sizes a person would type."""
    step = 10 ** max(0, int(math.log10(size)) - 1)
    return int(round(size / step) * step)
