"""The schema of a CheckpointedJob's ``spec``, section by section.

Defaults and bounds come from ``cjob_spec.defaults`` and enum values from the model's
enums (through ``cjob_spec.schema.fields``); patterns from ``cjob_spec.schema.patterns``;
what is written here is the shape, the descriptions ``kubectl explain`` shows and the
rules that only the API server can check before the parser runs.
"""

from __future__ import annotations

from cjob_spec import defaults
from cjob_spec.model import (
    AutoscalerMode,
    CheckpointCleanup,
    CheckpointMode,
    OnUnreadable,
    RestartPolicyType,
    StateBackend,
    UpgradeMode,
)
from cjob_spec.schema import patterns
from cjob_spec.schema.fields import choice, duration, flag, integer, memory, number
from cjob_spec.schema.openapi import (
    ArraySchema,
    IntOrStringSchema,
    ObjectSchema,
    Rule,
    Schema,
    StringSchema,
    cel_matches,
)
from cjob_spec.schema.pod_schema import POD

LEADING_SPACE = r"^\s"
TRAILING_SPACE = r"\s$"

JOB = ObjectSchema(
    required=("entrypoint",),
    properties={
        "entrypoint": StringSchema(
            description="module:function of the job's build(p: Pipeline) function.",
            max_length=256, pattern=patterns.ENTRYPOINT),
        "pythonPath": ArraySchema(
            description="Added to sys.path on the driver and the executors, in order: "
            "directories on the driver (in the image, or a mounted ConfigMap or volume) and "
            "s3://bucket/path/code.zip archives. The driver ships them to the executors.",
            max_items=64,
            items=StringSchema(min_length=1, max_length=1024, rules=(
                Rule(rule=f"!{cel_matches(patterns.URL_SCHEME)} || "
                          f"{cel_matches(patterns.S3_CODE_ARCHIVE)}",
                     message="must be a directory path or an s3://bucket/path/code.zip archive"),
                Rule(rule=f"!{cel_matches(LEADING_SPACE)} && !{cel_matches(TRAILING_SPACE)}",
                     message="must not start or end with spaces"),
            ))),
        "args": ObjectSchema(
            description="Free-form arguments, available to the job as p.args.",
            preserve_unknown=True),
    },
)


def _memory_text(gibibytes: int) -> str:
    return (f"Memory quantity: {gibibytes}Gi, 512Mi (Kubernetes) or {gibibytes}g, 512m "
            "(Spark).")


SPARK = ObjectSchema(
    defaulted=True,
    properties={
        "master": StringSchema(
            description="k8s (executors are pods created by Spark) or local[N], local[*], "
            "local[N,F] (everything in the driver pod).",
            max_length=32, default=defaults.SPARK_MASTER.default,
            rules=(Rule(rule=f"self == 'k8s' || {cel_matches(patterns.LOCAL_MASTER)}",
                        message="must be 'k8s', 'local[N]', 'local[*]' or 'local[N,F]'"),)),
        "conf": ObjectSchema(
            description="Extra Spark configuration. Keys start with 'spark.'; keys the "
            "operator manages (master, driver host and ports, sizing...) are refused.",
            max_properties=256, values=IntOrStringSchema()),
        "driver": ObjectSchema(defaulted=True, properties={
            "cores": integer(defaults.DRIVER_CORES),
            "memory": memory(defaults.DRIVER_MEMORY, _memory_text(2)),
        }),
        "executor": ObjectSchema(defaulted=True, properties={
            "instances": integer(defaults.EXECUTOR_INSTANCES),
            "cores": integer(defaults.EXECUTOR_CORES),
            "memory": memory(defaults.EXECUTOR_MEMORY, _memory_text(4)),
        }),
    },
)

