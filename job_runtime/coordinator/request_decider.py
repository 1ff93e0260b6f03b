"""When the coordinator starts the next checkpoint (Flink's ``CheckpointRequestDecider``).

A periodic checkpoint is due once ``interval`` passed since the last trigger and
``min_pause`` since the last completion, while fewer than ``max_concurrent`` are
pending. Once every source finished, the next checkpoint is the *final* one,
whatever the interval, and only one final checkpoint is pending or completes per
epoch. A trigger that could not start (no checkpoint id) pauses triggering for
``trigger_retry_pause``. A manual request is looked for every
``trigger_poll_interval``, and only while nothing is pending.

Pure bookkeeping on monotonic seconds the caller passes in: no lock, no clock,
no I/O, so the coordinator calls it under its state lock and tests call it with
made-up times.
"""

from __future__ import annotations

from job_runtime.coordinator.checkpoint_settings import CheckpointSettings


class RequestDecider:
    def __init__(self, *, settings: CheckpointSettings) -> None:
        self._settings = settings
        self._last_trigger = 0.0
        self._last_completed = 0.0
        self._paused_until = 0.0
        self._last_poll = 0.0
        self._final_completed = False

    def due(self, *, now: float, sources_finished: bool, pending: int,
            final_pending: bool) -> bool | None:
        """Whether a checkpoint is due: ``None`` if not, else whether it is the final one.

        A due trigger counts as attempted at once, so a failing one is retried after
        the interval (and at least ``trigger_retry_pause``), not on every tick.
        """
        settings = self._settings
        if now < self._paused_until:
            return None
        if sources_finished:
            if self._final_completed or final_pending:
                return None
        else:
            if settings.interval <= 0:
                return None
            if pending >= settings.max_concurrent:
                return None
            if now - self._last_trigger < settings.interval:
                return None
            if now - self._last_completed < settings.min_pause:
                return None
        self._last_trigger = now
        return sources_finished

    def poll_due(self, *, now: float, pending: int) -> bool:
        """Whether to read the manual request now (and count this as the read)."""
        if pending or now - self._last_poll < self._settings.trigger_poll_interval:
            return False
        self._last_poll = now
        return True

    def triggered(self, *, now: float) -> None:
        """A checkpoint started (periodic, final or manual)."""
        self._last_trigger = now

    def trigger_failed(self, *, now: float) -> None:
        """No checkpoint could start: hold off for ``trigger_retry_pause``."""
        self._paused_until = now + self._settings.trigger_retry_pause

    def completed(self, *, now: float) -> None:
        self._last_completed = now

    def final_completed(self) -> None:
        """The epoch's final checkpoint completed: no checkpoint is due any more."""
        self._final_completed = True

    def new_epoch(self) -> None:
        """The subtasks restarted: their final checkpoint is still to come."""
        self._final_completed = False
