"""The document as a whole: ``parse_job`` (apiVersion, kind, metadata, then ``spec``,
each section read by its module), and ``load_job_file``, one job read from YAML."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cjob_spec import defaults
from cjob_spec.errors import JobFileError, SpecError
from cjob_spec.errors import describe_value as _describe
from cjob_spec.model import (
    AutoscalerSpec,
    CheckpointCleanup,
    CheckpointedJob,
    CleanupPolicy,
    HealthSpec,
    JobSpec,
    Metadata,
    PodSettings,
    RestartPolicy,
    RestoreSpec,
    RollbackSpec,
    SnapshotSchedule,
    SparkSpec,
    StandbySpec,
    StateBackend,
    StateSpec,
    UpgradeMode,
)
from cjob_spec.names import API_VERSION, KIND, MAX_JOB_NAME_LENGTH
from cjob_spec.parse.autoscaler import read_autoscaler
from cjob_spec.parse.checkpoint import read_checkpoint, read_restore
from cjob_spec.parse.job_code import read_job_code
from cjob_spec.parse.node import Node
from cjob_spec.parse.pod import check_env_against_s3, read_pod
from cjob_spec.parse.restart_policy import read_restart_policy
from cjob_spec.parse.spark_settings import check_task_slots, read_spark
from cjob_spec.parse.values import DNS_LABEL_PATTERN, string_map
from cjob_spec.schema import patterns
from cjob_spec.schema.job_schema import ROOT

MAX_PARALLELISM_LIMIT = defaults.MAX_PARALLELISM_LIMIT
JOB_NAME_PATTERN = re.compile(patterns.JOB_NAME)


def parse_job(document: Mapping[str, Any]) -> CheckpointedJob:
    """Validate a CheckpointedJob document and return the model with defaults applied.

    Raises ``SpecError`` naming the first offending field. A ``status`` section is
    accepted and ignored (it is not part of what the user asks for).
    """
    root = Node(document, "", ROOT)
    api_version = root.get("apiVersion")
    if api_version != API_VERSION:
        raise SpecError(
            field="apiVersion", problem=f"must be {API_VERSION!r}, got {_describe(api_version)}"
        )
    kind = root.get("kind")
    if kind != KIND:
        raise SpecError(field="kind", problem=f"must be {KIND!r}, got {_describe(kind)}")
    metadata = _read_metadata(root.require("metadata"))
    return CheckpointedJob(metadata=metadata, spec=_read_spec(root.section("spec")))


def _read_metadata(value: object) -> Metadata:
    # Objects read from the API server carry many more metadata fields
    # (resourceVersion, managedFields, finalizers...): they are ignored, not refused.
    node = Node(value, "metadata", ROOT.child("metadata"), lenient=True)
    name = node.required_string("name")
    if len(name) > MAX_JOB_NAME_LENGTH or not JOB_NAME_PATTERN.match(name):
        raise SpecError(
            field="metadata.name",
            problem=f"must be at most {MAX_JOB_NAME_LENGTH} characters of lower-case letters, "
            f"digits and '-', starting with a letter and ending with a letter or digit, "
            f"got {name!r}",
        )
    namespace = node.string("namespace", default="default")
    assert namespace is not None
    if len(namespace) > 63 or not DNS_LABEL_PATTERN.match(namespace):
        raise SpecError(
            field="metadata.namespace", problem=f"must be a DNS label, got {namespace!r}"
        )
    uid = node.string("uid")
    generation = node.integer("generation", default=0, minimum=0)
    return Metadata(
        name=name,
        namespace=namespace,
        uid=uid,
        generation=generation,
        annotations=string_map(node.get("annotations"), "metadata.annotations"),
        labels=string_map(node.get("labels"), "metadata.labels"),
    )


def _read_spec(node: Node) -> JobSpec:
    # Absent: the operator runs the runtime image it was installed with (cjob run
    # runs no image at all).
    image = node.string("image")
    if image is not None and any(character.isspace() for character in image):
        raise SpecError(field="spec.image", problem=f"must not contain spaces, got {image!r}")
    job = read_job_code(node.section("job"))
    max_parallelism = node.integer_field(defaults.MAX_PARALLELISM)
    # Bounded by the job's own maxParallelism below (at most the field's maximum), so
    # that a too large value is reported against the bound that applies to this job.
    parallelism = node.integer(defaults.PARALLELISM.key, default=defaults.PARALLELISM.default,
                               minimum=defaults.PARALLELISM.minimum)
    if parallelism > max_parallelism:
        raise SpecError(
            field="spec.parallelism",
            problem=f"must be <= maxParallelism ({max_parallelism}), got {parallelism}",
        )
    spark = node.child("spark", read_spark, default=SparkSpec)
    check_task_slots(spark, parallelism)
    checkpoint = read_checkpoint(job, node.section("checkpoint"))
    restart_policy = node.child("restartPolicy", read_restart_policy,
                                default=RestartPolicy)
    restore = node.child("restore", read_restore, default=RestoreSpec)
    cleanup = node.child(
        "cleanupPolicy",
        lambda child: CleanupPolicy(
            checkpoints=child.enum_field(defaults.CLEANUP_CHECKPOINTS, CheckpointCleanup)
        ),
        default=CleanupPolicy,
    )
    pod = node.child("pod", read_pod, default=PodSettings)
    check_env_against_s3(pod, checkpoint)
    state = node.child(
        "state",
        lambda child: StateSpec(backend=child.enum_field(defaults.STATE_BACKEND, StateBackend)),
        default=StateSpec,
    )
    standby = node.child(
        "standby",
        lambda child: StandbySpec(enabled=child.flag_field(defaults.STANDBY_ENABLED)),
        default=StandbySpec,
    )
    snapshots = node.child(
        "snapshots",
        lambda child: SnapshotSchedule(
            interval=child.duration_field(defaults.SNAPSHOTS_INTERVAL),
            max_count=child.integer_field(defaults.SNAPSHOTS_MAX_COUNT),
            max_age=child.duration_field(defaults.SNAPSHOTS_MAX_AGE),
            before_upgrade=child.flag_field(defaults.SNAPSHOTS_BEFORE_UPGRADE)),
        default=SnapshotSchedule,
    )
    rollback = node.child(
        "rollback",
        lambda child: RollbackSpec(
            enabled=child.flag_field(defaults.ROLLBACK_ENABLED),
            readiness_timeout=child.duration_field(defaults.ROLLBACK_READINESS_TIMEOUT)),
        default=RollbackSpec,
    )
    autoscaler = node.child("autoscaler",
                            lambda child: read_autoscaler(child,
                                                          max_parallelism=max_parallelism),
                            default=AutoscalerSpec)
    health = node.child(
        "health",
        lambda child: HealthSpec(
            checkpoint_stall_intervals=child.integer_field(defaults.CHECKPOINT_STALL_INTERVALS),
            sink_stall_timeout=child.duration_field(defaults.SINK_STALL_TIMEOUT)),
        default=HealthSpec,
    )
    return JobSpec(
        autoscaler=autoscaler,
        health=health,
        state=state,
        pod=pod,
        image=image,
        job=job,
        checkpoint=checkpoint,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
        spark=spark,
        restart_policy=restart_policy,
        restore=restore,
        suspend=node.flag_field(defaults.SUSPEND),
        upgrade_mode=node.enum_field(defaults.UPGRADE_MODE, UpgradeMode),
        standby=standby,
        cleanup_policy=cleanup,
        rollback=rollback,
        snapshots=snapshots,
    )


def load_job_file(path: str | Path) -> CheckpointedJob:
    """Read one CheckpointedJob from a YAML file.

    File and YAML problems raise ``JobFileError`` (with the line number when YAML can
    tell); problems with the document itself raise ``SpecError``. Both derive from
    ``CjobSpecError``.
    """
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise JobFileError(file=file, problem="no such file") from None
    except IsADirectoryError:
        raise JobFileError(file=file, problem="is a directory, not a job file") from None
    except UnicodeDecodeError:
        raise JobFileError(file=file, problem="is not UTF-8 text") from None
    except OSError as error:
        raise JobFileError(file=file, problem=f"cannot be read: {error.strerror}") from None
    try:
        documents = [item for item in yaml.safe_load_all(text) if item is not None]
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = error.problem or error.context or "syntax error"
        raise JobFileError(file=file, problem=f"invalid YAML: {problem}", line=line) from None
    except yaml.YAMLError as error:
        raise JobFileError(file=file, problem=f"invalid YAML: {error}") from None
    if not documents:
        raise JobFileError(file=file, problem="is empty; expected one CheckpointedJob document")
    if len(documents) > 1:
        raise JobFileError(
            file=file,
            problem=f"holds {len(documents)} YAML documents; expected one CheckpointedJob",
        )
    document = documents[0]
    if not isinstance(document, Mapping):
        raise JobFileError(
            file=file, problem=f"must hold a mapping (a CheckpointedJob), got {_describe(document)}"
        )
    return parse_job(document)
