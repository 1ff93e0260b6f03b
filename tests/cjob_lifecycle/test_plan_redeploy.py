"""plan() for a redeploy (``spec.restore.redeployNonce``): the job starts again from the
point ``spec.restore`` names, whatever checkpoints it took since, in every phase, once
per nonce, and keeps restoring that point until an attempt of its own checkpoints."""

from __future__ import annotations

import dataclasses

import pytest
from operator_world import at, checkpoint, driver, make_job, observe, reasons, run, status

from cjob_lifecycle.actions import CreateDriver, DeleteDriver
from cjob_lifecycle.observed import RestoreSnapshot, StoreView
from cjob_spec import Phase, Reason
from cjob_spec.errors import SpecError
from cjob_spec.snapshot import SnapshotState
from cjob_spec.status import DiscardedReplacement

POINT = "s3://ckpt/jobs/clicks-uid-1/chk-4/_metadata"
PLAIN = make_job()
REDEPLOY = make_job(**{"restore.from": POINT, "restore.redeployNonce": "n1"})
STORE = StoreView(exists=True, latest=checkpoint(9, at(50)), fence_attempt=3,
                  latest_attempt=3)


def running() -> tuple:  # type: ignore[type-arg]
    return status(Phase.RUNNING, 3, job=PLAIN, latest_checkpoint=checkpoint(9, at(50))), \
        driver(3, job=PLAIN)


class TestARunningJob:
    def stopped(self):  # type: ignore[no-untyped-def]
        job_status, pod = running()
        return run(observe(REDEPLOY, job_status, pod, store=STORE), at(60))

    def test_the_attempt_stops_and_the_next_restores_the_named_point_exactly(self) -> None:
        stopping = self.stopped()
        assert stopping.of_type(DeleteDriver) == [
            DeleteDriver(name="clicks-attempt-3", reason=Reason.REDEPLOYING)]
        assert (stopping.status.phase, stopping.status.reason) == (
            Phase.RESTARTING, Reason.REDEPLOYING)
        assert stopping.status.last_redeploy_nonce == "n1"
        assert (stopping.status.discarded_through, stopping.status.discarded_attempt,
                stopping.status.discarded_replacement) == (
            9, 3, DiscardedReplacement.RESTORE_SOURCE)
        assert reasons(stopping) == [Reason.REDEPLOYING]

        started = run(observe(REDEPLOY, stopping.status, store=STORE), at(61))
        (created,) = started.of_type(CreateDriver)
        assert (created.attempt, created.restore_pointer, created.restore_exact) == (
            4, POINT, True)
        assert started.status.reason == Reason.REDEPLOYED
        assert reasons(started) == [Reason.REDEPLOYED]

    def test_the_same_nonce_is_acted_on_once(self) -> None:
        started = run(observe(REDEPLOY, self.stopped().status, store=STORE), at(61))
        again = run(observe(REDEPLOY, started.status, driver(4, job=REDEPLOY, created=at(61)),
                            store=STORE), at(90))
        assert not again.of_type(DeleteDriver)
        assert Reason.REDEPLOYING not in reasons(again)

    def test_a_restart_before_its_first_checkpoint_restores_the_point_again(self) -> None:
        started = run(observe(REDEPLOY, self.stopped().status, store=STORE), at(61))
        failed = driver(4, "Failed", job=REDEPLOY, exit_code=1, created=at(61))
        again = run(observe(REDEPLOY, started.status, failed, store=STORE), at(200))
        (created,) = again.of_type(CreateDriver)
        assert (created.attempt, created.restore_pointer, created.restore_exact) == (
            5, POINT, True)

    def test_a_checkpoint_the_stopping_driver_completes_on_its_way_out_is_not_restored(
            self) -> None:
        late = StoreView(exists=True, latest=checkpoint(10, at(60)), fence_attempt=3,
                         latest_attempt=3)
        started = run(observe(REDEPLOY, self.stopped().status, store=late), at(61))
        (created,) = started.of_type(CreateDriver)
        assert (created.restore_pointer, created.restore_exact) == (POINT, True)

    def test_once_a_redeployed_attempt_checkpointed_restarts_restore_the_latest_again(
            self) -> None:
        started = run(observe(REDEPLOY, self.stopped().status, store=STORE), at(61))
        own = StoreView(exists=True, latest=checkpoint(10, at(90)), fence_attempt=4,
                        latest_attempt=4)
        checkpointed = run(observe(REDEPLOY, started.status,
                                   driver(4, job=REDEPLOY, created=at(61)), store=own), at(95))
        assert checkpointed.status.discarded_through is None
        assert checkpointed.status.discarded_replacement is None
        failed = driver(4, "Failed", job=REDEPLOY, exit_code=1, created=at(61))
        later = run(observe(REDEPLOY, checkpointed.status, failed, store=own), at(200))
        (created,) = later.of_type(CreateDriver)
        assert (created.restore_pointer, created.restore_exact) == ("latest", False)


