"""Every default and bound of the CheckpointedJob spec, written once.

The model's dataclasses take their defaults from here, the parser its defaults and
bounds, the runtime's command line its flag defaults, and the CRD's schema
(``cjob_spec.schema.fields``) what it states, so that ``kubectl get -o yaml`` shows what
a job runs with and the API server refuses what the parser refuses;
``tests/cjob_spec/test_crd_defaults.py`` still walks the rendered CRD and compares
every default and bound it states with this module.

Each field is named by its path in the document, as the parser's errors name it.
Defaults are written in the document's form: durations and memory quantities as
text, enums as their values.
"""

from __future__ import annotations

from dataclasses import dataclass

from cjob_spec.durations import MAX_DURATION, Duration
from cjob_spec.quantities import Memory


@dataclass(frozen=True, kw_only=True)
class SpecField:
    path: str
    """Where the field is in the document, e.g. ``spec.checkpoint.retained``."""

    @property
    def key(self) -> str:
        """The field's own name in its section (``retained``)."""
        return self.path.rpartition(".")[2]


@dataclass(frozen=True, kw_only=True)
class IntegerField(SpecField):
    default: int
    minimum: int
    maximum: int


@dataclass(frozen=True, kw_only=True)
class NumberField(SpecField):
    default: float
    minimum: float
    maximum: float


@dataclass(frozen=True, kw_only=True)
class DurationField(SpecField):
    default: str
    minimum: str = "0s"
    """The shortest duration accepted (inclusive)."""
    positive: bool = False
    """Whether zero is refused too (a timeout of zero would fire at once)."""
    maximum: str = MAX_DURATION.text

    def default_value(self) -> Duration:
        return Duration.parse(self.default)

    @property
    def minimum_seconds(self) -> float:
        return Duration.parse(self.minimum).seconds


@dataclass(frozen=True, kw_only=True)
class MemoryField(SpecField):
    default: str

    def default_value(self) -> Memory:
        return Memory.parse(self.default)


@dataclass(frozen=True, kw_only=True)
class TextField(SpecField):
    """A string or an enum's value."""

    default: str


@dataclass(frozen=True, kw_only=True)
class FlagField(SpecField):
    default: bool


MAX_PARALLELISM_LIMIT = 32768
"""Upper bound of ``maxParallelism`` (number of key groups), as in Flink."""

PARALLELISM = IntegerField(path="spec.parallelism", default=1, minimum=1,
                           maximum=MAX_PARALLELISM_LIMIT)
"""The parser bounds it by the job's own ``maxParallelism``, which is at most this."""
MAX_PARALLELISM = IntegerField(path="spec.maxParallelism", default=128, minimum=1,
                               maximum=MAX_PARALLELISM_LIMIT)

SPARK_MASTER = TextField(path="spec.spark.master", default="k8s")
DRIVER_CORES = IntegerField(path="spec.spark.driver.cores", default=1, minimum=1, maximum=256)
DRIVER_MEMORY = MemoryField(path="spec.spark.driver.memory", default="1Gi")
EXECUTOR_INSTANCES = IntegerField(path="spec.spark.executor.instances", default=1, minimum=1,
                                  maximum=10000)
EXECUTOR_CORES = IntegerField(path="spec.spark.executor.cores", default=1, minimum=1,
                              maximum=256)
EXECUTOR_MEMORY = MemoryField(path="spec.spark.executor.memory", default="1Gi")

CHECKPOINT_INTERVAL = DurationField(path="spec.checkpoint.interval", default="10s",
                                    minimum="10ms")
"""Shorter intervals would trigger checkpoints faster than barriers can travel."""
CHECKPOINT_MIN_PAUSE = DurationField(path="spec.checkpoint.minPause", default="0s")
CHECKPOINT_TIMEOUT = DurationField(path="spec.checkpoint.timeout", default="10m", positive=True)
CHECKPOINT_MODE = TextField(path="spec.checkpoint.mode", default="ExactlyOnce")
CHECKPOINT_UNALIGNED = FlagField(path="spec.checkpoint.unaligned", default=False)
RETAINED = IntegerField(path="spec.checkpoint.retained", default=3, minimum=1, maximum=100)
"""At most 100: checkpoint pointers live in one ConfigMap, which must stay far below 1 MiB."""
TOLERABLE_FAILURES = IntegerField(path="spec.checkpoint.tolerableFailures", default=0,
                                  minimum=0, maximum=10000)
CHECKPOINT_STALL_INTERVALS = IntegerField(path="spec.health.checkpointStallIntervals",
                                          default=5, minimum=0, maximum=10000)
"""Checkpoint intervals without a completed checkpoint after which a running job is
restarted as stalled (0: never); see ``job_runtime.coordinator.stall_watch``."""
SINK_STALL_TIMEOUT = DurationField(path="spec.health.sinkStallTimeout", default="10m")
"""How long a sink may fail to deliver a completed checkpoint's output before the job
restarts as stalled (0s: never)."""

RESTART_TYPE = TextField(path="spec.restartPolicy.type", default="OnFailure")
MAX_RESTARTS = IntegerField(path="spec.restartPolicy.maxRestarts", default=5, minimum=0,
                            maximum=10000)
