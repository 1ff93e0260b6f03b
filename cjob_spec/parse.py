"""Validate a CheckpointedJob document once and turn it into the typed model.

``parse_job`` is the single gate every document passes, whether it comes from the API
server (the operator) or from a file (``cjob run``): unknown fields, wrong types, bad
enums, durations and quantities, and combinations that cannot run (more subtasks
than Spark task slots, unaligned checkpoints without exactly-once) are refused here
with a ``SpecError`` that names the field. Defaults are applied here too; they and
the bounds come from ``cjob_spec.defaults``, their one place (the CRD repeats them for
``kubectl get -o yaml`` and the API server, and a test holds it to them).

A null value counts as absent, as the API server treats nulls of non-nullable fields.
"""

from __future__ import annotations

import difflib
import keyword
import math
import re
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import yaml

from cjob_spec import defaults
from cjob_spec.defaults import (
    DurationField,
    FlagField,
    IntegerField,
    MemoryField,
    NumberField,
    TextField,
)
from cjob_spec.durations import MAX_DURATION, Duration
from cjob_spec.errors import (
    DurationFormatError,
    JobFileError,
    QuantityFormatError,
    SpecError,
)
from cjob_spec.errors import describe_value as _describe
from cjob_spec.model import (
    Backoff,
    CheckpointCleanup,
    CheckpointedJob,
    CheckpointMode,
    CheckpointSpec,
    CleanupPolicy,
    DriverResources,
    ExecutorResources,
    HealthSpec,
    JobCode,
    JobSpec,
    Metadata,
    OnUnreadable,
    PodSettings,
    RestartPolicy,
    RestartPolicyType,
    RestoreSource,
    RestoreSpec,
    RollbackSpec,
    S3Settings,
    SnapshotSchedule,
    SparkSpec,
    StandbySpec,
    StateBackend,
    StateSpec,
    UpgradeMode,
)
from cjob_spec.names import API_VERSION, KIND
from cjob_spec.quantities import Memory
from cjob_spec.security import (
    check_security_contexts,
    read_container_security_context,
    read_pod_security_context,
)

MAX_PARALLELISM_LIMIT = defaults.MAX_PARALLELISM_LIMIT
MAX_JOB_NAME_LENGTH = 40
"""Job names end up in Service names (63 characters) and in Spark's executor pod name
prefix (47 characters) together with the attempt number."""
MAX_RETAINED = defaults.RETAINED.maximum

MASTER_PATTERN = re.compile(r"^local\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\]$")
ENTRYPOINT_PATTERN = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
)
JOB_NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_LABEL_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN_PATTERN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
FILE_STORAGE_PATTERN = re.compile(r"^file:///\S*$")
S3_STORAGE_PATTERN = re.compile(r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/\S*)?$")
S3_CODE_PATTERN = re.compile(r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]/\S+[.]zip$")
"""An ``s3://`` entry of ``spec.job.pythonPath``: one zip archive, whose top level is
what goes on ``sys.path`` (modules and packages)."""
URL_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
ENDPOINT_PATTERN = re.compile(r"^https?://[^\s/]+(/\S*)?$")
"""An S3 endpoint: http(s), a host, an optional path (credentials are refused apart)."""

MAX_RESTARTS = defaults.MAX_RESTARTS.maximum
MAX_TOLERABLE_FAILURES = defaults.TOLERABLE_FAILURES.maximum
MAX_BACKOFF_MULTIPLIER = defaults.BACKOFF_MULTIPLIER.maximum

RESERVED_SPARK_CONF: dict[str, str] = {
    "spark.master": "use spec.spark.master",
    "spark.submit.deployMode": "the driver always runs in client mode inside its pod",
    "spark.driver.host": "set by the operator to the driver's headless service",
    "spark.driver.port": "set by the operator",
    "spark.driver.bindAddress": "set by the operator",
    "spark.driver.blockManager.port": "set by the operator",
    "spark.kubernetes.namespace": "the job's namespace is used",
    "spark.kubernetes.driver.pod.name": "set by the operator",
    "spark.kubernetes.container.image": "use spec.image",
    "spark.kubernetes.executor.podNamePrefix": "set by the operator",
    "spark.driver.memory": "use spec.spark.driver.memory",
    "spark.driver.cores": "use spec.spark.driver.cores",
    "spark.executor.instances": "use spec.spark.executor.instances",
    "spark.executor.cores": "use spec.spark.executor.cores",
    "spark.executor.memory": "use spec.spark.executor.memory",
    "spark.dynamicAllocation.enabled": "barrier stages cannot run with dynamic allocation",
    "spark.kubernetes.executor.podTemplateFile":
        "set by the operator; use spec.pod.securityContext and containerSecurityContext",
    "spark.kubernetes.executor.podTemplateContainerName": "set by the operator",
    "spark.kubernetes.executor.disableConfigMap":
        "the operator turns it on, so the driver needs no ConfigMap rights",
}
RESERVED_SPARK_CONF_PREFIXES: dict[str, str] = {
    "spark.kubernetes.authenticate.": "the driver uses its pod's service account",
}

