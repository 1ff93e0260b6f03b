"""A warm standby driver: Spark started, job code loaded, waiting to take over an attempt.

Most of a driver restart is not the restore but the start: a new process, its imports,
the JVM and the scheduler, the first Spark job's Python workers. A standby pays all of
that while the active driver runs, then waits for the supervisor's promotion
(:mod:`cjob_spec.standby_signal`). The supervisor promotes it only after advancing the
store's fence to the new attempt, so the driver being replaced (if it still lives)
can no longer commit a checkpoint; the standby itself never touches the store before
it is promoted, and everything it does afterwards is what any driver of that attempt
does: resolve the restore point, start the coordinator, launch the barrier stage.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from cjob_spec.exit_codes import ExitCode
from cjob_spec.standby_signal import (
    StandbyPromotion,
    StandbyReady,
    StandbySignalError,
    read_promotion,
    ready_path,
    write_signal,
)
from job_runtime.errors import ConfigurationError
from job_runtime.execution.settings import DriverSettings

log = logging.getLogger("job_runtime.driver")

POLL_SECONDS = 0.01
"""How often a waiting standby looks for its promotion: a stat call, cheap enough to
make the wait a negligible part of a takeover."""
REWARM_SECONDS = 20.0
"""How often a waiting standby runs its warm-up again: Spark stops Python workers that
were idle for a minute, and the warm-up is what keeps them (reused) alive."""


def warm_up(spark_context: Any, *, parallelism: int) -> None:
    """Run one small job across ``parallelism`` tasks that imports the subtask's code.

    The first job of a new ``SparkContext`` starts the Python worker daemon, and loads
    and compiles the scheduler's and the task serializer's code paths. Its workers
    import what a subtask runs (the runtime, Arrow, pandas) and stay in Spark's pool
    of reusable workers, so the promoted driver's barrier stage starts in them
    instead of forking and importing anew.
    """
    spark_context.parallelize(range(parallelism), parallelism).map(_import_subtask).collect()


def _import_subtask(value: int) -> int:
    # Loaded for the barrier stage, which runs in these workers.
    for module in ("job_runtime.execution.subtask", "job_runtime.execution.tasks"):
        importlib.import_module(module)
    return value


def wait_for_promotion(path: str, *, rewarm: Callable[[], None]) -> StandbyPromotion:
    """The promotion written to ``path``, once there is one; ``rewarm`` runs every
    :data:`REWARM_SECONDS` meanwhile.

    A standby whose supervisor is gone (its parent process changed) can never be
    promoted: it exits 0 rather than hold a JVM forever. A promotion this release
    cannot read is a configuration error, never a guess at the attempt.
    """
    parent = os.getppid()
    warmed = time.monotonic()
    while True:
        try:
            promotion = read_promotion(path)
        except StandbySignalError as exc:
            raise ConfigurationError(setting="--standby", problem=str(exc)) from None
        if promotion is not None:
            return promotion
        if os.getppid() != parent:
            log.info("standby: the supervisor that started it is gone; exiting")
            raise SystemExit(ExitCode.FINISHED)
        if time.monotonic() - warmed >= REWARM_SECONDS:
            rewarm()
            warmed = time.monotonic()
        time.sleep(POLL_SECONDS)


def wait_as_standby(*, settings: DriverSettings, spark_context: Any) -> DriverSettings:
    """Warm up, say so, wait for the promotion; the settings of the attempt taken over."""
    assert settings.standby_file is not None
    warm_up(spark_context, parallelism=settings.parallelism)
    write_signal(ready_path(settings.standby_file),
                 StandbyReady(pid=os.getpid(), ready_at=time.time()))
    log.info("standby ready: waiting for a promotion in %s", settings.standby_file)
    promotion = wait_for_promotion(
        settings.standby_file,
        rewarm=lambda: warm_up(spark_context, parallelism=settings.parallelism))
    log.info("promoted to attempt %d (restore: %s)", promotion.attempt, promotion.restore)
    return dataclasses.replace(settings, attempt=promotion.attempt, restore=promotion.restore,
                               status_file=promotion.status_file or settings.status_file,
                               standby_file=None)
