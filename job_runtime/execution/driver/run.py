"""The driver: resolve the restore point, start Spark and the coordinator, run the stage.

The whole job is ONE Spark barrier stage of P long-running tasks, followed by a
tiny shuffle. The shuffle makes the barrier stage a *ShuffleMapStage*, which
Spark relaunches as a whole when one of its tasks dies (a failed barrier
*ResultStage* is never retried); the relaunched subtasks restore the latest
completed checkpoint. In local mode, relaunches need ``local[N,F]`` with F > 1
attempts, which the driver sets when the master does not say.

:func:`run_driver` takes the driver through its phases, in this order: load the
job's code and pipeline; start Spark in the background; (a warm standby) get warm
and wait for the promotion; accept the restore point; start the coordinator; wait
for Spark; run the barrier stage; end the job as the stage ended.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import ipaddress
import os
import shutil
import socket
import time
from collections.abc import Callable
from typing import Any

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata
from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.file_system import join_uri
from cjob_checkpoint.storage.s3 import S3Config
from cjob_checkpoint.store.completed_store import (
    CheckpointIdCounter,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    JobOutcome,
)
from cjob_spec.exit_codes import ExitCode
from job_runtime.coordinator.coordinator import CheckpointCoordinator
from job_runtime.coordinator.endpoint import CoordinatorEndpoint
from job_runtime.errors import IncompatibleStateError, RestoreError
from job_runtime.execution.config import LOOPBACK, SubtaskConfig
from job_runtime.execution.driver.barrier_stage import BarrierStage
from job_runtime.execution.driver.beacon import start_beacon
from job_runtime.execution.driver.code import JobCodePaths, prepare_job_code, ship_job_code
from job_runtime.execution.driver.compatibility import incompatibilities, without
from job_runtime.execution.driver.driver_settings import DriverSettings
from job_runtime.execution.driver.exit_codes import STARTUP_ERRORS, exit_code
from job_runtime.execution.driver.fence import fenced_instead
from job_runtime.execution.driver.logger import log
from job_runtime.execution.driver.relaunch import RelaunchBudget, run_launches
from job_runtime.execution.driver.restore import (
    RestoreResolution,
    check_sinks,
    record_restore,
    resolve_restore,
)
from job_runtime.execution.driver.scratch import new_code_dir
from job_runtime.execution.driver.spark_start import (
    SparkStarter,
    check_parallelism,
    is_local_master,
    resolve_master,
    stop_spark_context,
)
from job_runtime.execution.driver.standby import ParkedStage, ParkedStageEnded, wait_as_standby
from job_runtime.execution.driver.status_writer import StatusWriter
from job_runtime.execution.driver.store import open_store, open_triggers
from job_runtime.execution.entrypoint import add_python_path, build_pipeline
from job_runtime.execution.operator_descriptors import describe_operators
from job_runtime.execution.stages import StagePlan, plan_stages
from job_runtime.metrics import DriverMetrics
from job_runtime.network.handshake import new_key
from job_runtime.pipeline import Pipeline
from job_runtime.sinks.sink_contract import Sink, sink_job_id
from job_runtime.sources.source_contract import Source
from job_runtime.sources.staging import DriverStaging


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadedJob:
    """The job as the driver loaded it: its code, its pipeline, and that cut into stages."""

    code: JobCodePaths
    pipeline: Pipeline
    source: Source
    sinks: list[tuple[str, Sink]]
    """Every sink by name, the main stream's first."""
    stages: list[StagePlan]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageWiring:
    """How the barrier stage's subtasks reach this driver's coordinator."""

    bind: str
    """Where the coordinator's endpoint listens."""
    key: bytes
    """This driver's key: a relaunched driver's subtasks get a new one, and anything
    left of an earlier attempt can no longer talk to this one."""
    subtask_config: functools.partial[SubtaskConfig]
    """The subtasks' settings, once the endpoint's port (``coordinator_port``) is known."""

    def stage(self, sc: Any, *, port: int, epoch: int,
              staged_inputs: dict[str, str] | None = None) -> BarrierStage:
        """Launch ``epoch`` of the barrier stage, its subtasks reaching the coordinator
        at ``port``; not started yet."""
        return BarrierStage(spark_context=sc, config=self.subtask_config(
            coordinator_port=port, staged_inputs=dict(staged_inputs or {}), epoch=epoch))

    def launcher(self, sc: Any, *, port: int,
                 staged_inputs: dict[str, str] | None = None) -> Callable[[int], BarrierStage]:
        """What starts launch N of the barrier stage: the first launch's and every
        relaunch's, a parked stage's and a running job's alike."""
        def launch(epoch: int) -> BarrierStage:
            launched = self.stage(sc, port=port, epoch=epoch, staged_inputs=staged_inputs)
            launched.start()
            return launched
        return launch


