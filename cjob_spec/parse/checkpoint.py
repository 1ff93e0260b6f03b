"""``spec.checkpoint`` with its S3 settings, and ``spec.restore``: where checkpoints go,
how they are taken, and which one (or which snapshot or path) a job starts from."""

from __future__ import annotations

import re

from cjob_spec import defaults
from cjob_spec.errors import SpecError
from cjob_spec.errors import describe_value as _describe
from cjob_spec.model import (
    CheckpointMode,
    CheckpointSpec,
    JobCode,
    OnUnreadable,
    RestoreSource,
    RestoreSpec,
    S3Settings,
)
from cjob_spec.parse.node import Node, suggest
from cjob_spec.schema import patterns

MAX_RETAINED = defaults.RETAINED.maximum
MAX_TOLERABLE_FAILURES = defaults.TOLERABLE_FAILURES.maximum

DNS_SUBDOMAIN_PATTERN = re.compile(patterns.DNS_SUBDOMAIN)
FILE_STORAGE_PATTERN = re.compile(patterns.FILE_STORAGE)
S3_STORAGE_PATTERN = re.compile(patterns.S3_STORAGE)
ENDPOINT_PATTERN = re.compile(patterns.S3_ENDPOINT)


def read_checkpoint(job: JobCode, node: Node) -> CheckpointSpec:
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
        s3 = _read_s3(node.section("s3"))
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
    if trigger is not None:
        node.check_length("triggerNonce", trigger)
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


def _read_s3(node: Node) -> S3Settings:
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


SNAPSHOT_NAME = re.compile(patterns.OBJECT_NAME)


def read_restore(node: Node) -> RestoreSpec:
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
        node.check_length("snapshot", snapshot)
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
    redeploy = node.get("redeployNonce")
    if redeploy is not None and not isinstance(redeploy, str):
        raise SpecError(field="spec.restore.redeployNonce",
                        problem=f"must be a string, got {_describe(redeploy)}", hint="quote it")
    if redeploy:
        node.check_length("redeployNonce", redeploy)
        if source.kind == "latest":
            raise SpecError(
                field="spec.restore.redeployNonce",
                problem="starts the job again from spec.restore.from (a checkpoint id or "
                        "path) or spec.restore.snapshot, and neither names one")
    return RestoreSpec(
        source=source,
        on_unreadable=node.enum_field(defaults.ON_UNREADABLE, OnUnreadable),
        allow_foreign_job=allow_foreign_job,
        allow_non_restored_state=node.flag_field(defaults.ALLOW_NON_RESTORED_STATE),
        redeploy_nonce=redeploy or None,
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
        hint = suggest(raw, ["latest"]) if "/" not in raw else None
    else:
        hint = None
    raise SpecError(field=path, problem=f"{problem}, got {_describe(raw)}", hint=hint)