"""More restarts than this are no policy, and the backoff computation walks them one by one."""
BACKOFF_INITIAL = DurationField(path="spec.restartPolicy.backoff.initial", default="10s")
BACKOFF_MAX = DurationField(path="spec.restartPolicy.backoff.max", default="5m")
BACKOFF_MULTIPLIER = NumberField(path="spec.restartPolicy.backoff.multiplier", default=2.0,
                                 minimum=1.0, maximum=100.0)
RESET_AFTER = DurationField(path="spec.restartPolicy.resetAfter", default="10m", positive=True)
START_TIMEOUT = DurationField(path="spec.restartPolicy.startTimeout", default="5m",
                              positive=True)

RESTORE_FROM = TextField(path="spec.restore.from", default="latest")
ON_UNREADABLE = TextField(path="spec.restore.onUnreadable", default="Fail")
ALLOW_FOREIGN_JOB = FlagField(path="spec.restore.allowForeignJob", default=False)
ALLOW_NON_RESTORED_STATE = FlagField(path="spec.restore.allowNonRestoredState", default=False)

SUSPEND = FlagField(path="spec.suspend", default=False)
UPGRADE_MODE = TextField(path="spec.upgradeMode", default="LastState")
STATE_BACKEND = TextField(path="spec.state.backend", default="hashmap")
STANDBY_ENABLED = FlagField(path="spec.standby.enabled", default=False)
SNAPSHOTS_INTERVAL = DurationField(path="spec.snapshots.interval", default="0s")
"""0s: no periodic snapshots."""
SNAPSHOTS_MAX_COUNT = IntegerField(path="spec.snapshots.maxCount", default=5, minimum=1,
                                   maximum=100)
SNAPSHOTS_MAX_AGE = DurationField(path="spec.snapshots.maxAge", default="0s")
"""0s: snapshots are not pruned by age."""
SNAPSHOTS_BEFORE_UPGRADE = FlagField(path="spec.snapshots.beforeUpgrade", default=False)
ROLLBACK_ENABLED = FlagField(path="spec.rollback.enabled", default=False)
ROLLBACK_READINESS_TIMEOUT = DurationField(path="spec.rollback.readinessTimeout", default="5m",
                                           positive=True)
CLEANUP_CHECKPOINTS = TextField(path="spec.cleanupPolicy.checkpoints", default="Retain")
AUTOSCALER_MODE = TextField(path="spec.autoscaler.mode", default="Off")
AUTOSCALER_MIN = IntegerField(path="spec.autoscaler.min", default=1, minimum=1, maximum=32768)
AUTOSCALER_MAX = IntegerField(path="spec.autoscaler.max", default=0, minimum=0, maximum=32768)
"""0: the job's ``maxParallelism``."""
AUTOSCALER_TARGET_LAG = DurationField(path="spec.autoscaler.targetLag", default="1m",
                                      positive=True)
"""The backlog the job should be able to read away within this long, besides keeping up."""
AUTOSCALER_TARGET_UTILIZATION = NumberField(path="spec.autoscaler.targetUtilization",
                                            default=0.7, minimum=0.1, maximum=1.0)
"""The share of its measured capacity a parallelism is chosen to run at: the headroom."""
AUTOSCALER_STABILIZATION = DurationField(path="spec.autoscaler.stabilization", default="5m")
"""How long a recommendation must hold before it is applied, and the least time between
two scalings."""

SPEC_FIELDS: tuple[SpecField, ...] = (
    PARALLELISM,
    MAX_PARALLELISM,
    SPARK_MASTER,
    DRIVER_CORES,
    DRIVER_MEMORY,
    EXECUTOR_INSTANCES,
    EXECUTOR_CORES,
    EXECUTOR_MEMORY,
    CHECKPOINT_INTERVAL,
    CHECKPOINT_MIN_PAUSE,
    CHECKPOINT_TIMEOUT,
    CHECKPOINT_MODE,
    CHECKPOINT_UNALIGNED,
    RETAINED,
    TOLERABLE_FAILURES,
    CHECKPOINT_STALL_INTERVALS,
    SINK_STALL_TIMEOUT,
    RESTART_TYPE,
    MAX_RESTARTS,
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    BACKOFF_MULTIPLIER,
    RESET_AFTER,
    START_TIMEOUT,
    RESTORE_FROM,
    ON_UNREADABLE,
    ALLOW_FOREIGN_JOB,
    ALLOW_NON_RESTORED_STATE,
    SUSPEND,
    UPGRADE_MODE,
    STATE_BACKEND,
    STANDBY_ENABLED,
    SNAPSHOTS_INTERVAL,
    SNAPSHOTS_MAX_COUNT,
    SNAPSHOTS_MAX_AGE,
    SNAPSHOTS_BEFORE_UPGRADE,
    ROLLBACK_ENABLED,
    ROLLBACK_READINESS_TIMEOUT,
    CLEANUP_CHECKPOINTS,
    AUTOSCALER_MODE,
    AUTOSCALER_MIN,
    AUTOSCALER_MAX,
    AUTOSCALER_TARGET_LAG,
    AUTOSCALER_TARGET_UTILIZATION,
    AUTOSCALER_STABILIZATION,
)
"""Every field of the spec that has a default (the CRD test walks them)."""
