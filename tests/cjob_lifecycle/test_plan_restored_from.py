"""``status.restoredFrom`` states what the driver restored, as its store report says.

The operator only knows what it asked for (``latest``, an id or a path); the driver
decides, and may fall back to an older checkpoint when the newest is unreadable and
``spec.restore.onUnreadable`` allows it. So ``restoredFrom`` stays unset until the
current attempt's driver reports, and a reported fallback is a Warning Event, once.
"""

from __future__ import annotations

from operator_world import T0, at, checkpoint, driver, make_job, observe, run, status

from cjob_checkpoint.store.restore_report import RestoredCheckpoint, RestoreReport
from cjob_lifecycle.actions import CreateDriver, EmitEvent
from cjob_lifecycle.observed import StoreView
from cjob_lifecycle.plan import Plan
from cjob_spec import JobStatus, Phase, Reason, RestoredFrom

PATH_7 = "s3://ckpt/jobs/clicks-uid-1/chk-7/_metadata"
PATH_8 = "s3://ckpt/jobs/clicks-uid-1/chk-8/_metadata"
FALLBACK_JOB = {"restore": {"from": "latest", "onUnreadable": "FallbackToPrevious"}}


def store(report: RestoreReport | None, *, fence: int = 2) -> StoreView:
    return StoreView(exists=True, latest=checkpoint(8, at(-60)), fence_attempt=fence,
                     restore_report=report)


def report(attempt: int, *, restored: int | None, fallback_from: int | None = None
           ) -> RestoreReport:
    def ref(checkpoint_id: int | None) -> RestoredCheckpoint | None:
        if checkpoint_id is None:
            return None
        return RestoredCheckpoint(
            id=checkpoint_id, path=f"s3://ckpt/jobs/clicks-uid-1/chk-{checkpoint_id}/_metadata")
    return RestoreReport(attempt=attempt, checkpoint=ref(restored),
                         fallback_from=ref(fallback_from))


def fallbacks(result: Plan) -> list[EmitEvent]:
    return [e for e in result.of_type(EmitEvent) if e.reason == Reason.RESTORED_FROM_FALLBACK]


class TestRestoredFrom:
    """restoredFrom is what the current attempt's driver reports, never what it was asked for."""

    def test_a_started_attempt_does_not_claim_what_it_restored_before_the_driver_reports(
        self,
    ) -> None:
        restarting = JobStatus(phase=Phase.RESTARTING, attempt=1, restarts=1,
                               latest_checkpoint=checkpoint(8, at(-60)),
                               restored_from=RestoredFrom(id=3, path="s3://old/chk-3/_metadata"))
        result = run(observe(make_job(), restarting, store=store(None, fence=1)), T0)
        assert result.of_type(CreateDriver)[0].restore_pointer == "latest"
        assert result.status.attempt == 2
        assert result.status.restored_from is None

    def test_the_current_attempts_report_becomes_restored_from(self) -> None:
        running = status(Phase.RUNNING, 2, latest_checkpoint=checkpoint(8, at(-60)))
        result = run(observe(make_job(), running, driver(2), store=store(report(2, restored=8))),
                     at(10))
        assert result.status.restored_from == RestoredFrom(id=8, path=PATH_8)
        assert fallbacks(result) == []

    def test_a_report_of_an_earlier_attempt_is_not_taken_for_the_current_one(self) -> None:
        pending = status(Phase.PENDING, 2, latest_checkpoint=checkpoint(8, at(-60)))
        result = run(observe(make_job(), pending, driver(2, "Pending"),
                             store=store(report(1, restored=7))), at(1))
        assert result.status.restored_from is None

    def test_an_empty_start_leaves_restored_from_unset(self) -> None:
        running = status(Phase.RUNNING, 2)
        result = run(observe(make_job(), running, driver(2), store=store(report(2, restored=None))),
                     at(10))
        assert result.status.restored_from is None
        assert fallbacks(result) == []

    def test_a_driver_that_finished_before_the_operator_saw_its_report_still_has_it_recorded(
        self,
    ) -> None:
        running = status(Phase.RUNNING, 2, latest_checkpoint=checkpoint(8, at(-60)))
        result = run(observe(make_job(), running, driver(2, "Succeeded"),
                             store=store(report(2, restored=8))), at(120))
        assert result.status.phase is Phase.SUCCEEDED
        assert result.status.restored_from == RestoredFrom(id=8, path=PATH_8)


class TestAFallback:
    """A driver that fell back to an older checkpoint is recorded as such, with one Warning."""

    def test_a_reported_fallback_sets_the_older_checkpoint_and_warns_once(self) -> None:
        job = make_job(**FALLBACK_JOB)
        running = status(Phase.RUNNING, 2, job=job, latest_checkpoint=checkpoint(8, at(-60)))
        fell_back = store(report(2, restored=7, fallback_from=8))
        first = run(observe(job, running, driver(2, job=job), store=fell_back), at(10))
        assert first.status.restored_from == RestoredFrom(id=7, path=PATH_7)
        (warning,) = fallbacks(first)
        assert warning.type == "Warning"
        assert "checkpoint 7" in warning.message and "checkpoint 8" in warning.message
        assert "attempt 2" in warning.message

        again = run(observe(job, first.status, driver(2, job=job), store=fell_back), at(20))
        assert again.status.restored_from == RestoredFrom(id=7, path=PATH_7)
        assert fallbacks(again) == []


class TestDroppedState:
    """A driver that dropped state the pipeline no longer maps says so in one Warning."""

    def test_a_report_with_dropped_state_warns_once_naming_each_operator(self) -> None:
        running = status(Phase.RUNNING, 2, latest_checkpoint=checkpoint(8, at(-60)))
        dropped = RestoreReport(
            attempt=2, checkpoint=RestoredCheckpoint(id=8, path=PATH_8),
            dropped=("operator '04-reduce' (reduce) holds state, but the job has no operator "
                     "of that name (its stateful operators: 'total')",))
        first = run(observe(make_job(), running, driver(2), store=store(dropped)), at(10))
        (warning,) = [e for e in first.of_type(EmitEvent)
                      if e.reason == Reason.NON_RESTORED_STATE]
        assert warning.type == "Warning"
        assert "'04-reduce'" in warning.message and "allowNonRestoredState" in warning.message
        again = run(observe(make_job(), first.status, driver(2), store=store(dropped)), at(20))
        assert [e for e in again.of_type(EmitEvent) if e.reason == Reason.NON_RESTORED_STATE] == []
