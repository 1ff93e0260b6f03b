"""plan() over every phase x every observation: the rules that must always hold.

The table tests show what happens in each situation; this sweep checks the safety
rules across all combinations, including ones nobody thought to write down: a new
driver is always fenced first, never overlaps a running one, never appears for a
suspended or deleted job, and replanning the same observation changes nothing.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from operator_world import SETTINGS, T0, at, checkpoint, driver, make_job, observe, run, status

from cjob_lifecycle.actions import (
    AdvanceFence,
    CreateCleanupPod,
    CreateDriver,
    DeleteDriver,
    EmitEvent,
    RemoveFinalizer,
)
from cjob_lifecycle.observed import DriverPod, StoreView
from cjob_spec import CheckpointedJob, JobStatus, Phase, Reason

PHASES: list[tuple[str, Phase | None, dict[str, Any]]] = [
    ("new", None, {}),
    ("pending", Phase.PENDING, {}),
    ("running", Phase.RUNNING, {"running_since": at(5), "restarts": 2}),
    ("suspending", Phase.RUNNING, {"reason": Reason.SUSPENDING, "suspend_requested_at": at(25)}),
    ("backing-off", Phase.RESTARTING, {"next_restart_at": at(500), "restarts": 1}),
    ("upgrading", Phase.RESTARTING, {"reason": Reason.UPGRADING, "next_restart_at": at(20)}),
    ("suspended", Phase.SUSPENDED, {}),
    ("succeeded", Phase.SUCCEEDED, {}),
    ("failed", Phase.FAILED, {"reason": Reason.RESTART_LIMIT_EXCEEDED, "restarts": 5}),
]

POD_STATES: list[tuple[str, dict[str, Any] | None]] = [
    ("missing", None),
    ("pending", {"phase": "Pending"}),
    ("pending-stuck", {"phase": "Pending", "reason": "ImagePullBackOff"}),
    ("running", {"phase": "Running"}),
    ("running-deleted", {"phase": "Running", "deleting": at(400)}),
    ("succeeded", {"phase": "Succeeded"}),
    ("failed", {"phase": "Failed", "exit_code": 1}),
    ("failed-permanently", {"phase": "Failed", "exit_code": 3}),
    ("node-lost", {"phase": "Unknown"}),
]

SPECS: list[tuple[str, dict[str, Any]]] = [
    ("plain", {}),
    ("suspend", {"suspend": True}),
    ("new-image", {"image": "example.org/clicks:2.0"}),
    ("nonce", {"checkpoint.triggerNonce": "n1"}),
    ("never-local", {"restartPolicy.type": "Never", "spark.master": "local[2]"}),
    ("cleanup-delete", {"cleanupPolicy.checkpoints": "Delete"}),
]

NOWS = [at(30), at(100), at(1000)]


def scenario(
    phase_case: tuple[str, Phase | None, dict[str, Any]],
    pod_case: tuple[str, dict[str, Any] | None],
    spec_case: tuple[str, dict[str, Any]],
    stale: bool,
    deleting: bool,
) -> tuple[CheckpointedJob, JobStatus, tuple[DriverPod, ...], StoreView]:
    _, phase, status_fields = phase_case
    _, pod_fields = pod_case
    _, spec_fields = spec_case
    original = make_job()
    job = make_job(**spec_fields)
    attempt = 2
    job_status = status(phase, attempt, job=original, **status_fields)
    pods: list[DriverPod] = []
    if stale:
        pods.append(driver(1, "Running", job=original))
    if pod_fields is not None:
        pods.append(driver(attempt, job=original, **pod_fields))
    store = StoreView(exists=True, latest=checkpoint(3, at(20)), fence_attempt=attempt)
    return job, job_status, tuple(pods), store


def blocks(pod: DriverPod, now: datetime) -> bool:
    if not pod.is_live:
        return False
    if pod.deletion_timestamp is None:
        return True
    return (now - pod.deletion_timestamp).total_seconds() < SETTINGS.kill_grace_seconds


CASES = list(itertools.product(PHASES, POD_STATES, SPECS, [False, True], [False, True], NOWS))


def case_id(case: tuple[Any, ...]) -> str:
    phase_case, pod_case, spec_case, stale, deleting, now = case
    return (
        f"{phase_case[0]}/{pod_case[0]}/{spec_case[0]}"
        f"{'/stale' if stale else ''}{'/deleting' if deleting else ''}"
        f"/{int((now - T0).total_seconds())}s"
    )


def test_safety_rules_hold_in_every_situation() -> None:
    # One test over all combinations (thousands) keeps the sweep fast; a failure
    # names every case it broke in.
    failures: list[str] = []
    for case in CASES:
        try:
            check_case(*case)
        except AssertionError as error:
            failures.append(f"{case_id(case)}: {str(error).splitlines()[0]}")
    assert not failures, f"{len(failures)} case(s) broke a rule:\n" + "\n".join(failures[:20])


def check_case(
    phase_case: tuple[str, Phase | None, dict[str, Any]],
    pod_case: tuple[str, dict[str, Any] | None],
    spec_case: tuple[str, dict[str, Any]],
    stale: bool,
    deleting: bool,
    now: datetime,
) -> None:
    job, job_status, pods, store = scenario(phase_case, pod_case, spec_case, stale, deleting)
    observed = observe(job, job_status, *pods, store=store, deleting=deleting)
    result = run(observed, now)
    actions = list(result.actions)
    creates = result.of_type(CreateDriver)
    new = result.status

    # A new driver is fenced first, numbered above everything seen, and never overlaps.
    assert len(creates) <= 1
    if creates:
        create = creates[0]
        fence_index = actions.index(AdvanceFence(attempt=create.attempt))
        assert fence_index < actions.index(create)
        assert create.attempt > max(
            [job_status.attempt, store.fence_attempt or 0] + [p.attempt for p in pods]
        )
        assert not deleting and not job.spec.suspend
        assert not any(blocks(pod, now) for pod in pods), "a new driver would overlap a live one"
        assert new.attempt == create.attempt and new.phase is Phase.PENDING

    # Deletions name observed pods, once each, and never finished or terminating ones twice.
    deleted = [action.name for action in result.of_type(DeleteDriver)]
    assert len(deleted) == len(set(deleted))
    assert set(deleted) <= {pod.name for pod in pods}

    # A suspended or deleted job ends with no driver left running.
    if job.spec.suspend and not deleting and new.phase is Phase.SUSPENDED:
        for pod in pods:
            assert not pod.is_live or pod.is_terminating or pod.name in deleted

    if deleting:
        finalizer = result.of_type(RemoveFinalizer)
        blocked = any(blocks(pod, now) for pod in pods)
        cleanup = result.of_type(CreateCleanupPod)
        # The data goes only once no driver can write it; the job goes after that.
        assert not (blocked and (finalizer or cleanup))
        assert bool(finalizer) != bool(cleanup) or blocked
        return

    if new.phase is None:
        assert any(blocks(pod, now) for pod in pods), "only a job waiting for an old driver"
        assert new.reason == Reason.WAITING_FOR_PREVIOUS_DRIVER
        return
    assert new.attempt >= job_status.attempt
    assert new.restarts <= job.spec.restart_policy.max_restarts
    assert new.observed_generation == job.metadata.generation
    assert [c.type for c in new.conditions] == ["Ready", "Progressing", "Checkpointing", "Failed"]
    ready = new.condition("Ready")
    assert ready is not None and (ready.status.value == "True") == (new.phase is Phase.RUNNING)
    if new.phase.is_terminal:
        assert result.requeue_after is None or not creates
    else:
        assert result.requeue_after is not None
        assert 0 <= result.requeue_after <= SETTINGS.resync_seconds

    # Replanning the same observation with the new status starts nothing new.
    again = run(observe(job, new, *pods, store=store), now)
    assert again.of_type(CreateDriver) == [] or not creates
    assert again.of_type(EmitEvent) == []
    assert again.status.phase is new.phase