_E = TypeVar("_E", bound=StrEnum)
_T = TypeVar("_T")


def _shorten(text: str) -> str:
    """At most 40 characters of a user's value, so a message stays one readable line."""
    return text if len(text) <= 40 else text[:37] + "..."




def _suggest(word: str, choices: Iterable[str]) -> str | None:
    options = list(choices)
    lowered = {choice.lower(): choice for choice in options}
    if word.lower() in lowered:
        return f"did you mean {lowered[word.lower()]!r}?"
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


class _Node:
    """One mapping of the document being read, with its dotted path.

    Refuses keys it does not know (with a "did you mean" hint) unless ``lenient``.
    """

    def __init__(
        self, value: object, path: str, allowed: Iterable[str], *, lenient: bool = False
    ) -> None:
        if not isinstance(value, Mapping):
            raise SpecError(field=path, problem=f"must be a mapping, got {_describe(value)}")
        self.path = path
        self.allowed = tuple(allowed)
        self.values: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise SpecError(field=path, problem=f"keys must be strings, got {_describe(key)}")
            if key not in self.allowed and not lenient:
                raise SpecError(
                    field=self.at(key),
                    problem="unknown field",
                    hint=_suggest(key, self.allowed),
                )
            self.values[key] = item

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str) -> object | None:
        return self.values.get(key)

    def require(self, key: str) -> object:
        value = self.values.get(key)
        if value is None:
            raise SpecError(field=self.at(key), problem="required field is missing")
        return value

    def string(self, key: str, *, default: str | None = None) -> str | None:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise SpecError(field=self.at(key), problem=f"must be a string, got {_describe(value)}")
        if not value.strip():
            raise SpecError(field=self.at(key), problem="must not be empty")
        return value

    def required_string(self, key: str) -> str:
        self.require(key)
        value = self.string(key)
        assert value is not None
        return value

    def integer(
        self, key: str, *, default: int, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(
                field=self.at(key), problem=f"must be an integer, got {_describe(value)}"
            )
        if minimum is not None and value < minimum:
            raise SpecError(field=self.at(key), problem=f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise SpecError(
                field=self.at(key), problem=f"must be <= {maximum}, got {_shorten(str(value))}"
            )
        return value

    def integer_field(self, field: IntegerField) -> int:
        return self.integer(field.key, default=field.default, minimum=field.minimum,
                            maximum=field.maximum)

    def number_field(self, field: NumberField) -> float:
        return self.number(field.key, default=field.default, minimum=field.minimum,
                           maximum=field.maximum)

    def duration_field(self, field: DurationField) -> Duration:
        return self.duration(field.key, default=field.default, positive=field.positive,
                             minimum=field.minimum_seconds or None,
                             maximum=Duration.parse(field.maximum))

    def memory_field(self, field: MemoryField) -> Memory:
        return self.memory(field.key, default=field.default)

    def flag_field(self, field: FlagField) -> bool:
        return self.boolean(field.key, default=field.default)

    def enum_field(self, field: TextField, enum_type: type[_E]) -> _E:
        return self.enum(field.key, enum_type, default=enum_type(field.default))

    def number(self, key: str, *, default: float, minimum: float, maximum: float) -> float:
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(field=self.at(key), problem=f"must be a number, got {_describe(value)}")
        if not math.isfinite(value) or value < minimum:
            raise SpecError(field=self.at(key), problem=f"must be >= {minimum:g}, got {value:g}")
        if value > maximum:
            raise SpecError(field=self.at(key), problem=f"must be <= {maximum:g}, got {value:g}")
        return float(value)

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(
                field=self.at(key), problem=f"must be true or false, got {_describe(value)}"
            )
        return value

    def enum(self, key: str, enum_type: type[_E], *, default: _E) -> _E:
        value = self.get(key)
        if value is None:
            return default
        choices = [member.value for member in enum_type]
        if isinstance(value, str):
            for member in enum_type:
                if member.value == value:
                    return member
        raise SpecError(
            field=self.at(key),
            problem=f"must be one of {', '.join(choices)}, got {_describe(value)}",
            hint=_suggest(value, choices) if isinstance(value, str) else None,
        )

    def duration(
        self,
        key: str,
        *,
        default: str,
        positive: bool = False,
        minimum: float | None = None,
        maximum: Duration = MAX_DURATION,
    ) -> Duration:
        value = self.get(key)
        if value is None:
            return Duration.parse(default)
        if not isinstance(value, str):
            raise SpecError(
                field=self.at(key),
                problem=f"must be a duration string like '10s' or '5m', got {_describe(value)}",
            )
        try:
            duration = Duration.parse(value)
        except DurationFormatError as error:
            raise SpecError(field=self.at(key), problem=str(error)) from None
        if positive and duration.seconds <= 0:
            raise SpecError(field=self.at(key), problem=f"must be greater than 0, got {value!r}")
        if minimum is not None and duration.seconds < minimum:
            raise SpecError(
                field=self.at(key), problem=f"must be at least {minimum:g}s, got {value!r}"
            )
        if not duration.seconds <= maximum.seconds:
            raise SpecError(
                field=self.at(key),
                problem=f"must be at most {maximum.text}, got {_shorten(value)!r}",
            )
        return duration

    def memory(self, key: str, *, default: str) -> Memory:
        value = self.get(key)
        if value is None:
            return Memory.parse(default)
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise SpecError(
                field=self.at(key),
                problem=f"must be a memory quantity like '2Gi' or '512m', got {_describe(value)}",
            )
        try:
            return Memory.parse(str(value))
        except QuantityFormatError as error:
            raise SpecError(field=self.at(key), problem=str(error)) from None

    def child(
        self,
        key: str,
        allowed: Iterable[str],
        read: Callable[[_Node], _T],
        *,
        default: Callable[[], _T],
    ) -> _T:
        value = self.get(key)
        if value is None:
            return default()
        return read(_Node(value, self.at(key), allowed))


def parse_job(document: Mapping[str, Any]) -> CheckpointedJob:
    """Validate a CheckpointedJob document and return the model with defaults applied.

    Raises ``SpecError`` naming the first offending field. A ``status`` section is
    accepted and ignored (it is not part of what the user asks for).
    """
    root = _Node(document, "", ("apiVersion", "kind", "metadata", "spec", "status"))
    api_version = root.get("apiVersion")
    if api_version != API_VERSION:
        raise SpecError(
            field="apiVersion", problem=f"must be {API_VERSION!r}, got {_describe(api_version)}"
        )
    kind = root.get("kind")
    if kind != KIND:
        raise SpecError(field="kind", problem=f"must be {KIND!r}, got {_describe(kind)}")
    metadata = _read_metadata(root.require("metadata"))
    spec_node = _Node(
        root.require("spec"),
        "spec",
        (
            "image",
            "job",
            "parallelism",
            "maxParallelism",
            "spark",
            "checkpoint",
            "restartPolicy",
            "restore",
            "suspend",
            "upgradeMode",
            "rollback",
            "snapshots",
            "state",
            "standby",
            "cleanupPolicy",
            "pod",
            "health",
        ),
    )
    return CheckpointedJob(metadata=metadata, spec=_read_spec(spec_node))


def _read_metadata(value: object) -> Metadata:
    # Objects read from the API server carry many more metadata fields
    # (resourceVersion, managedFields, finalizers...): they are ignored, not refused.
    node = _Node(value, "metadata", ("name", "namespace", "uid", "generation"), lenient=True)
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
        annotations=_string_map(node.get("annotations"), "metadata.annotations"),
        labels=_string_map(node.get("labels"), "metadata.labels"),
    )


def _string_map(value: object, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(field=path, problem=f"must be a mapping, got {_describe(value)}")
    result: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise SpecError(field=f"{path}.{key}", problem="keys and values must be strings")
        result[key] = item
    return result


def _read_spec(node: _Node) -> JobSpec:
    # Absent: the operator runs the runtime image it was installed with (cjob run
    # runs no image at all).
    image = node.string("image")
    if image is not None and any(character.isspace() for character in image):
        raise SpecError(field="spec.image", problem=f"must not contain spaces, got {image!r}")
    job = _read_job_code(
        _Node(node.require("job"), "spec.job", ("entrypoint", "pythonPath", "args"))
    )
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
    spark = node.child(
        "spark", ("master", "conf", "driver", "executor"), _read_spark, default=SparkSpec
    )
    _check_task_slots(spark, parallelism)
    checkpoint = _read_checkpoint(
        job,
        _Node(
            node.require("checkpoint"),
            "spec.checkpoint",
            (
                "storage",
                "s3",
                "interval",
                "minPause",
                "timeout",
                "mode",
                "unaligned",
                "retained",
                "tolerableFailures",
                "triggerNonce",
            ),
        ),
    )
    restart_policy = node.child(
        "restartPolicy",
        ("type", "maxRestarts", "backoff", "resetAfter", "startTimeout"),
        _read_restart_policy,
        default=RestartPolicy,
    )
    restore = node.child(
        "restore",
        ("from", "snapshot", "onUnreadable", "allowForeignJob", "allowNonRestoredState"),
        _read_restore,
        default=RestoreSpec,
    )
    cleanup = node.child(
        "cleanupPolicy",
        ("checkpoints",),
        lambda child: CleanupPolicy(
            checkpoints=child.enum_field(defaults.CLEANUP_CHECKPOINTS, CheckpointCleanup)
        ),
        default=CleanupPolicy,
    )
    pod = node.child("pod", POD_FIELDS, _read_pod, default=PodSettings)
    state = node.child(
        "state",
        ("backend",),
        lambda child: StateSpec(backend=child.enum_field(defaults.STATE_BACKEND, StateBackend)),
        default=StateSpec,
    )
    standby = node.child(
        "standby",
        ("enabled",),
        lambda child: StandbySpec(enabled=child.flag_field(defaults.STANDBY_ENABLED)),
        default=StandbySpec,
    )
    snapshots = node.child(
        "snapshots",
        ("interval", "maxCount", "maxAge", "beforeUpgrade"),
        lambda child: SnapshotSchedule(
            interval=child.duration_field(defaults.SNAPSHOTS_INTERVAL),
            max_count=child.integer_field(defaults.SNAPSHOTS_MAX_COUNT),
            max_age=child.duration_field(defaults.SNAPSHOTS_MAX_AGE),
            before_upgrade=child.flag_field(defaults.SNAPSHOTS_BEFORE_UPGRADE)),
        default=SnapshotSchedule,
    )
    rollback = node.child(
        "rollback",
        ("enabled", "readinessTimeout"),
        lambda child: RollbackSpec(
            enabled=child.flag_field(defaults.ROLLBACK_ENABLED),
            readiness_timeout=child.duration_field(defaults.ROLLBACK_READINESS_TIMEOUT)),
        default=RollbackSpec,
    )
    health = node.child(
        "health",
        ("checkpointStallIntervals", "sinkStallTimeout"),
        lambda child: HealthSpec(
            checkpoint_stall_intervals=child.integer_field(defaults.CHECKPOINT_STALL_INTERVALS),
            sink_stall_timeout=child.duration_field(defaults.SINK_STALL_TIMEOUT)),
        default=HealthSpec,
    )
    return JobSpec(
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


def _read_job_code(node: _Node) -> JobCode:
    entrypoint = node.required_string("entrypoint")
    if not ENTRYPOINT_PATTERN.match(entrypoint) or any(
        keyword.iskeyword(part) for part in re.split(r"[.:]", entrypoint)
    ):
        raise SpecError(
            field="spec.job.entrypoint",
            problem="must be 'module:function' made of Python identifiers "
            f"(for example 'clicks.job:build'), got {entrypoint!r}",
        )
    raw_path = node.get("pythonPath")
    python_path: list[str] = []
    if raw_path is not None:
        if not isinstance(raw_path, list):
            raise SpecError(
                field="spec.job.pythonPath",
                problem=f"must be a list of paths, got {_describe(raw_path)}",
            )
        for index, item in enumerate(raw_path):
            if not isinstance(item, str) or not item.strip():
                raise SpecError(
                    field=f"spec.job.pythonPath[{index}]",
                    problem=f"must be a non-empty string, got {_describe(item)}",
                )
            _check_python_path_entry(item, f"spec.job.pythonPath[{index}]")
            python_path.append(item)
    raw_args = node.get("args")
    args: dict[str, Any] = {}
    if raw_args is not None:
        if not isinstance(raw_args, Mapping):
            raise SpecError(
                field="spec.job.args", problem=f"must be a mapping, got {_describe(raw_args)}"
            )
        for key, item in raw_args.items():
            if not isinstance(key, str):
                raise SpecError(
                    field="spec.job.args", problem=f"keys must be strings, got {_describe(key)}"
                )
            _check_json_value(item, f"spec.job.args.{key}")
            args[key] = item
    return JobCode(entrypoint=entrypoint, python_path=tuple(python_path), args=args)


def _check_python_path_entry(entry: str, path: str) -> None:
    """A directory path (absolute, or relative to the driver's working directory; to
    the job file's folder with ``cjob run``) or one ``s3://bucket/key.zip`` archive.

    Other URLs are refused here rather than when the driver starts: ``sys.path``
    would take them as a directory name that never exists, and the job would only
    fail later with a puzzling "module not found".
    """
    if entry != entry.strip():
        raise SpecError(field=path, problem=f"must not start or end with spaces, got {entry!r}")
    if entry.startswith("s3://"):
        if not S3_CODE_PATTERN.match(entry):
            raise SpecError(
                field=path,
                problem=f"an s3:// entry must name a zip archive of the job's modules, "
                f"s3://bucket/path/code.zip, got {entry!r}",
                hint="zip the folder's contents (its modules and packages at the top level)",
            )
        return
    if URL_PATTERN.match(entry):
        scheme = entry.partition("://")[0]
        raise SpecError(
            field=path,
            problem=f"must be a directory path or an s3://bucket/path/code.zip archive, "
            f"got {entry!r}",
            hint="write s3:// for S3" if scheme.lower() in ("s3a", "s3n") else None,
        )


POD_FIELDS = ("volumes", "volumeMounts", "nodeSelector", "tolerations", "affinity",
              "priorityClassName", "securityContext", "containerSecurityContext")
VOLUME_MOUNT_FIELDS = ("name", "mountPath", "readOnly", "subPath", "subPathExpr",
                       "mountPropagation", "recursiveReadOnly")
TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
AFFINITY_FIELDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")


def _documents(value: object, path: str) -> list[tuple[str, Mapping[str, Any]]]:
    """A list of JSON mappings, each with its path (``spec.pod.volumes[0]``...)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(field=path, problem=f"must be a list, got {_describe(value)}")
    items: list[tuple[str, Mapping[str, Any]]] = []
    for index, item in enumerate(value):
        at = f"{path}[{index}]"
        if not isinstance(item, Mapping):
            raise SpecError(field=at, problem=f"must be a mapping, got {_describe(item)}")
        _check_json_value(item, at)
        items.append((at, item))
    return items


def _read_pod(node: _Node) -> PodSettings:
    volumes: list[Mapping[str, Any]] = []
    for at, volume in _documents(node.get("volumes"), node.at("volumes")):
        name = _Node(volume, at, (), lenient=True).required_string("name")
        if len(name) > 63 or not DNS_LABEL_PATTERN.match(name):
            raise SpecError(field=f"{at}.name", problem=f"must be a DNS label, got {name!r}")
        if any(v["name"] == name for v in volumes):
            raise SpecError(field=f"{at}.name", problem=f"volume {name!r} is declared twice")
        if len(volume) != 2:
            raise SpecError(field=at, problem="must have a name and exactly one volume source "
                            "(for example persistentVolumeClaim, hostPath, nfs)")
        volumes.append(volume)
    mounts: list[Mapping[str, Any]] = []
    for at, mount in _documents(node.get("volumeMounts"), node.at("volumeMounts")):
        fields = _Node(mount, at, VOLUME_MOUNT_FIELDS)
        name = fields.required_string("name")
        if not any(v["name"] == name for v in volumes):
            raise SpecError(field=f"{at}.name", problem=f"no volume named {name!r} in "
                            "spec.pod.volumes",
                            hint=_suggest(name, [str(v["name"]) for v in volumes]))
        mount_path = fields.required_string("mountPath")
        if not mount_path.startswith("/"):
            raise SpecError(field=f"{at}.mountPath",
                            problem=f"must be an absolute path, got {mount_path!r}")
        if any(m["mountPath"] == mount_path for m in mounts):
            raise SpecError(field=f"{at}.mountPath",
                            problem=f"{mount_path!r} is mounted twice")
        fields.boolean("readOnly", default=False)
        mounts.append(mount)
    tolerations: list[Mapping[str, Any]] = []
    for at, toleration in _documents(node.get("tolerations"), node.at("tolerations")):
        _Node(toleration, at, TOLERATION_FIELDS)   # refuses unknown keys, with a hint
        tolerations.append(toleration)
    affinity: Mapping[str, Any] | None = None
    if node.get("affinity") is not None:
        affinity_node = _Node(node.get("affinity"), node.at("affinity"), AFFINITY_FIELDS)
        _check_json_value(dict(affinity_node.values), node.at("affinity"))
        affinity = dict(affinity_node.values)
    security_context: dict[str, Any] = {}
    if node.get("securityContext") is not None:
        security_context = read_pod_security_context(
            node.get("securityContext"), node.at("securityContext"))
    container_security_context: dict[str, Any] = {}
    if node.get("containerSecurityContext") is not None:
        container_security_context = read_container_security_context(
            node.get("containerSecurityContext"), node.at("containerSecurityContext"))
    check_security_contexts(
        pod=security_context, container=container_security_context, path=node.path)
    return PodSettings(
        security_context=security_context,
        container_security_context=container_security_context,
        volumes=tuple(volumes),
        volume_mounts=tuple(mounts),
        node_selector=_string_map(node.get("nodeSelector"), node.at("nodeSelector")),
        tolerations=tuple(tolerations),
        affinity=affinity,
        priority_class_name=node.string("priorityClassName"),
    )


def _check_json_value(value: object, path: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(field=path, problem=f"must be a finite number, got {value}")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_json_value(item, f"{path}[{index}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SpecError(field=path, problem=f"keys must be strings, got {_describe(key)}")
            _check_json_value(item, f"{path}.{key}")
        return
    raise SpecError(
        field=path,
        problem=f"must be a JSON value (string, number, boolean, list or mapping), "
        f"got {_describe(value)}",
        hint="quote dates and times" if "date" in type(value).__name__ else None,
    )


def _read_spark(node: _Node) -> SparkSpec:
    master = node.string(defaults.SPARK_MASTER.key, default=defaults.SPARK_MASTER.default)
    assert master is not None
    if master != "k8s" and not MASTER_PATTERN.match(master):
        raise SpecError(
            field="spec.spark.master",
            problem=f"must be 'k8s', 'local[N]', 'local[*]' or 'local[N,F]', got {master!r}",
        )
    conf = _read_spark_conf(node.get("conf"), node.at("conf"))
    driver = node.child(
        "driver",
        ("cores", "memory"),
        lambda child: DriverResources(
            cores=child.integer_field(defaults.DRIVER_CORES),
            memory=child.memory_field(defaults.DRIVER_MEMORY),
        ),
        default=DriverResources,
    )
    executor = node.child(
        "executor",
        ("instances", "cores", "memory"),
        lambda child: ExecutorResources(
            instances=child.integer_field(defaults.EXECUTOR_INSTANCES),
            cores=child.integer_field(defaults.EXECUTOR_CORES),
            memory=child.memory_field(defaults.EXECUTOR_MEMORY),
        ),
        default=ExecutorResources,
    )
    return SparkSpec(master=master, conf=conf, driver=driver, executor=executor)


def _read_spark_conf(value: object, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(field=path, problem=f"must be a mapping, got {_describe(value)}")
    conf: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key.startswith("spark."):
            raise SpecError(
                field=f"{path}.{key}", problem="Spark configuration keys start with 'spark.'"
            )
        hint = RESERVED_SPARK_CONF.get(key) or next(
            (why for prefix, why in RESERVED_SPARK_CONF_PREFIXES.items() if key.startswith(prefix)),
            None,
        )
        if hint is not None:
            raise SpecError(field=f"{path}.{key}", problem="is managed by the operator", hint=hint)
        if isinstance(item, bool) or not isinstance(item, str | int):
            raise SpecError(
                field=f"{path}.{key}",
                problem=f"must be a string or an integer, got {_describe(item)}",
                hint="quote booleans and decimals, e.g. 'true'",
            )
        conf[key] = str(item)
    request = conf.get(DRIVER_REQUEST_CORES)
    if request is not None and not _is_cpu_quantity(request):
        raise SpecError(field=f"{path}.{DRIVER_REQUEST_CORES}",
                        problem=f"must be a CPU quantity above 0, got {request!r}",
                        hint="e.g. '500m' or '1'; the driver pod's CPU request")
    return conf


DRIVER_REQUEST_CORES = "spark.kubernetes.driver.request.cores"
"""Spark's setting for the driver pod's CPU request, which ``spark.driver.cores`` (whole
cores, the driver's threads) otherwise sets: honoured as Spark honours it."""
CPU_QUANTITY = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+|[0-9]+m)$")


def _is_cpu_quantity(text: str) -> bool:
    if not CPU_QUANTITY.match(text):
        return False
    return (float(text[:-1]) / 1000 if text.endswith("m") else float(text)) > 0


def _check_task_slots(spark: SparkSpec, parallelism: int) -> None:
    """A barrier stage needs all its subtasks running at once, so it needs that many slots."""
    task_cpus_text = spark.conf.get("spark.task.cpus", "1")
    task_cpus = int(task_cpus_text) if task_cpus_text.isdigit() and int(task_cpus_text) > 0 else 1
    if spark.is_kubernetes:
        executor = spark.executor
        slots = executor.instances * (executor.cores // task_cpus)
        if slots < parallelism:
            raise SpecError(
                field="spec.parallelism",
                problem=f"needs {parallelism} Spark task slots but the executors give {slots} "
                f"(instances {executor.instances} x cores {executor.cores}"
                + (f" / spark.task.cpus {task_cpus}" if task_cpus != 1 else "")
                + ")",
                hint="all subtasks of a barrier stage run at once",
            )
        return
    match = MASTER_PATTERN.match(spark.master)
    assert match is not None
    if match.group(1) != "*":
        slots = int(match.group(1)) // task_cpus
        if slots < parallelism:
            raise SpecError(
                field="spec.parallelism",
                problem=f"needs {parallelism} Spark task slots but master {spark.master} "
                f"gives {slots}",
                hint="all subtasks of a barrier stage run at once",
            )


def _read_checkpoint(job: JobCode, node: _Node) -> CheckpointSpec:
    storage = node.required_string("storage")
    if not (FILE_STORAGE_PATTERN.match(storage) or S3_STORAGE_PATTERN.match(storage)):
        raise SpecError(
            field="spec.checkpoint.storage",
            problem=f"must be a file:///absolute/path or s3://bucket/prefix URI, got {storage!r}",
        )
    s3: S3Settings | None = None
    if node.get("s3") is not None:
        # The job's S3 settings also serve its s3:// code archives, so a job with file
        # checkpoints may still need them.
        if not storage.startswith("s3://") and not job.uses_s3:
            raise SpecError(
                field="spec.checkpoint.s3",
                problem="is only valid with s3:// storage or s3:// entries in spec.job.pythonPath",
            )
        s3 = _read_s3(
            _Node(node.get("s3"), node.at("s3"), ("endpoint", "region", "credentialsSecret"))
        )
    mode = node.enum_field(defaults.CHECKPOINT_MODE, CheckpointMode)
    unaligned = node.flag_field(defaults.CHECKPOINT_UNALIGNED)
    if unaligned and mode is not CheckpointMode.EXACTLY_ONCE:
        raise SpecError(
            field="spec.checkpoint.unaligned",
            problem="unaligned checkpoints need mode ExactlyOnce",
        )
    interval = node.duration_field(defaults.CHECKPOINT_INTERVAL)
    timeout = node.duration_field(defaults.CHECKPOINT_TIMEOUT)
    trigger = node.get("triggerNonce")
    if trigger is not None and not isinstance(trigger, str):
        raise SpecError(
            field="spec.checkpoint.triggerNonce",
            problem=f"must be a string, got {_describe(trigger)}",
            hint="quote it",
        )
    return CheckpointSpec(
        storage=storage,
        s3=s3,
        interval=interval,
        min_pause=node.duration_field(defaults.CHECKPOINT_MIN_PAUSE),
        timeout=timeout,
        mode=mode,
        unaligned=unaligned,
        retained=node.integer_field(defaults.RETAINED),
        tolerable_failures=node.integer_field(defaults.TOLERABLE_FAILURES),
        trigger_nonce=trigger or None,
    )


def _read_s3(node: _Node) -> S3Settings:
    endpoint = node.string("endpoint")
    if endpoint is not None and "@" in endpoint.partition("://")[2].partition("/")[0]:
        # Never echo the value: it holds a secret that would end up in events and logs.
        raise SpecError(
            field="spec.checkpoint.s3.endpoint",
            problem="must not contain credentials (user:password@)",
            hint="put them in the Secret named by credentialsSecret",
        )
    if endpoint is not None and not ENDPOINT_PATTERN.match(endpoint):
        raise SpecError(
            field="spec.checkpoint.s3.endpoint",
            problem=f"must be an http:// or https:// URL, got {endpoint!r}",
        )
    secret = node.string("credentialsSecret")
    if secret is not None and (len(secret) > 253 or not DNS_SUBDOMAIN_PATTERN.match(secret)):
        raise SpecError(
            field="spec.checkpoint.s3.credentialsSecret",
            problem=f"must be a Secret name, got {secret!r}",
        )
    return S3Settings(endpoint=endpoint, region=node.string("region"), credentials_secret=secret)


def _read_restart_policy(node: _Node) -> RestartPolicy:
    backoff = node.child(
        "backoff", ("initial", "max", "multiplier"), _read_backoff, default=Backoff
    )
    return RestartPolicy(
        type=node.enum_field(defaults.RESTART_TYPE, RestartPolicyType),
        max_restarts=node.integer_field(defaults.MAX_RESTARTS),
        backoff=backoff,
        reset_after=node.duration_field(defaults.RESET_AFTER),
        start_timeout=node.duration_field(defaults.START_TIMEOUT),
    )


def _read_backoff(node: _Node) -> Backoff:
    initial = node.duration_field(defaults.BACKOFF_INITIAL)
    maximum = node.duration_field(defaults.BACKOFF_MAX)
    if maximum.seconds < initial.seconds:
        raise SpecError(
            field="spec.restartPolicy.backoff.max",
            problem=f"must be >= initial ({initial.text}), got {maximum.text!r}",
        )
    return Backoff(
        initial=initial, max=maximum, multiplier=node.number_field(defaults.BACKOFF_MULTIPLIER)
    )


SNAPSHOT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _read_restore(node: _Node) -> RestoreSpec:
    raw = node.get("from")
    source = RestoreSource()
    if raw is not None:
        source = _read_restore_source(raw)
    snapshot = node.get("snapshot")
    if snapshot is not None:
        if not isinstance(snapshot, str) or not SNAPSHOT_NAME.match(snapshot):
            raise SpecError(field="spec.restore.snapshot",
                            problem=f"must name a CheckpointedJobSnapshot (a DNS subdomain), "
                                    f"got {_describe(snapshot)}")
        if source.kind != "latest":
            raise SpecError(field="spec.restore.snapshot",
                            problem="and spec.restore.from both name a starting point; "
                                    "keep one")
        source = RestoreSource(kind="snapshot", snapshot=snapshot)
    allow_foreign_job = node.flag_field(defaults.ALLOW_FOREIGN_JOB)
    if allow_foreign_job and source.kind != "path":
        raise SpecError(
            field="spec.restore.allowForeignJob",
            problem="applies only to a checkpoint path in spec.restore.from "
            "(a file:// or s3:// path to another job's _metadata)",
        )
    return RestoreSpec(
        source=source,
        on_unreadable=node.enum_field(defaults.ON_UNREADABLE, OnUnreadable),
        allow_foreign_job=allow_foreign_job,
        allow_non_restored_state=node.flag_field(defaults.ALLOW_NON_RESTORED_STATE),
    )


def _read_restore_source(raw: object) -> RestoreSource:
    path = "spec.restore.from"
    problem = "must be 'latest', a checkpoint id, or a file:// or s3:// path to _metadata"
    if isinstance(raw, bool):
        raise SpecError(field=path, problem=f"{problem}, got {_describe(raw)}")
    if isinstance(raw, int) or (isinstance(raw, str) and raw.isdigit()):
        checkpoint_id = int(raw)
        if checkpoint_id < 1:
            raise SpecError(field=path, problem=f"checkpoint ids start at 1, got {checkpoint_id}")
        return RestoreSource(kind="id", checkpoint_id=checkpoint_id)
    if isinstance(raw, str):
        if raw == defaults.RESTORE_FROM.default:
            return RestoreSource()
        if FILE_STORAGE_PATTERN.match(raw) or S3_STORAGE_PATTERN.match(raw):
            return RestoreSource(kind="path", path=raw)
        hint = _suggest(raw, ["latest"]) if "/" not in raw else None
    else:
        hint = None
    raise SpecError(field=path, problem=f"{problem}, got {_describe(raw)}", hint=hint)


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
