"""The embedded runner: a CheckpointedJob supervised on this machine, without Kubernetes.

It does what the operator does for a cluster, with a local process in place of
the driver pod: start attempt n of the driver (``python -m job_runtime run``
with ``local[N]`` Spark), fence the file store to that attempt first, watch it,
and when it ends ask the same pure restart policy as the operator what to do.
Every attempt after a failure restores the latest completed checkpoint.

State lives in ``<state-dir>/<name>/``: ``status.json`` (the CR's status shape),
``checkpoints/`` (file:// checkpoint data), ``store/`` (the completed-checkpoint
store), ``attempt-<n>.log`` (each driver's output) and ``uid``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from cjob_spec import (
    AttemptEnd,
    CheckpointedJob,
    CheckpointRef,
    Finish,
    GiveUp,
    JobStatus,
    Phase,
    Restart,
    RestoredFrom,
    decide_restart,
    file_store_arg,
    to_runtime_args,
)
from cjob_spec.driver_env import driver_env as spec_driver_env
from cjob_spec.exit_codes import describe_exit, reason_for_exit
from cjob_spec.model import is_s3_code
from cjob_spec.status import ConditionStatus, ConditionType, FailureRecord, set_condition

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class StateDirError(Exception):
    """The state directory cannot be used."""

    def __init__(self, *, path: str, problem: str) -> None:
        super().__init__(f"state dir {path}: {problem}")
        self.path = path
        self.problem = problem


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobPaths:
    root: Path

    @property
    def status(self) -> Path:
        return self.root / "status.json"

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def uid(self) -> Path:
        return self.root / "uid"

    def log(self, attempt: int) -> Path:
        return self.root / f"attempt-{attempt}.log"

    def runtime_status(self, attempt: int) -> Path:
        return self.root / f"attempt-{attempt}.progress.json"


def job_paths(state_dir: str, name: str) -> JobPaths:
    return JobPaths(root=Path(state_dir).resolve() / name)


def ensure_state_dir(paths: JobPaths) -> None:
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
        probe = paths.root / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise StateDirError(path=str(paths.root), problem=exc.strerror or str(exc)) from None


def read_status(paths: JobPaths) -> JobStatus:
    try:
        data = json.loads(paths.status.read_text())
    except (OSError, ValueError):
        return JobStatus()
    return JobStatus.from_dict(data.get("status") if "status" in data else data)


def write_status(paths: JobPaths, status: JobStatus, *, extra: dict[str, Any] | None = None
                 ) -> None:
    body = status.to_dict()
    if extra:
        body.update(extra)
    tmp = paths.status.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True))
    os.replace(tmp, paths.status)


@dataclasses.dataclass(kw_only=True)
class RunOptions:
    state_dir: str = ".cjob"
    kill_driver_after: float | None = None
    fresh: bool = False
    metrics_port: int | None = None
    base_dir: str = "."
    out: TextIO = sys.stdout
    interactive: bool = False


@dataclasses.dataclass
class Progress:
    """What the runner shows while an attempt runs."""

    records: int = 0
    checkpoints: int = 0
    latest_id: int | None = None
    state: str = "starting"


def _local_master(job: CheckpointedJob) -> str:
    master = job.spec.spark.master
    if master.startswith("local"):
        return master
    return f"local[{job.spec.parallelism}]"


def _exit_code_of(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _last_error_line(log_path: Path) -> str:
    """The most telling line of a driver's log for a one-line failure message."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if " ERROR job_runtime" in line:
            return line.split(": ", 1)[-1].strip()
    return ""


