"""The embedded runner: a CheckpointedJob supervised on this machine, without Kubernetes.

It runs the operator's lifecycle, not a copy of it: on every pass it observes its
local drivers and file store (:mod:`cjob.local_backend`), asks the same pure
:func:`cjob_lifecycle.plan.plan` what to do, carries out the actions (fence the store,
start attempt n of the driver, ``python -m job_runtime run`` with ``local[N]`` Spark,
stop a driver) and records the status the plan returns. Phases, conditions, restarts
with backoff, restoring from the latest checkpoint and fencing therefore behave as on
a cluster by construction. What is its own is what a terminal shows: progress lines,
``--kill-driver-after``, and resuming a run that was interrupted.

State lives in ``<state-dir>/<name>/``: ``status.json`` (the CR's status shape),
``checkpoints/`` (file:// checkpoint data), ``store/`` (the completed-checkpoint
store), ``attempt-<n>.log`` (each driver's output) and ``uid``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from cjob.local_backend import LOCAL_SETTINGS, DriverLaunch, LocalBackend
from cjob_checkpoint.driver_status import DriverStatus, StatusFileError, read_status_file
from cjob_lifecycle.actions import CreateDriver, CreateStandby, EmitEvent, PromoteStandby
from cjob_lifecycle.plan import plan
from cjob_spec import (
    CheckpointedJob,
    JobStatus,
    Phase,
    file_store_arg,
    runtime_settings,
    to_runtime_args,
)
from cjob_spec.driver_env import driver_env as spec_driver_env
from cjob_spec.model import is_s3_code
from cjob_spec.reasons import Reason
from cjob_spec.runtime_settings import RuntimeSettings
from cjob_spec.standby_signal import SUPERVISOR_PID_ENV, StandbyPromotion, ready_path

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

    def standby_log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def promotion(self, name: str) -> Path:
        """Where standby driver ``name`` waits for its promotion."""
        return self.root / f"{name}.promote"


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
    driver_command: tuple[str, ...] = (sys.executable, "-m", "job_runtime", "run")
    """The driver's command; the runtime's arguments follow it (as in a driver pod)."""


@dataclasses.dataclass
class Progress:
    """What the runner shows while an attempt runs."""

    records: int = 0
    checkpoints: int = 0
    latest_id: int | None = None
    state: str = "starting"


QUIET_EVENTS = frozenset({Reason.STARTED, Reason.RESTARTED, Reason.RETRYING, Reason.RESUMED,
                          Reason.UPGRADED, Reason.RUNNING, Reason.CHECKPOINTS_NOT_PERSISTENT})
"""Events the runner does not print: the start of an attempt has its own line (with
the restore pointer and the log file), a running driver shows progress lines, and
file:// storage is the state directory here, not a container's disk, so it persists."""

TICK_SECONDS = 0.5
"""How often a running attempt's progress file is read and its process polled."""
EXIT_POLL_SECONDS = 0.05
"""How often the driver processes are polled for an exit: a failed driver is replaced
(a standby promoted) the moment it is seen gone, so this bounds the detection part of
a recovery. Polling a child is a cheap system call."""
PASS_SECONDS = 1.0
"""Longest time between two passes of the plan while a driver runs, so that the
status follows the store's checkpoints about as closely as it did before."""


def _local_master(job: CheckpointedJob) -> str:
    master = job.spec.spark.master
    if master.startswith("local"):
        return master
    return f"local[{job.spec.parallelism}]"


def resumed_status(previous: JobStatus) -> JobStatus:
    """The status a new ``cjob run`` of an unfinished job continues from.

    Running ``cjob run`` again is the user asking for the job to go on, so an attempt
    that was interrupted with the runner (Pending, Running) or had failed becomes a
    restart without backoff: the plan then starts the next attempt from the latest
    checkpoint, keeping the restart count. A job waiting out a backoff keeps waiting,
    and a suspended one stays the plan's to resume.
    """
    if previous.phase in (Phase.PENDING, Phase.RUNNING, Phase.FAILED):
        return previous.replace(
            phase=Phase.RESTARTING, reason=Reason.RESUMING, next_restart_at=None,
            message=f"resuming after attempt {previous.attempt}")
    return previous