CHECKPOINT = ObjectSchema(
    required=("storage",),
    rules=(
        Rule(rule="!has(self.unaligned) || !self.unaligned || !has(self.mode) || "
                  f"self.mode == '{CheckpointMode.EXACTLY_ONCE.value}'",
             message="unaligned checkpoints need mode ExactlyOnce"),
        Rule(rule=f"!has(self.retained) || self.retained >= {defaults.RETAINED.minimum}",
             message=f"retained must be >= {defaults.RETAINED.minimum}"),
    ),
    properties={
        "storage": StringSchema(
            description="Where checkpoint data goes: file:///absolute/path or s3://bucket/prefix.",
            max_length=1024,
            rules=(Rule(rule=f"{cel_matches(patterns.FILE_STORAGE)} || "
                             f"{cel_matches(patterns.S3_STORAGE)}",
                        message="must be a file:///absolute/path or s3://bucket/prefix URI"),)),
        "s3": ObjectSchema(
            # On the object, not the field: a field's error repeats its value, and this
            # value holds a secret.
            rules=(Rule(rule="!has(self.endpoint) || "
                             f"!{cel_matches(patterns.ENDPOINT_CREDENTIALS, subject='self.endpoint')}",
                        field_path=".endpoint",
                        message="must not contain credentials (user:password@): put them in "
                                "the Secret named by credentialsSecret"),),
            properties={
                "endpoint": StringSchema(
                    description="S3 endpoint URL (MinIO or any S3 API); the AWS default "
                    "when absent.", max_length=1024, pattern=patterns.S3_ENDPOINT),
                "region": StringSchema(max_length=64),
                "credentialsSecret": StringSchema(
                    description="Secret with keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.",
                    max_length=253, pattern=patterns.DNS_SUBDOMAIN),
            }),
        "interval": duration(defaults.CHECKPOINT_INTERVAL,
                             "Time between checkpoint triggers (Go duration, e.g. 10s)."),
        "minPause": duration(defaults.CHECKPOINT_MIN_PAUSE, "Minimum time between the end "
                             "of one checkpoint and the next trigger."),
        "timeout": duration(defaults.CHECKPOINT_TIMEOUT,
                            "A checkpoint not completed after this long is aborted."),
        "mode": choice(defaults.CHECKPOINT_MODE, CheckpointMode),
        "unaligned": flag(defaults.CHECKPOINT_UNALIGNED),
        "retained": integer(defaults.RETAINED, "Completed checkpoints kept (the newest "
                            "restorable one is never pruned)."),
        "tolerableFailures": integer(defaults.TOLERABLE_FAILURES, "Consecutive checkpoint "
                                     "failures tolerated before the job fails."),
        "triggerNonce": StringSchema(
            description="Set to a new value to take one checkpoint now; does not restart "
            "the job.", max_length=253),
    },
)

RESTART_POLICY = ObjectSchema(
    defaulted=True,
    properties={
        "type": choice(defaults.RESTART_TYPE, RestartPolicyType),
        "maxRestarts": integer(defaults.MAX_RESTARTS, "Restarts allowed before giving up "
                               "(reset after a healthy resetAfter)."),
        "backoff": ObjectSchema(
            defaulted=True,
            rules=(Rule(rule="!has(self.initial) || !has(self.max) || "
                             "duration(self.max) >= duration(self.initial)",
                        message="backoff.max must be >= backoff.initial"),),
            properties={
                "initial": duration(defaults.BACKOFF_INITIAL),
                "max": duration(defaults.BACKOFF_MAX),
                "multiplier": number(defaults.BACKOFF_MULTIPLIER),
            }),
        "resetAfter": duration(defaults.RESET_AFTER, "An attempt healthy for this long "
                               "resets the restart count."),
        "startTimeout": duration(defaults.START_TIMEOUT, "A driver not running after this "
                                 "long counts as failed."),
    },
)

RESTORE = ObjectSchema(
    defaulted=True,
    rules=(
        Rule(rule="!has(self.allowForeignJob) || !self.allowForeignJob || "
                  "(has(self.from) && type(self.from) == string && "
                  "(self.from.startsWith('file://') || self.from.startsWith('s3://')))",
             message="allowForeignJob applies only to a checkpoint path in restore.from"),
        Rule(rule="!has(self.snapshot) || !has(self.from) || "
                  f"self.from == '{defaults.RESTORE_FROM.default}'",
             message="restore.snapshot and restore.from both name a starting point; keep one"),
        Rule(rule="!has(self.redeployNonce) || self.redeployNonce == '' || "
                  "has(self.snapshot) || (has(self.from) && "
                  f"string(self.from) != '{defaults.RESTORE_FROM.default}')",
             message="redeployNonce starts the job again from restore.from (a checkpoint id "
                     "or path) or restore.snapshot; name one"),
    ),
    properties={
        "from": IntOrStringSchema(
            description="Starting point of a fresh start: latest (the job's newest "
            "checkpoint, if any), a checkpoint id, or a file:// or s3:// path to a "
            "_metadata file.",
            pattern=patterns.RESTORE_FROM, default=defaults.RESTORE_FROM.default,
            rules=(Rule(rule="type(self) == string || self >= 1",
                        message="checkpoint ids start at 1"),)),
        "snapshot": StringSchema(
            description="Start from a CheckpointedJobSnapshot of this namespace (this job's "
            "or another's) instead of restore.from: the job waits until the snapshot is "
            "Completed. Another job's output newer than the snapshot, in this job's output "
            "location, is withdrawn.",
            max_length=253, pattern=patterns.OBJECT_NAME),
        "onUnreadable": choice(defaults.ON_UNREADABLE, OnUnreadable),
        "allowForeignJob": flag(
            defaults.ALLOW_FOREIGN_JOB,
            "Allow restore.from to name a checkpoint another job wrote (for example a "
            "deleted job's retained checkpoint). That job must no longer run: its output "
            "newer than the checkpoint is withdrawn."),
        "redeployNonce": StringSchema(
            description="Set to a new value to stop the job and start it again from "
            "restore.from or restore.snapshot instead of its latest checkpoint; every "
            "attempt restores that point until one completes a checkpoint of its own. "
            "Output committed after that point is produced again.",
            max_length=253),
        "allowNonRestoredState": flag(
            defaults.ALLOW_NON_RESTORED_STATE,
            "Let a restore drop the state of operators the job no longer has or whose "
            "state changed (renamed, removed, another kind, key or aggregates): they start "
            "empty and an Event lists them. Without it such a restore fails with "
            "IncompatibleState."),
    },
)

