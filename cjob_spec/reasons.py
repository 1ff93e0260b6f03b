"""The reasons a job's lifecycle gives, as one enum shared by every part that names one.

A reason is API: it is the ``reason`` of the Events posted on a job, of its
``status.reason`` and ``status.lastFailure.reason``, of its conditions, and the
``reason`` label of the operator's restart metric. Users select Events by it
(``kubectl get events --field-selector reason=StoreLost``) and alert on it, so a
released value never changes; a member's name may. The planner
(:mod:`cjob_lifecycle.plan`), the exit codes and the restart policy of this package,
the operator and the embedded runner name a reason only through :class:`Reason`, so a
misspelt one is a type error rather than a new, silent API value.

Kubernetes has reasons of its own for a pod (``ImagePullBackOff``, ``Error``) that the
lifecycle passes on where they say more than its own would. Those are
:data:`PodReason`: the lifecycle cannot list the kubelet's reasons, and wrapping one
says where it came from. The few the planner looks for by name (``OOMKilled``,
``Evicted``...) are members.
"""

from __future__ import annotations

from enum import StrEnum, unique
from typing import NewType

PodReason = NewType("PodReason", str)
"""A reason Kubernetes gave for a pod, passed on unchanged (``ImagePullBackOff``)."""


@unique
class Reason(StrEnum):
    """Every reason the lifecycle gives. The value is the API; see the module docstring."""

    # --- an attempt starts: status.reason of Pending, a Normal Event ---------------------
    STARTED = "Started"
    """The job's first attempt started."""
    RESTARTED = "Restarted"
    """An attempt started after the previous one ended, once its backoff was over."""
    UPGRADED = "Upgraded"
    """An attempt started for a changed spec, from the latest checkpoint."""
    ROLLED_BACK = "RolledBack"
    """A changed spec failed, or completed no checkpoint within
    ``rollback.readinessTimeout``: the job runs its last stable spec again (the Warning
    Event says why; the attempt starts with this reason, the condition of that name
    is True)."""
    RESUMED = "Resumed"
    """An attempt started when ``spec.suspend`` was set back to false."""
    RETRYING = "Retrying"
    """A failed job started again: its spec changed, or what it lacked arrived."""
    REDEPLOYED = "Redeployed"
    """An attempt started for ``spec.restore.redeployNonce``, from ``spec.restore``'s
    from or snapshot instead of the latest checkpoint."""

    # --- where the job is: status.reason, the Ready and Progressing conditions -----------
    PENDING = "Pending"
    """The phase of the same name, as a condition's reason."""
    STARTING = "Starting"
    """The driver pod exists and has not started; the kubelet gave no reason of its own."""
    RUNNING = "Running"
    """The current attempt's driver runs."""
    BACKING_OFF = "BackingOff"
    """The attempt ended; the next one starts at ``status.nextRestartAt``."""
    UPGRADING = "Upgrading"
    """The spec changed: the running attempt is stopped, to restart from its latest
    checkpoint."""
    SCALING_RECOMMENDED = "ScalingRecommended"
    """``spec.autoscaler`` recommends another parallelism than the job runs at."""
    SCALING_APPLIED = "ScalingApplied"
    """``spec.autoscaler`` (mode ``Apply``) set the parallelism the job runs at: an
    upgrade through ``spec.upgradeMode`` follows."""
    REDEPLOYING = "Redeploying"
    """``spec.restore.redeployNonce`` changed: the running attempt is stopped, to start
    again from ``spec.restore``'s from or snapshot."""
    SUSPENDING = "Suspending"
    """``spec.suspend`` is set: a final checkpoint is taken before the driver stops."""
    SUSPENDED = "Suspended"
    """The job is suspended; also why its driver pod is deleted."""
    RESUMING = "Resuming"
    """``cjob run`` continues a job whose earlier run ended with the runner."""
    RESTARTING = "Restarting"
    """The phase of the same name; also why the driver of an attempt in backoff is deleted."""
    SUCCEEDED = "Succeeded"
    """The job finished."""
    FAILED = "Failed"
    """The phase of the same name, as a condition's reason."""
    UNKNOWN = "Unknown"
    """A condition's reason before the job has a phase."""
    WAITING_FOR_PREVIOUS_DRIVER = "WaitingForPreviousDriver"
    """A new job waits for the driver pods of an earlier job of the same name to stop."""
    WAITING_FOR_PREVIOUS_STORE = "WaitingForPreviousStore"
    """A new job waits for the garbage collector to delete the checkpoint store of an
    earlier job of the same name."""
    WAITING_FOR_SNAPSHOT = "WaitingForSnapshot"
    """A fresh start from ``spec.restore.snapshot`` waits for the snapshot to exist and
    complete."""
    TERMINATING = "Terminating"
    """The job is being deleted and waits for its driver pods to stop."""
    DELETING_CHECKPOINTS = "DeletingCheckpoints"
    """The job is being deleted and its cleanup pod deletes its checkpoint data."""

    # --- how an attempt ended: lastFailure.reason, a Warning Event, the restart metric ---
    FINISHED = "Finished"
    """The driver exited 0."""
    DRIVER_FAILED = "DriverFailed"
    """The driver exited with a code that says nothing more."""
    INVALID_CONFIGURATION = "InvalidConfiguration"
    """The driver exited 2: bad arguments or configuration (permanent)."""
    USER_CODE_ERROR = "UserCodeError"
    """The driver exited 3: the job's code raised (permanent)."""
    CHECKPOINT_FAILURES_EXCEEDED = "CheckpointFailuresExceeded"
    """The driver exited 4: more consecutive checkpoint failures than tolerated."""
    STORAGE_UNREACHABLE = "StorageUnreachable"
    """The driver exited 5: checkpoint storage or the store could not be reached."""
    RESTORE_FAILED = "RestoreFailed"
    """The driver exited 6: the checkpoint to restore is unreadable or foreign (permanent)."""
    CLEANUP_FAILED = "CleanupFailed"
    """The cleanup command exited 7: the checkpoint data could not be deleted."""
    INCOMPATIBLE_STATE = "IncompatibleState"
    """The driver exited 10: the checkpoint holds state the job's pipeline no longer maps
    (an operator renamed, removed or changed) and ``allowNonRestoredState`` is off
    (permanent)."""
    SINK_REJECTED_RECORD = "SinkRejectedRecord"
    """The driver exited 11: a sink's system refused a record for good (too large,
    unencodable, a constraint violation) and the sink has no dead-letter route
    (permanent: the restored checkpoint holds the same record)."""
    SINK_STALLED = "SinkStalled"
    """The driver exited 12: a sink could not deliver a completed checkpoint's output for
    longer than ``spec.health.sinkStallTimeout`` (restarted)."""
    EXECUTORS_UNSCHEDULABLE = "ExecutorsUnschedulable"
    """An executor of the running attempt could not be placed by the scheduler for
    longer than ``restartPolicy.startTimeout`` (more CPU or memory than any node has):
    the barrier stage needs every executor at once, so the job fails rather than
    restart into the same wait (permanent until the spec changes)."""
    RESTART_LOOP = "RestartLoop"
    """The driver exited 14: the subtasks failed on every relaunch of the barrier stage
    Spark allows in one attempt (a crash that repeats); restarted, counted against
    ``maxRestarts``."""
    CHECKPOINT_STALLED = "CheckpointStalled"
    """The driver exited 13: no checkpoint completed within the health window while the
    job ran (a hung function, a subtask that stopped reading); restarted from the
    latest checkpoint."""
    FENCED = "Fenced"
    """The driver exited 9: a newer attempt took over its checkpoint store."""
    KILLED = "Killed"
    """The driver exited 137 (SIGKILL, often out of memory)."""
    TERMINATED = "Terminated"
    """The driver exited 143 (SIGTERM)."""
    DRIVER_LOST = "DriverLost"
    """The driver is gone without an exit code; with a standby, as it reported first."""
    DRIVER_POD_MISSING = "DriverPodMissing"
    """The attempt's driver pod disappeared, or never appeared."""
    DRIVER_POD_DELETED = "DriverPodDeleted"
    """Someone else deleted the attempt's driver pod."""
    NODE_LOST = "NodeLost"
    """The node of the driver pod stopped reporting (phase Unknown)."""
    START_TIMEOUT = "StartTimeout"
    """The driver pod did not start within ``restartPolicy.startTimeout``."""
    OOM_KILLED = "OOMKilled"
    """Kubernetes' reason for a container killed out of memory."""
    EVICTED = "Evicted"
    """Kubernetes' reason for a pod evicted from its node."""
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    """Kubernetes' reason for a pod past its ``activeDeadlineSeconds``."""
    CONTAINER_CANNOT_RUN = "ContainerCannotRun"
    """Kubernetes' reason for a container that could not be started; also the embedded
    runner's for a driver process it could not spawn."""
    ATTEMPT_ENDED = "AttemptEnded"
    """An attempt ended well and is restarted (restart policy ``Always``)."""

    # --- why the job failed for good: status.reason of Failed, the Failed condition ------
    RESTART_LIMIT_EXCEEDED = "RestartLimitExceeded"
    """An attempt ended with ``maxRestarts`` restarts spent."""
    NO_IMAGE = "NoImage"
    """Neither the spec nor the operator names an image to run the driver in."""
    STORE_LOST = "StoreLost"
    """The checkpoint store no longer records a checkpoint the job completed."""
    STORE_CONFLICT = "StoreConflict"
    """The checkpoint store's name is taken by a ConfigMap that is not the job's."""
    INVALID_SPEC = "InvalidSpec"
    """The spec does not parse."""
    DRIVER_CREATE_FAILED = "DriverCreateFailed"
    """The API server refused the driver pod for good (a quota, an admission policy)."""

    # --- Events about checkpoints, the standby and the operator --------------------------
    CHECKPOINT_REQUESTED = "CheckpointRequested"
    """A manual checkpoint was requested (``spec.checkpoint.triggerNonce``)."""
    CHECKPOINTS_NOT_PERSISTENT = "CheckpointsNotPersistent"
    """The checkpoints are written where the next driver pod cannot read them."""
    RESTORED_FROM_FALLBACK = "RestoredFromFallback"
    """The driver restored an older checkpoint because the newer one is unreadable."""
    NON_RESTORED_STATE = "NonRestoredState"
    """The driver dropped state the pipeline no longer maps (``allowNonRestoredState``):
    those operators started empty."""
    RESTART_COUNT_RESET = "RestartCountReset"
    """The attempt ran healthy for ``restartPolicy.resetAfter``."""
    FALSE_DRIVER_LOST = "FalseDriverLost"
    """A driver a standby reported lost still ran until the takeover fenced it: the
    takeover is not counted as a restart."""
    STANDBY_FAILED = "StandbyFailed"
    """The standby driver failed; a new one is started."""
    CHECKPOINTS_DELETED = "CheckpointsDeleted"
    """The cleanup pod of a deleted job deleted its checkpoint data."""
    CHECKPOINTS_RETAINED = "CheckpointsRetained"
    """A deleted job's checkpoint data was kept, and the Event says where and why."""
    RECONCILE_ERROR = "ReconcileError"
    """A reconciliation pass stopped on an error and is retried."""
    FOREIGN_POD_IGNORED = "ForeignPodIgnored"
    """A pod carries the job's labels and a driver's or standby's role, but the job does
    not own it: it is ignored (a Warning Event, once per pod)."""

    # --- why a driver pod is deleted ------------------------------------------------------
    STALE_ATTEMPT = "StaleAttempt"
    """It runs an attempt that is no longer the current one."""
    PRUNED_HISTORY = "PrunedHistory"
    """It is a finished pod older than the ones kept for their logs."""
    SUPERSEDED = "Superseded"
    """A new attempt starts."""
    JOB_DELETED = "JobDeleted"
    """The job is being deleted."""
    STANDBY_NOT_NEEDED = "StandbyNotNeeded"
    """A standby driver of a job that no longer asks for one, or is not active."""
    STANDBY_OUTDATED = "StandbyOutdated"
    """A standby driver started for an earlier spec."""
    SPEC_CHANGED = "SpecChanged"
    """The spec changed under the running attempt."""

    # --- the Checkpointing and Failed conditions -----------------------------------------
    CHECKPOINT_COMPLETED = "CheckpointCompleted"
    """Checkpoints complete in time."""
    CHECKPOINT_OVERDUE = "CheckpointOverdue"
    """No checkpoint completed within twice the interval plus the timeout."""
    AWAITING_FIRST_CHECKPOINT = "AwaitingFirstCheckpoint"
    """The attempt has completed no checkpoint yet, and none is overdue."""
    NOT_RUNNING = "NotRunning"
    """Checkpointing says nothing while the job is not running."""
    NOT_FAILED = "NotFailed"
    """The job has not failed."""
    NOT_ROLLED_BACK = "NotRolledBack"
    """With ``spec.rollback``: the job runs its own spec."""


RESTART_METRIC_REASONS: tuple[Reason, ...] = (
    Reason.DRIVER_FAILED, Reason.CHECKPOINT_FAILURES_EXCEEDED, Reason.STORAGE_UNREACHABLE,
    Reason.SINK_STALLED, Reason.RESTART_LOOP, Reason.CHECKPOINT_STALLED, Reason.KILLED,
    Reason.TERMINATED, Reason.DRIVER_LOST, Reason.DRIVER_POD_MISSING,
    Reason.DRIVER_POD_DELETED, Reason.NODE_LOST, Reason.START_TIMEOUT, Reason.OOM_KILLED,
    Reason.EVICTED, Reason.DEADLINE_EXCEEDED, Reason.CONTAINER_CANNOT_RUN,
    Reason.ATTEMPT_ENDED, Reason.UPGRADED, Reason.RETRYING,
)
"""The lifecycle's reasons a restart can be counted under in the operator's restart
metric: an attempt's end that is restarted, or an upgrade or a retry (a kubelet's
:data:`PodReason` can come besides). The operator serves each at zero from its start,
since a rate over a counter begins at its first sample: one that appeared at 1 would
hide its first restart from an alert."""
