"""A warm standby driver: Spark started, barrier stage parked, waiting to take over.

Most of a driver restart is not the restore but the start: a new process, its imports,
the JVM and the scheduler, the barrier stage's scheduling and its Python workers. A
standby pays all of that while the active driver runs. It launches its own barrier
stage, whose subtasks connect, load the job's code, register, and then wait for an
answer that only the promotion allows (:mod:`job_runtime.coordinator.endpoint`).

The promotion comes from the supervisor (:mod:`cjob_spec.standby_signal`): a file
``cjob run`` writes, or the annotation the operator sets on the job's checkpoint
ConfigMap. The supervisor promotes it only after advancing the store's fence to the
new attempt, so the driver being replaced (if it still lives) can no longer commit a
checkpoint. The standby itself never touches the store before it is promoted. What it
does afterwards is what any driver of that attempt does: resolve the restore point and
start the coordinator, which answers the parked subtasks with the attempt and the
checkpoint to restore.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from cjob_spec.exit_codes import ExitCode
from cjob_spec.standby_signal import (
    SUPERVISOR_PID_ENV,
    StandbyPromotion,
    StandbyReady,
    StandbySignalError,
    read_promotion,
    ready_path,
    write_signal,
)
from job_runtime.coordinator.endpoint import CoordinatorEndpoint
from job_runtime.errors import ConfigurationError
from job_runtime.execution.driver.active_watch import ActiveDriverWatch
from job_runtime.execution.driver.barrier_stage import BarrierStage, LaunchFailed
from job_runtime.execution.driver.driver_settings import DriverSettings
from job_runtime.execution.driver.logger import log
from job_runtime.execution.driver.relaunch import RelaunchBudget
from job_runtime.execution.subtask import SUBTASK_MODULES

POLL_SECONDS = 0.01
"""How often a waiting standby looks for its promotion: a stat call, cheap enough to
make the wait a negligible part of a takeover."""
WAIT_SLICE_SECONDS = 20.0
"""How often a waiting standby looks up from the wait: to run its warm-up again (Spark
stops Python workers idle for a minute, and the warm-up keeps them alive), or to check
that Spark has not given up on its parked stage. Each slice of a ConfigMap wait is one
watch request, so a slice is long."""
PARKED_CHECK_SECONDS = 0.5
"""How often a standby parking its stage checks that Spark has not given up on it."""


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
    for module in SUBTASK_MODULES:
        importlib.import_module(module)
    return value


class PromotionSource(Protocol):
    """Where a standby's promotion comes from."""

    @property
    def where(self) -> str: ...

    def wait(self, *, seconds: float) -> StandbyPromotion | None:
        """The promotion, if there is one now or within about ``seconds``."""


class FilePromotionSource:
    """The promotion file ``cjob run`` writes, looked for every :data:`POLL_SECONDS`.

    A standby whose supervisor is gone (its parent is no longer the process that
    started it) can never be promoted: it exits 0 rather than hold a JVM forever.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._parent = supervisor_pid()

    @property
    def where(self) -> str:
        return self.path

    def wait(self, *, seconds: float) -> StandbyPromotion | None:
        deadline = time.monotonic() + seconds
        while True:
            promotion = read_promotion(self.path)
            if promotion is not None:
                return promotion
            if os.getppid() != self._parent:
                log.info("standby: the supervisor that started it is gone; exiting")
                raise SystemExit(ExitCode.FINISHED)
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_SECONDS)


def supervisor_pid() -> int:
    """The process that started this standby: the one ``cjob run`` names
    (:data:`SUPERVISOR_PID_ENV`), else this process's parent now."""
    named = os.environ.get(SUPERVISOR_PID_ENV, "")
    return int(named) if named.isdigit() else os.getppid()


def await_promotion(source: PromotionSource, *, meanwhile: Callable[[], None],
                    setting: str = "--standby") -> StandbyPromotion:
    """The promotion ``source`` delivers, once there is one; ``meanwhile`` runs every
    :data:`WAIT_SLICE_SECONDS` until then (and may raise to end the wait).

    A promotion this release cannot read is a configuration error (of ``setting``),
    never a guess at the attempt.
    """
    while True:
        try:
            promotion = source.wait(seconds=WAIT_SLICE_SECONDS)
        except StandbySignalError as exc:
            raise ConfigurationError(setting=setting, problem=str(exc)) from None
        if promotion is not None:
            return promotion
        meanwhile()


def wait_for_promotion(path: str, *, rewarm: Callable[[], None]) -> StandbyPromotion:
    """The promotion written to the file ``path`` (see :class:`FilePromotionSource`)."""
    return await_promotion(FilePromotionSource(path), meanwhile=rewarm)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StandbyChannel:
    """How a standby hears of its promotion and says it is ready."""

    source: PromotionSource
    setting: str
    """The flag that chose the channel, named in configuration errors."""
    ready_file: str | None
    """Where readiness is written (``None``: nowhere)."""
    watch: ActiveDriverWatch | None = None
    """The watch over the active driver, which reports it lost (``--beacon-host``)."""