SECTIONS: dict[str, Schema] = {
    "image": StringSchema(
        description="Spark + Python image with job_runtime (and possibly the job's code) for "
        "the driver and the executors. Absent: the runtime image the operator was installed "
        "with.", min_length=1, max_length=512, pattern=patterns.NO_SPACES),
    "job": JOB,
    "parallelism": integer(defaults.PARALLELISM,
                           "Number of parallel subtasks (one Spark barrier task each)."),
    "maxParallelism": integer(defaults.MAX_PARALLELISM, "Number of key groups; the upper "
                              "bound of parallelism on restore."),
    "spark": SPARK,
    "checkpoint": CHECKPOINT,
    "restartPolicy": RESTART_POLICY,
    "restore": RESTORE,
    "suspend": flag(defaults.SUSPEND, "Take a final checkpoint, stop the driver and keep "
                    "the job; false resumes it."),
    "upgradeMode": choice(
        defaults.UPGRADE_MODE, UpgradeMode,
        "How a spec change (new code, kubectl scale) reaches a running attempt. LastState "
        "stops the driver and starts the new spec from the latest checkpoint; Snapshot "
        "first takes a final checkpoint whose output the sinks commit, then starts the new "
        "spec from it (nothing read twice), and falls back to LastState when none completes "
        "in time; Stateless starts the new spec with empty state (its sources from their "
        "start)."),
    "state": ObjectSchema(
        description="How keyed state is kept and checkpointed.",
        defaulted=True,
        properties={"backend": choice(
            defaults.STATE_BACKEND, StateBackend,
            "hashmap keeps keyed state in memory and checkpoints it whole; rocksdb keeps it "
            "on the executors' local disk (state may exceed memory) and checkpoints upload "
            "only the files that are new since the last completed checkpoint.")}),
    "standby": ObjectSchema(
        description="A warm standby driver: Spark started and the job's code loaded, "
        "promoted when the active driver ends (fencing it first), so a driver failure does "
        "not pay for a driver start. The standby watches the active driver and reports its "
        "death at once, before the kubelet notices it. Its takeover is not delayed by "
        "restartPolicy.backoff (the standby has started already), but it counts against "
        "restartPolicy.maxRestarts.",
        defaulted=True,
        properties={"enabled": flag(defaults.STANDBY_ENABLED)}),
    "snapshots": ObjectSchema(
        description="CheckpointedJobSnapshots the operator takes of the job by itself "
        "(labelled checkpointed.io/job=<job>): one every interval while the job runs, and, "
        "with beforeUpgrade, one of the final checkpoint of each upgradeMode Snapshot "
        "upgrade. The oldest completed ones beyond maxCount, or older than maxAge, are "
        "deleted (the newest completed one is kept).",
        defaulted=True,
        properties={
            "interval": duration(defaults.SNAPSHOTS_INTERVAL,
                                 "Time between two periodic snapshots; 0s takes none."),
            "maxCount": integer(defaults.SNAPSHOTS_MAX_COUNT),
            "maxAge": duration(defaults.SNAPSHOTS_MAX_AGE, "Snapshots older than this are "
                               "deleted; 0s keeps them by count only."),
            "beforeUpgrade": flag(defaults.SNAPSHOTS_BEFORE_UPGRADE),
        }),
    "health": ObjectSchema(
        description="When a job that still runs counts as failed and restarts from its "
        "latest checkpoint: no checkpoint completed for checkpointStallIntervals intervals "
        "(reason CheckpointStalled), or a sink that could not deliver a completed "
        "checkpoint's output for sinkStallTimeout (SinkStalled).",
        defaulted=True,
        properties={
            "checkpointStallIntervals": integer(
                defaults.CHECKPOINT_STALL_INTERVALS,
                "Checkpoint intervals without a completed checkpoint after which a running "
                "job is stalled; the window is at least 30s and three times the longest "
                "checkpoint the attempt completed, and before its first one at least "
                "checkpoint.timeout. 0 turns the check off."),
            "sinkStallTimeout": duration(
                defaults.SINK_STALL_TIMEOUT,
                "How long a sink may fail to deliver a completed checkpoint's output (later "
                "intervals wait behind it) before the job restarts. 0s turns the check off."),
        }),
    "autoscaler": ObjectSchema(
        description="A parallelism chosen from the sources' lag (Kafka) and the job's "
        "measured throughput: enough to keep up with what arrives and to read the backlog "
        "away within targetLag, at targetUtilization of the measured capacity, between min "
        "and max, rounded up to divide maxParallelism's key groups evenly where it can. "
        "Recommend says it in status.autoscaler and a ScalingRecommended Event; Apply runs "
        "the job at it through upgradeMode once it held for stabilization (ScalingApplied).",
        defaulted=True,
        rules=(Rule(rule="!has(self.max) || self.max == 0 || !has(self.min) || "
                         "self.min <= self.max",
                    message="min must be <= max"),),
        properties={
            "mode": choice(defaults.AUTOSCALER_MODE, AutoscalerMode),
            "min": integer(defaults.AUTOSCALER_MIN, "The smallest parallelism it chooses."),
            "max": integer(defaults.AUTOSCALER_MAX, "The largest parallelism it chooses; 0: "
                           "maxParallelism."),
            "targetLag": duration(defaults.AUTOSCALER_TARGET_LAG, "How soon the backlog "
                                  "should be read away, besides keeping up."),
            "targetUtilization": number(defaults.AUTOSCALER_TARGET_UTILIZATION,
                                        "The share of its measured capacity the chosen "
                                        "parallelism runs at."),
            "stabilization": duration(defaults.AUTOSCALER_STABILIZATION, "How long a "
                                      "recommendation must hold before Apply applies it, "
                                      "and the least time between two scalings."),
        }),
    "rollback": ObjectSchema(
        description="Return to the last spec that ran when a changed spec fails, or "
        "completes no checkpoint within readinessTimeout: the job runs that spec again from "
        "the checkpoint the change started from, with a RolledBack condition and Event, "
        "until the spec changes again.",
        defaulted=True,
        properties={
            "enabled": flag(defaults.ROLLBACK_ENABLED),
            "readinessTimeout": duration(defaults.ROLLBACK_READINESS_TIMEOUT, "How long a "
                                         "changed spec has to complete its first checkpoint."),
        }),
    "cleanupPolicy": ObjectSchema(
        defaulted=True,
        properties={"checkpoints": choice(
            defaults.CLEANUP_CHECKPOINTS, CheckpointCleanup,
            "What happens to checkpoint data when the CheckpointedJob is deleted.")}),
    "pod": POD,
}

SPEC = ObjectSchema(
    required=("job", "checkpoint"),
    rules=(
        Rule(rule="!has(self.parallelism) || !has(self.maxParallelism) || "
                  "self.parallelism <= self.maxParallelism",
             message="parallelism must be <= maxParallelism"),
        Rule(rule="!has(self.checkpoint.s3) || self.checkpoint.storage.startsWith('s3://') || "
                  "(has(self.job.pythonPath) && "
                  "self.job.pythonPath.exists(p, p.startsWith('s3://')))",
             message="checkpoint.s3 is only valid with s3:// storage or s3:// entries in "
                     "job.pythonPath"),
        Rule(rule="!has(self.spark) || !has(self.spark.master) || "
                  "self.spark.master != 'k8s' || "
                  "!has(self.spark.executor) || !has(self.spark.executor.instances) || "
                  "!has(self.spark.executor.cores) || !has(self.parallelism) || "
                  "self.spark.executor.instances * self.spark.executor.cores >= "
                  "self.parallelism",
             message="parallelism needs as many Spark task slots (executor instances x "
                     "cores): all subtasks of a barrier stage run at once"),
    ),
    properties=SECTIONS,
)
"""``spec``: every field a user sets."""
