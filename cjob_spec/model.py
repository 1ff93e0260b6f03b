"""The CheckpointedJob document as frozen dataclasses.

Values here are already validated and defaulted by ``cjob_spec.parse.parse_job``:
code that receives a ``CheckpointedJob`` never re-checks them. Field names are the
snake_case forms of the CR's camelCase fields.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from cjob_spec import defaults
from cjob_spec.durations import Duration
from cjob_spec.quantities import Memory

DEFAULT_MAX_PARALLELISM = defaults.MAX_PARALLELISM.default
DEFAULT_MASTER = defaults.SPARK_MASTER.default


class CheckpointMode(StrEnum):
    EXACTLY_ONCE = "ExactlyOnce"
    AT_LEAST_ONCE = "AtLeastOnce"

    @property
    def runtime_flag(self) -> str:
        return "exactly_once" if self is CheckpointMode.EXACTLY_ONCE else "at_least_once"


class RestartPolicyType(StrEnum):
    NEVER = "Never"
    """Never restart: the first end of the driver ends the job."""
    ON_FAILURE = "OnFailure"
    """Restart after failures; a driver that exits 0 finishes the job."""
    ALWAYS = "Always"
    """Restart after failures and after clean exits (a job that must keep running)."""


class OnUnreadable(StrEnum):
    FAIL = "Fail"
    FALLBACK_TO_PREVIOUS = "FallbackToPrevious"

    @property
    def runtime_flag(self) -> str:
        return "fail" if self is OnUnreadable.FAIL else "fallback"


class UpgradeMode(StrEnum):
    """How a running attempt makes way for a changed spec."""

    LAST_STATE = "LastState"
    """Stop the driver and start the new spec from the latest checkpoint: the records
    read since that checkpoint are read again (exactly once all the same)."""
    SNAPSHOT = "Snapshot"
    """Take a final checkpoint through the suspend path (its output committed by every
    sink, the driver then ends), then start the new spec from it: nothing is read
    twice. Falls back to ``LastState`` when no final checkpoint completes in time."""
    STATELESS = "Stateless"
    """Stop the driver and start the new spec with empty state: its sources read from
    their ``start`` again, its sinks send nothing the old state still owed, and the
    output already committed stays. For a change the old state does not fit and need
    not survive."""


DEFAULT_UPGRADE_MODE = UpgradeMode.LAST_STATE


class CheckpointCleanup(StrEnum):
    RETAIN = "Retain"
    """Keep checkpoint data in storage when the CheckpointedJob is deleted."""
    DELETE = "Delete"
    """Delete the job's checkpoint directory when the CheckpointedJob is deleted."""


class AutoscalerMode(StrEnum):
    """What the autoscaler does with the parallelism it recommends."""

    OFF = "Off"
    RECOMMEND = "Recommend"
    """Say it (``status.autoscaler``, a ``ScalingRecommended`` Event); change nothing."""
    APPLY = "Apply"
    """Run the job at it, through the job's upgrade mode, once it held for the
    stabilization time."""


class StateBackend(StrEnum):
    HASHMAP = "hashmap"
    """Keyed state in memory; every checkpoint writes it whole."""
    ROCKSDB = "rocksdb"
    """Keyed state on local disk (may exceed memory); checkpoints upload only new files."""


DEFAULT_CHECKPOINT_MODE = CheckpointMode(defaults.CHECKPOINT_MODE.default)
DEFAULT_RESTART_TYPE = RestartPolicyType(defaults.RESTART_TYPE.default)
DEFAULT_ON_UNREADABLE = OnUnreadable(defaults.ON_UNREADABLE.default)
DEFAULT_CLEANUP = CheckpointCleanup(defaults.CLEANUP_CHECKPOINTS.default)
DEFAULT_STATE_BACKEND = StateBackend(defaults.STATE_BACKEND.default)
DEFAULT_AUTOSCALER_MODE = AutoscalerMode(defaults.AUTOSCALER_MODE.default)
"""The enums' defaults, written in ``cjob_spec.defaults`` as the document writes them."""


@dataclass(frozen=True)
class Metadata:
    name: str
    namespace: str = "default"
    uid: str | None = None
    generation: int = 0
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


S3_CODE_PREFIX = "s3://"
"""``spec.job.pythonPath`` entries starting with this name a zip archive of the job's
modules on S3; every other entry is a directory (or archive) on the driver's disk."""


def is_s3_code(entry: str) -> bool:
    """Whether a ``pythonPath`` entry names a zip archive on S3 (fetched by the driver)."""
    return entry.startswith(S3_CODE_PREFIX)


