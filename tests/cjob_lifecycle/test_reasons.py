"""The lifecycle's reasons are one enum: every reason the planner gives is a member, and
every member's value is a released, CamelCase API string that something still gives.

Reasons are what users select Events by and alert on, so these tests hold three lines:
the values never change unnoticed (they are listed here once more, on purpose); no
module names a reason as a free string, where a typo would be a new API value; and a
sweep over the planner's situations meets no reason outside the enum but the ones
Kubernetes gave for the pods it was shown.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import cjob_operator
import pytest
from operator_world import at, checkpoint, driver, make_job, observe, run, status

import cjob
import cjob_lifecycle
import cjob_spec
from cjob_checkpoint.store.restore_report import RestoredCheckpoint, RestoreReport
from cjob_lifecycle.actions import DeleteDriver, EmitEvent
from cjob_lifecycle.observed import (
    CleanupPod,
    DriverPod,
    ExecutorPod,
    MetricSample,
    Observed,
    StoreOwnership,
    StoreView,
)
from cjob_lifecycle.plan import Plan, plan_invalid_spec
from cjob_lifecycle.plan.conditions import PHASE_REASONS
from cjob_spec import CheckpointedJob, JobStatus, Phase, Reason, SpecError, spec_hash
from cjob_spec.driver_beacon import DriverLost
from cjob_spec.status import StableSpec

RELEASED = {
    "AttemptEnded", "AwaitingFirstCheckpoint", "BackingOff", "CheckpointCompleted",
    "CheckpointFailuresExceeded", "CheckpointOverdue", "CheckpointRequested",
    "CheckpointsDeleted", "CheckpointsNotPersistent", "CheckpointsRetained", "CleanupFailed",
    "ContainerCannotRun", "DeadlineExceeded", "DeletingCheckpoints", "DriverCreateFailed",
    "DriverFailed", "DriverLost", "DriverPodDeleted", "DriverPodMissing", "Evicted", "Failed",
    "FalseDriverLost", "Fenced", "ForeignPodIgnored", "IncompatibleState", "NonRestoredState",
    "Finished", "InvalidConfiguration", "InvalidSpec", "JobDeleted", "Killed", "NoImage",
    "NodeLost", "NotFailed", "NotRunning", "OOMKilled", "Pending", "PrunedHistory",
    "ReconcileError", "RestartCountReset", "RestartLimitExceeded", "Restarted", "Restarting",
    "RestoreFailed", "RestoredFromFallback", "Resumed", "Resuming", "Retrying", "Running",
    "SpecChanged", "StaleAttempt", "StandbyFailed", "StandbyNotNeeded", "StandbyOutdated",
    "StartTimeout", "Started", "Starting", "StorageUnreachable", "StoreConflict", "StoreLost",
    "Succeeded", "Superseded", "Suspended", "Suspending", "Terminated", "Terminating",
    "Unknown", "Upgraded", "Upgrading", "UserCodeError", "WaitingForPreviousDriver",
    "Redeploying", "Redeployed", "ScalingRecommended", "ScalingApplied",
    "WaitingForPreviousStore", "WaitingForSnapshot", "RolledBack", "NotRolledBack",
    "SinkRejectedRecord", "SinkStalled", "CheckpointStalled", "ExecutorsUnschedulable",
    "RestartLoop",
}
"""Every value users may already select by. A value leaves this set only deliberately."""

NOT_THE_PLANNERS = {
    Reason.DRIVER_CREATE_FAILED: "the operator's, for a driver pod the API server refused",
    Reason.RECONCILE_ERROR: "the operator's, for a pass that stopped on an error",
    Reason.FOREIGN_POD_IGNORED: "the operator's, for a pod it reads but the job does not own",
    Reason.RESUMING: "the embedded runner's, for a job run again after an interrupted run",
    Reason.FINISHED: "the exit code 0's; the planner calls a finished attempt Succeeded",
}
"""Members the planner never gives, and whose they are instead."""

KUBELET_REASONS = ("ImagePullBackOff", "ErrImagePull", "Error", "ContainerStatusUnknown")
"""Reasons Kubernetes gives for pods that are not members: the sweep shows them to the
planner, which may pass them on (as a ``PodReason``)."""

PACKAGES = (cjob_lifecycle, cjob_operator, cjob, cjob_spec)
CAMEL_CASE = re.compile(r"(?=.*[a-z])[A-Z][A-Za-z0-9]*")


class TestTheEnum:
    """Each member is a released, CamelCase value of its own."""

    def test_every_value_is_camel_case(self) -> None:
        assert [r.value for r in Reason if not CAMEL_CASE.fullmatch(r.value)] == []

    def test_no_two_names_share_a_value(self) -> None:
        values = [member.value for member in Reason.__members__.values()]
        assert len(values) == len(set(values)) == len(Reason)

    def test_the_released_values_are_kept(self) -> None:
        assert {r.value for r in Reason} == RELEASED

    def test_every_phase_is_a_reason_of_the_same_value(self) -> None:
        assert {phase: reason.value for phase, reason in PHASE_REASONS.items()} == {
            phase: phase.value for phase in Phase}

    def test_a_reason_is_written_into_the_status_as_the_plain_string_it_is(self) -> None:
        result = run(observe(make_job(), JobStatus()), at(0))
        written = result.status.to_dict()
        assert written["reason"] == "Started" and type(written["reason"]) is str
        assert all(type(c["reason"]) is str for c in written["conditions"])


def python_files() -> Iterator[Path]:
    for package in PACKAGES:
        for folder in package.__path__:
            yield from sorted(Path(folder).rglob("*.py"))


def free_reasons(tree: ast.AST) -> Iterator[ast.AST]:
    """Where a string literal stands for a reason: ``reason="X"``, an Event's type
    followed by ``"X"`` (``draft.event("Warning", "X", ...)``), ``PodReason("X")``,
    ``x.reason == "X"`` or ``x.reason in ("X", ...)``."""
    def literal(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str)
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(literal(element) for element in node.elts)
        return False

    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "reason" and literal(node.value):
            yield node.value
        elif isinstance(node, ast.Call):
            function = node.func
            if any(isinstance(kind, ast.Constant) and kind.value in ("Normal", "Warning")
                   and literal(reason) for kind, reason in itertools.pairwise(node.args)):
                yield node
            if isinstance(function, ast.Name) and function.id == "PodReason" \
                    and any(literal(arg) for arg in node.args):
                yield node
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(side, ast.Attribute) and side.attr == "reason" for side in sides) \
                    and any(literal(side) for side in sides):
                yield node


class TestNoFreeStrings:
    """No module of the lifecycle, the operator, the CLI or the spec spells a reason."""

    def test_no_reason_is_written_as_a_string_literal(self) -> None:
        found = [f"{path}:{getattr(node, 'lineno', '?')}"
                 for path in python_files()
                 for node in free_reasons(ast.parse(path.read_text()))]
        assert found == []

    def test_the_check_finds_the_free_strings_it_is_shown(self) -> None:
        shown = ('draft.set(reason="Upgrading")\n'
                 'draft.event("Normal", "Started", "started")\n'
                 'self._post(ref, "Warning", "ReconcileError", message)\n'
                 'upgrading = status.reason == "Upgrading"\n'
                 'restarted = status.reason in ("Restarted", "Upgraded")\n'
                 'passed_on = PodReason("ImagePullBackOff")\n'
                 'fine = draft.set(reason=Reason.UPGRADING, message="m")\n')
        assert len(list(free_reasons(ast.parse(shown)))) == 6

    def test_every_member_is_given_somewhere(self) -> None:
        named = {match for path in python_files() if path.name != "reasons.py"
                 for match in re.findall(r"\bReason\.([A-Z_]+)\b", path.read_text())}
        assert {r.name for r in Reason} - named == set()


# --- a sweep over the planner's situations ----------------------------------------------


def given(result: Plan) -> Iterator[tuple[str, str]]:
    """Every reason a plan gives, with where it gives it."""
    new = result.status
    if new.reason is not None:
        yield "status.reason", new.reason
    if new.last_failure is not None:
        yield "status.lastFailure.reason", new.last_failure.reason
    for condition in new.conditions:
        yield f"the {condition.type} condition", condition.reason
    for event in result.of_type(EmitEvent):
        yield "an Event", event.reason
    for deletion in result.of_type(DeleteDriver):
        yield "a DeleteDriver", deletion.reason


def standby(attempt: int, job: CheckpointedJob, **fields: object) -> DriverPod:
    pod = DriverPod(name=f"clicks-standby-{attempt}", attempt=attempt, phase="Running",
                    created_at=at(0), started_at=at(1), standby=True, ready=True,
                    spec_hash=spec_hash(job))
    return dataclasses.replace(pod, **fields)  # type: ignore[arg-type]


DRIVER_STATES: list[dict[str, object] | None] = [
    None,
    {"phase": "Pending"},
    {"phase": "Pending", "reason": "ImagePullBackOff", "message": "back-off"},
    {"phase": "Pending", "reason": "ErrImagePull"},
    {"phase": "Running"},
    {"phase": "Running", "deleting": at(40)},
    {"phase": "Succeeded"},
    *({"phase": "Failed", "exit_code": code}
      for code in (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 137, 143)),
    {"phase": "Failed", "exit_code": 137, "reason": "OOMKilled"},
    {"phase": "Failed", "exit_code": None, "reason": "Evicted"},
    {"phase": "Failed", "exit_code": None, "reason": "DeadlineExceeded"},
    {"phase": "Failed", "exit_code": 128, "reason": "ContainerCannotRun"},
    {"phase": "Failed", "exit_code": None, "reason": "ContainerStatusUnknown"},
    {"phase": "Failed", "exit_code": 1, "reason": "Error"},
    {"phase": "Unknown"},
]
STATUSES: list[tuple[Phase | None, dict[str, object]]] = [
    (None, {}),
    (Phase.PENDING, {}),
    (Phase.RUNNING, {"running_since": at(5), "restarts": 2}),
    (Phase.RUNNING, {"reason": Reason.SUSPENDING, "suspend_requested_at": at(25)}),
    (Phase.RUNNING, {"restarts": 5}),
    (Phase.RESTARTING, {"next_restart_at": at(500), "restarts": 1}),
    (Phase.RESTARTING, {"reason": Reason.UPGRADING, "next_restart_at": at(20)}),
    (Phase.SUSPENDED, {}),
    (Phase.SUCCEEDED, {}),
    (Phase.FAILED, {"reason": Reason.RESTART_LIMIT_EXCEEDED, "restarts": 5}),
    (Phase.FAILED, {"reason": Reason.NO_IMAGE}),
    (Phase.FAILED, {"reason": Reason.STORE_LOST}),
    (Phase.FAILED, {"reason": Reason.STORE_CONFLICT}),
]
SPECS: list[dict[str, object]] = [
    {},
    {"suspend": True},
    {"image": "example.org/clicks:2.0"},
    {"image": None},
    {"checkpoint.triggerNonce": "n1"},
    {"restartPolicy.type": "Never"},
    {"restartPolicy.type": "Always"},
    {"checkpoint": {"storage": "file:///ckpt"}},
    {"restore.from": "s3://ckpt/jobs/clicks-uid-1/chk-3/_metadata"},
    {"standby.enabled": True},
]
STORES: list[StoreView] = [
    StoreView(exists=True, latest=checkpoint(3, at(20)), fence_attempt=2),
    StoreView(exists=False),
    StoreView(exists=True, ownership=StoreOwnership.DELETED_JOB),
    StoreView(exists=True, ownership=StoreOwnership.OTHER, latest=checkpoint(9, at(0))),
    StoreView(exists=True, latest=checkpoint(3, at(20)), fence_attempt=2,
              restore_report=RestoreReport(
                  attempt=2, checkpoint=RestoredCheckpoint(id=2, path="s3://x/chk-2/_metadata"),
                  fallback_from=RestoredCheckpoint(id=3, path="s3://x/chk-3/_metadata"))),
    StoreView(exists=True, latest=checkpoint(3, at(20)), fence_attempt=2,
              restore_report=RestoreReport(
                  attempt=2, checkpoint=RestoredCheckpoint(id=3, path="s3://x/chk-3/_metadata"),
                  dropped=("operator 'sum' holds state, but the job has no operator of that "
                           "name (its stateful operators: 'total')",))),
]
NOWS = [at(30), at(100), at(700), at(5000)]


def situation(phase: Phase | None, fields: dict[str, object], state: dict[str, object] | None,
              *, spec: dict[str, object], store: StoreView, stale: bool) -> Observed:
    """Attempt 2 of a job started with the plain spec, maybe beside a stale and an old driver."""
    original = make_job()
    latest = checkpoint(3, at(20)) if not store.exists else None
    job_status = status(phase, 2, job=original, latest_checkpoint=latest, **fields)
    pods = [driver(1, "Running", job=original), driver(0, "Failed", exit_code=1)] if stale else []
    if state is not None:
        pods.append(driver(2, job=original, **state))  # type: ignore[arg-type]
    return observe(make_job(**spec), job_status, *pods, store=store)


def everyday_situations() -> Iterator[tuple[Observed, datetime]]:
    """Every status with every driver, every spec and every store."""
    plain, store = SPECS[0], STORES[0]
    some_drivers = [None, {"phase": "Running"}, {"phase": "Succeeded"},
                    {"phase": "Failed", "exit_code": 1}]
    for (phase, fields), state, now, stale in itertools.product(
            STATUSES, DRIVER_STATES, NOWS, (False, True)):
        yield situation(phase, fields, state, spec=plain, store=store, stale=stale), now
    for (phase, fields), spec, state, now in itertools.product(
            STATUSES, SPECS, some_drivers, NOWS[:2]):
        yield situation(phase, fields, state, spec=spec, store=store, stale=False), now
    for (phase, fields), other, state, now in itertools.product(
            STATUSES, STORES, some_drivers[::3], NOWS[:2]):
        yield situation(phase, fields, state, spec=plain, store=other, stale=False), now


def standby_situations() -> Iterator[tuple[Observed, datetime]]:
    """A standby that is ready, failed, outdated or unwanted, and its report of a lost driver."""
    job = make_job(**{"standby.enabled": True})
    running = status(Phase.RUNNING, 1, job=job)
    report = DriverLost(attempt=1, pod="clicks-standby-1", at=at(60).timestamp(),
                        detail="its connection closed without a goodbye")
    reporting = StoreView(exists=True, fence_attempt=1, driver_lost=report)
    yield observe(job, running, driver(1, job=job), standby(1, job), store=reporting), at(61)
    taken_over = run(observe(job, running, driver(1, job=job), standby(1, job), store=reporting),
                     at(61)).status
    promoted = dataclasses.replace(standby(1, job), attempt=2, standby=False)
    for code in (9, 137):  # alive until fenced (a false report), or really dead
        ended = driver(1, "Failed", job=job, exit_code=code)
        yield observe(job, taken_over, ended, promoted, store=reporting), at(70)
    failed = standby(1, job, phase="Failed", exit_code=1, finished_at=at(0), message="boom")
    yield observe(job, running, driver(1, job=job), failed), at(500)
    changed = make_job(**{"standby.enabled": True, "image": "example.org/clicks:2.0"})
    yield observe(changed, running, driver(1, job=job), standby(1, job)), at(10)
    yield observe(make_job(), running, driver(1, job=job), standby(1, job)), at(10)
    yield observe(make_job(suspend=True), running, driver(1, job=job), standby(1, job)), at(10)


def executor_situations() -> Iterator[tuple[Observed, datetime]]:
    """An executor of the running attempt that the scheduler cannot place."""
    unplaced = ExecutorPod(name="clicks-exec-1", phase="Pending", attempt=1,
                           unschedulable_since=at(0), unschedulable_message="Insufficient cpu")
    for now in (at(10), at(400)):
        yield observe(make_job(), status(Phase.RUNNING, 1), driver(1),
                      executors=(unplaced,)), now


def snapshot_situations() -> Iterator[tuple[Observed, datetime]]:
    """A new job to start from a snapshot object that is not there yet."""
    yield observe(make_job(**{"restore.snapshot": "keep"}), JobStatus(),
                  store=StoreView(exists=False)), at(0)


def rollback_situations() -> Iterator[tuple[Observed, datetime]]:
    """A changed spec whose attempt failed, with the last one that ran well kept, then the
    pass after its rollback."""
    rollback = {"rollback.enabled": True}
    good, bad = make_job(**rollback), make_job(**rollback, **{"job.entrypoint": "x:y"})
    kept = StableSpec(spec_hash=spec_hash(good), spec={"job": {"entrypoint": "clicks.job:build"},
                                                        "checkpoint": {"storage": "s3://c/j"}})
    failing = status(Phase.RUNNING, 2, job=bad, stable_spec=kept)
    observed = observe(bad, failing, driver(2, "Failed", job=bad, exit_code=3))
    yield observed, at(100)
    yield observe(bad, run(observed, at(100)).status), at(101)
    yield observe(good, status(Phase.RUNNING, 1, job=good), driver(1, job=good)), at(10)


def redeploy_situations() -> Iterator[tuple[Observed, datetime]]:
    """A redeploy asked of a running job, then the pass that starts it again."""
    job = make_job(**{"restore.from": 3, "restore.redeployNonce": "again"})
    store = StoreView(exists=True, latest=checkpoint(9, at(5)), fence_attempt=1)
    observed = observe(job, status(Phase.RUNNING, 1, job=job), driver(1, job=job),
                       store=store)
    yield observed, at(10)
    yield observe(job, run(observed, at(10)).status, store=store), at(11)


def autoscaling_situations() -> Iterator[tuple[Observed, datetime]]:
    """A job behind, its parallelism recommended, then applied once it held."""
    job = make_job(autoscaler={"mode": "Apply", "stabilization": "1m", "max": 16})
    samples = (MetricSample(at=at(0), attempt=1, records_in=0.0, lag_records=6000.0),
               MetricSample(at=at(60), attempt=1, records_in=60_000.0, lag_records=12_000.0))
    observed = dataclasses.replace(
        observe(job, status(Phase.RUNNING, 1, job=job), driver(1, job=job)),
        scaling_samples=samples)
    yield observed, at(60)
    yield dataclasses.replace(observed, status=run(observed, at(60)).status), at(121)


def deletion_situations() -> Iterator[tuple[Observed, datetime]]:
    """A job going away, with its data kept or deleted by a cleanup pod in every state."""
    for spec in ({}, {"cleanupPolicy.checkpoints": "Delete"},
                 {"cleanupPolicy.checkpoints": "Delete", "image": None}):
        job = make_job(**spec)
        for pod in (None, *(CleanupPod(name="clicks-cleanup", phase=phase, created_at=at(0))
                            for phase in ("Pending", "Running", "Succeeded", "Failed",
                                          "Unknown"))):
            for drivers in ((), (driver(1, job=job),)):
                observed = observe(job, status(Phase.RUNNING, 1, job=job), *drivers,
                                   deleting=True, cleanup_pod=pod)
                yield observed, at(20)
                yield observed, at(2000)


@pytest.fixture(scope="module")
def reasons_given() -> dict[str, set[str]]:
    """Every reason the sweep met, with where the planner gave it."""
    found: dict[str, set[str]] = {}
    invalid = plan_invalid_spec(status=JobStatus(), generation=1, now=at(0),
                                error=SpecError(field="spec.image", problem="is empty"))
    results = itertools.chain(
        (run(observed, now) for observed, now in itertools.chain(
            everyday_situations(), standby_situations(), snapshot_situations(),
            executor_situations(),
            rollback_situations(), redeploy_situations(), autoscaling_situations(),
            deletion_situations())),
        [invalid])
    for result in results:
        for where, reason in given(result):
            found.setdefault(reason, set()).add(where)
    return found


class TestTheSweep:
    """Over thousands of situations, the planner gives members and the kubelet's reasons only."""

    def test_every_reason_the_planner_gives_is_a_member_or_the_kubelets(
            self, reasons_given: dict[str, set[str]]) -> None:
        foreign = {reason: sorted(where) for reason, where in reasons_given.items()
                   if reason not in Reason.__members__.values() and reason not in KUBELET_REASONS}
        assert foreign == {}

    def test_the_sweep_meets_every_member_but_those_the_planner_never_gives(
            self, reasons_given: dict[str, set[str]]) -> None:
        met = {Reason(reason) for reason in reasons_given if reason in set(Reason)}
        assert set(Reason) - met == set(NOT_THE_PLANNERS)
