"""to_runtime_args: the contract with ``python -m job_runtime run``, one settings document.

A supervisor passes the attempt's :class:`RuntimeSettings` as ``--settings``; these
tests read it back as the runtime does and check what each spec field became.
"""

from __future__ import annotations

from typing import Any

import pytest
from spec_documents import full, minimal, with_field

from cjob_spec import CheckpointedJob, SpecError, parse_job, runtime_settings, to_runtime_args
from cjob_spec.model import CheckpointMode, OnUnreadable, StateBackend
from cjob_spec.runtime_args import configmap_store_arg, file_store_arg
from cjob_spec.runtime_settings import RuntimeSettings


def args_for(job: CheckpointedJob, **options: Any) -> list[str]:
    """The driver's command line for ``job``, as a supervisor builds it."""
    return to_runtime_args(runtime_settings(job, **options))


def settings_of(args: list[str]) -> RuntimeSettings:
    assert args.count("--settings") == 1
    return RuntimeSettings.decode(args[args.index("--settings") + 1])


def test_every_setting_of_a_full_job_reaches_the_runtime() -> None:
    job = parse_job(full())
    args = args_for(
        job,
        restore_pointer="latest",
        attempt=3,
        store=configmap_store_arg(namespace="analytics", name="clicks-per-user-checkpoints"),
        metrics_port=9108,
        status_file="/tmp/status.json",
    )
    assert args[:1] == ["--settings"] and len(args) == 2, "the job's settings are one argument"
    settings = settings_of(args)
    assert settings.job_name == "clicks-per-user"
    assert settings.job_uid == "u-1"
    assert settings.entrypoint == "clicks.job:build"
    assert settings.python_path == ("jobs/",)
    assert settings.args == {"input": "s3://in/clicks/", "output": "s3://out/clicks/",
                             "limit": 10}
    assert settings.parallelism == 4
    assert settings.max_parallelism == 256
    assert settings.master == "k8s"
    assert settings.spark_conf == {"spark.sql.shuffle.partitions": "8",
                                   "spark.ui.enabled": "false"}
    assert settings.checkpoint_storage == "s3://ckpt/clicks"
    assert settings.checkpoint_interval == 30
    assert settings.checkpoint_min_pause == 5
    assert settings.checkpoint_timeout == 120
    assert settings.checkpoint_mode is CheckpointMode.EXACTLY_ONCE
    assert settings.unaligned
    assert settings.retained == 5
    assert settings.tolerable_failures == 2
    assert settings.restore == "latest"
    assert settings.on_unreadable is OnUnreadable.FALLBACK_TO_PREVIOUS
    assert settings.attempt == 3
    assert settings.store == "configmap:analytics/clicks-per-user-checkpoints"
    assert settings.metrics_port == 9108
    assert settings.status_file == "/tmp/status.json"
    assert settings.state_backend is StateBackend.ROCKSDB


def test_a_minimal_job_runs_with_the_documents_defaults() -> None:
    job = parse_job(minimal())
    args = args_for(
        job, restore_pointer="7", attempt=1, store=file_store_arg("state/clicks"), job_uid="local"
    )
    settings = settings_of(args)
    defaults = RuntimeSettings(job_name=settings.job_name, job_uid="local",
                               entrypoint=settings.entrypoint,
                               checkpoint_storage=settings.checkpoint_storage,
                               master=settings.master, restore="7", store="file:state/clicks")
    assert settings == defaults
    assert "--beacon-host" not in args


def test_the_supervisor_can_override_master_and_add_spark_settings() -> None:
    job = parse_job(with_field(minimal(), "spec.spark.conf", {"spark.ui.enabled": "true"}))
    args = args_for(
        job,
        restore_pointer="latest",
        attempt=1,
        store="file:x",
        job_uid="u",
        master="local[2,3]",
        extra_spark_conf={"spark.ui.enabled": "false", "spark.driver.memory": "1024m"},
    )
    settings = settings_of(args)
    assert settings.master == "local[2,3]"
    assert settings.spark_conf == {"spark.driver.memory": "1024m", "spark.ui.enabled": "false"}


def test_a_restore_of_another_jobs_checkpoint_is_passed_only_when_allowed() -> None:
    foreign = "s3://ckpt/clicks/clicks-per-user-u0/chk-9/_metadata"
    document = with_field(minimal(), "spec.restore.from", foreign)
    allowed = parse_job(with_field(document, "spec.restore.allowForeignJob", True))
    settings = settings_of(args_for(allowed, restore_pointer=foreign, attempt=1,
                                           store="file:x", job_uid="u"))
    assert settings.restore == foreign
    assert settings.allow_foreign_restore
    refused = settings_of(args_for(parse_job(document), restore_pointer=foreign,
                                          attempt=1, store="file:x", job_uid="u"))
    assert not refused.allow_foreign_restore


def test_dropping_state_the_pipeline_no_longer_maps_is_passed_only_when_allowed() -> None:
    allowed = parse_job(with_field(minimal(), "spec.restore.allowNonRestoredState", True))
    assert settings_of(args_for(allowed, restore_pointer="latest", attempt=1,
                                       store="file:x", job_uid="u")).allow_non_restored_state
    assert not settings_of(args_for(parse_job(minimal()), restore_pointer="latest",
                                           attempt=1, store="file:x",
                                           job_uid="u")).allow_non_restored_state


def test_fractional_durations_are_passed_as_seconds() -> None:
    job = parse_job(with_field(minimal(), "spec.checkpoint.interval", "1500ms"))
    args = args_for(job, restore_pointer="latest", attempt=1, store="file:x", job_uid="u")
    assert settings_of(args).checkpoint_interval == 1.5


def test_a_job_without_uid_cannot_be_run() -> None:
    with pytest.raises(SpecError, match=r"metadata\.uid: is required to run the job"):
        args_for(parse_job(minimal()), restore_pointer="latest", attempt=1, store="file:x")


def test_attempts_start_at_one() -> None:
    with pytest.raises(SpecError, match="attempt: must be >= 1, got 0"):
        args_for(parse_job(full()), restore_pointer="latest", attempt=0, store="file:x")


def test_a_user_string_with_dollars_is_escaped_for_the_kubelet_and_the_callers_are_not() -> None:
    job = parse_job(with_field(minimal(), "spec.job.args", {"greeting": "a $(HOME) b"}))
    args = args_for(job, restore_pointer="latest", attempt=1, store="file:x",
                           job_uid="u", master="k8s://https://$(HOST)",
                           literal=lambda text: text.replace("$", "$$"))
    settings = settings_of(args)
    assert settings.args == {"greeting": "a $$(HOME) b"}
    assert settings.master == "k8s://https://$(HOST)"


def test_the_runtime_reads_the_document_into_its_driver_settings() -> None:
    from job_runtime.cli import build_parser, settings_from_args

    job = parse_job(with_field(minimal(), "spec.state.backend", "rocksdb"))
    args = args_for(job, restore_pointer="latest", attempt=2, store="file:x", job_uid="u")
    settings = settings_from_args(build_parser().parse_args(["run", *args]))
    assert settings.state_backend is StateBackend.ROCKSDB
    assert settings.attempt == 2 and settings.store.text == "file:x"
    default = args_for(parse_job(minimal()), restore_pointer="latest", attempt=1,
                              store="file:x", job_uid="u")
    assert settings_from_args(build_parser().parse_args(["run", *default])).state_backend is (
        StateBackend.HASHMAP)