@dataclass(frozen=True)
class JobCode:
    """Where the user's ``build(p: Pipeline)`` function lives and what it is given."""

    entrypoint: str
    python_path: tuple[str, ...] = ()
    """Directories on the driver (a baked image, a mounted ConfigMap or volume) and
    ``s3://bucket/key.zip`` archives, in the order they go on ``sys.path``. The runtime
    makes every entry importable on the executors too."""
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def uses_s3(self) -> bool:
        return any(is_s3_code(entry) for entry in self.python_path)

    @property
    def module(self) -> str:
        return self.entrypoint.partition(":")[0]

    @property
    def function(self) -> str:
        return self.entrypoint.partition(":")[2]


@dataclass(frozen=True)
class DriverResources:
    cores: int = defaults.DRIVER_CORES.default
    memory: Memory = field(default_factory=defaults.DRIVER_MEMORY.default_value)


@dataclass(frozen=True)
class ExecutorResources:
    instances: int = defaults.EXECUTOR_INSTANCES.default
    cores: int = defaults.EXECUTOR_CORES.default
    memory: Memory = field(default_factory=defaults.EXECUTOR_MEMORY.default_value)


@dataclass(frozen=True)
class SparkSpec:
    master: str = DEFAULT_MASTER
    """``k8s`` (executors are pods created by Spark) or ``local[N]``/``local[*]``/``local[N,F]``."""
    conf: Mapping[str, str] = field(default_factory=dict)
    driver: DriverResources = field(default_factory=DriverResources)
    executor: ExecutorResources = field(default_factory=ExecutorResources)

    @property
    def is_kubernetes(self) -> bool:
        return self.master == "k8s"


@dataclass(frozen=True)
class S3Settings:
    """How the job reaches S3: its ``s3://`` checkpoint storage and ``s3://`` code
    archives in ``spec.job.pythonPath`` both use these settings."""

    endpoint: str | None = None
    region: str | None = None
    credentials_secret: str | None = None
    """Name of a Secret in the job's namespace with keys ``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY``."""


@dataclass(frozen=True)
class CheckpointSpec:
    storage: str
    s3: S3Settings | None = None
    interval: Duration = field(default_factory=defaults.CHECKPOINT_INTERVAL.default_value)
    min_pause: Duration = field(default_factory=defaults.CHECKPOINT_MIN_PAUSE.default_value)
    timeout: Duration = field(default_factory=defaults.CHECKPOINT_TIMEOUT.default_value)
    mode: CheckpointMode = DEFAULT_CHECKPOINT_MODE
    unaligned: bool = defaults.CHECKPOINT_UNALIGNED.default
    retained: int = defaults.RETAINED.default
    tolerable_failures: int = defaults.TOLERABLE_FAILURES.default
    trigger_nonce: str | None = None
    """``spec.checkpoint.triggerNonce``: set it to a new value to ask for one checkpoint
    now (like a savepoint trigger). The operator records the last nonce it handled in
    ``status.lastTriggerNonce``; changing it does not restart the job."""


@dataclass(frozen=True)
class Backoff:
    initial: Duration = field(default_factory=defaults.BACKOFF_INITIAL.default_value)
    max: Duration = field(default_factory=defaults.BACKOFF_MAX.default_value)
    multiplier: float = defaults.BACKOFF_MULTIPLIER.default


@dataclass(frozen=True)
class RestartPolicy:
    type: RestartPolicyType = DEFAULT_RESTART_TYPE
    max_restarts: int = defaults.MAX_RESTARTS.default
    backoff: Backoff = field(default_factory=Backoff)
    reset_after: Duration = field(default_factory=defaults.RESET_AFTER.default_value)
    """An attempt that ran this long before failing counts as healthy: the restart
    count starts again from zero."""
    start_timeout: Duration = field(default_factory=defaults.START_TIMEOUT.default_value)
    """A driver that has not started running after this long counts as failed."""


@dataclass(frozen=True)
class RestoreSource:
    """Where a fresh start restores from: the latest checkpoint, an id, a path, or a
    CheckpointedJobSnapshot (``snapshot``: its name, which the operator resolves to the
    copy's ``_metadata`` once the snapshot is Completed)."""

    kind: Literal["latest", "id", "path", "snapshot"] = "latest"
    checkpoint_id: int | None = None
    path: str | None = None
    snapshot: str | None = None

    @property
    def pointer(self) -> str:
        """The value of the runtime's ``--restore`` flag (a snapshot's is its path,
        which only the supervisor that resolved it knows)."""
        if self.kind == "id":
            return str(self.checkpoint_id)
        if self.kind == "path":
            return str(self.path)
        return "latest"


