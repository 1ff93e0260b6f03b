"""plan()'s conditions: the four of them on every pass, and Checkpointing following the
checkpoints of the attempt."""

from __future__ import annotations

from operator_world import T0, at, checkpoint, driver, make_job, observe, run, status

from cjob_lifecycle.observed import StoreView
from cjob_spec import JobStatus, Phase, Reason


def condition(result_status: JobStatus, kind: str) -> tuple[str, str]:
    found = result_status.condition(kind)
    assert found is not None
    return found.status.value, found.reason


class TestEveryPass:
    """Every pass sets the same four conditions."""

    def test_every_pass_sets_the_four_conditions_with_the_observed_generation(self) -> None:
        job = make_job()
        result = run(observe(job, JobStatus()), T0)
        assert [c.type for c in result.status.conditions] == [
            "Ready",
            "Progressing",
            "Checkpointing",
            "Failed",
        ]
        assert all(c.observed_generation == 1 for c in result.status.conditions)
        assert condition(result.status, "Progressing") == ("True", Reason.STARTED)


class TestCheckpointing:
    """Checkpointing is Unknown, True or False as the attempt's checkpoints come or not."""

    def test_checkpointing_is_unknown_until_the_first_checkpoint_of_the_attempt(self) -> None:
        store = StoreView(exists=True, latest=checkpoint(3, at(-100)), fence_attempt=1)
        result = run(observe(make_job(), status(Phase.RUNNING), driver(1), store=store), at(20))
        assert condition(result.status, "Checkpointing") == (
            "Unknown", Reason.AWAITING_FIRST_CHECKPOINT)

    def test_checkpointing_is_true_while_checkpoints_complete_in_time(self) -> None:
        store = StoreView(exists=True, latest=checkpoint(4, at(15)), fence_attempt=1)
        result = run(observe(make_job(), status(Phase.RUNNING), driver(1), store=store), at(20))
        assert condition(result.status, "Checkpointing") == ("True", Reason.CHECKPOINT_COMPLETED)
        assert result.status.latest_checkpoint == checkpoint(4, at(15))

    def test_checkpointing_is_false_when_checkpoints_are_overdue(self) -> None:
        store = StoreView(exists=True, latest=checkpoint(4, at(15)), fence_attempt=1)
        # interval 10s, timeout 10m: overdue after 2 x 10s + 600s
        result = run(observe(make_job(), status(Phase.RUNNING), driver(1), store=store),
                     at(15 + 621))
        assert condition(result.status, "Checkpointing") == ("False", Reason.CHECKPOINT_OVERDUE)
