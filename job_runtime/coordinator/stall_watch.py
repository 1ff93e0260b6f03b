"""When a running job that completes no checkpoint is stuck, not slow.

A function that blocks forever, or a subtask that stopped reading, holds the barrier:
no checkpoint completes, yet every process is alive and the job says Running. The
checkpoint timeout would notice, but it is sized for the slowest honest checkpoint
(ten minutes by default), and ``tolerableFailures`` multiplies it. The watch restarts
sooner, from evidence the attempt gathered itself:

* the window opens when every subtask of the current stage attempt is ready, and
  again at each completed checkpoint, and at each failed one that counts against
  ``tolerableFailures``: a checkpoint that fails (storage away, a declined upload)
  shows that barriers still move, and the failure budget is what decides about it;
  a stall is a job whose checkpoints neither complete nor fail;
* it is ``intervals`` checkpoint intervals (``spec.health.checkpointStallIntervals``,
  each with ``minPause``), or three times the longest checkpoint this driver
  completed, whichever is longer, so a job whose checkpoints are honestly slow is not
  mistaken for a stuck one; and never less than :data:`SHORTEST_WINDOW`, so a pause of
  the machine (a long garbage collection, a slow disk, a busy node) is not either;
* before the attempt's first completed checkpoint it is at least the checkpoint
  timeout: the first checkpoint may follow a long restore or a cold cache, and the
  watch has seen nothing yet to judge by;
* while a sink's output waits for its send (a subtask reports a completed
  checkpoint's interval not yet delivered: a broker or database away, a send that
  blocks for its client's timeout and holds the barrier meanwhile), the sink's own
  bound (``spec.health.sinkStallTimeout``) judges: the subtask reports output that
  waited past it, whether its send fails or hangs, and the job ends as
  ``SinkStalled``, the cause a user can act on, not as a checkpoint stall that
  points at their functions.

Past the window the coordinator fails the job with :class:`CheckpointStalledError`,
whose exit code the supervisor restarts from the latest checkpoint.
"""

from __future__ import annotations

from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.errors import CheckpointStalledError

SLOWEST_FACTOR = 3.0
"""How many times the longest completed checkpoint the window is at least."""
SHORTEST_WINDOW = 30.0
"""Seconds: the least window, whatever the interval (which may be a few milliseconds,
or zero for checkpoints triggered by hand)."""


class StallWatch:
    def __init__(self, *, settings: CheckpointSettings) -> None:
        self._settings = settings
        self._since: float | None = None
        """When the current window opened (``None``: the stage is not running)."""
        self._completed = 0
        self._longest = 0.0

    @property
    def enabled(self) -> bool:
        return self._settings.stall_intervals > 0

    def window(self) -> float:
        settings = self._settings
        window = max(settings.stall_intervals * (settings.interval + settings.min_pause),
                     SLOWEST_FACTOR * self._longest, SHORTEST_WINDOW)
        if not self._completed:
            window = max(window, settings.timeout)
        return window

    def new_epoch(self) -> None:
        """The subtasks restarted: nothing runs until they are ready again."""
        self._since = None

    def running(self, *, now: float) -> None:
        """Every subtask is ready: the window opens (once per stage attempt)."""
        if self._since is None:
            self._since = now

    def completed(self, *, now: float, duration: float) -> None:
        self._completed += 1
        self._longest = max(self._longest, duration)
        if self._since is not None:
            self._since = now

    def failed(self, *, now: float) -> None:
        """A checkpoint failed for a reason the failure budget counts."""
        if self._since is not None:
            self._since = now

    def check(self, *, now: float, sink_waiting: float = 0.0) -> CheckpointStalledError | None:
        """The error that ends the job once the window passed without a checkpoint;
        ``sink_waiting``: how long the oldest output of any sink has waited for its
        send (0: none waits)."""
        if not self.enabled or self._since is None:
            return None
        waited = now - self._since
        window = self.window()
        if waited <= window:
            return None
        if sink_waiting > 0:
            return None
        return CheckpointStalledError(seconds=waited, window=window,
                                      completed=self._completed)