@dataclass(frozen=True)
class RestoreSpec:
    source: RestoreSource = field(default_factory=RestoreSource)
    on_unreadable: OnUnreadable = DEFAULT_ON_UNREADABLE
    allow_foreign_job: bool = defaults.ALLOW_FOREIGN_JOB.default
    """Whether ``source`` may be a checkpoint another job wrote (a deleted job's
    retained checkpoints, say). Off by default, so a mistyped path never continues a
    stranger's state and output."""
    allow_non_restored_state: bool = defaults.ALLOW_NON_RESTORED_STATE.default
    """Whether a restore may drop state the job's pipeline no longer maps (an operator
    renamed, removed or changed): those operators start empty and an Event lists
    them. Off by default: such a restore fails with ``IncompatibleState``."""
    redeploy_nonce: str | None = None
    """``spec.restore.redeployNonce``: a new value starts the job again from ``source``
    (never ``latest``), whatever checkpoints it took since; every attempt restores
    ``source`` until one completes a checkpoint of its own. Flink's operator calls the
    same request ``savepointRedeployNonce``."""


@dataclass(frozen=True)
class StateSpec:
    backend: StateBackend = DEFAULT_STATE_BACKEND


@dataclass(frozen=True)
class SnapshotSchedule:
    """CheckpointedJobSnapshots the operator takes of the job by itself: one every
    ``interval`` while it runs, and one of the final checkpoint of an
    ``upgradeMode: Snapshot`` upgrade with ``before_upgrade``; the oldest completed ones
    beyond ``max_count``, or older than ``max_age``, are deleted (not part of
    ``spec_hash``)."""

    interval: Duration = field(default_factory=defaults.SNAPSHOTS_INTERVAL.default_value)
    max_count: int = defaults.SNAPSHOTS_MAX_COUNT.default
    max_age: Duration = field(default_factory=defaults.SNAPSHOTS_MAX_AGE.default_value)
    before_upgrade: bool = defaults.SNAPSHOTS_BEFORE_UPGRADE.default

    @property
    def periodic(self) -> bool:
        return self.interval.seconds > 0

    @property
    def in_use(self) -> bool:
        """Whether the operator takes any snapshot of the job by itself."""
        return self.periodic or self.before_upgrade


@dataclass(frozen=True)
class RollbackSpec:
    """Return to the last spec that ran when a new one fails, or completes no checkpoint
    within ``readiness_timeout`` (the operator; not part of ``spec_hash``)."""

    enabled: bool = defaults.ROLLBACK_ENABLED.default
    readiness_timeout: Duration = field(
        default_factory=defaults.ROLLBACK_READINESS_TIMEOUT.default_value)


@dataclass(frozen=True)
class HealthSpec:
    """When a job that still runs counts as failed (``spec.health``): no checkpoint for
    ``checkpoint_stall_intervals`` intervals, or a sink that cannot deliver for
    ``sink_stall_timeout``. Either restarts it from the latest checkpoint."""

    checkpoint_stall_intervals: int = defaults.CHECKPOINT_STALL_INTERVALS.default
    sink_stall_timeout: Duration = field(
        default_factory=defaults.SINK_STALL_TIMEOUT.default_value)

    @property
    def is_default(self) -> bool:
        return self == HealthSpec()


@dataclass(frozen=True)
class AutoscalerSpec:
    """``spec.autoscaler``: a parallelism chosen from the sources' lag and the job's
    measured throughput, between ``min`` and ``max``."""

    mode: AutoscalerMode = DEFAULT_AUTOSCALER_MODE
    min: int = defaults.AUTOSCALER_MIN.default
    max: int = defaults.AUTOSCALER_MAX.default
    """0: the job's ``maxParallelism``."""
    target_lag: Duration = field(default_factory=defaults.AUTOSCALER_TARGET_LAG.default_value)
    target_utilization: float = defaults.AUTOSCALER_TARGET_UTILIZATION.default
    stabilization: Duration = field(
        default_factory=defaults.AUTOSCALER_STABILIZATION.default_value)

    @property
    def enabled(self) -> bool:
        return self.mode is not AutoscalerMode.OFF

    def upper(self, max_parallelism: int) -> int:
        """The largest parallelism it may choose."""
        return min(self.max or max_parallelism, max_parallelism)


@dataclass(frozen=True)
class StandbySpec:
    """A warm standby driver: a second driver process whose Spark is started and whose
    job code is loaded, waiting to take over when the active driver ends.

    Promoting it skips the driver's start (process, imports, Spark), which is most of a
    restart; it advances the store's fence first, so the driver it replaces can no
    longer commit. It costs a second driver's memory and cores while the job runs.
    """

    enabled: bool = defaults.STANDBY_ENABLED.default


