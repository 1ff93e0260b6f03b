"""CheckpointedJob spec and status models, validation and restart-policy decisions.

Pure and dependency-light (standard library and PyYAML only): the operator and the
embedded local runner both import it, and neither Kubernetes nor Spark is needed to
validate a job or decide what to do after a failure.
"""

from cjob_spec.durations import Duration, format_seconds, parse_duration_seconds
from cjob_spec.errors import (
    CjobSpecError,
    DurationFormatError,
    JobFileError,
    QuantityFormatError,
    SpecError,
)
from cjob_spec.exit_codes import ExitCode, describe_exit, is_permanent, reason_for_exit
from cjob_spec.model import (
    Backoff,
    CheckpointCleanup,
    CheckpointedJob,
    CheckpointMode,
    CheckpointSpec,
    CleanupPolicy,
    DriverResources,
    ExecutorResources,
    JobCode,
    JobSpec,
    Metadata,
    OnUnreadable,
    RestartPolicy,
    RestartPolicyType,
    RestoreSource,
    RestoreSpec,
    S3Settings,
    SparkSpec,
    StateBackend,
    UpgradeMode,
    spec_hash,
)
from cjob_spec.parse import load_job_file, parse_job
from cjob_spec.quantities import Memory, parse_memory_bytes
from cjob_spec.reasons import PodReason, Reason
from cjob_spec.restart import AttemptEnd, Finish, GiveUp, Restart, RestartDecision, decide_restart
from cjob_spec.runtime_args import (
    configmap_store_arg,
    file_store_arg,
    runtime_settings,
    to_runtime_args,
)
from cjob_spec.status import (
    CheckpointRef,
    Condition,
    ConditionStatus,
    ConditionType,
    FailureRecord,
    JobStatus,
    Phase,
    RestoredFrom,
    set_condition,
)

__all__ = [
    "AttemptEnd",
    "Backoff",
    "CheckpointCleanup",
    "CheckpointMode",
    "CheckpointRef",
    "CheckpointSpec",
    "CheckpointedJob",
    "CjobSpecError",
    "CleanupPolicy",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "DriverResources",
    "Duration",
    "DurationFormatError",
    "ExecutorResources",
    "ExitCode",
    "FailureRecord",
    "Finish",
    "GiveUp",
    "JobCode",
    "JobFileError",
    "JobSpec",
    "JobStatus",
    "Memory",
    "Metadata",
    "OnUnreadable",
    "Phase",
    "PodReason",
    "QuantityFormatError",
    "Reason",
    "Restart",
    "RestartDecision",
    "RestartPolicy",
    "RestartPolicyType",
    "RestoreSource",
    "RestoreSpec",
    "RestoredFrom",
    "S3Settings",
    "SparkSpec",
    "SpecError",
    "StateBackend",
    "UpgradeMode",
    "configmap_store_arg",
    "decide_restart",
    "describe_exit",
    "file_store_arg",
    "format_seconds",
    "is_permanent",
    "load_job_file",
    "parse_duration_seconds",
    "parse_job",
    "parse_memory_bytes",
    "reason_for_exit",
    "runtime_settings",
    "set_condition",
    "spec_hash",
    "to_runtime_args",
]
