"""The command line of ``python -m job_runtime run``, built from a CheckpointedJob.

This is the contract between the supervisors (operator, embedded runner) and the
runtime. Flags (values are single arguments; repeatable flags may appear many times):

``--job-name NAME``
    The CheckpointedJob's name.
``--job-uid UID``
    Its uid; checkpoints live under ``<storage>/<name>-<uid>/``.
``--entrypoint MOD:FN``
    The user's ``build(p: Pipeline)`` function.
``--python-path P`` (repeatable)
    Added to ``sys.path`` on the driver and the executors, in order (the first entry
    wins): a directory on the driver, or an ``s3://bucket/key.zip`` archive the driver
    downloads with the job's S3 settings. The driver ships whatever the executors
    cannot see themselves (see ``job_runtime.execution.driver.code``).
``--args-json JSON``
    ``spec.job.args`` as a JSON object; the pipeline sees it as ``p.args``.
``--parallelism N`` / ``--max-parallelism N``
    Subtasks of the barrier stage / number of key groups.
``--master MASTER``
    Spark master URL (``local[4]``, ``local[4,3]``, ``k8s://https://host:port``).
``--spark-conf K=V`` (repeatable)
    Extra Spark configuration, applied before the session starts.
``--checkpoint-storage URI``
    ``file:///...`` or ``s3://bucket/prefix``.
``--checkpoint-interval S`` / ``--checkpoint-min-pause S`` / ``--checkpoint-timeout S``
    Seconds (decimals allowed).
``--checkpoint-mode exactly_once|at_least_once``
``--unaligned``
    Present only for unaligned checkpoints.
``--retained N`` / ``--tolerable-failures N``
``--checkpoint-stall-intervals N`` / ``--sink-stall-timeout S``
    ``spec.health``; given only when they differ from the defaults.
``--restore POINTER``
    ``latest`` (the newest completed checkpoint in the store; a fresh start when the
    store is empty), a checkpoint id of this job, or a path to a ``_metadata`` file.
``--allow-foreign-restore``
    Present only when ``spec.restore.allowForeignJob`` lets a path name another job's
    checkpoint.
``--allow-non-restored-state``
    Present only when ``spec.restore.allowNonRestoredState`` lets a restore drop the
    state of operators the pipeline no longer maps.
``--on-unreadable fail|fallback``
    What to do when the checkpoint to restore is unreadable: exit 6, or fall back to
    an older retained checkpoint (and say so).
``--state-backend hashmap|rocksdb``
    ``spec.state.backend``; given only for ``rocksdb`` (``hashmap`` is the default).
``--state-dir DIR``
    Local working directory of the ``rocksdb`` backend (optional; default
    ``cjob-rocksdb`` in Spark's scratch directory, ``SPARK_LOCAL_DIRS``, which Spark
    on Kubernetes puts on an emptyDir, else in the system's temporary directory).
``--attempt N``
    The attempt number; the store refuses writes from any attempt but the fenced one.
``--store file:DIR|configmap:NAMESPACE/NAME``
    The completed-checkpoint store.
``--metrics-port N``
    Prometheus endpoint of the driver (optional).
``--status-file PATH``
    Where the runtime writes its progress as JSON (optional; the embedded runner).

Exit codes are ``cjob_spec.exit_codes.ExitCode``.

On Kubernetes the kubelet rewrites container arguments: ``$(VAR)`` becomes the
variable's value and ``$$`` becomes ``$``. The operator relies on that for its own
values (the API server's and the pod's address), but what a user wrote (job args,
Spark settings, storage, python paths, restore paths) must reach the job as written,
as it does under the embedded runner: the operator passes ``literal=kubelet_literal``,
which doubles every ``$`` of those strings.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from cjob_spec import defaults
from cjob_spec.durations import format_seconds
from cjob_spec.errors import SpecError
from cjob_spec.model import DEFAULT_STATE_BACKEND, CheckpointedJob


def to_runtime_args(
    job: CheckpointedJob,
    *,
    restore_pointer: str,
    attempt: int,
    store: str,
    master: str | None = None,
    job_uid: str | None = None,
    extra_spark_conf: Mapping[str, str] | None = None,
    metrics_port: int | None = None,
    status_file: str | None = None,
    beacon_host: str | None = None,
    literal: Callable[[str], str] | None = None,
) -> list[str]:
    """Arguments (after ``python -m job_runtime run``) that run ``job``'s attempt.

    ``master`` overrides ``spec.spark.master`` (the operator passes the
    ``k8s://https://...`` URL for ``k8s``); ``extra_spark_conf`` is merged over
    ``spec.spark.conf`` (the operator's driver and executor settings). ``job_uid``
    overrides ``metadata.uid``; one of them is required. ``literal`` is applied to
    every string a user wrote (and to the restore pointer), never to the caller's own
    values (``master``, ``extra_spark_conf``, ``beacon_host``), so that a caller can
    keep the user's strings from being rewritten on their way (:func:`kubelet_literal`).
    """
    user = literal or _as_is
    uid = job_uid or job.metadata.uid
    if not uid:
        raise SpecError(field="metadata.uid", problem="is required to run the job")
    if attempt < 1:
        raise SpecError(field="attempt", problem=f"must be >= 1, got {attempt}")
    spec = job.spec
    checkpoint = spec.checkpoint
    args = [
        "--job-name",
        job.metadata.name,
        "--job-uid",
        uid,
        "--entrypoint",
        user(spec.job.entrypoint),
    ]
    for path in spec.job.python_path:
        args += ["--python-path", user(path)]
    args += [
        "--args-json",
        user(json.dumps(dict(spec.job.args), sort_keys=True, separators=(",", ":"))),
        "--parallelism",
        str(spec.parallelism),
        "--max-parallelism",
        str(spec.max_parallelism),
        "--master",
        master or user(spec.spark.master),
    ]
    conf = {key: user(f"{key}={value}") for key, value in spec.spark.conf.items()}
    conf.update({key: f"{key}={value}" for key, value in (extra_spark_conf or {}).items()})
    for key in sorted(conf):
        args += ["--spark-conf", conf[key]]
    args += [
        "--checkpoint-storage",
        user(checkpoint.storage),
        "--checkpoint-interval",
        format_seconds(checkpoint.interval.seconds),
        "--checkpoint-min-pause",
        format_seconds(checkpoint.min_pause.seconds),
        "--checkpoint-timeout",
        format_seconds(checkpoint.timeout.seconds),
        "--checkpoint-mode",
        checkpoint.mode.runtime_flag,
    ]
    if checkpoint.unaligned:
        args.append("--unaligned")
    args += [
        "--retained",
        str(checkpoint.retained),
        "--tolerable-failures",
        str(checkpoint.tolerable_failures),
        "--restore",
        user(restore_pointer),
        "--on-unreadable",
        spec.restore.on_unreadable.runtime_flag,
    ]
    if spec.restore.allow_foreign_job:
        args.append("--allow-foreign-restore")
    if spec.restore.allow_non_restored_state:
        args.append("--allow-non-restored-state")
    if spec.state.backend is not DEFAULT_STATE_BACKEND:
        args += ["--state-backend", spec.state.backend.value]
    health = spec.health
    if health.checkpoint_stall_intervals != defaults.CHECKPOINT_STALL_INTERVALS.default:
        args += ["--checkpoint-stall-intervals", str(health.checkpoint_stall_intervals)]
    if health.sink_stall_timeout != defaults.SINK_STALL_TIMEOUT.default_value():
        args += ["--sink-stall-timeout", format_seconds(health.sink_stall_timeout.seconds)]
    args += [
        "--attempt",
        str(attempt),
        "--store",
        store,
    ]
    if metrics_port is not None:
        args += ["--metrics-port", str(metrics_port)]
    if status_file is not None:
        args += ["--status-file", status_file]
    if beacon_host is not None:
        args += ["--beacon-host", beacon_host]
    return args


def kubelet_literal(text: str) -> str:
    """``text`` as a container argument the kubelet passes on unchanged: every ``$``
    doubled, so neither ``$(VAR)`` nor ``$$`` is rewritten."""
    return text.replace("$", "$$")


def _as_is(text: str) -> str:
    return text


def file_store_arg(directory: str) -> str:
    """``--store`` value of the file store (the embedded runner)."""
    return f"file:{directory}"


def configmap_store_arg(*, namespace: str, name: str) -> str:
    """``--store`` value of the ConfigMap store (the operator)."""
    return f"configmap:{namespace}/{name}"
