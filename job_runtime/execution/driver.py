"""The driver: resolve the restore point, start Spark and the coordinator, run the stage.

The whole job is ONE Spark barrier stage of P long-running tasks, followed by a
tiny shuffle. The shuffle makes the barrier stage a *ShuffleMapStage*, which
Spark relaunches as a whole when one of its tasks dies (a failed barrier
*ResultStage* is never retried); the relaunched subtasks restore the latest
completed checkpoint. In local mode, relaunches need ``local[N,F]`` with F > 1
attempts, which the driver sets when the master does not say.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import ipaddress
import logging
import os
import re
import shutil
import socket
import threading
import time
from typing import Any

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.storage.filesystem import S3Config, get_filesystem, join_uri
from cjob_checkpoint.store.base import (
    CheckpointIdCounter,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    JobOutcome,
)
from cjob_checkpoint.store.triggers import FileTriggerSource, TriggerSource
from cjob_spec.driver_beacon import BeaconAddress
from cjob_spec.exit_codes import ExitCode
from job_runtime.coordinator.coordinator import CheckpointCoordinator
from job_runtime.coordinator.endpoint import CoordinatorEndpoint
from job_runtime.errors import ConfigurationError, RestoreError
from job_runtime.execution.barrier_stage import BarrierStage
from job_runtime.execution.beacon import DriverBeacon
from job_runtime.execution.code import prepare_job_code, ship_job_code
from job_runtime.execution.config import SubtaskConfig
from job_runtime.execution.entrypoint import add_python_path, build_pipeline
from job_runtime.execution.exit_codes import (
    STARTUP_ERRORS,
    exit_code,
)
from job_runtime.execution.restore import record_restore, resolve_restore
from job_runtime.execution.scratch import new_code_dir
from job_runtime.execution.settings import DriverSettings
from job_runtime.execution.spark_start import SparkStarter
from job_runtime.execution.stages import plan_stages
from job_runtime.execution.standby import ParkedStageEnded, configmap_store, wait_as_standby
from job_runtime.execution.status_writer import StatusWriter
from job_runtime.metrics import DriverMetrics
from job_runtime.network.handshake import new_key

log = logging.getLogger("job_runtime.driver")

_LOCAL = re.compile(r"^local\[(\*|\d+)(?:,(\d+))?\]$")


def resolve_master(master: str, *, parallelism: int, task_attempts: int) -> str:
    """``local[N]`` becomes ``local[N,F]`` so Spark relaunches a crashed barrier stage."""
    match = _LOCAL.match(master)
    if not match:
        return master
    threads = os.cpu_count() or 1 if match.group(1) == "*" else int(match.group(1))
    if threads < parallelism:
        raise ConfigurationError(
            setting="spark.master",
            problem=f"{master} offers {threads} task slots but parallelism is {parallelism}; "
                    f"a barrier stage needs all subtasks at once (use local[{parallelism}])")
    attempts = int(match.group(2)) if match.group(2) else task_attempts
    return f"local[{threads},{attempts}]"


def open_triggers(settings: DriverSettings) -> TriggerSource | None:
    """Where manual checkpoint requests for this driver arrive, if anywhere."""
    kind, _, where = settings.store.partition(":")
    if kind == "file":
        return FileTriggerSource(where)
    if kind == "configmap":
        try:
            from cjob_checkpoint.store.configmap_triggers import open_configmap_triggers
        except ImportError:
            return None
        namespace, _, name = where.partition("/")
        return open_configmap_triggers(namespace=namespace, name=name)
    return None


def open_store(settings: DriverSettings) -> tuple[CompletedCheckpointStore, CheckpointIdCounter]:
    kind, _, where = settings.store.partition(":")
    if kind == "file":
        from cjob_checkpoint.store.file import FileCheckpointIdCounter, FileCheckpointStore

        os.makedirs(where, exist_ok=True)
        return (FileCheckpointStore(where, retained=settings.retained, attempt=settings.attempt),
                FileCheckpointIdCounter(where, attempt=settings.attempt))
    if kind == "memory":
        from cjob_checkpoint.store.memory import (
            InMemoryCheckpointIdCounter,
            InMemoryCheckpointStore,
        )

        return InMemoryCheckpointStore(retained=settings.retained), InMemoryCheckpointIdCounter()
    if kind == "configmap":
        from cjob_checkpoint.store.configmap import open_configmap_store

        namespace, _, name = where.partition("/")
        return open_configmap_store(namespace=namespace, name=name, retained=settings.retained,
                                    attempt=settings.attempt)
    raise ConfigurationError(setting="--store",
                             problem=f"expected file:DIR, memory: or configmap:NS/NAME, "
                                     f"got {settings.store!r}")


def is_local_master(master: str) -> bool:
    return master.startswith("local")


def _driver_host(master: str, conf: dict[str, str],
                 environ: dict[str, str] | None = None) -> tuple[str, str]:
    """(bind address, advertised address) of the coordinator's endpoint.

    Local mode binds loopback: every subtask runs on this machine. Elsewhere the
    endpoint binds the pod's own address (the bind address the operator gives
    Spark, else ``POD_IP``, else what the host name resolves to), never every
    interface, and advertises ``spark.driver.host`` (the headless service).
    """
    if is_local_master(master):
        return "127.0.0.1", "127.0.0.1"
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


def run_driver(settings: DriverSettings) -> int:
    """Run the job to its end; returns the process exit code."""
    try:
        return _run(settings)
    except STARTUP_ERRORS as exc:
        return exit_code(exc)


def _run(settings: DriverSettings) -> int:
    if settings.parallelism < 1 or settings.parallelism > settings.max_parallelism:
        raise ConfigurationError(setting="--parallelism",
                                 problem=f"must be within 1..{settings.max_parallelism}")
    s3 = S3Config.from_env()
    code_dir = new_code_dir()
    atexit.register(shutil.rmtree, code_dir, ignore_errors=True)
    code = prepare_job_code(settings.python_path, master=settings.master, s3=s3,
                            work_dir=code_dir)
    add_python_path(code.driver_path)
    pipeline = build_pipeline(entrypoint=settings.entrypoint, args=settings.args,
                              name=settings.job_name)
    assert pipeline.source_op is not None and pipeline.sink_op is not None
    stages = plan_stages(pipeline)
    master = resolve_master(settings.master, parallelism=settings.parallelism,
                            task_attempts=settings.task_attempts)
    spark = SparkStarter(settings=settings, master=master)
    storage = CheckpointStorage(settings.checkpoint_storage, settings.job_id,
                                fs=get_filesystem(settings.checkpoint_storage, s3=s3))
    bind, advertised = _driver_host(master, settings.spark_conf)
    # One key per driver process: a relaunched driver's subtasks get a new one, and
    # anything left of an earlier attempt can no longer talk to this one.
    key = new_key()
    subtasks = functools.partial(
        _subtask_config, settings=settings, code=code, storage=storage, s3=s3,
        coordinator_host=advertised, key=key, loopback=is_local_master(master))
    endpoint: CoordinatorEndpoint | None = None
    stage: BarrierStage | None = None
    shipped = False
    promoted_at: float | None = None
    if settings.is_standby:
        # A warm standby: everything that does not depend on the attempt or the
        # restore point is done now, the rest once the supervisor promotes it.
        sc = spark.context()
        ship_job_code(sc, code)
        shipped = True
        parked = None
        if not pipeline.source_op.prepares_on_driver:
            endpoint = CoordinatorEndpoint(host=bind, key=key)
            stage = BarrierStage(spark_context=sc, config=subtasks(coordinator_port=endpoint.port))
            parked = (stage, endpoint)
        try:
            settings = wait_as_standby(settings=settings, spark_context=sc, parked=parked)
        except ParkedStageEnded as exc:
            # Only this standby failed, not the job: say so, not "job failed".
            log.error("%s", exc)
            return exit_code(exc.cause, logged=True)
        promoted_at = time.time()
    _start_beacon(settings)
    store, counter = open_store(settings)
    resolution = resolve_restore(settings=settings, storage=storage, store=store)
    restored, metadata, notes = resolution.checkpoint, resolution.metadata, resolution.notes
    for note in notes:
        log.warning("%s", note)
    if restored is not None:
        log.info("restoring checkpoint %d from %s", restored.checkpoint_id,
                 restored.metadata_path)
        counter.set_count(restored.checkpoint_id + 1)
        if metadata is not None and metadata.max_parallelism != settings.max_parallelism:
            raise RestoreError(pointer=restored.metadata_path,
                               problem="maxParallelism differs from the checkpoint's "
                                       f"{metadata.max_parallelism}; it cannot change")
        pipeline.sink_op.prepare_restore(checkpoint_id=restored.checkpoint_id,
                                         job_id=settings.job_id, s3=s3)
        if resolution.origin_job is not None:
            pipeline.sink_op.prepare_restore(checkpoint_id=restored.checkpoint_id,
                                             job_id=resolution.origin_job, s3=s3)
    # Only once the checkpoint is accepted: a refused restore must not be reported.
    record_restore(store=store, attempt=settings.attempt, resolution=resolution)

    metrics = DriverMetrics(job=settings.job_name)
    if settings.metrics_port:
        metrics.serve(settings.metrics_port)
    if restored is not None:
        metrics.restored.labels(settings.job_name).set(restored.checkpoint_id)

    def on_complete(completed: CompletedCheckpoint, stats: Any) -> None:
        metrics.checkpoint_completed(checkpoint_id=completed.checkpoint_id,
                                     timestamp=completed.timestamp, size=completed.size_bytes,
                                     stats=stats)

    # A parked stage's subtasks get their answer as soon as the coordinator exists.
    coordinator = CheckpointCoordinator(
        job_id=settings.job_id, attempt=settings.attempt, parallelism=settings.parallelism,
        max_parallelism=settings.max_parallelism, stages=len(stages), storage=storage,
        store=store, counter=counter, settings=settings.checkpoint,
        initial_restore=metadata, initial_restore_pointer=restored, on_complete=on_complete,
        host=bind, key=key, endpoint=endpoint, triggers=open_triggers(settings))
    status = StatusWriter(path=settings.status_file or "", coordinator=coordinator,
                          metrics=metrics, attempt=settings.attempt,
                          fallback_notes=tuple(notes))

    sc = spark.context()
    status.timeline["sparkStartingAt"] = spark.started_at
    status.timeline["sparkReadyAt"] = spark.ready_at or time.time()
    if promoted_at is not None:
        status.timeline["promotedAt"] = promoted_at
    try:
        # Before any Spark job: the source's preparation may already run the job's code.
        if not shipped:
            ship_job_code(sc, code)
        pipeline.source_op.prepare_on_driver(spark_context=sc, staging_uri=_staging(storage))
        if stage is None:
            stage = BarrierStage(spark_context=sc,
                                 config=subtasks(coordinator_port=coordinator.port))
            stage.start()
        assert stage.launched_at is not None
        status.timeline["stageLaunchedAt"] = stage.launched_at
        outcome = stage.wait(coordinator=coordinator)
    finally:
        coordinator.stop()
    if outcome is None:
        pipeline.sink_op.finish_job(job_id=settings.job_id, s3=s3)
        store.shutdown(JobOutcome.FINISHED, discard=coordinator.shared_files.discard)
        latest = coordinator.latest
        coordinator.delete_unreferenced_shared(0 if latest is None else latest.checkpoint_id)
        status.stop(state="finished")
        sc.stop()
        log.info("job finished: %d records written, %d checkpoints completed",
                 coordinator.snapshot_progress()["recordsOut"], coordinator.stats.completed)
        return ExitCode.FINISHED
    status.stop(state="failed")
    try:
        sc.stop()
    except Exception:
        pass
    return exit_code(outcome)


def _start_beacon(settings: DriverSettings) -> DriverBeacon | None:
    """Listen for standby drivers (``--beacon-host``) and record where, in the background.

    The beacon only makes a standby's takeover faster: if it cannot listen or be
    recorded, the job runs on and the kubelet's report of this driver's end is what a
    standby waits for, as without it. Its ``bye`` is said at the interpreter's exit,
    which every orderly end of the driver passes through and a killed one does not.
    """
    if settings.beacon_host is None:
        return None
    namespace, name = configmap_store(settings, setting="--beacon-host")
    try:
        beacon = DriverBeacon(host=settings.beacon_host, attempt=settings.attempt)
    except OSError as exc:
        log.warning("cannot listen for standby drivers at %s: %s; a standby then learns "
                    "of this driver's end from the kubelet", settings.beacon_host, exc)
        return None
    atexit.register(beacon.close)
    address = BeaconAddress(attempt=settings.attempt, host=beacon.host, port=beacon.port)

    def publish() -> None:
        from cjob_checkpoint.store.configmap_beacon import open_beacon_records

        try:
            open_beacon_records(namespace=namespace, store=name).publish(address)
        except Exception as exc:
            log.warning("cannot record this driver's beacon in configmap:%s/%s: %s",
                        namespace, name, exc)
            return
        log.info("standby drivers can watch this driver at %s:%d", address.host, address.port)

    threading.Thread(target=publish, name="beacon-publish", daemon=True).start()
    return beacon


def _staging(storage: CheckpointStorage) -> str:
    """Where sources stage their input (a DataFrame's rows), beside the checkpoints."""
    return join_uri(storage.job_dir, "staging")


def _subtask_config(*, settings: DriverSettings, code: Any, storage: CheckpointStorage,
                    s3: S3Config, coordinator_host: str, coordinator_port: int, key: bytes,
                    loopback: bool) -> SubtaskConfig:
    return SubtaskConfig(
        job_id=settings.job_id, job_name=settings.job_name, entrypoint=settings.entrypoint,
        python_path=code.executor_path, args=settings.args, parallelism=settings.parallelism,
        max_parallelism=settings.max_parallelism, coordinator_host=coordinator_host,
        coordinator_port=coordinator_port, checkpoint_root=settings.checkpoint_storage,
        staging_uri=_staging(storage), mode=settings.mode, unaligned=settings.unaligned,
        credits=settings.credits, s3=dataclasses.asdict(s3) if s3.to_env() else None, key=key,
        loopback=loopback, state_backend=settings.state_backend, state_dir=settings.state_dir)
