"""Which image a driver runs: the job's ``spec.image``, else the operator's runtime image,
else a permanent ``NoImage`` failure (a condition and an Event, never a crash)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from cjob_operator.builders import build_driver_pod
from cjob_operator.config import OperatorConfig
from cjob_operator.options import build_parser, parse_options
from cjob_operator.reconcile import Reconciler
from operator_world import (
    IMAGE,
    RUNTIME_IMAGE,
    T0,
    RecordingCluster,
    at,
    document,
    make_job,
    observe,
    run,
)
from pod_settings import runtime_settings_of

from cjob_lifecycle.actions import CreateDriver, EmitEvent
from cjob_spec import JobStatus, Phase

NO_IMAGE = {"image": None}


def spark_conf(pod: Mapping[str, Any]) -> dict[str, str]:
    return dict(runtime_settings_of(pod).spark_conf)


# --- plan ------------------------------------------------------------------------------


def test_a_job_without_an_image_runs_the_operators_runtime_image() -> None:
    job = make_job(**NO_IMAGE)
    result = run(observe(job, JobStatus(), default_image=RUNTIME_IMAGE), T0)
    (create,) = result.of_type(CreateDriver)
    assert create.image == RUNTIME_IMAGE
    assert result.status.phase is Phase.PENDING


def test_the_jobs_own_image_wins_over_the_operators_runtime_image() -> None:
    result = run(observe(make_job(), JobStatus(), default_image=RUNTIME_IMAGE), T0)
    assert [action.image for action in result.of_type(CreateDriver)] == [IMAGE]


def test_a_job_without_an_image_fails_for_good_when_the_operator_has_none() -> None:
    job = make_job(**NO_IMAGE)
    result = run(observe(job, JobStatus()), T0)
    assert [type(action).__name__ for action in result.actions] == ["EmitEvent"]
    (event,) = result.of_type(EmitEvent)
    assert (event.type, event.reason) == ("Warning", "NoImage")
    assert "spec.image is not set" in event.message and "runtimeImage" in event.message
    status = result.status
    assert (status.phase, status.reason) == (Phase.FAILED, "NoImage")
    assert status.last_failure is not None and status.last_failure.reason == "NoImage"
    failed = status.condition("Failed")
    assert failed is not None and (failed.status.value, failed.reason) == ("True", "NoImage")

    again = run(observe(job, status), at(60))
    assert again.actions == ()
    assert again.status.phase is Phase.FAILED


def test_a_job_that_failed_for_want_of_an_image_starts_once_the_operator_has_one() -> None:
    job = make_job(**NO_IMAGE)
    failed = run(observe(job, JobStatus()), T0).status
    result = run(observe(job, failed, default_image=RUNTIME_IMAGE), at(30))
    (create,) = result.of_type(CreateDriver)
    assert (create.attempt, create.image) == (1, RUNTIME_IMAGE)
    assert (result.status.phase, result.status.reason) == (Phase.PENDING, "Retrying")


def test_a_job_that_failed_for_want_of_an_image_starts_once_its_spec_names_one() -> None:
    failed = run(observe(make_job(**NO_IMAGE), JobStatus()), T0).status
    result = run(observe(make_job(), failed), at(30))
    assert [action.image for action in result.of_type(CreateDriver)] == [IMAGE]


# --- builders --------------------------------------------------------------------------


@pytest.mark.parametrize("master", ["k8s", "local[2]"])
def test_the_driver_pod_runs_the_image_the_plan_chose(master: str) -> None:
    job = make_job(**{"image": None, "spark.master": master})
    pod = build_driver_pod(job, attempt=1, restore_pointer="latest", image=RUNTIME_IMAGE,
                           operator_config=OperatorConfig())
    assert pod["spec"]["containers"][0]["image"] == RUNTIME_IMAGE
    executors = spark_conf(pod).get("spark.kubernetes.container.image")
    assert executors == (RUNTIME_IMAGE if master == "k8s" else None)


# --- options ---------------------------------------------------------------------------


def test_the_runtime_image_comes_from_the_flag_or_else_the_environment() -> None:
    base = ["--namespace", "team"]
    assert parse_options(base, environ={}).runtime_image is None
    from_env = parse_options(base, environ={"CJOB_RUNTIME_IMAGE": RUNTIME_IMAGE})
    assert from_env.runtime_image == RUNTIME_IMAGE
    flag = parse_options([*base, "--runtime-image", "team/runtime:2"],
                         environ={"CJOB_RUNTIME_IMAGE": RUNTIME_IMAGE})
    assert flag.runtime_image == "team/runtime:2"


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["--runtime-image", "team/runtime 2"], {}),
        (["--runtime-image", " "], {}),
        ([], {"CJOB_RUNTIME_IMAGE": "team/runtime 2"}),
    ],
)
def test_a_runtime_image_with_spaces_is_refused_at_start(
    argv: list[str], environ: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_options(["--namespace", "team", *argv], environ=environ)
    assert caught.value.code == 2
    assert "not an image reference" in capsys.readouterr().err


def test_the_runtime_image_flag_is_documented() -> None:
    parser = build_parser()
    flags = [action for action in parser._actions if "--runtime-image" in action.option_strings]
    assert len(flags) == 1 and isinstance(flags[0], argparse.Action)
    assert "spec.image" in (flags[0].help or "")


# --- the reconciler --------------------------------------------------------------------


def reconcile_new_job(default_image: str | None) -> RecordingCluster:
    cluster = RecordingCluster(document(**NO_IMAGE))
    reconciler = Reconciler(cluster=cluster,
                            operator_config=OperatorConfig(default_image=default_image),
                            clock=lambda: datetime(2024, 5, 1, 12, tzinfo=UTC))
    reconciler.reconcile(namespace="team", name="clicks", pods=[])
    return cluster


def test_the_reconciler_creates_the_driver_in_the_operators_runtime_image() -> None:
    cluster = reconcile_new_job(RUNTIME_IMAGE)
    (pod,) = cluster.pods
    assert pod["spec"]["containers"][0]["image"] == RUNTIME_IMAGE
    assert spark_conf(pod)["spark.kubernetes.container.image"] == RUNTIME_IMAGE


def test_without_any_image_the_reconciler_records_the_failure_and_creates_nothing() -> None:
    cluster = reconcile_new_job(None)
    assert cluster.pods == []
    assert [(kind, reason) for kind, reason, _ in cluster.events] == [("Warning", "NoImage")]
    status = cluster.job["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "NoImage")
    failed = [c for c in status["conditions"] if c["type"] == "Failed"]
    assert failed and (failed[0]["status"], failed[0]["reason"]) == ("True", "NoImage")