@dataclasses.dataclass(frozen=True, kw_only=True)
class WarmStart:
    """What a warm standby did before its promotion, which the promoted driver keeps."""

    endpoint: CoordinatorEndpoint | None = None
    """The endpoint its parked barrier stage's subtasks registered at, if it parked one."""
    stage: BarrierStage | None = None
    """Its parked barrier stage, already launched."""
    code_shipped: bool = False
    promoted_at: float | None = None


def run_driver(settings: DriverSettings, *, spark: SparkStarter | None = None) -> int:
    """Run the job to its end; returns the process exit code. ``spark``: Spark already
    being started for these settings (``start_early``)."""
    try:
        return _run(settings, spark=spark)
    except STARTUP_ERRORS as exc:
        return exit_code(exc)


def _run(settings: DriverSettings, *, spark: SparkStarter | None) -> int:
    check_parallelism(settings)
    s3 = S3Config.from_env()
    job = _load_job(settings, s3=s3)
    master = resolve_master(settings.master, parallelism=settings.parallelism,
                            task_attempts=settings.task_attempts)
    if spark is None:
        spark = SparkStarter(settings=settings, master=master)
    storage = CheckpointStorage(settings.checkpoint_storage, settings.job_id,
                                fs=get_filesystem(settings.checkpoint_storage, s3=s3))
    wiring = _wire_stage(settings, master=master, job=job, storage=storage, s3=s3)
    warm = WarmStart()
    if settings.is_standby:
        try:
            settings, warm = _stand_by(settings, spark=spark, job=job, wiring=wiring)
        except ParkedStageEnded as exc:
            # Only this standby failed, not the job: say so, not "job failed".
            log.error("%s", exc)
            return exit_code(exc.cause, logged=True)
    start_beacon(settings)
    for name, sink in job.sinks:
        sink.prepare_on_driver(job_id=sink_job_id(settings.job_id, name))
    store, counter = open_store(settings.store, retained=settings.retained,
                                attempt=settings.attempt)
    resolution = _accept_restore(settings, job=job, storage=storage, store=store,
                                 counter=counter, s3=s3)
    metrics = _serve_metrics(settings, resolution=resolution)
    coordinator = _start_coordinator(settings, job=job, storage=storage, store=store,
                                     counter=counter, resolution=resolution, metrics=metrics,
                                     wiring=wiring, warm=warm)
    status = StatusWriter(path=settings.status_file or "", coordinator=coordinator,
                          metrics=metrics, attempt=settings.attempt,
                          fallback_notes=tuple(resolution.notes))
    sc = _wait_for_spark(spark, status=status, warm=warm)
    staging = DriverStaging(uri=_staging(storage), attempt=settings.attempt, store=store)
    outcome = _run_stage(sc, settings=settings, job=job, staging=staging, coordinator=coordinator, status=status,
                         wiring=wiring, warm=warm)
    return _end(outcome, settings=settings, job=job, store=store, coordinator=coordinator,
                status=status, spark_context=sc, s3=s3)


