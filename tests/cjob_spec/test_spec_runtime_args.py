"""to_runtime_args: the command line contract with ``python -m job_runtime run``."""

from __future__ import annotations

import json

import pytest
from spec_documents import full, minimal, with_field

from cjob_spec import SpecError, parse_job, to_runtime_args
from cjob_spec.runtime_args import configmap_store_arg, file_store_arg


def flag_values(args: list[str], flag: str) -> list[str]:
    return [args[index + 1] for index, item in enumerate(args) if item == flag]


def single(args: list[str], flag: str) -> str:
    values = flag_values(args, flag)
    assert len(values) == 1, f"{flag} appears {len(values)} times"
    return values[0]


def test_every_setting_of_a_full_job_reaches_the_runtime() -> None:
    job = parse_job(full())
    args = to_runtime_args(
        job,
        restore_pointer="latest",
        attempt=3,
        store=configmap_store_arg(namespace="analytics", name="clicks-per-user-checkpoints"),
        metrics_port=9108,
        status_file="/tmp/status.json",
    )
    assert single(args, "--job-name") == "clicks-per-user"
    assert single(args, "--job-uid") == "u-1"
    assert single(args, "--entrypoint") == "clicks.job:build"
    assert flag_values(args, "--python-path") == ["jobs/"]
    assert json.loads(single(args, "--args-json")) == {
        "input": "s3://in/clicks/",
        "output": "s3://out/clicks/",
        "limit": 10,
    }
    assert single(args, "--parallelism") == "4"
    assert single(args, "--max-parallelism") == "256"
    assert single(args, "--master") == "k8s"
    assert flag_values(args, "--spark-conf") == [
        "spark.sql.shuffle.partitions=8",
        "spark.ui.enabled=false",
    ]
    assert single(args, "--checkpoint-storage") == "s3://ckpt/clicks"
    assert single(args, "--checkpoint-interval") == "30"
    assert single(args, "--checkpoint-min-pause") == "5"
    assert single(args, "--checkpoint-timeout") == "120"
    assert single(args, "--checkpoint-mode") == "exactly_once"
    assert "--unaligned" in args
    assert single(args, "--retained") == "5"
    assert single(args, "--tolerable-failures") == "2"
    assert single(args, "--restore") == "latest"
    assert single(args, "--on-unreadable") == "fallback"
    assert single(args, "--attempt") == "3"
    assert single(args, "--store") == "configmap:analytics/clicks-per-user-checkpoints"
    assert single(args, "--metrics-port") == "9108"
    assert single(args, "--status-file") == "/tmp/status.json"
    assert single(args, "--state-backend") == "rocksdb"


def test_a_minimal_job_leaves_optional_flags_out() -> None:
    job = parse_job(minimal())
    args = to_runtime_args(
        job, restore_pointer="7", attempt=1, store=file_store_arg("state/clicks"), job_uid="local"
    )
    for flag in ("--unaligned", "--python-path", "--spark-conf", "--metrics-port", "--status-file",
                 "--allow-foreign-restore", "--state-backend"):
        assert flag not in args
    assert single(args, "--store") == "file:state/clicks"
    assert single(args, "--restore") == "7"
    assert single(args, "--job-uid") == "local"
    assert single(args, "--checkpoint-mode") == "exactly_once"
    assert single(args, "--on-unreadable") == "fail"
    assert single(args, "--args-json") == "{}"


def test_the_supervisor_can_override_master_and_add_spark_settings() -> None:
    job = parse_job(with_field(minimal(), "spec.spark.conf", {"spark.ui.enabled": "true"}))
    args = to_runtime_args(
        job,
        restore_pointer="latest",
        attempt=1,
        store="file:x",
        job_uid="u",
        master="local[2,3]",
        extra_spark_conf={"spark.ui.enabled": "false", "spark.driver.memory": "1024m"},
    )
    assert single(args, "--master") == "local[2,3]"
    assert flag_values(args, "--spark-conf") == [
        "spark.driver.memory=1024m",
        "spark.ui.enabled=false",
    ]


def test_a_restore_of_another_jobs_checkpoint_is_passed_only_when_allowed() -> None:
    foreign = "s3://ckpt/clicks/clicks-per-user-u0/chk-9/_metadata"
    document = with_field(minimal(), "spec.restore.from", foreign)
    allowed = parse_job(with_field(document, "spec.restore.allowForeignJob", True))
    args = to_runtime_args(allowed, restore_pointer=foreign, attempt=1, store="file:x",
                           job_uid="u")
    assert single(args, "--restore") == foreign
    assert args.count("--allow-foreign-restore") == 1
    refused = to_runtime_args(parse_job(document), restore_pointer=foreign, attempt=1,
                              store="file:x", job_uid="u")
    assert "--allow-foreign-restore" not in refused


def test_dropping_state_the_pipeline_no_longer_maps_is_passed_only_when_allowed() -> None:
    allowed = parse_job(with_field(minimal(), "spec.restore.allowNonRestoredState", True))
    args = to_runtime_args(allowed, restore_pointer="latest", attempt=1, store="file:x",
                           job_uid="u")
    assert args.count("--allow-non-restored-state") == 1
    refused = to_runtime_args(parse_job(minimal()), restore_pointer="latest", attempt=1,
                              store="file:x", job_uid="u")
    assert "--allow-non-restored-state" not in refused


def test_at_least_once_mode_is_passed_in_the_runtime_spelling() -> None:
    job = parse_job(with_field(minimal(), "spec.checkpoint.mode", "AtLeastOnce"))
    args = to_runtime_args(job, restore_pointer="latest", attempt=1, store="file:x", job_uid="u")
    assert single(args, "--checkpoint-mode") == "at_least_once"


def test_fractional_durations_are_passed_as_decimal_seconds() -> None:
    job = parse_job(with_field(minimal(), "spec.checkpoint.interval", "1500ms"))
    args = to_runtime_args(job, restore_pointer="latest", attempt=1, store="file:x", job_uid="u")
    assert single(args, "--checkpoint-interval") == "1.5"


def test_a_job_without_uid_cannot_be_run() -> None:
    with pytest.raises(SpecError, match=r"metadata\.uid: is required to run the job"):
        to_runtime_args(parse_job(minimal()), restore_pointer="latest", attempt=1, store="file:x")


def test_attempts_start_at_one() -> None:
    with pytest.raises(SpecError, match="attempt: must be >= 1, got 0"):
        to_runtime_args(parse_job(full()), restore_pointer="latest", attempt=0, store="file:x")


def test_arguments_with_spaces_stay_single_arguments() -> None:
    job = parse_job(with_field(minimal(), "spec.job.args", {"greeting": "hello world"}))
    args = to_runtime_args(job, restore_pointer="latest", attempt=1, store="file:x", job_uid="u")
    assert json.loads(single(args, "--args-json")) == {"greeting": "hello world"}


def test_the_runtime_parses_every_state_backend_the_spec_passes() -> None:
    from job_runtime.cli import build_parser, settings_from_args

    job = parse_job(with_field(minimal(), "spec.state.backend", "rocksdb"))
    args = to_runtime_args(job, restore_pointer="latest", attempt=1, store="file:x", job_uid="u")
    settings = settings_from_args(build_parser().parse_args(["run", *args]))
    assert settings.state_backend == "rocksdb"
    default = to_runtime_args(parse_job(minimal()), restore_pointer="latest", attempt=1,
                              store="file:x", job_uid="u")
    assert settings_from_args(build_parser().parse_args(["run", *default])).state_backend == (
        "hashmap")
