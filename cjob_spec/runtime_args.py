"""The command line of ``python -m job_runtime run``, built from a CheckpointedJob.

This is the contract between the supervisors (operator, embedded runner) and the
runtime: the attempt's :class:`~cjob_spec.runtime_settings.RuntimeSettings` as one
JSON argument, ``--settings``, and the flags of the process's role beside it:

``--beacon-host ADDRESS``
    Listen for standby drivers at this address (the pod's own) and record it in the
    ConfigMap store.
``--standby PROMOTION_FILE`` / ``--standby-pod POD`` / ``--standby-ready-file PATH``
    Run as a warm standby (set by the supervisors' standby launchers).

The runtime's individual flags (``--job-name``, ``--restore``, ...; ``python -m
job_runtime run --help``) build the same document for a command line written by
hand.

Exit codes are ``cjob_spec.exit_codes.ExitCode``.

On Kubernetes the kubelet rewrites container arguments: ``$(VAR)`` becomes the
variable's value and ``$$`` becomes ``$``. The operator relies on that for its own
values (the API server's and the pod's address, in the master URL and its Spark
settings), but what a user wrote (job args, Spark settings, storage, python paths,
restore paths) must reach the job as written, as it does under the embedded runner:
the operator passes ``literal=kubelet_literal``, which doubles every ``$`` of those
strings inside the document.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cjob_spec.errors import SpecError
from cjob_spec.model import CheckpointedJob
from cjob_spec.runtime_settings import RuntimeSettings


def runtime_settings(
    job: CheckpointedJob,
    *,
    restore_pointer: str,
    attempt: int,
    store: str,
    restore_exact: bool = False,
    master: str | None = None,
    job_uid: str | None = None,
    extra_spark_conf: Mapping[str, str] | None = None,
    metrics_port: int | None = None,
    status_file: str | None = None,
    literal: Callable[[str], str] | None = None,
) -> RuntimeSettings:
    """The settings that run ``job``'s attempt.

    ``master`` overrides ``spec.spark.master`` (the operator passes the
    ``k8s://https://...`` URL for ``k8s``); ``extra_spark_conf`` is merged over
    ``spec.spark.conf`` (the operator's driver and executor settings). ``job_uid``
    overrides ``metadata.uid``; one of them is required. ``literal`` is applied to
    every string a user wrote (and to the restore pointer), never to the caller's own
    values (``master``, ``extra_spark_conf``), so that a caller can keep the user's
    strings from being rewritten on their way (:func:`kubelet_literal`).
    """
    user = literal or _as_is
    uid = job_uid or job.metadata.uid
    if not uid:
        raise SpecError(field="metadata.uid", problem="is required to run the job")
    if attempt < 1:
        raise SpecError(field="attempt", problem=f"must be >= 1, got {attempt}")
    spec = job.spec
    checkpoint = spec.checkpoint
    conf = {user(key): user(value) for key, value in spec.spark.conf.items()}
    conf.update(extra_spark_conf or {})
    return RuntimeSettings(
        job_name=job.metadata.name,
        job_uid=uid,
        entrypoint=user(spec.job.entrypoint),
        checkpoint_storage=user(checkpoint.storage),
        python_path=tuple(user(path) for path in spec.job.python_path),
        args=_literal_json(dict(spec.job.args), user),
        parallelism=spec.parallelism,
        max_parallelism=spec.max_parallelism,
        master=master or user(spec.spark.master),
        spark_conf=dict(sorted(conf.items())),
        checkpoint_interval=checkpoint.interval.seconds,
        checkpoint_min_pause=checkpoint.min_pause.seconds,
        checkpoint_timeout=checkpoint.timeout.seconds,
        checkpoint_mode=checkpoint.mode,
        unaligned=checkpoint.unaligned,
        retained=checkpoint.retained,
        tolerable_failures=checkpoint.tolerable_failures,
        checkpoint_stall_intervals=spec.health.checkpoint_stall_intervals,
        sink_stall_timeout=spec.health.sink_stall_timeout.seconds,
        restore=user(restore_pointer),
        restore_exact=restore_exact,
        on_unreadable=spec.restore.on_unreadable,
        allow_foreign_restore=spec.restore.allow_foreign_job,
        allow_non_restored_state=spec.restore.allow_non_restored_state,
        state_backend=spec.state.backend,
        attempt=attempt,
        store=store,
        metrics_port=metrics_port,
        status_file=status_file,
    )


def to_runtime_args(settings: RuntimeSettings, *, beacon_host: str | None = None) -> list[str]:
    """Arguments (after ``python -m job_runtime run``) that run an attempt: its settings
    as ``--settings``, and ``--beacon-host`` when given (a caller's own value, like
    ``master``)."""
    args = ["--settings", settings.encode()]
    if beacon_host is not None:
        args += ["--beacon-host", beacon_host]
    return args


def _literal_json(value: Any, user: Callable[[str], str]) -> Any:
    """``value`` (JSON data a user wrote) with ``user`` applied to every string in it."""
    if isinstance(value, str):
        return user(value)
    if isinstance(value, list):
        return [_literal_json(item, user) for item in value]
    if isinstance(value, dict):
        return {user(key): _literal_json(item, user) for key, item in value.items()}
    return value


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