@dataclass(frozen=True)
class CleanupPolicy:
    checkpoints: CheckpointCleanup = DEFAULT_CLEANUP


PERSISTENT_VOLUME_KINDS = ("persistentVolumeClaim", "hostPath", "nfs")
"""Volume sources whose files outlive the pod (and that Spark can mount into executors)."""


@dataclass(frozen=True)
class PodSettings:
    """What every pod of the job runs with (the driver, a standby driver, the executors
    Spark creates), and the templates of one role's pods, passed to the pods as given.

    Volumes, variables, tolerations, affinity and templates are Kubernetes objects: the
    parser checks their shape (names, paths, known keys) and that a template leaves
    alone what the operator sets; the API server validates the rest when the pod is
    created, so they stay documents here.
    """

    volumes: tuple[Mapping[str, Any], ...] = ()
    volume_mounts: tuple[Mapping[str, Any], ...] = ()
    env: tuple[Mapping[str, Any], ...] = ()
    """Kubernetes ``EnvVar`` objects for the job's containers (before the operator's own)."""
    env_from: tuple[Mapping[str, Any], ...] = ()
    """Kubernetes ``EnvFromSource`` objects: every key of a Secret or ConfigMap."""
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets in the job's namespace the kubelet pulls the job's image with."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] | None = None
    priority_class_name: str | None = None
    driver_template: Mapping[str, Any] | None = None
    """A Pod (``metadata``, ``spec``) the driver and standby pods are built on: what it
    sets stays unless the operator sets it (the parser refuses such fields)."""
    executor_template: Mapping[str, Any] | None = None
    """Likewise for the executor pods Spark creates."""
    security_context: Mapping[str, Any] = field(default_factory=dict)
    """``spec.pod.securityContext`` as given: it adjusts the restricted defaults of the
    driver's and executors' pod security context (``cjob_spec.security``)."""
    container_security_context: Mapping[str, Any] = field(default_factory=dict)
    """``spec.pod.containerSecurityContext`` as given, for their containers."""

    @property
    def is_default(self) -> bool:
        return self == PodSettings()

    def document(self) -> dict[str, Any]:
        """The settings in the CR's camelCase form, without the unset ones."""
        document: dict[str, Any] = {
            "volumes": [dict(v) for v in self.volumes],
            "volumeMounts": [dict(m) for m in self.volume_mounts],
            "env": [dict(v) for v in self.env],
            "envFrom": [dict(v) for v in self.env_from],
            "imagePullSecrets": [{"name": name} for name in self.image_pull_secrets],
            "nodeSelector": dict(self.node_selector),
            "tolerations": [dict(t) for t in self.tolerations],
            "affinity": dict(self.affinity) if self.affinity is not None else None,
            "priorityClassName": self.priority_class_name,
            "securityContext": dict(self.security_context),
            "containerSecurityContext": dict(self.container_security_context),
            "driverTemplate": self.driver_template,
            "executorTemplate": self.executor_template,
        }
        return {key: value for key, value in document.items() if value}

    def volume(self, name: str) -> Mapping[str, Any] | None:
        return next((v for v in self.volumes if v.get("name") == name), None)

    def mount_holding(self, path: str) -> Mapping[str, Any] | None:
        """The volume mount whose directory contains ``path`` (the deepest one)."""
        best: Mapping[str, Any] | None = None
        for mount in self.volume_mounts:
            root = str(mount["mountPath"]).rstrip("/") or "/"
            inside = path == root or path.startswith(root if root == "/" else root + "/")
            if inside and (best is None or len(root) > len(str(best["mountPath"]))):
                best = mount
        return best


def volume_kind(volume: Mapping[str, Any]) -> str | None:
    """The volume source's key (``persistentVolumeClaim``, ``emptyDir``...), if any."""
    return next((key for key in volume if key != "name"), None)


def ephemeral_storage_problem(spec: JobSpec) -> str | None:
    """Why ``file://`` checkpoints of this spec would not survive the driver pod, if so.

    A driver pod writes ``file://`` checkpoints into its own filesystem unless a
    persistent volume is mounted there; the next attempt's pod would then find the
    checkpoint the store points to gone. ``cjob run`` keeps them on the local disk and
    does not need this check; the operator reports it as a Warning.
    """
    storage = spec.checkpoint.storage
    if not storage.startswith("file://"):
        return None
    path = storage[len("file://"):] or "/"
    advice = ("mount a persistent volume there (spec.pod.volumes and spec.pod.volumeMounts) "
              "or use s3:// storage")
    mount = spec.pod.mount_holding(path)
    if mount is None:
        return (f"checkpoint storage {storage} is inside the driver container: a restarted "
                f"driver cannot read it; {advice}")
    volume = spec.pod.volume(str(mount["name"])) or {}
    kind = volume_kind(volume)
    if kind not in PERSISTENT_VOLUME_KINDS:
        return (f"checkpoint storage {storage} is on volume {mount['name']!r} of kind "
                f"{kind or 'unknown'}, which is deleted with the pod; {advice}")
    if mount.get("readOnly"):
        return f"checkpoint storage {storage} is on a read-only mount of {mount['name']!r}"
    return None