class EmbeddedRunner:
    def __init__(self, *, job: CheckpointedJob, options: RunOptions,
                 clock: Clock = utc_now) -> None:
        self.job = job
        self.options = options
        self.clock = clock
        self.paths = job_paths(options.state_dir, job.metadata.name)
        self.killed_once = False
        self._last_print = 0.0
        self._attempt_started: dict[int, float] = {}
        self._uid = ""
        self._events: list[EmitEvent] = []

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
            return resumed_status(previous), uid
        uid = uuid.uuid4().hex[:12]
        for child in (self.paths.store,):
            if child.exists():
                for f in child.iterdir():
                    f.unlink()
        self.paths.uid.write_text(uid)
        return JobStatus(), uid

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

    def _launch(self, action: CreateDriver) -> DriverLaunch:
        """The driver process of ``action``: what a driver pod would run, locally."""
        attempt = action.attempt
        args = to_runtime_args(self._settings(restore_pointer=action.restore_pointer,
                                              restore_exact=action.restore_exact,
                                              attempt=attempt,
                                              status_file=str(self.paths.runtime_status(attempt))))
        # An earlier run of a job of this name may have left this attempt's progress
        # file: read before the new driver writes its own, it would show that run's
        # records and checkpoints, and could trigger --kill-driver-after.
        self.paths.runtime_status(attempt).unlink(missing_ok=True)
        return DriverLaunch(argv=(*self.options.driver_command, *args),
                            env=driver_environment(self.job, os.environ),
                            log=self.paths.log(attempt))

    def _settings(self, *, restore_pointer: str, attempt: int, restore_exact: bool = False,
                  status_file: str | None = None) -> RuntimeSettings:
        """What a local driver of ``attempt`` is told: a driver pod's settings, with the
        file store and a local master."""
        return runtime_settings(self._job_for_attempt(), restore_pointer=restore_pointer,
                                restore_exact=restore_exact, attempt=attempt, store=file_store_arg(str(self.paths.store)),
                                master=_local_master(self.job), job_uid=self._uid,
                                metrics_port=self.options.metrics_port, status_file=status_file)

    def _launch_standby(self, action: CreateStandby) -> DriverLaunch:
        """A standby driver: the next attempt's arguments, and the file to wait on.

        Its attempt and restore point are the promotion's; until then it only starts
        Spark and loads the job's code, and writes no status file.
        """
        promotion = self.paths.promotion(action.name)
        promotion.unlink(missing_ok=True)
        ready_path(promotion).unlink(missing_ok=True)
        args = to_runtime_args(self._settings(restore_pointer="latest",
                                              attempt=action.attempt + 1))
        # The standby knows who may promote it from the start (see SUPERVISOR_PID_ENV).
        env = {**driver_environment(self.job, os.environ), SUPERVISOR_PID_ENV: str(os.getpid())}
        return DriverLaunch(argv=(*self.options.driver_command, *args, "--standby",
                                  str(promotion)),
                            env=env,
                            log=self.paths.standby_log(action.name), promotion_file=promotion)

    def _promotion(self, action: PromoteStandby) -> StandbyPromotion:
        status_file = self.paths.runtime_status(action.attempt)
        status_file.unlink(missing_ok=True)  # see _launch: an earlier run's file
        return StandbyPromotion(attempt=action.attempt, restore=action.restore_pointer,
                                status_file=str(status_file))

    def _on_promote(self, action: PromoteStandby, log: Path) -> None:
        self._end_progress_line()
        self._attempt_started[action.attempt] = time.monotonic()
        self._say(f"starting attempt {action.attempt} (restore: {action.restore_pointer}, "
                  f"promoted standby {action.name}, log: {log})")

    # ------------------------------------------------------------------ output

    def _say(self, text: str) -> None:
        self.options.out.write(f"[cjob] {text}\n")
        self.options.out.flush()

    def _end_progress_line(self) -> None:
        if self.options.interactive and self._last_print:
            self.options.out.write("\n")
            self._last_print = 0.0

    def _on_start(self, action: CreateDriver, log: Path) -> None:
        self._end_progress_line()
        self._attempt_started[action.attempt] = time.monotonic()
        self._say(f"starting attempt {action.attempt} (restore: {action.restore_pointer}, "
                  f"log: {log})")

    def _on_event(self, event: EmitEvent) -> None:
        self._events.append(event)

    def _print_events(self, before: JobStatus, status: JobStatus) -> None:
        """The pass's Events as lines; the one that ends the job is the summary's, and
        the restart after a failure is said without repeating the failure's line."""
        events, self._events = self._events, []
        final = status.phase is not None and status.phase.is_terminal
        failure = status.last_failure if status.last_failure != before.last_failure else None
        for event in events:
            if event.reason in QUIET_EVENTS or (final and event.reason == status.reason):
                continue
            self._end_progress_line()
            repeated = f"{failure.message}; " if failure is not None else None
            if repeated and status.phase is Phase.RESTARTING \
                    and event.message.startswith(repeated):
                self._say(f"restarting from the latest checkpoint "
                          f"({event.message.removeprefix(repeated)})")
                continue
            prefix = "warning: " if event.type == "Warning" else ""
            self._say(f"{prefix}{event.message}")

    def _report_failure(self, before: JobStatus, after: JobStatus) -> None:
        failure = after.last_failure
        if failure is None or failure == before.last_failure:
            return
        self._end_progress_line()
        attempt = failure.attempt if failure.attempt is not None else after.attempt
        self._say(f"attempt {attempt} failed: {failure.message}")

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
        """Drive the job's lifecycle until it is over; returns the exit code.

        Each pass observes the local drivers and the file store, plans, carries out
        the plan and records its status; between passes the runner watches the
        running attempt until the plan's next wake-up or a driver exits.
        """
        status, self._uid = self._prepare()
        # The plan sees the job as it runs here: its checkpoints in the state directory.
        backend = LocalBackend(job=self._job_for_attempt(), store=self.paths.store,
                               launch_for=self._launch, on_event=self._on_event,
                               on_start=self._on_start, clock=self.clock,
                               standby_launch_for=self._launch_standby,
                               promotion_for=self._promotion, on_promote=self._on_promote)
        written: dict[str, Any] | None = None
        planned = status
        try:
            while True:
                observed = backend.observe(status)
                result = plan(observed, now=self.clock(), settings=LOCAL_SETTINGS)
                # From here on the pass's actions may have happened (a driver launched):
                # an interrupt before its status is written still records it (below).
                planned = result.status
                self._report_failure(status, result.status)
                backend.execute(result.actions)
                self._print_events(status, result.status)
                status = result.status
                body = status.to_dict()
                if body != written:
                    write_status(self.paths, status)
                    written = body
                    self.status_changed(status)
                phase = status.phase
                if phase is not None and (phase.is_terminal or phase is Phase.SUSPENDED) \
                        and not backend.live:
                    return self._finish(status)
                self._watch(backend, status=status, wake_after=result.requeue_after)
        except KeyboardInterrupt:
            backend.stop_all()
            if planned.to_dict() != written:
                write_status(self.paths, planned)
            raise
        finally:
            self._end_progress_line()

    def status_changed(self, status: JobStatus) -> None:
        """Called with every new status once ``status.json`` holds it.

        Nothing here: a supervisor built on the runner (and the tests that compare it
        with the operator, pass by pass) follows the lifecycle through this hook.
        """

    def _watch(self, backend: LocalBackend, *, status: JobStatus,
               wake_after: float | None) -> None:
        """Show the current attempt's progress until the next pass is due: the plan's
        wake-up, at most ``PASS_SECONDS``, or sooner when a driver exits."""
        wait = PASS_SECONDS if wake_after is None else min(wake_after, PASS_SECONDS)
        deadline = time.monotonic() + wait
        name = status.driver_pod
        followed = 0.0
        while True:
            now = time.monotonic()
            if name is not None and name in backend.live and now - followed >= TICK_SECONDS:
                followed = now
                self._follow(backend, name=name, attempt=status.attempt,
                             restarts=status.restarts)
            if backend.poll():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(EXIT_POLL_SECONDS, remaining))

    def _follow(self, backend: LocalBackend, *, name: str, attempt: int, restarts: int
                ) -> None:
        runtime = self._read_runtime(attempt)
        progress = Progress(state="starting")
        if runtime is not None:
            latest = runtime.latest_checkpoint
            progress = Progress(
                records=runtime.records_in, checkpoints=runtime.checkpoints.completed,
                latest_id=None if latest is None else latest.id,
                state="running" if runtime.started else "starting Spark")
        self._show_progress(attempt, progress, restarts)
        if self._should_kill(attempt=attempt, progress=progress):
            self.killed_once = True
            self._end_progress_line()
            self._say(f"killing the driver of attempt {attempt} (SIGKILL) after "
                      f"checkpoint {progress.latest_id}, to show recovery")
            backend.kill(name)

    def _read_runtime(self, attempt: int) -> DriverStatus | None:
        """The attempt's driver status; ``None`` until its driver wrote a readable one."""
        try:
            return read_status_file(self.paths.runtime_status(attempt))
        except (OSError, StatusFileError):
            return None

    def _should_kill(self, *, attempt: int, progress: Progress) -> bool:
        after = self.options.kill_driver_after
        started = self._attempt_started.get(attempt)
        if after is None or self.killed_once or started is None:
            return False
        return time.monotonic() - started >= after and progress.checkpoints >= 1

    def _finish(self, status: JobStatus) -> int:
        self._end_progress_line()
        phase = status.phase
        assert phase is not None
        succeeded = phase is Phase.SUCCEEDED
        latest = status.latest_checkpoint
        restored = status.restored_from
        self._say(f"job {self.job.metadata.name} {phase.value}: {status.message}")
        self._say(f"  attempts {status.attempt}, restarts {status.restarts}, latest checkpoint "
                  f"{latest.id if latest else '-'}, restored from "
                  f"{restored.id if restored and restored.id is not None else '-'}")
        self._say(f"  status: {self.paths.status}")
        if phase is Phase.FAILED:
            sys.stderr.write(f"cjob: error: job {self.job.metadata.name} failed: "
                             f"{status.message}\n")
            return 1
        return 0 if succeeded or phase is Phase.SUSPENDED else 1


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

