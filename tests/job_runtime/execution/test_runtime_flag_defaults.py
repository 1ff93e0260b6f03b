"""A driver started without its optional flags runs with the spec's defaults.

The supervisors pass the whole settings document, but a flag left out is what a
hand-written command line or a test gets: the document's default, which is the spec's
(taken from ``cjob_spec.defaults``), and the settings the driver builds from them are
the driver's own defaults, so neither can drift from the spec.
"""

from __future__ import annotations

from cjob_spec import CheckpointedJob, parse_job, runtime_settings, to_runtime_args
from job_runtime.cli import build_parser, settings_from_args
from job_runtime.execution.driver.driver_settings import DriverSettings

REQUIRED = ["--job-name", "clicks", "--job-uid", "u-1", "--entrypoint", "clicks.job:build",
            "--checkpoint-storage", "file:///data/ckpt"]


def minimal_job() -> CheckpointedJob:
    return parse_job({
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": "clicks", "uid": "u-1"},
        "spec": {"job": {"entrypoint": "clicks.job:build"},
                 "checkpoint": {"storage": "file:///data/ckpt"}},
    })


def bare_settings() -> DriverSettings:
    return settings_from_args(build_parser().parse_args(["run", *REQUIRED]))


def test_a_command_line_without_optional_flags_runs_what_a_job_without_optional_fields_runs() -> None:
    bare = bare_settings()
    args = to_runtime_args(runtime_settings(minimal_job(), restore_pointer="latest",
                                            attempt=bare.attempt, store=bare.store.text,
                                            master=bare.master, job_uid="u-1"))
    supervised = settings_from_args(build_parser().parse_args(["run", *args]))
    assert bare == supervised


def test_the_command_line_defaults_are_the_driver_settings_defaults() -> None:
    assert bare_settings() == DriverSettings(
        job_name="clicks", job_uid="u-1", entrypoint="clicks.job:build",
        checkpoint_storage="file:///data/ckpt")