class EmbeddedRunner:
    def __init__(self, *, job: CheckpointedJob, options: RunOptions,
                 clock: Clock = utc_now) -> None:
        self.job = job
        self.options = options
        self.clock = clock
        self.paths = job_paths(options.state_dir, job.metadata.name)
        self.killed_once = False
        self._last_print = 0.0

    # ------------------------------------------------------------------ setup

    def _prepare(self) -> tuple[JobStatus, str]:
        ensure_state_dir(self.paths)
        previous = read_status(self.paths)
        resume = (not self.options.fresh and previous.phase is not None
                  and previous.phase not in (Phase.SUCCEEDED,) and self.paths.uid.exists())
        if resume:
            uid = self.paths.uid.read_text().strip()
            self._say(f"resuming {self.job.metadata.name} (uid {uid}) after attempt "
                      f"{previous.attempt}")
            return previous.replace(restarts=previous.restarts), uid
        uid = uuid.uuid4().hex[:12]
        for child in (self.paths.store,):
            if child.exists():
                for f in child.iterdir():
                    f.unlink()
        self.paths.uid.write_text(uid)
        return JobStatus(phase=Phase.PENDING, observed_generation=self.job.metadata.generation
                         ), uid

    def checkpoint_storage(self) -> str:
        storage = self.job.spec.checkpoint.storage
        if storage.startswith("s3://"):
            return storage
        return self.paths.checkpoints.as_uri()

    def _job_for_attempt(self) -> CheckpointedJob:
        spec = self.job.spec
        base = Path(self.options.base_dir)
        # Relative directories are relative to the job file's folder (else the current
        # one); s3:// archives are the driver's to fetch, as on a cluster.
        python_path = tuple(
            p if is_s3_code(p) or os.path.isabs(p)
            else str((base / p).resolve()) if (base / p).exists()
            else str(Path(p).resolve()) for p in spec.job.python_path)
        job_code = dataclasses.replace(spec.job, python_path=python_path)
        checkpoint = dataclasses.replace(spec.checkpoint, storage=self.checkpoint_storage())
        return dataclasses.replace(self.job, spec=dataclasses.replace(
            spec, job=job_code, checkpoint=checkpoint))

    def _restore_pointer(self) -> str:
        from job_runtime.store.file import list_checkpoints

        if self.paths.store.exists() and list_checkpoints(str(self.paths.store),
                                                          skip_corrupt=True):
            return "latest"
        source = self.job.spec.restore.source
        if source.kind == "id":
            return str(source.checkpoint_id)
        if source.kind == "path":
            return str(source.path)
        return "latest"

    # ------------------------------------------------------------------ output

    def _say(self, text: str) -> None:
        self.options.out.write(f"[cjob] {text}\n")
        self.options.out.flush()

    def _show_progress(self, attempt: int, progress: Progress, restarts: int) -> None:
        now = time.monotonic()
        if not self.options.interactive and now - self._last_print < 5.0:
            return
        self._last_print = now
        latest = "-" if progress.latest_id is None else str(progress.latest_id)
        line = (f"attempt {attempt} {progress.state}: {progress.records:,} records, "
                f"{progress.checkpoints} checkpoints, latest checkpoint {latest}, "
                f"restarts {restarts}")
        if self.options.interactive:
            self.options.out.write(f"\r[cjob] {line}\033[K")
            self.options.out.flush()
        else:
            self._say(line)

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        """Supervise attempts until the job succeeds or fails; returns the exit code."""
        status, uid = self._prepare()
        job = self._job_for_attempt()
        spec = self.job.spec
        while True:
            attempt = status.attempt + 1
            from job_runtime.store.file import advance_attempt

            self.paths.store.mkdir(parents=True, exist_ok=True)
            advance_attempt(str(self.paths.store), attempt)
            restore = self._restore_pointer()
            args = to_runtime_args(job, restore_pointer=restore, attempt=attempt,
                                   store=file_store_arg(str(self.paths.store)),
                                   master=_local_master(self.job), job_uid=uid,
                                   metrics_port=self.options.metrics_port,
                                   status_file=str(self.paths.runtime_status(attempt)))
            started = self.clock()
            status = status.replace(
                phase=Phase.RUNNING if attempt == 1 else Phase.RESTARTING, attempt=attempt,
                driver_pod=f"{self.job.metadata.name}-attempt-{attempt}", started_at=started,
                running_since=started, next_restart_at=None, reason=None, message=None,
                conditions=set_condition(status.conditions, kind=ConditionType.READY,
                                         status=ConditionStatus.TRUE, reason="DriverRunning",
                                         message=f"attempt {attempt} started", now=started,
                                         observed_generation=self.job.metadata.generation))
            write_status(self.paths, status)
            self._say(f"starting attempt {attempt} (restore: {restore}, log: "
                      f"{self.paths.log(attempt)})")
            returncode, runtime = self._watch(attempt=attempt, args=args, status=status)
            status = self._with_runtime(status, runtime)
            ended = self.clock()
            exit_code = _exit_code_of(returncode)
            reason = reason_for_exit(exit_code)
            detail = _last_error_line(self.paths.log(attempt))
            message = describe_exit(exit_code) + (f": {detail}" if detail else "")
            end = AttemptEnd(reason=reason, exit_code=exit_code, at=ended, message=message)
            decision = decide_restart(policy=spec.restart_policy, end=end,
                                      restarts=status.restarts, healthy_since=started, now=ended)
            if exit_code != 0:
                status = status.replace(last_failure=FailureRecord(
                    reason=reason, exit_code=exit_code, message=message, at=ended,
                    attempt=attempt))
                self._say(f"attempt {attempt} failed: {message}")
            if isinstance(decision, Restart):
                status = status.replace(phase=Phase.RESTARTING, restarts=decision.restarts,
                                        last_restart_at=ended, reason=decision.reason,
                                        message=decision.message,
                                        next_restart_at=decision.not_before)
                write_status(self.paths, status)
                self._say(f"restarting from the latest checkpoint in "
                          f"{decision.delay_seconds:g}s ({decision.message})")
                time.sleep(decision.delay_seconds)
                continue
            return self._finish(status, decision)

    def _finish(self, status: JobStatus, decision: GiveUp | Finish) -> int:
        now = self.clock()
        succeeded = isinstance(decision, Finish) and decision.succeeded
        phase = Phase.SUCCEEDED if succeeded else Phase.FAILED
        conditions = set_condition(
            status.conditions, kind=ConditionType.READY, status=ConditionStatus.FALSE,
            reason=decision.reason, message=decision.message, now=now,
            observed_generation=self.job.metadata.generation)
        if not succeeded:
            conditions = set_condition(
                conditions, kind=ConditionType.FAILED, status=ConditionStatus.TRUE,
                reason=decision.reason, message=decision.message, now=now,
                observed_generation=self.job.metadata.generation)
        status = status.replace(phase=phase, reason=decision.reason, message=decision.message,
                                conditions=conditions, next_restart_at=None)
        write_status(self.paths, status)
        latest = status.latest_checkpoint
        restored = status.restored_from
        self._say(f"job {self.job.metadata.name} {phase.value}: {decision.message}")
        self._say(f"  attempts {status.attempt}, restarts {status.restarts}, latest checkpoint "
                  f"{latest.id if latest else '-'}, restored from "
                  f"{restored.id if restored else '-'}")
        self._say(f"  status: {self.paths.status}")
        if not succeeded:
            sys.stderr.write(f"cjob: error: job {self.job.metadata.name} failed: "
                             f"{decision.message}\n")
        return 0 if succeeded else 1

    def _with_runtime(self, status: JobStatus, runtime: dict[str, Any] | None) -> JobStatus:
        if not runtime:
            return status
        latest = runtime.get("latestCheckpoint")
        if latest:
            status = status.replace(latest_checkpoint=CheckpointRef(
                id=int(latest["id"]), path=str(latest["path"]),
                completed_at=datetime.fromtimestamp(float(latest["completedAt"]), UTC),
                size_bytes=int(latest.get("sizeBytes", 0))))
        restored = runtime.get("restoredFrom")
        if restored:
            status = status.replace(restored_from=RestoredFrom(id=int(restored["id"]),
                                                               path=str(restored["path"])))
        return status

    def _read_runtime(self, attempt: int) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.paths.runtime_status(attempt).read_text())
            return data
        except (OSError, ValueError):
            return None

    def _watch(self, *, attempt: int, args: list[str], status: JobStatus
               ) -> tuple[int, dict[str, Any] | None]:
        log_path = self.paths.log(attempt)
        # An earlier run of a job of this name may have left this attempt's progress
        # file: read before the new driver writes its own, it would show that run's
        # records and checkpoints, and could trigger --kill-driver-after.
        self.paths.runtime_status(attempt).unlink(missing_ok=True)
        env = driver_environment(self.job, os.environ)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "job_runtime", "run", *args],
                                    stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            started = time.monotonic()
            runtime: dict[str, Any] | None = None
            written_id: int | None = None
            try:
                while proc.poll() is None:
                    time.sleep(0.5)
                    runtime = self._read_runtime(attempt) or runtime
                    progress = Progress(state="starting")
                    if runtime:
                        latest = runtime.get("latestCheckpoint") or {}
                        progress = Progress(
                            records=int(runtime.get("recordsIn", 0)),
                            checkpoints=int(runtime["checkpoints"]["completed"]),
                            latest_id=latest.get("id"),
                            state="running" if int(runtime.get("epoch", -1)) >= 0
                            else "starting Spark")
                        if progress.latest_id != written_id:
                            written_id = progress.latest_id
                            write_status(self.paths, self._with_runtime(status, runtime))
                    self._show_progress(attempt, progress, status.restarts)
                    if self._should_kill(started=started, progress=progress):
                        self.killed_once = True
                        if self.options.interactive:
                            self.options.out.write("\n")
                        self._say(f"killing the driver of attempt {attempt} (SIGKILL) after "
                                  f"checkpoint {progress.latest_id}, to show recovery")
                        os.killpg(proc.pid, signal.SIGKILL)
            except KeyboardInterrupt:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
                raise
            finally:
                if self.options.interactive:
                    self.options.out.write("\n")
            _reap_group(proc.pid)
        return proc.returncode, self._read_runtime(attempt) or runtime

    def _should_kill(self, *, started: float, progress: Progress) -> bool:
        after = self.options.kill_driver_after
        if after is None or self.killed_once:
            return False
        return time.monotonic() - started >= after and progress.checkpoints >= 1


def driver_environment(job: CheckpointedJob, environ: Mapping[str, str]) -> dict[str, str]:
    """The local driver's environment: this process's, plus what the spec gives every
    driver (:func:`cjob_spec.driver_env.driver_env`, the operator's driver pod gets the
    same) where the environment has nothing of its own for it.

    The environment wins (``AWS_ENDPOINT_URL`` for a local MinIO, say; an
    ``AWS_ENDPOINT_URL_S3`` or ``AWS_DEFAULT_REGION`` counts as naming the endpoint or
    region). Credentials always come from the environment: ``credentialsSecret`` names
    a Secret, which only a cluster has.
    """
    env = dict(environ)
    aliases = {"AWS_ENDPOINT_URL": ("AWS_ENDPOINT_URL_S3",), "AWS_REGION": ("AWS_DEFAULT_REGION",),
               "AWS_DEFAULT_REGION": ("AWS_REGION",)}
    for var in spec_driver_env(job):
        if var.value is None:
            continue
        if env.get(var.name) or any(environ.get(alias) for alias in aliases.get(var.name, ())):
            continue
        env[var.name] = var.value
    return env


def _reap_group(pgid: int) -> None:
    """Make sure nothing of a driver's process group (JVM, Python workers) outlives it."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
