"""One launch of the job's Spark barrier stage, run from a thread of the driver.

Starting a launch and waiting for its end are two steps: an active driver takes
them one after the other, a warm standby starts the first launch before it is
promoted (its subtasks wait for the coordinator's answer to their registration) and
waits for the end only once it is the attempt's driver.

A launch is P long-running tasks whose Spark job ends with them: a barrier
*ResultStage*, which Spark never retries. When a subtask dies the launch fails as a
whole and the driver launches the stage again (:mod:`relaunch`), numbering each
launch in the subtasks' settings: the subtasks of a relaunch know their epoch from
the start and meet at the coordinator, instead of in Spark's ``allGather``, which
checks for its answer once a second.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from typing import Any, Protocol

from job_runtime.errors import EntrypointError, UserCodeError
from job_runtime.execution.config import SubtaskConfig
from job_runtime.execution.subtask.runtime import run_subtask

_EXECUTOR_ENTRYPOINT_ERROR = re.compile(r"EntrypointError: entrypoint '([^']*)': ([^\n]*)")


class FailureSource(Protocol):
    """What the stage watches while it runs: the coordinator's verdict."""

    failed_event: threading.Event
    failure: BaseException | None


class BarrierStage:
    def __init__(self, *, spark_context: Any, config: SubtaskConfig) -> None:
        self._sc = spark_context
        self._config = config
        self._thread = threading.Thread(target=self._job, daemon=True, name="spark-job")
        self._ended = threading.Event()
        self._error: BaseException | None = None
        self.launched_at: float | None = None
        """Wall-clock time the stage's Spark job was submitted."""
        self.ended_at: float | None = None

    @property
    def epoch(self) -> int:
        return self._config.epoch

    @property
    def ran_seconds(self) -> float:
        """From the launch to its end (or to now, while it runs)."""
        if self.launched_at is None:
            return 0.0
        return (self.ended_at or time.time()) - self.launched_at

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    @property
    def ended(self) -> bool:
        return self.started and not self._thread.is_alive()

    def start(self) -> None:
        self.launched_at = time.time()
        self._thread.start()

    def spark_failure(self) -> BaseException | None:
        """Why the launch failed, once it has; ``None`` while it runs or after it
        succeeded."""
        if not self.ended or self._error is None:
            return None
        return _spark_failure(self._error)

    def wait(self, *, coordinator: FailureSource) -> BaseException | None:
        """Wait for the end of the started stage; ``None`` on success, else why the job
        failed.

        A failure the coordinator declares (a user error, too many failed checkpoints,
        a fence) cancels the stage at once instead of waiting for Spark to notice.
        """
        if not self.started:
            raise RuntimeError("the barrier stage was never started")
        # Whichever comes first: the job's end (noticed within a few milliseconds, since
        # a bounded job's run ends there) or the coordinator's verdict.
        while not self._ended.wait(0.01):
            if coordinator.failed_event.is_set():
                self._sc.cancelAllJobs()
                self._thread.join(timeout=60)
                return coordinator.failure
        self._thread.join()
        return coordinator.failure or self.spark_failure()

    def _job(self) -> None:
        parallelism = self._config.parallelism
        try:
            rdd = self._sc.parallelize(range(parallelism), parallelism)
            # The subtasks' summaries are not used: collect() is what runs the job.
            rdd.barrier().mapPartitions(functools.partial(run_subtask, self._config)).collect()
        except BaseException as exc:
            self._error = exc
        finally:
            self.ended_at = time.time()
            self._ended.set()


def _spark_failure(exc: BaseException) -> BaseException:
    text = str(exc)
    missing = _EXECUTOR_ENTRYPOINT_ERROR.search(text)
    if missing is not None:
        # The executors cannot import the job (its code is not in their image and
        # was not shipped): as permanent as on the driver, and far clearer than
        # Spark's own summary.
        return EntrypointError(entrypoint=missing.group(1),
                               problem=f"{missing.group(2).strip()} on an executor")
    marker = "UserCodeError"
    if marker in text:
        return UserCodeError(operator="?", subtask=-1, details=text[-4000:])
    return LaunchFailed(text.splitlines()[0] if text else type(exc).__name__)


class LaunchFailed(RuntimeError):
    """A launch of the barrier stage failed for a reason a relaunch may not meet again:
    a subtask died, an executor was lost."""

    def __init__(self, summary: str) -> None:
        super().__init__(f"a launch of the barrier stage failed: {summary}")
        self.summary = summary