def _load_job(settings: DriverSettings, *, s3: S3Config) -> LoadedJob:
    """Fetch the job's code into a scratch folder of this process, import it, build
    the pipeline and cut it into stages."""
    code_dir = new_code_dir()
    atexit.register(shutil.rmtree, code_dir, ignore_errors=True)
    code = prepare_job_code(settings.python_path, master=settings.master, s3=s3,
                            work_dir=code_dir)
    add_python_path(code.driver_path)
    pipeline = build_pipeline(entrypoint=settings.entrypoint, args=settings.args,
                              name=settings.job_name)
    assert pipeline.source_op is not None and pipeline.sink_op is not None
    return LoadedJob(code=code, pipeline=pipeline, source=pipeline.job_source(),
                     sinks=pipeline.sinks(), stages=plan_stages(pipeline))


def _wire_stage(settings: DriverSettings, *, master: str, job: LoadedJob,
                storage: CheckpointStorage, s3: S3Config) -> StageWiring:
    bind, advertised = _driver_host(master, settings.spark_conf)
    key = new_key()
    config = functools.partial(
        _subtask_config, settings=settings, code=job.code, storage=storage, s3=s3,
        coordinator_host=advertised, key=key, loopback=is_local_master(master))
    return StageWiring(bind=bind, key=key, subtask_config=config)


def _stand_by(settings: DriverSettings, *, spark: SparkStarter, job: LoadedJob,
              wiring: StageWiring) -> tuple[DriverSettings, WarmStart]:
    """A warm standby: everything that does not depend on the attempt or the restore
    point is done now, the rest once the supervisor promotes it. Returns the settings
    of the attempt it took over; raises :class:`ParkedStageEnded`."""
    sc = spark.context()
    ship_job_code(sc, job.code)
    endpoint: CoordinatorEndpoint | None = None
    parked: ParkedStage | None = None
    if not any(source.prepares_on_driver for source in job.pipeline.prepared_sources()):
        endpoint = CoordinatorEndpoint(host=wiring.bind, key=wiring.key)
        # Parking starts the first launch; the relaunches start themselves.
        parked = ParkedStage(wiring.stage(sc, port=endpoint.port, epoch=1),
                             relaunch=wiring.launcher(sc, port=endpoint.port),
                             budget=RelaunchBudget(launches=settings.task_attempts))
    promoted = wait_as_standby(settings=settings, spark_context=sc,
                               parked=None if parked is None or endpoint is None
                               else (parked, endpoint))
    return promoted, WarmStart(endpoint=endpoint,
                               stage=None if parked is None else parked.stage,
                               code_shipped=True, promoted_at=time.time())


def _accept_restore(settings: DriverSettings, *, job: LoadedJob, storage: CheckpointStorage,
                    store: CompletedCheckpointStore, counter: CheckpointIdCounter,
                    s3: S3Config) -> RestoreResolution:
    """Resolve the checkpoint to start from, check it, let the sink withdraw output
    newer than it, and record the restore in the store."""
    resolution = resolve_restore(settings=settings, storage=storage, store=store)
    restored, metadata = resolution.checkpoint, resolution.metadata
    for note in resolution.notes:
        log.warning("%s", note)
    if restored is not None:
        log.info("restoring checkpoint %d from %s", restored.checkpoint_id,
                 restored.metadata_path)
        counter.set_count(restored.checkpoint_id + 1)
        if metadata is not None and metadata.max_parallelism != settings.max_parallelism:
            raise RestoreError(pointer=restored.metadata_path,
                               problem="maxParallelism differs from the checkpoint's "
                                       f"{metadata.max_parallelism}; it cannot change")
        if metadata is not None:
            check_sinks(metadata, sinks={name for name, _ in job.sinks},
                        pointer=restored.metadata_path)
            resolution = _fit_state(settings, resolution=resolution, metadata=metadata,
                                    job=job, pointer=restored.metadata_path)
        for name, sink in job.sinks:
            sink.prepare_restore(checkpoint_id=restored.checkpoint_id,
                                 job_id=sink_job_id(settings.job_id, name), s3=s3)
            if resolution.origin_job is not None:
                sink.prepare_restore(checkpoint_id=restored.checkpoint_id,
                                     job_id=sink_job_id(resolution.origin_job, name), s3=s3)
    # Only once the checkpoint is accepted: a refused restore must not be reported.
    record_restore(store=store, attempt=settings.attempt, resolution=resolution)
    return resolution