@dataclass(frozen=True)
class JobSpec:
    job: JobCode
    checkpoint: CheckpointSpec
    image: str | None = None
    """The driver's (and executors') image; ``None``: the runtime image the operator
    was installed with. ``cjob run`` runs no image at all."""
    parallelism: int = defaults.PARALLELISM.default
    max_parallelism: int = DEFAULT_MAX_PARALLELISM
    spark: SparkSpec = field(default_factory=SparkSpec)
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    restore: RestoreSpec = field(default_factory=RestoreSpec)
    suspend: bool = defaults.SUSPEND.default
    upgrade_mode: UpgradeMode = DEFAULT_UPGRADE_MODE
    """How a spec change reaches a running attempt (not part of ``spec_hash``: changing
    only this changes nothing that runs)."""
    standby: StandbySpec = field(default_factory=StandbySpec)
    cleanup_policy: CleanupPolicy = field(default_factory=CleanupPolicy)
    pod: PodSettings = field(default_factory=PodSettings)
    rollback: RollbackSpec = field(default_factory=RollbackSpec)
    snapshots: SnapshotSchedule = field(default_factory=SnapshotSchedule)
    state: StateSpec = field(default_factory=StateSpec)
    health: HealthSpec = field(default_factory=HealthSpec)
    autoscaler: AutoscalerSpec = field(default_factory=AutoscalerSpec)
    """Not part of ``spec_hash``: the parallelism it applies is, through the job it runs."""


@dataclass(frozen=True)
class CheckpointedJob:
    metadata: Metadata
    spec: JobSpec
    api_version: str = "checkpointed.io/v1alpha1"
    kind: str = "CheckpointedJob"

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace


def spec_hash(job: CheckpointedJob) -> str:
    """A short hash of the parts of the spec that a running attempt depends on.

    The operator stamps it on each driver pod; when the job's hash no longer matches
    the running pod's, the job is upgraded (stopped and restarted from its latest
    checkpoint). Fields that do not need a new driver are left out on purpose:
    ``suspend``, ``restartPolicy``, ``restore`` (it only picks the starting point of a
    fresh start), ``cleanupPolicy``, ``upgradeMode``, ``rollback``, ``snapshots``,
    ``autoscaler`` (the parallelism it applies is hashed, through the job it runs) and
    ``checkpoint.triggerNonce``.
    """
    spec = job.spec
    checkpoint = spec.checkpoint
    s3 = checkpoint.s3
    document: dict[str, Any] = {
        "image": spec.image,
        "entrypoint": spec.job.entrypoint,
        "pythonPath": list(spec.job.python_path),
        "args": spec.job.args,
        "parallelism": spec.parallelism,
        "maxParallelism": spec.max_parallelism,
        "master": spec.spark.master,
        "conf": dict(spec.spark.conf),
        "driver": [spec.spark.driver.cores, spec.spark.driver.memory.bytes],
        "executor": [
            spec.spark.executor.instances,
            spec.spark.executor.cores,
            spec.spark.executor.memory.bytes,
        ],
        "storage": checkpoint.storage,
        "s3": None if s3 is None else [s3.endpoint, s3.region, s3.credentials_secret],
        "interval": checkpoint.interval.seconds,
        "minPause": checkpoint.min_pause.seconds,
        "timeout": checkpoint.timeout.seconds,
        "mode": checkpoint.mode.value,
        "unaligned": checkpoint.unaligned,
        "retained": checkpoint.retained,
        "tolerableFailures": checkpoint.tolerable_failures,
        "onUnreadable": spec.restore.on_unreadable.value,
    }
    if not spec.pod.is_default:   # only then: the hash of every older spec stays the same
        document["pod"] = spec.pod.document()
    if spec.state.backend is not DEFAULT_STATE_BACKEND:   # likewise
        document["stateBackend"] = spec.state.backend.value
    if not spec.health.is_default:   # likewise
        document["health"] = [spec.health.checkpoint_stall_intervals,
                              spec.health.sink_stall_timeout.seconds]
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode()).hexdigest()[:16]