def test_a_failed_job_starts_again_from_the_point_at_once() -> None:
    failed = status(Phase.FAILED, 3, job=PLAIN, latest_checkpoint=checkpoint(9, at(50)),
                    reason=Reason.RESTART_LIMIT_EXCEEDED)
    result = run(observe(REDEPLOY, failed, store=STORE), at(60))
    (created,) = result.of_type(CreateDriver)
    assert (created.attempt, created.restore_pointer, created.restore_exact) == (
        4, POINT, True)
    assert result.status.restarts == 0
    assert reasons(result) == [Reason.REDEPLOYING, Reason.REDEPLOYED]


def test_a_suspended_job_resumes_from_the_point() -> None:
    job = make_job(suspend=True, **{"restore.from": POINT, "restore.redeployNonce": "n1"})
    suspended = status(Phase.SUSPENDED, 3, job=PLAIN, latest_checkpoint=checkpoint(9, at(50)),
                       reason=Reason.SUSPENDED)
    noted = run(observe(job, suspended, store=STORE), at(60))
    assert not noted.of_type(CreateDriver)
    assert noted.status.phase is Phase.SUSPENDED
    assert noted.status.discarded_replacement is DiscardedReplacement.RESTORE_SOURCE
    resumed = run(observe(REDEPLOY, noted.status, store=STORE), at(70))
    (created,) = resumed.of_type(CreateDriver)
    assert (created.restore_pointer, created.restore_exact) == (POINT, True)


def test_a_job_that_never_started_starts_from_the_point_as_any_first_start_does() -> None:
    result = run(observe(REDEPLOY, None, store=StoreView(exists=False)), at(1))
    (created,) = result.of_type(CreateDriver)
    assert (created.restore_pointer, created.restore_exact) == (POINT, False)
    assert result.status.last_redeploy_nonce == "n1"
    assert result.status.discarded_through is None


def test_a_redeploy_to_a_snapshot_waits_for_it_to_complete() -> None:
    job = make_job(**{"restore.snapshot": "keep", "restore.redeployNonce": "n2"})
    job_status, pod = running()
    stopping = run(observe(job, job_status, pod, store=STORE), at(60))
    waiting = dataclasses.replace(
        observe(job, stopping.status, store=STORE),
        restore_snapshot=RestoreSnapshot(name="keep", state=SnapshotState.IN_PROGRESS,
                                         message="copying"))
    held = run(waiting, at(61))
    assert not held.of_type(CreateDriver)
    assert held.status.reason == Reason.WAITING_FOR_SNAPSHOT
    # The stopped attempt's pod, still there as Failed (killed for the redeploy), is not
    # read as the end of the start that waits.
    killed = driver(3, "Failed", job=PLAIN, exit_code=143)
    still = run(dataclasses.replace(waiting, status=held.status,
                                    pods=(killed,)), at(90))
    assert still.status.reason == Reason.WAITING_FOR_SNAPSHOT
    assert still.status.restarts == 0 and still.status.last_failure is None
    copied = dataclasses.replace(waiting, status=still.status, restore_snapshot=RestoreSnapshot(
        name="keep", state=SnapshotState.COMPLETED, path="s3://ckpt/snapshots/keep/_metadata",
        checkpoint_id=4, job_name="clicks"))
    started = run(copied, at(70))
    (created,) = started.of_type(CreateDriver)
    assert (created.restore_pointer, created.restore_exact) == (
        "s3://ckpt/snapshots/keep/_metadata", True)


@pytest.mark.parametrize("restore", [{}, {"restore.from": "latest"}])
def test_a_redeploy_without_a_point_to_start_from_is_a_spec_error(
        restore: dict[str, str]) -> None:
    with pytest.raises(SpecError, match=r"spec\.restore\.redeployNonce: starts the job again"):
        make_job(**restore, **{"restore.redeployNonce": "n1"})