def _fit_state(settings: DriverSettings, *, resolution: RestoreResolution,
               metadata: CheckpointMetadata, job: LoadedJob,
               pointer: str) -> RestoreResolution:
    """The resolution with state the pipeline no longer maps left out when the job
    allows it; otherwise such state fails the attempt (``IncompatibleState``)."""
    found = incompatibilities(metadata, describe_operators(job.stages))
    if not found:
        return resolution
    problems = tuple(problem.describe() for problem in found)
    if not settings.allow_non_restored_state:
        raise IncompatibleStateError(pointer=pointer, problems=problems)
    for problem in problems:
        log.warning("not restoring state the pipeline no longer maps "
                    "(spec.restore.allowNonRestoredState): %s", problem)
    return dataclasses.replace(resolution, metadata=without(metadata, found), dropped=problems)


def _serve_metrics(settings: DriverSettings, *, resolution: RestoreResolution) -> DriverMetrics:
    metrics = DriverMetrics(job=settings.job_name)
    if settings.metrics_port:
        metrics.serve(settings.metrics_port)
    if resolution.checkpoint is not None:
        metrics.restored.labels(settings.job_name).set(resolution.checkpoint.checkpoint_id)
    return metrics


def _start_coordinator(settings: DriverSettings, *, job: LoadedJob, storage: CheckpointStorage,
                       store: CompletedCheckpointStore, counter: CheckpointIdCounter,
                       resolution: RestoreResolution, metrics: DriverMetrics,
                       wiring: StageWiring, warm: WarmStart) -> CheckpointCoordinator:
    """The coordinator, answering at the parked stage's endpoint if there is one: a
    parked stage's subtasks get their answer as soon as the coordinator exists."""

    def on_complete(completed: CompletedCheckpoint, stats: Any) -> None:
        metrics.checkpoint_completed(checkpoint_id=completed.checkpoint_id,
                                     timestamp=completed.timestamp, size=completed.size_bytes,
                                     stats=stats)

    return CheckpointCoordinator(
        job_id=settings.job_id, attempt=settings.attempt, parallelism=settings.parallelism,
        max_parallelism=settings.max_parallelism, stages=len(job.stages), storage=storage,
        store=store, counter=counter, settings=settings.checkpoint,
        initial_restore=resolution.metadata, initial_restore_pointer=resolution.checkpoint,
        on_complete=on_complete, host=wiring.bind, key=wiring.key, endpoint=warm.endpoint,
        triggers=open_triggers(settings.store), pipeline=describe_operators(job.stages))


def _wait_for_spark(spark: SparkStarter, *, status: StatusWriter, warm: WarmStart) -> Any:
    """The started ``SparkContext``, its start's milestones in the status timeline."""
    sc = spark.context()
    status.timeline["sparkStartingAt"] = spark.started_at
    status.timeline["sparkReadyAt"] = spark.ready_at or time.time()
    if warm.promoted_at is not None:
        status.timeline["promotedAt"] = warm.promoted_at
    return sc


def _run_stage(sc: Any, *, settings: DriverSettings, job: LoadedJob, staging: DriverStaging,
               coordinator: CheckpointCoordinator, status: StatusWriter, wiring: StageWiring,
               warm: WarmStart) -> BaseException | None:
    """Launch the barrier stage (unless a standby parked it), relaunch it after failed
    launches the budget allows, and wait for its end; what ended the job, or ``None``
    when it finished. The subtasks read the inputs the source's preparation published
    (a parked stage's source prepares nothing)."""
    try:
        # Before any Spark job: the source's preparation may already run the job's code.
        if not warm.code_shipped:
            ship_job_code(sc, job.code)
        for source in job.pipeline.prepared_sources():
            source.prepare_on_driver(spark_context=sc, staging=staging)
        launch = wiring.launcher(sc, port=coordinator.port, staged_inputs=dict(staging.inputs))
        stage = warm.stage or launch(1)
        assert stage.launched_at is not None
        status.timeline["stageLaunchedAt"] = stage.launched_at
        return run_launches(stage, relaunch=launch, coordinator=coordinator,
                            budget=RelaunchBudget(launches=settings.task_attempts))
    finally:
        coordinator.stop()


