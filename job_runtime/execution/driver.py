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
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from typing import Any

from cjob_spec.exit_codes import ExitCode
from job_runtime.coordinator.coordinator import CheckpointCoordinator, CheckpointSettings
from job_runtime.errors import (
    CheckpointFailureBudgetExceeded,
    ConfigurationError,
    EntrypointError,
    JobCodeError,
    PipelineDefinitionError,
    RestoreError,
    UserCodeError,
)
from job_runtime.execution.code import prepare_job_code, ship_job_code
from job_runtime.execution.config import SubtaskConfig
from job_runtime.execution.entrypoint import add_python_path, build_pipeline
from job_runtime.execution.spark_start import SparkStarter
from job_runtime.execution.stages import plan_stages
from job_runtime.execution.subtask import run_subtask
from job_runtime.metrics import DriverMetrics
from job_runtime.network.handshake import new_key
from job_runtime.storage.checkpoint_storage import CheckpointStorage
from job_runtime.storage.errors import StorageError, StorageUnavailableError
from job_runtime.storage.filesystem import S3Config, get_filesystem, join_uri, write_file_atomically
from job_runtime.store.base import (
    CheckpointIdCounter,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    FencedError,
    JobStatus,
    StoreError,
    UnreadableCheckpointError,
)
from job_runtime.store.restore_report import RestoredCheckpoint, RestoreReport
from job_runtime.store.triggers import FileTriggerSource, TriggerSource

log = logging.getLogger("job_runtime.driver")

