"""observe_driver_pod: reading a pod as the API server reports it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cjob_operator.observed import observe_cleanup_pod, observe_driver_pod, observe_executors
from operator_world import make_job

from cjob_lifecycle.observed import Observed
from cjob_spec import JobStatus


def pod(
    *,
    phase: str = "Running",
    state: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    **status: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "clicks-attempt-2",
            "labels": {"checkpointed.io/attempt": "2"} if labels is None else labels,
            "annotations": {"checkpointed.io/spec-hash": "h1"},
            "creationTimestamp": "2024-05-01T12:00:00Z",
        },
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "driver", "state": state or {}}],
            **status,
        },
    }


def test_a_running_driver_is_read_with_its_start_time() -> None:
    observed = observe_driver_pod(pod(state={"running": {"startedAt": "2024-05-01T12:00:07Z"}}))
    assert observed is not None
    assert observed.phase == "Running"
    assert observed.started_at == datetime(2024, 5, 1, 12, 0, 7, tzinfo=UTC)
    assert observed.created_at == datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    assert (observed.exit_code, observed.spec_hash, observed.attempt) == (None, "h1", 2)
    assert observed.is_live and not observed.is_finished


def test_a_terminated_driver_is_read_with_its_exit_code_and_reason() -> None:
    terminated = {
        "exitCode": 137,
        "reason": "OOMKilled",
        "startedAt": "2024-05-01T12:00:07Z",
        "finishedAt": "2024-05-01T13:00:00Z",
    }
    observed = observe_driver_pod(pod(phase="Failed", state={"terminated": terminated}))
    assert observed is not None
    assert (observed.exit_code, observed.reason) == (137, "OOMKilled")
    assert observed.finished_at == datetime(2024, 5, 1, 13, 0, 0, tzinfo=UTC)
    assert observed.started_at == datetime(2024, 5, 1, 12, 0, 7, tzinfo=UTC)
    assert observed.is_finished


def test_an_evicted_driver_carries_the_pod_reason() -> None:
    observed = observe_driver_pod(
        pod(phase="Failed", reason="Evicted", message="The node was low on resource: memory.")
    )
    assert observed is not None
    assert (observed.reason, observed.exit_code) == ("Evicted", None)
    assert observed.message == "The node was low on resource: memory."


def test_a_waiting_driver_says_why() -> None:
    waiting = {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}
    observed = observe_driver_pod(pod(phase="Pending", state={"waiting": waiting}))
    assert observed is not None
    assert observed.reason == "ImagePullBackOff"
    assert observed.started_at is None


def test_a_deleted_driver_is_terminating() -> None:
    manifest = pod()
    manifest["metadata"]["deletionTimestamp"] = "2024-05-01T12:05:00Z"
    observed = observe_driver_pod(manifest)
    assert observed is not None and observed.is_terminating


def test_pods_without_an_attempt_label_are_not_drivers() -> None:
    assert observe_driver_pod(pod(labels={})) is None
    assert observe_driver_pod(pod(labels={"checkpointed.io/attempt": "x"})) is None


def test_an_unknown_or_missing_phase_is_read_safely() -> None:
    assert observe_driver_pod(pod(phase="Weird")).phase == "Pending"  # type: ignore[union-attr]
    manifest = pod()
    del manifest["status"]
    observed = observe_driver_pod(manifest)
    assert observed is not None and observed.phase == "Pending"


def test_the_observation_tells_pending_trigger_nonces_and_generations() -> None:
    job = make_job(**{"checkpoint.triggerNonce": "n1"})
    fresh = Observed(job=job, status=JobStatus())
    assert fresh.pending_trigger_nonce == "n1"
    assert not fresh.generation_observed
    handled = Observed(job=job, status=JobStatus(last_trigger_nonce="n1", observed_generation=1))
    assert handled.pending_trigger_nonce is None
    assert handled.generation_observed


def test_a_cleanup_pods_outcome_is_the_last_line_of_its_termination_message() -> None:
    manifest = {
        "metadata": {"name": "sums-cleanup", "labels": {"checkpointed.io/role": "cleanup"},
                     "creationTimestamp": "2024-05-01T12:00:00Z"},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "cleanup", "state": {
            "terminated": {"exitCode": 7, "reason": "Error",
                           "message": "a warning\ncheckpoint data kept: access denied\n"}}}]},
    }
    observed = observe_cleanup_pod(manifest)
    assert observed is not None
    assert (observed.phase, observed.exit_code) == ("Failed", 7)
    assert observed.message == "checkpoint data kept: access denied"
    assert observe_driver_pod(manifest) is None
    assert observe_cleanup_pod({**manifest, "metadata": {"name": "x", "labels": {}}}) is None


def executor(*, conditions: list[dict[str, Any]], attempt: str = "2",
             owner_kind: str = "Pod") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "clicks-exec-1",
            "labels": {"checkpointed.io/job": "clicks", "checkpointed.io/role": "executor",
                       "checkpointed.io/attempt": attempt},
            "ownerReferences": [{"kind": owner_kind, "name": "clicks-attempt-2"}],
            "creationTimestamp": "2024-05-01T12:00:00Z",
        },
        "status": {"phase": "Pending", "conditions": conditions},
    }


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "lastTransitionTime": "2024-05-01T12:00:03Z",
                 "message": "0/1 nodes are available: 1 Insufficient cpu."}


def test_an_executor_the_scheduler_cannot_place_is_read_with_since_when_and_why() -> None:
    [found] = observe_executors([executor(conditions=[UNSCHEDULABLE])], job_name="clicks")
    assert found.attempt == 2
    assert found.unschedulable_since == datetime(2024, 5, 1, 12, 0, 3, tzinfo=UTC)
    assert found.unschedulable_message == "0/1 nodes are available: 1 Insufficient cpu."


def test_a_placed_executor_is_not_unschedulable() -> None:
    placed = {"type": "PodScheduled", "status": "True",
              "lastTransitionTime": "2024-05-01T12:00:03Z"}
    [found] = observe_executors([executor(conditions=[placed])], job_name="clicks")
    assert found.unschedulable_since is None


def test_an_executor_is_never_read_as_a_driver_though_it_has_an_attempt_label() -> None:
    assert observe_driver_pod(executor(conditions=[UNSCHEDULABLE])) is None
    assert observe_executors([executor(conditions=[], owner_kind="ReplicaSet")],
                             job_name="clicks") == ()