def _end(outcome: BaseException | None, *, settings: DriverSettings, job: LoadedJob,
         store: CompletedCheckpointStore, coordinator: CheckpointCoordinator,
         status: StatusWriter, spark_context: Any, s3: S3Config) -> int:
    """Finish the job's output and the store's records, or report what failed it; the
    exit code."""
    if outcome is None and coordinator.suspended.is_set():
        # Suspended, not finished: the subtasks ended only after every sink committed
        # the suspend checkpoint, which stays for the resume; the sink's staging area
        # is the next attempt's, so the job's end (finish_job) does not run.
        store.shutdown(JobOutcome.SUSPENDED, discard=coordinator.commits.shared_state.discard)
        status.stop(state="suspended")
        stop_spark_context(spark_context)
        latest = coordinator.latest
        log.info("job suspended after checkpoint %s, its output committed",
                 "-" if latest is None else latest.checkpoint_id)
        return ExitCode.SUSPENDED
    if outcome is None:
        for name, sink in job.sinks:
            sink.finish_job(job_id=sink_job_id(settings.job_id, name), s3=s3)
        store.shutdown(JobOutcome.FINISHED, discard=coordinator.commits.shared_state.discard)
        latest = coordinator.latest
        coordinator.commits.delete_unreferenced_shared(0 if latest is None else latest.checkpoint_id)
        status.stop(state="finished")
        stop_spark_context(spark_context)
        log.info("job finished: %d records written, %d checkpoints completed",
                 coordinator.snapshot_progress()["recordsOut"], coordinator.stats.completed)
        return ExitCode.FINISHED
    outcome = fenced_instead(outcome, store=store, attempt=settings.attempt)
    status.stop(state="failed")
    try:
        stop_spark_context(spark_context)
    except Exception:
        pass
    return exit_code(outcome)


def _driver_host(master: str, conf: dict[str, str],
                 environ: dict[str, str] | None = None) -> tuple[str, str]:
    """(bind address, advertised address) of the coordinator's endpoint.

    Local mode binds loopback: every subtask runs on this machine. Elsewhere the
    endpoint binds the pod's own address (the bind address the operator gives
    Spark, else ``POD_IP``, else what the host name resolves to), never every
    interface, and advertises ``spark.driver.host`` (the headless service).
    """
    if is_local_master(master):
        return LOOPBACK, LOOPBACK
    env = os.environ if environ is None else environ
    for candidate in (conf.get("spark.driver.bindAddress"), env.get("POD_IP")):
        if candidate and _is_ip(candidate):
            bind = candidate
            break
    else:
        bind = socket.gethostbyname(socket.gethostname())
    advertised = conf.get("spark.driver.host") or bind
    return bind, advertised


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _staging(storage: CheckpointStorage) -> str:
    """Where sources stage their input (a DataFrame's rows), beside the checkpoints."""
    return join_uri(storage.job_dir, "staging")


def _subtask_config(*, settings: DriverSettings, code: JobCodePaths, storage: CheckpointStorage,
                    s3: S3Config, coordinator_host: str, coordinator_port: int, key: bytes,
                    loopback: bool, staged_inputs: dict[str, str] | None = None,
                    epoch: int = 1) -> SubtaskConfig:
    return SubtaskConfig(
        job_id=settings.job_id, job_name=settings.job_name, entrypoint=settings.entrypoint,
        python_path=code.executor_path, args=settings.args, parallelism=settings.parallelism,
        max_parallelism=settings.max_parallelism, coordinator_host=coordinator_host,
        coordinator_port=coordinator_port, checkpoint_root=settings.checkpoint_storage,
        staging_uri=_staging(storage), mode=settings.mode, unaligned=settings.unaligned,
        credits=settings.credits, s3=dataclasses.asdict(s3) if s3.to_env() else None, key=key,
        loopback=loopback, state_backend=settings.state_backend, state_dir=settings.state_dir,
        sink_stall_timeout=settings.sink_stall_timeout,
        staged_inputs=dict(staged_inputs or {}), epoch=epoch)
