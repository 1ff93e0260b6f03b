"""parse_job: defaults, accepted forms, and one clear error per kind of mistake."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from spec_documents import full, minimal, with_field, without_field

from cjob_spec import (
    CheckpointCleanup,
    CheckpointMode,
    OnUnreadable,
    RestartPolicyType,
    SpecError,
    parse_job,
    spec_hash,
)

# --- defaults ------------------------------------------------------------------------


def test_a_minimal_job_gets_every_default() -> None:
    job = parse_job(minimal())
    spec = job.spec
    assert job.metadata.namespace == "default"
    assert job.metadata.uid is None
    assert spec.parallelism == 1
    assert spec.max_parallelism == 128
    assert spec.job.python_path == ()
    assert spec.job.args == {}
    assert spec.spark.master == "k8s"
    assert spec.spark.conf == {}
    assert (spec.spark.driver.cores, spec.spark.driver.memory.bytes) == (1, 1024**3)
    executor = spec.spark.executor
    assert (executor.instances, executor.cores, executor.memory.bytes) == (1, 1, 1024**3)
    checkpoint = spec.checkpoint
    assert checkpoint.s3 is None
    assert checkpoint.interval.seconds == 10
    assert checkpoint.min_pause.seconds == 0
    assert checkpoint.timeout.seconds == 600
    assert checkpoint.mode is CheckpointMode.EXACTLY_ONCE
    assert checkpoint.unaligned is False
    assert checkpoint.retained == 3
    assert checkpoint.tolerable_failures == 0
    assert checkpoint.trigger_nonce is None
    policy = spec.restart_policy
    assert policy.type is RestartPolicyType.ON_FAILURE
    assert policy.max_restarts == 5
    assert policy.backoff.initial.seconds == 10
    assert policy.backoff.max.seconds == 300
    assert policy.backoff.multiplier == 2
    assert policy.reset_after.seconds == 600
    assert policy.start_timeout.seconds == 300
    assert spec.restore.source.pointer == "latest"
    assert spec.restore.on_unreadable is OnUnreadable.FAIL
    assert spec.suspend is False
    assert spec.cleanup_policy.checkpoints is CheckpointCleanup.RETAIN


def test_every_field_of_a_full_job_is_read() -> None:
    job = parse_job(full())
    spec = job.spec
    assert (job.metadata.name, job.metadata.namespace) == ("clicks-per-user", "analytics")
    assert (job.metadata.uid, job.metadata.generation) == ("u-1", 3)
    assert spec.job.python_path == ("jobs/",)
    assert spec.job.args["limit"] == 10
    assert (spec.parallelism, spec.max_parallelism) == (4, 256)
    assert spec.spark.conf == {"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"}
    assert spec.spark.executor.memory.bytes == 4 * 1024**3
    checkpoint = spec.checkpoint
    assert checkpoint.s3 is not None
    assert checkpoint.s3.endpoint == "http://minio:9000"
    assert checkpoint.s3.region == "eu-west-1"
    assert checkpoint.s3.credentials_secret == "s3-creds"
    assert (checkpoint.interval.seconds, checkpoint.min_pause.seconds) == (30, 5)
    assert checkpoint.timeout.seconds == 120
    assert checkpoint.unaligned is True
    assert (checkpoint.retained, checkpoint.tolerable_failures) == (5, 2)
    assert checkpoint.trigger_nonce == "manual-1"
    policy = spec.restart_policy
    assert policy.type is RestartPolicyType.ALWAYS
    assert (policy.max_restarts, policy.backoff.multiplier) == (7, 3.0)
    assert (policy.reset_after.seconds, policy.start_timeout.seconds) == (3600, 90)
    assert spec.restore.source.pointer == "s3://old/chk-7/_metadata"
    assert spec.restore.on_unreadable is OnUnreadable.FALLBACK_TO_PREVIOUS
    assert spec.suspend is True
    assert spec.cleanup_policy.checkpoints is CheckpointCleanup.DELETE


def test_nulls_count_as_absent_like_on_the_api_server() -> None:
    document = with_field(minimal(), "spec.checkpoint.interval", None)
    document = with_field(document, "spec.spark", None)
    job = parse_job(document)
    assert job.spec.checkpoint.interval.seconds == 10
    assert job.spec.spark.master == "k8s"


def test_objects_read_from_the_api_server_are_accepted() -> None:
    document = with_field(minimal(), "metadata.resourceVersion", "12")
    document = with_field(document, "metadata.managedFields", [{"manager": "kubectl"}])
    document = with_field(document, "metadata.annotations", {"a": "b"})
    document["status"] = {"phase": "Running", "whatever": 1}
    job = parse_job(document)
    assert job.metadata.annotations == {"a": "b"}


# --- accepted forms ------------------------------------------------------------------


def test_a_job_without_an_image_is_accepted_and_left_to_the_operators_default() -> None:
    job = parse_job(without_field(minimal(), "spec.image"))
    assert job.spec.image is None


@pytest.mark.parametrize(
    "entries",
    [
        ["jobs/"],
        ["."],
        ["/opt/cjob/jobs/my-job"],
        ["s3://code/jobs/clicks.zip", "/opt/cjob/jobs/shared"],
        ["/opt/jobs/clicks.zip"],
    ],
)
def test_python_path_takes_directories_and_s3_zip_archives(entries: list[str]) -> None:
    job = parse_job(with_field(minimal(), "spec.job.pythonPath", entries))
    assert job.spec.job.python_path == tuple(entries)
    assert job.spec.job.uses_s3 == any(e.startswith("s3://") for e in entries)


def test_s3_settings_serve_s3_code_even_with_file_checkpoints() -> None:
    document = with_field(minimal(), "spec.job.pythonPath", ["s3://code/clicks.zip"])
    document = with_field(document, "spec.checkpoint.s3", {"endpoint": "http://minio:9000",
                                                           "credentialsSecret": "s3-creds"})
    s3 = parse_job(document).spec.checkpoint.s3
    assert s3 is not None and s3.endpoint == "http://minio:9000"



@pytest.mark.parametrize(
    ("value", "pointer"),
    [
        ("latest", "latest"),
        (42, "42"),
        ("42", "42"),
        ("file:///data/ckpt/job-u/chk-3/_metadata", "file:///data/ckpt/job-u/chk-3/_metadata"),
        ("s3://bucket/job-u/chk-3/_metadata", "s3://bucket/job-u/chk-3/_metadata"),
    ],
)
def test_restore_accepts_latest_an_id_or_a_path(value: object, pointer: str) -> None:
    job = parse_job(with_field(minimal(), "spec.restore.from", value))
    assert job.spec.restore.source.pointer == pointer


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2Gi", 2 * 1024**3),
        ("512Mi", 512 * 1024**2),
        ("1.5Gi", 3 * 1024**3 // 2),
        ("2g", 2 * 1024**3),
        ("512m", 512 * 1024**2),
        ("4096mb", 4 * 1024**3),
        ("1G", 10**9),
        ("1500M", 1500 * 10**6),
        (1073741824, 1024**3),
    ],
)
def test_memory_accepts_kubernetes_and_spark_forms(text: object, size: int) -> None:
    job = parse_job(with_field(minimal(), "spec.spark.driver.memory", text))
    assert job.spec.spark.driver.memory.bytes == size


@pytest.mark.parametrize("master", ["k8s", "local[1]", "local[*]", "local[4,3]", "local[*,2]"])
def test_spark_masters_kubernetes_and_local_are_accepted(master: str) -> None:
    assert parse_job(with_field(minimal(), "spec.spark.master", master)).spec.spark.master == master


def test_local_star_does_not_limit_parallelism() -> None:
    document = with_field(minimal(), "spec.spark.master", "local[*]")
    assert parse_job(with_field(document, "spec.parallelism", 64)).spec.parallelism == 64


# --- errors --------------------------------------------------------------------------

M = minimal()
FILE = "spec.checkpoint.storage"

ERRORS: list[tuple[str, dict[str, Any], str]] = [
    (
        "wrong api version",
        with_field(M, "apiVersion", "v1"),
        "apiVersion: must be 'checkpointed.io/v1alpha1', got a string ('v1')",
    ),
    (
        "wrong kind",
        with_field(M, "kind", "Job"),
        "kind: must be 'CheckpointedJob', got a string ('Job')",
    ),
    ("missing metadata", without_field(M, "metadata"), "metadata: required field is missing"),
    ("missing name", without_field(M, "metadata.name"), "metadata.name: required field is missing"),
    (
        "upper-case name",
        with_field(M, "metadata.name", "Clicks"),
        "metadata.name: must be at most 40 characters of lower-case letters, digits and '-', "
        "starting with a letter and ending with a letter or digit, got 'Clicks'",
    ),
    (
        "name too long for the driver service",
        with_field(M, "metadata.name", "a" * 41),
        f"metadata.name: must be at most 40 characters of lower-case letters, digits and '-', "
        f"starting with a letter and ending with a letter or digit, got '{'a' * 41}'",
    ),
    (
        "bad namespace",
        with_field(M, "metadata.namespace", "Team_A"),
        "metadata.namespace: must be a DNS label, got 'Team_A'",
    ),
    (
        "unknown top-level field",
        with_field(M, "specs", {}),
        "specs: unknown field (did you mean 'spec'?)",
    ),
    (
        "misspelt section",
        with_field(without_field(M, "spec.checkpoint"), "spec.chekpoint", {}),
        "spec.chekpoint: unknown field (did you mean 'checkpoint'?)",
    ),
    (
        "misspelt nested field",
        with_field(M, "spec.restartPolicy.maxRestart", 3),
        "spec.restartPolicy.maxRestart: unknown field (did you mean 'maxRestarts'?)",
    ),
    ("unknown field without suggestion", with_field(M, "spec.zzz", 1), "spec.zzz: unknown field"),
    ("missing spec", without_field(M, "spec"), "spec: required field is missing"),
    ("spec not a mapping", with_field(M, "spec", [1]), "spec: must be a mapping, got a list"),
    ("empty image", with_field(M, "spec.image", " "), "spec.image: must not be empty"),
    (
        "image with spaces",
        with_field(M, "spec.image", "a b"),
        "spec.image: must not contain spaces, got 'a b'",
    ),
    ("missing job", without_field(M, "spec.job"), "spec.job: required field is missing"),
    (
        "entrypoint without function",
        with_field(M, "spec.job.entrypoint", "clicks.job"),
        "spec.job.entrypoint: must be 'module:function' made of Python identifiers "
        "(for example 'clicks.job:build'), got 'clicks.job'",
    ),
    (
        "entrypoint with a keyword",
        with_field(M, "spec.job.entrypoint", "jobs.class:build"),
        "spec.job.entrypoint: must be 'module:function' made of Python identifiers "
        "(for example 'clicks.job:build'), got 'jobs.class:build'",
    ),
    (
        "entrypoint with a dash",
        with_field(M, "spec.job.entrypoint", "my-jobs:build"),
        "spec.job.entrypoint: must be 'module:function' made of Python identifiers "
        "(for example 'clicks.job:build'), got 'my-jobs:build'",
    ),
    (
        "python path not a list",
        with_field(M, "spec.job.pythonPath", "jobs/"),
        "spec.job.pythonPath: must be a list of paths, got a string ('jobs/')",
    ),
    (
        "empty python path entry",
        with_field(M, "spec.job.pythonPath", ["ok", ""]),
        "spec.job.pythonPath[1]: must be a non-empty string, got a string ('')",
    ),
    (
        "s3 python path naming a folder",
        with_field(M, "spec.job.pythonPath", ["s3://code/jobs/clicks/"]),
        "spec.job.pythonPath[0]: an s3:// entry must name a zip archive of the job's modules, "
        "s3://bucket/path/code.zip, got 's3://code/jobs/clicks/' (zip the folder's contents "
        "(its modules and packages at the top level))",
    ),
    (
        "s3 python path naming a wheel",
        with_field(M, "spec.job.pythonPath", ["/opt/jobs", "s3://code/clicks-1.0-py3-none-any.whl"]),
        "spec.job.pythonPath[1]: an s3:// entry must name a zip archive of the job's modules, "
        "s3://bucket/path/code.zip, got 's3://code/clicks-1.0-py3-none-any.whl' (zip the "
        "folder's contents (its modules and packages at the top level))",
    ),
    (
        "s3 python path without a key",
        with_field(M, "spec.job.pythonPath", ["s3://code.zip"]),
        "spec.job.pythonPath[0]: an s3:// entry must name a zip archive of the job's modules, "
        "s3://bucket/path/code.zip, got 's3://code.zip' (zip the folder's contents "
        "(its modules and packages at the top level))",
    ),
    (
        "s3a python path",
        with_field(M, "spec.job.pythonPath", ["s3a://code/clicks.zip"]),
        "spec.job.pythonPath[0]: must be a directory path or an s3://bucket/path/code.zip "
        "archive, got 's3a://code/clicks.zip' (write s3:// for S3)",
    ),
    (
        "python path on another store",
        with_field(M, "spec.job.pythonPath", ["gs://code/clicks.zip"]),
        "spec.job.pythonPath[0]: must be a directory path or an s3://bucket/path/code.zip "
        "archive, got 'gs://code/clicks.zip'",
    ),
    (
        "python path as a file URI",
        with_field(M, "spec.job.pythonPath", ["file:///opt/jobs"]),
        "spec.job.pythonPath[0]: must be a directory path or an s3://bucket/path/code.zip "
        "archive, got 'file:///opt/jobs'",
    ),
    (
        "python path with a trailing space",
        with_field(M, "spec.job.pythonPath", ["/opt/jobs "]),
        "spec.job.pythonPath[0]: must not start or end with spaces, got '/opt/jobs '",
    ),
    (
        "args not a mapping",
        with_field(M, "spec.job.args", ["a"]),
        "spec.job.args: must be a mapping, got a list",
    ),
    (
        "args holding a YAML date",
        with_field(M, "spec.job.args", {"since": datetime.date(2024, 1, 1)}),
        "spec.job.args.since: must be a JSON value (string, number, boolean, list or mapping), "
        "got a date (quote dates and times)",
    ),
    (
        "args holding NaN",
        with_field(M, "spec.job.args", {"x": [float("nan")]}),
        "spec.job.args.x[0]: must be a finite number, got nan",
    ),
    (
        "parallelism zero",
        with_field(M, "spec.parallelism", 0),
        "spec.parallelism: must be >= 1, got 0",
    ),
    (
        "parallelism as a string",
        with_field(M, "spec.parallelism", "4"),
        "spec.parallelism: must be an integer, got a string ('4')",
    ),
    (
        "parallelism as a boolean",
        with_field(M, "spec.parallelism", True),
        "spec.parallelism: must be an integer, got a boolean (true)",
    ),
    (
        "parallelism above max parallelism",
        with_field(with_field(M, "spec.maxParallelism", 8), "spec.parallelism", 9),
        "spec.parallelism: must be <= maxParallelism (8), got 9",
    ),
    (
        "max parallelism above the key group limit",
        with_field(M, "spec.maxParallelism", 40000),
        "spec.maxParallelism: must be <= 32768, got 40000",
    ),
    (
        "more subtasks than executor slots",
        with_field(M, "spec.parallelism", 3),
        "spec.parallelism: needs 3 Spark task slots but the executors give 1 "
        "(instances 1 x cores 1) (all subtasks of a barrier stage run at once)",
    ),
    (
        "more subtasks than local threads",
        with_field(with_field(M, "spec.spark.master", "local[2]"), "spec.parallelism", 4),
        "spec.parallelism: needs 4 Spark task slots but master local[2] gives 2 "
        "(all subtasks of a barrier stage run at once)",
    ),
    (
        "unknown master",
        with_field(M, "spec.spark.master", "yarn"),
        "spec.spark.master: must be 'k8s', 'local[N]', 'local[*]' or 'local[N,F]', got 'yarn'",
    ),
    (
        "local with zero threads",
        with_field(M, "spec.spark.master", "local[0]"),
        "spec.spark.master: must be 'k8s', 'local[N]', 'local[*]' or 'local[N,F]', got 'local[0]'",
    ),
    (
        "conf key outside spark",
        with_field(M, "spec.spark.conf", {"hadoop.x": "1"}),
        "spec.spark.conf.hadoop.x: Spark configuration keys start with 'spark.'",
    ),
    (
        "conf setting the master",
        with_field(M, "spec.spark.conf", {"spark.master": "local[2]"}),
        "spec.spark.conf.spark.master: is managed by the operator (use spec.spark.master)",
    ),
    (
        "conf setting executor memory",
        with_field(M, "spec.spark.conf", {"spark.executor.memory": "2g"}),
        "spec.spark.conf.spark.executor.memory: is managed by the operator "
        "(use spec.spark.executor.memory)",
    ),
    (
        "conf setting credentials",
        with_field(M, "spec.spark.conf", {"spark.kubernetes.authenticate.oauthToken": "x"}),
        "spec.spark.conf.spark.kubernetes.authenticate.oauthToken: is managed by the operator "
        "(the driver uses its pod's service account)",
    ),
    (
        "conf enabling dynamic allocation",
        with_field(M, "spec.spark.conf", {"spark.dynamicAllocation.enabled": "true"}),
        "spec.spark.conf.spark.dynamicAllocation.enabled: is managed by the operator "
        "(barrier stages cannot run with dynamic allocation)",
    ),
    (
        "conf value as a YAML boolean",
        with_field(M, "spec.spark.conf", {"spark.ui.enabled": False}),
        "spec.spark.conf.spark.ui.enabled: must be a string or an integer, got a boolean (false) "
        "(quote booleans and decimals, e.g. 'true')",
    ),
    (
        "driver with zero cores",
        with_field(M, "spec.spark.driver.cores", 0),
        "spec.spark.driver.cores: must be >= 1, got 0",
    ),
    (
        "memory in an unknown unit",
        with_field(M, "spec.spark.driver.memory", "2GB"),
        "spec.spark.driver.memory: unknown unit 'GB' (use Ki, Mi, Gi, Ti, K, M, G, T or "
        "Spark's k, m, g, t), got '2GB'",
    ),
    (
        "memory that is not a quantity",
        with_field(M, "spec.spark.executor.memory", "lots"),
        "spec.spark.executor.memory: must be a memory quantity like '2Gi', '512Mi' or '2g', "
        "got 'lots'",
    ),
    (
        "zero memory",
        with_field(M, "spec.spark.executor.memory", "0Mi"),
        "spec.spark.executor.memory: must be greater than zero, got '0Mi'",
    ),
    (
        "missing checkpoint",
        without_field(M, "spec.checkpoint"),
        "spec.checkpoint: required field is missing",
    ),
    ("missing storage", without_field(M, FILE), f"{FILE}: required field is missing"),
    (
        "storage on hdfs",
        with_field(M, FILE, "hdfs://nn/ckpt"),
        f"{FILE}: must be a file:///absolute/path or s3://bucket/prefix URI, got 'hdfs://nn/ckpt'",
    ),
    (
        "relative file storage",
        with_field(M, FILE, "file://data/ckpt"),
        f"{FILE}: must be a file:///absolute/path or s3://bucket/prefix URI, "
        "got 'file://data/ckpt'",
    ),
    (
        "s3 settings with file storage",
        with_field(M, "spec.checkpoint.s3", {"endpoint": "http://minio:9000"}),
        "spec.checkpoint.s3: is only valid with s3:// storage or s3:// entries in "
        "spec.job.pythonPath",
    ),
    (
        "s3 endpoint without scheme",
        with_field(
            with_field(M, FILE, "s3://bucket/p"), "spec.checkpoint.s3.endpoint", "minio:9000"
        ),
        "spec.checkpoint.s3.endpoint: must be an http:// or https:// URL, got 'minio:9000'",
    ),
    (
        "interval without unit",
        with_field(M, "spec.checkpoint.interval", "10"),
        "spec.checkpoint.interval: must be a duration like '10s', '5m', '1h30m' or '250ms' "
        "(units: h, m, s, ms, us, ns), got '10'",
    ),
    (
        "interval as a number",
        with_field(M, "spec.checkpoint.interval", 10),
        "spec.checkpoint.interval: must be a duration string like '10s' or '5m', "
        "got an integer (10)",
    ),
    (
        "negative interval",
        with_field(M, "spec.checkpoint.interval", "-5s"),
        "spec.checkpoint.interval: must not be negative, got '-5s'",
    ),
    (
        "zero interval",
        with_field(M, "spec.checkpoint.interval", "0s"),
        "spec.checkpoint.interval: must be at least 0.01s, got '0s'",
    ),
    (
        "zero timeout",
        with_field(M, "spec.checkpoint.timeout", "0s"),
        "spec.checkpoint.timeout: must be greater than 0, got '0s'",
    ),
    (
        "mode in the wrong case",
        with_field(M, "spec.checkpoint.mode", "exactlyonce"),
        "spec.checkpoint.mode: must be one of ExactlyOnce, AtLeastOnce, got a string "
        "('exactlyonce') (did you mean 'ExactlyOnce'?)",
    ),
    (
        "unaligned at least once",
        with_field(
            with_field(M, "spec.checkpoint.mode", "AtLeastOnce"), "spec.checkpoint.unaligned", True
        ),
        "spec.checkpoint.unaligned: unaligned checkpoints need mode ExactlyOnce",
    ),
    (
        "unaligned as a string",
        with_field(M, "spec.checkpoint.unaligned", "yes"),
        "spec.checkpoint.unaligned: must be true or false, got a string ('yes')",
    ),
    (
        "no retained checkpoint",
        with_field(M, "spec.checkpoint.retained", 0),
        "spec.checkpoint.retained: must be >= 1, got 0",
    ),
    (
        "too many retained checkpoints for a ConfigMap",
        with_field(M, "spec.checkpoint.retained", 101),
        "spec.checkpoint.retained: must be <= 100, got 101",
    ),
    (
        "negative tolerable failures",
        with_field(M, "spec.checkpoint.tolerableFailures", -1),
        "spec.checkpoint.tolerableFailures: must be >= 0, got -1",
    ),
    (
        "trigger nonce as a number",
        with_field(M, "spec.checkpoint.triggerNonce", 3),
        "spec.checkpoint.triggerNonce: must be a string, got an integer (3) (quote it)",
    ),
    (
        "restart policy type in the wrong case",
        with_field(M, "spec.restartPolicy.type", "onfailure"),
        "spec.restartPolicy.type: must be one of Never, OnFailure, Always, got a string "
        "('onfailure') (did you mean 'OnFailure'?)",
    ),
    (
        "negative max restarts",
        with_field(M, "spec.restartPolicy.maxRestarts", -1),
        "spec.restartPolicy.maxRestarts: must be >= 0, got -1",
    ),
    (
        "backoff max below initial",
        with_field(M, "spec.restartPolicy.backoff", {"initial": "1m", "max": "10s"}),
        "spec.restartPolicy.backoff.max: must be >= initial (1m), got '10s'",
    ),
    (
        "shrinking backoff",
        with_field(M, "spec.restartPolicy.backoff.multiplier", 0.5),
        "spec.restartPolicy.backoff.multiplier: must be >= 1, got 0.5",
    ),
    (
        "bad start timeout",
        with_field(M, "spec.restartPolicy.startTimeout", "5 minutes"),
        "spec.restartPolicy.startTimeout: must be a duration like '10s', '5m', '1h30m' or "
        "'250ms' (units: h, m, s, ms, us, ns), got '5 minutes'",
    ),
    (
        "misspelt latest",
        with_field(M, "spec.restore.from", "lates"),
        "spec.restore.from: must be 'latest', a checkpoint id, or a file:// or s3:// path to "
        "_metadata, got a string ('lates') (did you mean 'latest'?)",
    ),
    (
        "checkpoint id zero",
        with_field(M, "spec.restore.from", 0),
        "spec.restore.from: checkpoint ids start at 1, got 0",
    ),
    (
        "restore from hdfs",
        with_field(M, "spec.restore.from", "hdfs://nn/chk-1"),
        "spec.restore.from: must be 'latest', a checkpoint id, or a file:// or s3:// path to "
        "_metadata, got a string ('hdfs://nn/chk-1')",
    ),
    (
        "unknown unreadable policy",
        with_field(M, "spec.restore.onUnreadable", "Ignore"),
        "spec.restore.onUnreadable: must be one of Fail, FallbackToPrevious, got a string "
        "('Ignore')",
    ),
    (
        "another job's checkpoint allowed without naming one",
        with_field(M, "spec.restore.allowForeignJob", True),
        "spec.restore.allowForeignJob: applies only to a checkpoint path in spec.restore.from "
        "(a file:// or s3:// path to another job's _metadata)",
    ),
    (
        "allowForeignJob as a string",
        with_field(M, "spec.restore.allowForeignJob", "yes"),
        "spec.restore.allowForeignJob: must be true or false, got a string ('yes')",
    ),
    (
        "allowNonRestoredState as a string",
        with_field(M, "spec.restore.allowNonRestoredState", "yes"),
        "spec.restore.allowNonRestoredState: must be true or false, got a string ('yes')",
    ),
    (
        "unknown state backend",
        with_field(M, "spec.state.backend", "RocksDB"),
        "spec.state.backend: must be one of hashmap, rocksdb, got a string ('RocksDB') "
        "(did you mean 'rocksdb'?)",
    ),
    (
        "state backend as a number",
        with_field(M, "spec.state.backend", 1),
        "spec.state.backend: must be one of hashmap, rocksdb, got an integer (1)",
    ),
    (
        "unknown field under state",
        with_field(M, "spec.state.incremental", True),
        "spec.state.incremental: unknown field",
    ),
    (
        "unknown cleanup policy",
        with_field(M, "spec.cleanupPolicy.checkpoints", "Keep"),
        "spec.cleanupPolicy.checkpoints: must be one of Retain, Delete, got a string ('Keep')",
    ),
    (
        "suspend as a string",
        with_field(M, "spec.suspend", "true"),
        "spec.suspend: must be true or false, got a string ('true')",
    ),
]


@pytest.mark.parametrize(
    ("document", "message"),
    [pytest.param(document, message, id=case) for case, document, message in ERRORS],
)
def test_an_invalid_job_is_refused_with_a_one_line_message_naming_the_field(
    document: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_job(document)
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(caught.value.field)


def test_a_document_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(SpecError, match="must be a mapping, got a list"):
        parse_job([1, 2])  # type: ignore[arg-type]


def test_spec_errors_carry_the_field_and_the_problem_separately() -> None:
    with pytest.raises(SpecError) as caught:
        parse_job(with_field(minimal(), "spec.checkpoint.retained", 0))
    assert caught.value.field == "spec.checkpoint.retained"
    assert caught.value.problem == "must be >= 1, got 0"


# --- spec hash -----------------------------------------------------------------------


def test_the_spec_hash_is_stable_for_the_same_document() -> None:
    assert spec_hash(parse_job(full())) == spec_hash(parse_job(full()))


def test_the_default_state_backend_keeps_the_spec_hash_of_documents_written_before_it() -> None:
    explicit = with_field(minimal(), "spec.state.backend", "hashmap")
    assert spec_hash(parse_job(explicit)) == spec_hash(parse_job(minimal()))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.image", "example.org/clicks:2.0"),
        ("spec.image", None),
        ("spec.job.pythonPath", ["s3://code/clicks.zip"]),
        ("spec.parallelism", 2),
        ("spec.job.args", {"input": "other"}),
        ("spec.spark.executor.memory", "8Gi"),
        ("spec.checkpoint.interval", "1m"),
        ("spec.checkpoint.mode", "AtLeastOnce"),
        ("spec.checkpoint.unaligned", False),
        ("spec.restore.onUnreadable", "Fail"),
        ("spec.state.backend", "hashmap"),
    ],
)
def test_changes_a_running_driver_depends_on_change_the_spec_hash(path: str, value: Any) -> None:
    document = full()
    if path == "spec.checkpoint.mode":
        document = with_field(document, "spec.checkpoint.unaligned", False)
    assert spec_hash(parse_job(with_field(document, path, value))) != spec_hash(parse_job(document))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.suspend", False),
        ("spec.checkpoint.triggerNonce", "manual-2"),
        ("spec.restartPolicy.maxRestarts", 1),
        ("spec.restore.from", "s3://old/chk-9/_metadata"),
        ("spec.restore.allowForeignJob", False),
        ("spec.restore.allowNonRestoredState", True),
        ("spec.cleanupPolicy.checkpoints", "Retain"),
        ("metadata.generation", 9),
    ],
)
def test_changes_that_need_no_new_driver_keep_the_spec_hash(path: str, value: Any) -> None:
    document = full()
    assert spec_hash(parse_job(with_field(document, path, value))) == spec_hash(parse_job(document))