_LOCAL = re.compile(r"^local\[(\*|\d+)(?:,(\d+))?\]$")
_EXECUTOR_ENTRYPOINT_ERROR = re.compile(r"EntrypointError: entrypoint '([^']*)': ([^\n]*)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriverSettings:
    job_name: str
    job_uid: str
    entrypoint: str
    python_path: tuple[str, ...] = ()
    args: dict[str, Any] = dataclasses.field(default_factory=dict)
    parallelism: int = 1
    max_parallelism: int = 128
    master: str = "local[*]"
    spark_conf: dict[str, str] = dataclasses.field(default_factory=dict)
    checkpoint_storage: str = ""
    checkpoint: CheckpointSettings = dataclasses.field(default_factory=CheckpointSettings)
    mode: str = "exactly_once"
    unaligned: bool = False
    retained: int = 3
    restore: str = "latest"
    on_unreadable: str = "fail"
    allow_foreign_restore: bool = False
    """``restore`` may be another job's checkpoint path (``spec.restore.allowForeignJob``)."""
    attempt: int = 1
    store: str = "memory:"
    metrics_port: int | None = None
    status_file: str | None = None
    task_attempts: int = 4
    credits: int = 4

    @property
    def job_id(self) -> str:
        return f"{self.job_name}-{self.job_uid}"


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
            from job_runtime.store.configmap_triggers import open_configmap_triggers
        except ImportError:
            return None
        namespace, _, name = where.partition("/")
        return open_configmap_triggers(namespace=namespace, name=name)
    return None


def open_store(settings: DriverSettings) -> tuple[CompletedCheckpointStore, CheckpointIdCounter]:
    kind, _, where = settings.store.partition(":")
    if kind == "file":
        from job_runtime.store.file import FileCheckpointIdCounter, FileCheckpointStore

        os.makedirs(where, exist_ok=True)
        return (FileCheckpointStore(where, retained=settings.retained, attempt=settings.attempt),
                FileCheckpointIdCounter(where, attempt=settings.attempt))
    if kind == "memory":
        from job_runtime.store.memory import InMemoryCheckpointIdCounter, InMemoryCheckpointStore

        return InMemoryCheckpointStore(retained=settings.retained), InMemoryCheckpointIdCounter()
    if kind == "configmap":
        from job_runtime.store.configmap import open_configmap_store

        namespace, _, name = where.partition("/")
        return open_configmap_store(namespace=namespace, name=name, retained=settings.retained,
                                    attempt=settings.attempt)
    raise ConfigurationError(setting="--store",
                             problem=f"expected file:DIR, memory: or configmap:NS/NAME, "
                                     f"got {settings.store!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoreResolution:
    """Where the driver starts: the checkpoint (``None``: empty state) and its metadata.

    ``notes`` describe fallbacks for the log and the embedded status; ``skipped`` are
    the checkpoints passed over as unreadable, which the restore report names.
    """

    checkpoint: CompletedCheckpoint | None
    metadata: dict[str, Any] | None
    notes: list[str]
    skipped: tuple[RestoredCheckpoint, ...] = ()
    origin_job: str | None = None
    """The job that wrote ``checkpoint``, when it is not this job (an allowed foreign
    restore): its output newer than the checkpoint is withdrawn like this job's own."""

    @property
    def fallback_from(self) -> RestoredCheckpoint | None:
        """The newest skipped checkpoint newer than the one restored: what a fallback
        left behind (a damaged older pointer is no fallback)."""
        floor = -1 if self.checkpoint is None else self.checkpoint.checkpoint_id
        newer = [c for c in self.skipped if c.id > floor]
        return max(newer, key=lambda c: c.id) if newer else None

    def report(self, *, attempt: int) -> RestoreReport:
        restored = None if self.checkpoint is None else RestoredCheckpoint(
            id=self.checkpoint.checkpoint_id, path=self.checkpoint.metadata_path)
        return RestoreReport(attempt=attempt, checkpoint=restored,
                             fallback_from=self.fallback_from)


def record_restore(*, store: CompletedCheckpointStore, attempt: int,
                   resolution: RestoreResolution) -> bool:
    """Record what this attempt restores, for the operator's ``status.restoredFrom``.

    Done once, right after resolving and before the first checkpoint, so it never
    competes with a commit. A failure to record is logged by the store and does not
    fail the job; a fenced attempt raises :class:`FencedError`, because it must stop.
    """
    return store.record_restore(resolution.report(attempt=attempt))


def resolve_restore(
    *, settings: DriverSettings, storage: CheckpointStorage, store: CompletedCheckpointStore
) -> RestoreResolution:
    """The checkpoint to start from, its metadata, and what fallbacks were taken."""
    notes: list[str] = []
    skipped: list[RestoredCheckpoint] = []
    request = settings.restore.strip()
    if request in ("", "none"):
        return RestoreResolution(checkpoint=None, metadata=None, notes=notes)
    candidates: list[CompletedCheckpoint]
    try:
        retained = list(reversed(store.all()))
    except UnreadableCheckpointError as exc:
        if settings.on_unreadable != "fallback":
            raise RestoreError(pointer=exc.path, problem=exc.cause) from None
        notes.append(f"skipping a damaged pointer in the store: {exc}")
        skipped.append(RestoredCheckpoint(id=exc.checkpoint_id, path=exc.path))
        retained = list(reversed(_all_readable(store)))
    if request == "latest":
        candidates = retained
        if not candidates:
            return RestoreResolution(checkpoint=None, metadata=None, notes=notes,
                                     skipped=tuple(skipped))
    elif retained and _checkpoint_id_of_request(request) < retained[0].checkpoint_id:
        # ``restore.from`` names where a job *starts*. Once the job has completed a
        # newer checkpoint, every later attempt resumes from that one instead.
        notes.append(f"the store holds checkpoint {retained[0].checkpoint_id}, newer than "
                     f"the requested {request}; restoring the newest")
        candidates = retained
    elif request.isdigit():
        wanted = int(request)
        found = [c for c in retained if c.checkpoint_id == wanted]
        if not found:
            path = storage.metadata_uri(wanted)
            found = [CompletedCheckpoint(checkpoint_id=wanted, metadata_path=path, timestamp=0.0)]
        candidates = found + [c for c in retained if c.checkpoint_id < wanted]
    else:
        foreign = not storage.is_own_checkpoint(request)
        if foreign and not settings.allow_foreign_restore:
            raise RestoreError(pointer=request,
                               problem=f"it is not a checkpoint of job {settings.job_id} "
                                       f"(expected a path below {storage.job_dir}/); to "
                                       f"continue another job's checkpoint, set "
                                       f"spec.restore.allowForeignJob: true")
        if foreign:
            # Only the named checkpoint: this job's own store holds nothing older of it.
            return _restore_foreign(request, storage=storage, settings=settings,
                                    notes=notes)
        found_id = _checkpoint_id_of(request)
        candidates = [CompletedCheckpoint(checkpoint_id=found_id, metadata_path=request,
                                          timestamp=0.0)]
        candidates += [c for c in retained if c.checkpoint_id < found_id]
    first_error: UnreadableCheckpointError | None = None
    for candidate in candidates:
        try:
            metadata = json.loads(storage.read_metadata(candidate.metadata_path))
        except UnreadableCheckpointError as exc:
            first_error = first_error or exc
            if settings.on_unreadable != "fallback":
                raise RestoreError(pointer=candidate.metadata_path, problem=exc.cause) from None
            notes.append(f"checkpoint {candidate.checkpoint_id} is unreadable ({exc.cause}); "
                         f"falling back to an older one")
            skipped.append(RestoredCheckpoint(id=candidate.checkpoint_id,
                                              path=candidate.metadata_path))
            continue
        except ValueError as exc:
            raise RestoreError(pointer=candidate.metadata_path,
                               problem=f"metadata is not valid JSON: {exc}") from None
        if metadata.get("job") != settings.job_id:
            raise RestoreError(pointer=candidate.metadata_path,
                               problem=f"it belongs to job {metadata.get('job')!r}")
        return RestoreResolution(checkpoint=candidate, metadata=metadata, notes=notes,
                                 skipped=tuple(skipped))
    assert first_error is not None
    raise RestoreError(pointer=settings.restore,
                       problem=f"no readable checkpoint to fall back to ({first_error.cause})")


def _restore_foreign(request: str, *, storage: CheckpointStorage, settings: DriverSettings,
                     notes: list[str]) -> RestoreResolution:
    """Another job's checkpoint, allowed by ``spec.restore.allowForeignJob``.

    No fallback: an older checkpoint of a stranger is not what anyone asked for, so an
    unreadable one fails the restore whatever ``onUnreadable`` says.
    """
    checkpoint_id = _checkpoint_id_of(request)
    if checkpoint_id < 0:
        raise RestoreError(pointer=request,
                           problem="it is not a checkpoint path (expected "
                                   "<storage>/<job>-<uid>/chk-<id>/_metadata)")
    try:
        metadata = json.loads(storage.read_metadata(request))
    except UnreadableCheckpointError as exc:
        raise RestoreError(pointer=request, problem=exc.cause) from None
    except ValueError as exc:
        raise RestoreError(pointer=request, problem=f"metadata is not valid JSON: {exc}") from None
    origin = metadata.get("job") if isinstance(metadata, dict) else None
    if not isinstance(origin, str) or not origin:
        raise RestoreError(pointer=request, problem="its metadata names no job")
    if origin == settings.job_id:
        raise RestoreError(pointer=request,
                           problem=f"its metadata says it belongs to this job, but its path is "
                                   f"not below {storage.job_dir}/")
    notes.append(f"restoring checkpoint {checkpoint_id} of job {origin} "
                 f"(spec.restore.allowForeignJob)")
    checkpoint = CompletedCheckpoint(checkpoint_id=checkpoint_id, metadata_path=request,
                                     timestamp=0.0)
    return RestoreResolution(checkpoint=checkpoint, metadata=metadata, notes=notes,
                             origin_job=origin)


def _all_readable(store: CompletedCheckpointStore) -> list[CompletedCheckpoint]:
    """The store's pointers, leaving out damaged ones."""
    return store.all(skip_corrupt=True)


def _checkpoint_id_of_request(request: str) -> int:
    return int(request) if request.isdigit() else _checkpoint_id_of(request)


def _checkpoint_id_of(path: str) -> int:
    match = re.search(r"/chk-(\d+)(?:/|$)", path)
    return int(match.group(1)) if match else -1


class StatusWriter:
    """Writes the driver's progress as JSON for the embedded runner, once a second."""

    def __init__(self, *, path: str, coordinator: CheckpointCoordinator,
                 metrics: DriverMetrics | None, extra: dict[str, Any]) -> None:
        self.path = path
        self.coordinator = coordinator
        self.metrics = metrics
        self.extra = extra
        # Driver milestones (process start, Spark start and ready), merged with the
        # coordinator's epoch milestones into ``timeline``.
        self.timeline: dict[str, float] = {"driverStartedAt": process_started_at()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="status-writer")
        self._thread.start()

    def write(self, *, state: str, history: bool = False) -> None:
        coordinator = self.coordinator
        progress = coordinator.snapshot_progress()
        latest = coordinator.latest
        body = {
            "state": state,
            "pid": os.getpid(),
            "updatedAt": time.time(),
            "epoch": progress["epoch"],
            "subtaskRestarts": max(0, coordinator.epochs_started - 1),
            "recordsIn": progress["recordsIn"],
            "recordsOut": progress["recordsOut"],
            "checkpoints": progress["checkpoints"],
            "latestCheckpoint": None if latest is None else {
                "id": latest.checkpoint_id, "path": latest.metadata_path,
                "completedAt": latest.timestamp, "sizeBytes": latest.size_bytes},
            "restoredFrom": None if coordinator.restored_from is None else {
                "id": coordinator.restored_from.checkpoint_id,
                "path": coordinator.restored_from.metadata_path},
            "timeline": {**self.timeline, **progress.get("timeline", {})},
            "rejectedConnections": progress["rejectedConnections"],
            **self.extra,
        }
        if history:
            body["checkpointHistory"] = coordinator.stats.history_dicts()
        if self.metrics is not None:
            self.metrics.progress(records_in=progress["recordsIn"],
                                  records_out=progress["recordsOut"],
                                  failed=progress["checkpoints"]["failed"],
                                  restarts=max(0, coordinator.epochs_started - 1))
        if self.path:
            write_file_atomically(self.path, json.dumps(body, indent=2).encode())

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.write(state="running")
            except Exception as exc:
                log.debug("status write failed: %s", exc)

    def stop(self, *, state: str) -> None:
        self._stop.set()
        try:
            self.write(state=state, history=True)
        except Exception as exc:
            log.warning("final status write failed: %s", exc)


def process_started_at() -> float:
    """When this process started (wall clock), from ``/proc``; now where that is unknown."""
    try:
        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        return time.time() - (uptime - started)
    except (OSError, ValueError, IndexError):
        return time.time()


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
    except (EntrypointError, PipelineDefinitionError, ConfigurationError, JobCodeError) as exc:
        log.error("%s", exc)
        return ExitCode.BAD_CONFIG
    except UserCodeError as exc:
        log.error("%s", exc)
        return ExitCode.USER_CODE_ERROR
    except RestoreError as exc:
        log.error("%s", exc)
        return ExitCode.RESTORE_FAILED
    except StorageUnavailableError as exc:
        # Checkpoint storage, or an S3 archive of the job's code: the error names which.
        log.error("storage unreachable: %s", exc)
        return ExitCode.STORAGE_UNREACHABLE
    except FencedError as exc:
        log.error("%s", exc)
        return 1
    except (StoreError, StorageError) as exc:
        log.error("checkpoint store or storage failed: %s", exc)
        return ExitCode.STORAGE_UNREACHABLE


def _run(settings: DriverSettings) -> int:
    if settings.parallelism < 1 or settings.parallelism > settings.max_parallelism:
        raise ConfigurationError(setting="--parallelism",
                                 problem=f"must be within 1..{settings.max_parallelism}")
    s3 = S3Config.from_env()
    code_dir = tempfile.mkdtemp(prefix="cjob-code-")
    atexit.register(shutil.rmtree, code_dir, ignore_errors=True)
    code = prepare_job_code(settings.python_path, master=settings.master, s3=s3,
                            work_dir=code_dir)
    add_python_path(code.driver_path)
    pipeline = build_pipeline(entrypoint=settings.entrypoint, args=settings.args,
                              name=settings.job_name)
    stages = plan_stages(pipeline)
    master = resolve_master(settings.master, parallelism=settings.parallelism,
                            task_attempts=settings.task_attempts)
    spark = SparkStarter(settings=settings, master=master)
    storage = CheckpointStorage(settings.checkpoint_storage, settings.job_id,
                                fs=get_filesystem(settings.checkpoint_storage, s3=s3))
    store, counter = open_store(settings)
    resolution = resolve_restore(settings=settings, storage=storage, store=store)
    restored, metadata, notes = resolution.checkpoint, resolution.metadata, resolution.notes
    for note in notes:
        log.warning("%s", note)
    if restored is not None:
        log.info("restoring checkpoint %d from %s", restored.checkpoint_id,
                 restored.metadata_path)
        counter.set_count(restored.checkpoint_id + 1)
        if metadata and int(metadata.get("maxParallelism", settings.max_parallelism)) != \
                settings.max_parallelism:
            raise RestoreError(pointer=restored.metadata_path,
                               problem="maxParallelism differs from the checkpoint's "
                                       f"{metadata.get('maxParallelism')}; it cannot change")
        assert pipeline.sink_op is not None
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

    bind, advertised = _driver_host(master, settings.spark_conf)
    # One key per driver attempt: a relaunched driver's subtasks get a new one, and
    # anything left of an earlier attempt can no longer talk to this one.
    key = new_key()
    coordinator = CheckpointCoordinator(
        job_id=settings.job_id, attempt=settings.attempt, parallelism=settings.parallelism,
        max_parallelism=settings.max_parallelism, stages=len(stages), storage=storage,
        store=store, counter=counter, settings=settings.checkpoint,
        initial_restore=metadata, initial_restore_pointer=restored, on_complete=on_complete,
        host=bind, key=key, triggers=open_triggers(settings))
    status = StatusWriter(path=settings.status_file or "", coordinator=coordinator,
                          metrics=metrics,
                          extra={"fallbackNotes": notes, "attempt": settings.attempt})
    staging = join_uri(storage.job_dir, "staging")
    config = SubtaskConfig(
        job_id=settings.job_id, job_name=settings.job_name, attempt=settings.attempt,
        entrypoint=settings.entrypoint, python_path=code.executor_path, args=settings.args,
        parallelism=settings.parallelism, max_parallelism=settings.max_parallelism,
        coordinator_host=advertised, coordinator_port=coordinator.port,
        checkpoint_root=settings.checkpoint_storage, staging_uri=staging, mode=settings.mode,
        unaligned=settings.unaligned, credits=settings.credits,
        s3=dataclasses.asdict(s3) if s3.to_env() else None, key=key,
        loopback=is_local_master(master))

    sc = spark.context()
    status.timeline["sparkStartingAt"] = spark.started_at
    status.timeline["sparkReadyAt"] = spark.ready_at or time.time()
    try:
        # Before any Spark job: the source's preparation may already run the job's code.
        ship_job_code(sc, code)
        assert pipeline.source_op is not None
        pipeline.source_op.prepare_on_driver(spark_context=sc, staging_uri=staging)
        outcome = _run_stage(sc=sc, settings=settings, config=config,
                             coordinator=coordinator)
    finally:
        coordinator.stop()
    if outcome is None:
        assert pipeline.sink_op is not None
        pipeline.sink_op.finish_job(job_id=settings.job_id, s3=s3)
        store.shutdown(JobStatus.FINISHED, discard=storage.discard)
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
    return _exit_code_for(outcome)


def _exit_code_for(failure: BaseException) -> int:
    if isinstance(failure, UserCodeError):
        log.error("%s", failure)
        return ExitCode.USER_CODE_ERROR
    if isinstance(failure, EntrypointError):
        log.error("%s", failure)
        return ExitCode.BAD_CONFIG
    if isinstance(failure, CheckpointFailureBudgetExceeded):
        log.error("%s", failure)
        if "unavailable" in failure.last_reason or "unreachable" in failure.last_reason:
            return ExitCode.STORAGE_UNREACHABLE
        return ExitCode.CHECKPOINT_FAILURES_EXCEEDED
    if isinstance(failure, FencedError):
        log.error("%s", failure)
        return 1
    log.error("job failed: %s", failure)
    return 1


def _run_stage(*, sc: Any, settings: DriverSettings, config: SubtaskConfig,
               coordinator: CheckpointCoordinator) -> BaseException | None:
    """Run the barrier stage; ``None`` on success, else why the job failed."""
    result: dict[str, Any] = {}

    def job() -> None:
        try:
            rdd = sc.parallelize(range(settings.parallelism), settings.parallelism)
            summaries = (rdd.barrier()
                         .mapPartitions(functools.partial(run_subtask, config))
                         .groupByKey(1)
                         .collect())
            result["summaries"] = summaries
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=job, daemon=True, name="spark-job")
    thread.start()
    while thread.is_alive():
        if coordinator.failed_event.wait(0.2):
            sc.cancelAllJobs()
            thread.join(timeout=60)
            return coordinator.failure
    if coordinator.failure is not None:
        return coordinator.failure
    if "error" in result:
        return _spark_failure(result["error"])
    return None


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
    return RuntimeError(f"Spark gave up on the job after repeated task failures: "
                        f"{text.splitlines()[0] if text else type(exc).__name__}")