def standby_channel(settings: DriverSettings) -> StandbyChannel:
    """``--standby FILE`` (``cjob run``) or ``--standby-pod POD`` (the operator)."""
    if settings.standby_file is not None:
        return StandbyChannel(source=FilePromotionSource(settings.standby_file),
                              setting="--standby",
                              ready_file=str(ready_path(settings.standby_file)))
    pod = settings.standby_pod
    assert pod is not None
    namespace, name = settings.store.configmap(setting="--standby-pod")
    from cjob_checkpoint.store.configmap_beacon import beacon_in, open_beacon_records
    from cjob_checkpoint.store.configmap_promotion import open_promotion_watch

    driver_watch = None
    on_annotations = None
    if settings.beacon_host is not None:
        records = open_beacon_records(namespace=namespace, store=name)
        driver_watch = ActiveDriverWatch(pod=pod, report=records.report_lost)

        def on_annotations(annotations: Mapping[str, str]) -> None:
            address = beacon_in(annotations)
            if address is not None:
                driver_watch.offer(address)

    source = open_promotion_watch(namespace=namespace, name=name, pod=pod,
                                  min_attempt=settings.attempt, on_annotations=on_annotations)
    ready_file = settings.standby_ready_file
    if ready_file is not None:
        # A relative name is in the temporary directory: a container's own /tmp, where
        # the pod's readiness probe looks.
        ready_file = os.path.join(tempfile.gettempdir(), ready_file)
    return StandbyChannel(source=source, setting="--standby-pod", ready_file=ready_file,
                          watch=driver_watch)


class ParkedStageEnded(Exception):
    """The standby's barrier stage ended before the promotion, and may not be launched
    again."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"the standby's barrier stage ended before a promotion: {cause}")
        self.cause = cause


class ParkedStage:
    """The standby's launch of the barrier stage, launched again (through ``relaunch``)
    when it fails before the promotion, as long as ``budget`` allows: a lost executor
    costs the standby a relaunch, not its place."""

    def __init__(self, first: BarrierStage, *, relaunch: Callable[[int], BarrierStage],
                 budget: RelaunchBudget) -> None:
        self.stage = first
        self._relaunch = relaunch
        self._budget = budget

    def check(self) -> None:
        """Relaunch an ended launch, or raise :class:`ParkedStageEnded`."""
        if not self.stage.ended:
            return
        failure = self.stage.spark_failure()
        if failure is None:
            raise ParkedStageEnded(RuntimeError("it finished without a coordinator"))
        if not (isinstance(failure, LaunchFailed)
                and self._budget.relaunch_after(ran_seconds=self.stage.ran_seconds)):
            raise ParkedStageEnded(failure)
        log.warning("standby: its parked barrier stage failed (%s); launching it again",
                    failure.summary)
        self.stage = self._relaunch(self.stage.epoch + 1)


def park_stage(parked: ParkedStage, *, endpoint: CoordinatorEndpoint,
               parallelism: int) -> None:
    """Launch the barrier stage and wait until every subtask waits for the coordinator.

    A parked subtask has connected, loaded the job's code and registered; what is left
    after the promotion is the coordinator's answer, the restore and the channels.
    """
    parked.stage.start()
    while not endpoint.wait_parked(parallelism, timeout=PARKED_CHECK_SECONDS):
        parked.check()


def wait_as_standby(*, settings: DriverSettings, spark_context: Any,
                    parked: tuple[ParkedStage, CoordinatorEndpoint] | None) -> DriverSettings:
    """Get warm, say so, wait for the promotion; the settings of the attempt taken over.

    With ``parked`` (a stage and the endpoint its subtasks register at), the standby
    launches the barrier stage now and is ready once every subtask is parked; Spark
    keeps the busy Python workers, so nothing needs warming again. Without it (a
    source that prepares on the driver, whose Spark job needs the task slots) the
    standby runs a warm-up job, and runs it again while it waits.
    """
    channel = standby_channel(settings)
    meanwhile: Callable[[], None]
    if parked is None:
        warm_up(spark_context, parallelism=settings.parallelism)
        meanwhile = functools.partial(warm_up, spark_context, parallelism=settings.parallelism)
    else:
        stage, endpoint = parked
        park_stage(stage, endpoint=endpoint, parallelism=settings.parallelism)
        meanwhile = stage.check
    if channel.ready_file is not None:
        write_signal(channel.ready_file, StandbyReady(pid=os.getpid(), ready_at=time.time()))
    log.info("standby ready%s: waiting for a promotion in %s",
             "" if parked is None else ", its barrier stage parked", channel.source.where)
    if channel.watch is not None:
        channel.watch.start()
    try:
        promotion = await_promotion(channel.source, setting=channel.setting,
                                    meanwhile=meanwhile)
    finally:
        if channel.watch is not None:
            channel.watch.stop()
    log.info("promoted to attempt %d (restore: %s)", promotion.attempt, promotion.restore)
    return dataclasses.replace(settings, attempt=promotion.attempt, restore=promotion.restore,
                               status_file=promotion.status_file or settings.status_file,
                               standby_file=None, standby_pod=None)
