"""The embedded runner's backend: the lifecycle's world as local processes and a file store.

The operator observes driver pods and a checkpoint ConfigMap and acts on them through
the Kubernetes API; this module does the same on one machine, so that the embedded
runner can drive the very same :func:`cjob_lifecycle.plan.plan`:

* a driver "pod" is a local process group (``python -m job_runtime run``, started in
  its own session so that its JVM and Python workers go with it). It is Running from
  the moment it is spawned, Succeeded when it exits 0 and Failed otherwise, with the
  exit code a pod would report (128 + the signal for a killed process). A process
  starts at once, so the start timeout, which covers scheduling and image pulls on a
  cluster, has nothing to wait for here;
* the checkpoint store is the file store in ``<state-dir>/<name>/store`` (fence,
  completed checkpoints and the driver's restore report, as in the ConfigMap);
* ``EmitEvent`` becomes a line of the runner's output, and the Kubernetes objects the
  operator ensures (service account, role, service, network policy) have no local
  counterpart.

Every kind of action has its case in :meth:`LocalBackend.execute_one`, those with
nothing to do here too, so the type checker proves none is forgotten.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO, assert_never

from cjob_lifecycle.actions import (
    Action,
    AdvanceFence,
    CreateCleanupPod,
    CreateDriver,
    CreateSnapshot,
    CreateStandby,
    DeleteCheckpointStore,
    DeleteCleanupPod,
    DeleteDriver,
    DeleteExecutor,
    DeleteSnapshot,
    EmitEvent,
    EnsureCheckpointConfigMap,
    EnsureNetworkPolicy,
    EnsureRole,
    EnsureRoleBinding,
    EnsureService,
    EnsureServiceAccount,
    EnsureSparkAuthSecret,
    PromoteStandby,
    RemoveFinalizer,
    RequestCheckpoint,
    RequeueAfter,
    RetainCheckpointStore,
)
from cjob_lifecycle.observed import DriverPod, Observed, StoreOwnership, StoreView
from cjob_lifecycle.plan import PlanSettings
from cjob_spec.model import CheckpointedJob, spec_hash
from cjob_spec.reasons import Reason
from cjob_spec.standby_signal import (
    StandbyPromotion,
    StandbySignalError,
    read_ready,
    ready_path,
    write_signal,
)
from cjob_spec.status import CheckpointRef, JobStatus

Clock = Callable[[], datetime]

LOCAL_IMAGE = "local"
"""What stands for the driver's image: a local driver runs in this Python environment,
so a job needs no ``spec.image`` here (the plan fails jobs without an image)."""

LOCAL_SETTINGS = PlanSettings(
    pod_appear_grace_seconds=5.0,
    kill_grace_seconds=30.0,
    poll_seconds=1.0,
    network_policies=False,
)
"""The plan's timing knobs for local processes: a process is in the table the moment
it is spawned, and nothing needs a network policy."""

TERMINATION_GRACE_SECONDS = 30.0
"""Time a driver gets after SIGTERM before its group is killed (the pod's grace period)."""

SPAWN_FAILED_REASON = Reason.CONTAINER_CANNOT_RUN
"""The reason of a driver that could not be spawned: the pod reason the plan already
treats as more telling than an exit code."""


@dataclass(frozen=True, kw_only=True)
class LocalDriver:
    """What the runner knows of one attempt's driver process: the facts a pod reports.

    ``exit_code`` is ``None`` while the process runs; ``spawn_error`` is set when it
    could not be started at all. ``stop_deadline`` is when a requested stop turns
    into SIGKILL (a pod's ``deletionTimestamp``).
    """

    name: str
    attempt: int
    created_at: datetime
    spec_hash: str
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    message: str | None = None
    spawn_error: str | None = None
    stop_deadline: datetime | None = None
    promotion_file: Path | None = None
    """Set while the process is a standby driver: where its promotion is written."""
    ready: bool = False
    """A standby that said it is ready (Spark started, job code loaded)."""


def driver_pod(driver: LocalDriver) -> DriverPod:
    """The driver as the plan sees every driver: a pod with a phase and an exit code."""
    if driver.spawn_error is not None:
        phase, reason, message = "Failed", SPAWN_FAILED_REASON, driver.spawn_error
    elif driver.exit_code is None:
        phase, reason, message = "Running", None, None
    else:
        phase = "Succeeded" if driver.exit_code == 0 else "Failed"
        reason, message = None, driver.message
    return DriverPod(
        name=driver.name,
        attempt=driver.attempt,
        phase=phase,
        created_at=driver.created_at,
        started_at=driver.started_at,
        finished_at=driver.finished_at,
        exit_code=driver.exit_code,
        reason=reason,
        message=message,
        deletion_timestamp=driver.stop_deadline,
        spec_hash=driver.spec_hash,
        standby=driver.promotion_file is not None,
        ready=driver.ready,
    )


def exit_code_of(returncode: int) -> int:
    """A process's exit status as a container's: 128 + the signal that killed it."""
    return 128 - returncode if returncode < 0 else returncode


def last_error_line(log_path: Path) -> str | None:
    """The most telling line of a driver's log, for the one-line failure message."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if " ERROR job_runtime" in line:
            return line.split(": ", 1)[-1].strip() or None
    return None


def checkpoint_ref(*, checkpoint_id: int, path: str, timestamp: float,
                   size_bytes: int) -> CheckpointRef:
    """A completed checkpoint as the status records it (the operator's rounding)."""
    return CheckpointRef(
        id=checkpoint_id,
        path=path,
        completed_at=datetime.fromtimestamp(timestamp, UTC).replace(microsecond=0),
        size_bytes=size_bytes or None,
    )


def observe_file_store(directory: Path) -> StoreView:
    """The file store as the plan sees a checkpoint store: fence, latest, restore report."""
    from cjob_checkpoint.store.file import FileCheckpointStore, list_checkpoints, read_attempt

    if not directory.is_dir():
        return StoreView(exists=False)
    checkpoints = list_checkpoints(str(directory), skip_corrupt=True)
    latest = None
    latest_attempt = None
    if checkpoints:
        newest = checkpoints[-1]
        latest = checkpoint_ref(checkpoint_id=newest.checkpoint_id, path=newest.metadata_path,
                                timestamp=newest.timestamp, size_bytes=newest.size_bytes)
        latest_attempt = newest.attempt
    fence = read_attempt(str(directory))
    report = FileCheckpointStore(str(directory), retained=1, attempt=fence).restore_report()
    return StoreView(exists=True, ownership=StoreOwnership.THIS_JOB, latest=latest,
                     latest_attempt=latest_attempt, fence_attempt=fence, restore_report=report)


@dataclass(frozen=True, kw_only=True)
class DriverLaunch:
    """How to start one attempt's driver: its command line, environment and log file."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    log: Path
    promotion_file: Path | None = None
    """For a standby driver: the file its promotion is written to."""


LaunchFor = Callable[[CreateDriver], DriverLaunch]
"""Builds the launch of the driver a ``CreateDriver`` asks for (runtime arguments)."""
StandbyLaunchFor = Callable[[CreateStandby], DriverLaunch]
"""Builds the launch of a standby driver (runtime arguments and ``--standby FILE``)."""
PromotionFor = Callable[[PromoteStandby], StandbyPromotion]
"""What a promoted standby is told: its attempt, restore point and status file."""


class _Running:
    """A spawned driver process and the log file it writes to."""

    def __init__(self, *, process: subprocess.Popen[bytes], log: BinaryIO, log_path: Path
                 ) -> None:
        self.process = process
        self.log = log
        self.log_path = log_path


class LocalBackend:
    """Observes the local drivers and the file store, and carries out a plan's actions.

    Every action is idempotent, as the operator's are: creating a driver that exists,
    stopping one that stopped or fencing to the current attempt changes nothing.
    """

    def __init__(self, *, job: CheckpointedJob, store: Path, launch_for: LaunchFor,
                 on_event: Callable[[EmitEvent], None],
                 on_start: Callable[[CreateDriver, Path], None],
                 clock: Clock, standby_launch_for: StandbyLaunchFor | None = None,
                 promotion_for: PromotionFor | None = None,
                 on_promote: Callable[[PromoteStandby, Path], None] | None = None) -> None:
        self.job = job
        self.standby_launch_for = standby_launch_for
        self.promotion_for = promotion_for
        self.on_promote = on_promote
        self.store = store
        self.launch_for = launch_for
        self.on_event = on_event
        self.on_start = on_start
        self.clock = clock
        self.drivers: dict[str, LocalDriver] = {}
        self._running: dict[str, _Running] = {}

    # ------------------------------------------------------------------ observe

    def observe(self, status: JobStatus) -> Observed:
        """Everything the plan decides on, as of now."""
        self.poll()
        self._enforce_stop_deadlines()
        self._look_for_ready_standbys()
        pods = tuple(sorted((driver_pod(d) for d in self.drivers.values()),
                            key=lambda pod: (pod.attempt, pod.name)))
        return Observed(job=self.job, status=status, pods=pods,
                        store=observe_file_store(self.store), default_image=LOCAL_IMAGE)

    def poll(self) -> bool:
        """Record the drivers that exited since the last look; True if any did."""
        changed = False
        for name, running in list(self._running.items()):
            returncode = running.process.poll()
            if returncode is None:
                continue
            running.log.close()
            _kill_group(running.process.pid)
            del self._running[name]
            self.drivers[name] = replace(
                self.drivers[name], exit_code=exit_code_of(returncode),
                finished_at=self.clock(), message=last_error_line(running.log_path))
            changed = True
        return changed

    def _look_for_ready_standbys(self) -> None:
        for name, driver in list(self.drivers.items()):
            if driver.promotion_file is None or driver.ready or name not in self._running:
                continue
            try:
                ready = read_ready(ready_path(driver.promotion_file)) is not None
            except StandbySignalError:
                ready = False  # a file from another release: never promote blindly
            if ready:
                self.drivers[name] = replace(driver, ready=True)

    @property
    def live(self) -> list[str]:
        """Names of the drivers whose processes still run."""
        return sorted(self._running)

    def pid(self, name: str) -> int | None:
        running = self._running.get(name)
        return None if running is None else running.process.pid

    # ------------------------------------------------------------------ act

    def execute(self, actions: Sequence[Action]) -> None:
        for action in actions:
            self.execute_one(action)

    def execute_one(self, action: Action) -> None:
        match action:
            case EnsureCheckpointConfigMap():
                self.store.mkdir(parents=True, exist_ok=True)
            case AdvanceFence():
                from cjob_checkpoint.store.file import advance_attempt

                self.store.mkdir(parents=True, exist_ok=True)
                advance_attempt(str(self.store), action.attempt)
            case CreateDriver():
                self._create(action)
            case CreateStandby():
                self._create_standby(action)
            case PromoteStandby():
                self._promote(action)
            case DeleteDriver():
                self._delete(action)
            case RequestCheckpoint():
                from cjob_checkpoint.store.triggers import request_checkpoint

                request_checkpoint(str(self.store), nonce=action.nonce)
            case EmitEvent():
                self.on_event(action)
            case (EnsureServiceAccount() | EnsureRole() | EnsureRoleBinding() | EnsureService()
                  | EnsureNetworkPolicy() | EnsureSparkAuthSecret()):
                pass  # a cluster's objects: a local driver runs as the user, on this machine
            case (CreateCleanupPod() | DeleteCleanupPod() | DeleteCheckpointStore()
                  | RetainCheckpointStore() | DeleteExecutor() | RemoveFinalizer()):
                pass  # only a job being deleted gets these, and the runner deletes none
            case CreateSnapshot() | DeleteSnapshot():
                pass  # snapshot objects are a cluster's; cjob run refuses spec.snapshots
            case RequeueAfter():
                pass  # the caller's next wake-up
            case _:
                assert_never(action)

    def _create(self, action: CreateDriver) -> None:
        if action.name in self.drivers:
            return
        launch = self.launch_for(action)
        self.on_start(action, launch.log)
        self._spawn(name=action.name, attempt=action.attempt, launch=launch)

    def _create_standby(self, action: CreateStandby) -> None:
        if action.name in self.drivers or self.standby_launch_for is None:
            return
        launch = self.standby_launch_for(action)
        self._spawn(name=action.name, attempt=action.attempt, launch=launch)

    def _promote(self, action: PromoteStandby) -> None:
        """Tell the standby which attempt it now runs; from here on it is that attempt's
        driver (the plan advanced the fence before asking for this)."""
        driver = self.drivers.get(action.name)
        if driver is None or driver.promotion_file is None or self.promotion_for is None:
            return
        if action.name in self._running:
            write_signal(driver.promotion_file, self.promotion_for(action))
        self.drivers[action.name] = replace(driver, attempt=action.attempt,
                                            promotion_file=None, started_at=self.clock())
        if self.on_promote is not None:
            running = self._running.get(action.name)
            self.on_promote(action, running.log_path if running is not None else Path())

    def _spawn(self, *, name: str, attempt: int, launch: DriverLaunch) -> None:
        now = self.clock()
        driver = LocalDriver(name=name, attempt=attempt, created_at=now,
                             spec_hash=spec_hash(self.job),
                             promotion_file=launch.promotion_file)
        log = open(launch.log, "wb")  # noqa: SIM115 - closed when the process exits
        # Ctrl-C or SIGTERM waits until the driver is recorded: one landing after the
        # process started and before ``_running`` knew it would leave a driver that
        # ``stop_all`` never stops.
        with _signals_held():
            try:
                process = subprocess.Popen(list(launch.argv), stdout=log,
                                           stderr=subprocess.STDOUT, env=dict(launch.env),
                                           start_new_session=True)
            except OSError as exc:
                log.close()
                self.drivers[name] = replace(
                    driver,
                    spawn_error=f"could not start {launch.argv[0]}: {exc.strerror or exc}",
                    finished_at=now)
                return
            self.drivers[name] = replace(driver, started_at=now)
            self._running[name] = _Running(process=process, log=log, log_path=launch.log)

    def _delete(self, action: DeleteDriver) -> None:
        driver = self.drivers.get(action.name)
        if driver is None:
            return
        if action.name not in self._running:
            # A finished driver is only history: forget it (its log stays).
            del self.drivers[action.name]
            return
        if action.force:
            self.kill(action.name)
            return
        if driver.stop_deadline is None:
            deadline = self.clock() + timedelta(seconds=TERMINATION_GRACE_SECONDS)
            self.drivers[action.name] = replace(driver, stop_deadline=deadline)
            _signal_group(self._running[action.name].process.pid, signal.SIGTERM)

    def kill(self, name: str) -> None:
        """SIGKILL a driver's whole process group (a lost node, or a demonstration)."""
        running = self._running.get(name)
        if running is not None:
            _signal_group(running.process.pid, signal.SIGKILL)

    def _enforce_stop_deadlines(self) -> None:
        now = self.clock()
        for name in self.live:
            deadline = self.drivers[name].stop_deadline
            if deadline is not None and now >= deadline:
                self.kill(name)

    def stop_all(self, *, timeout: float = 30.0) -> None:
        """SIGTERM every live driver, wait for them, then kill what is left."""
        for name in self.live:
            _signal_group(self._running[name].process.pid, signal.SIGTERM)
        for name in self.live:
            process = self._running[name].process
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(process.pid)
                process.wait()
        self.poll()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive inside are delivered as the block ends.

    The signals are recorded by a handler of the block's own and raised again after
    it, not blocked: a blocked signal mask would be inherited by the driver started
    inside, which then could not be stopped. In the main thread only, where Python
    runs signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def record(signum: int, frame: object) -> None:
        arrived.append(signum)

    previous = {sig: signal.signal(sig, record) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in arrived:
            signal.raise_signal(signum)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(pgid: int) -> None:
    """Make sure nothing of a driver's process group (JVM, Python workers) outlives it."""
    _signal_group(pgid, signal.SIGKILL)
