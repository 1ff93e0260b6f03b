"""The coordinator's settings (``spec.checkpoint``), apart so its parts can share them."""

from __future__ import annotations

import dataclasses

from cjob_spec import defaults


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointSettings:
    interval: float = defaults.CHECKPOINT_INTERVAL.default_value().seconds
    min_pause: float = defaults.CHECKPOINT_MIN_PAUSE.default_value().seconds
    timeout: float = defaults.CHECKPOINT_TIMEOUT.default_value().seconds
    max_concurrent: int = 1
    tolerable_failures: int = defaults.TOLERABLE_FAILURES.default
    stall_intervals: int = defaults.CHECKPOINT_STALL_INTERVALS.default
    """Intervals without a completed checkpoint after which a running job counts as
    stalled (``spec.health.checkpointStallIntervals``; 0: never), see
    :mod:`job_runtime.coordinator.stall_watch`."""
    trigger_poll_interval: float = 5.0
    """Seconds between reads of the manual checkpoint request (an apiserver call)."""
    trigger_retry_pause: float = 1.0
    """Least pause after a trigger that could not start, on top of ``interval``."""
