"""The coordinator's settings (``spec.checkpoint``), apart so its parts can share them."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointSettings:
    interval: float = 10.0
    min_pause: float = 0.0
    timeout: float = 600.0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    trigger_poll_interval: float = 5.0
    """Seconds between reads of the manual checkpoint request (an apiserver call)."""
    trigger_retry_pause: float = 1.0
    """Least pause after a trigger that could not start, on top of ``interval``."""
