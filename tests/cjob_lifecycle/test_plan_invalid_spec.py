"""plan_invalid_spec(): a spec that does not parse is reported, and nothing else is touched."""

from __future__ import annotations

from operator_world import T0, at, make_job, observe, run, status

from cjob_lifecycle.actions import CreateDriver, DeleteDriver
from cjob_lifecycle.plan import plan_invalid_spec
from cjob_spec import JobStatus, Phase, Reason, SpecError


class TestAnInvalidSpec:
    """An invalid spec fails a new job and leaves a running one alone."""

    def test_an_invalid_new_job_is_marked_failed(self) -> None:
        error = SpecError(field="spec.parallelism", problem="must be >= 1, got 0")
        result = plan_invalid_spec(status=JobStatus(), error=error, generation=1, now=T0)
        assert result.status.phase is Phase.FAILED
        assert result.status.reason == Reason.INVALID_SPEC
        assert result.status.message == "invalid spec: spec.parallelism: must be >= 1, got 0"
        assert [type(a).__name__ for a in result.actions] == ["EmitEvent"]

    def test_an_invalid_update_leaves_the_running_driver_alone(self) -> None:
        error = SpecError(field="spec.image", problem="must not be empty")
        running = status(Phase.RUNNING, 2)
        result = plan_invalid_spec(status=running, error=error, generation=2, now=T0)
        assert result.status.phase is Phase.RUNNING
        assert not any(isinstance(a, DeleteDriver | CreateDriver) for a in result.actions)
        again = plan_invalid_spec(status=result.status, error=error, generation=2, now=at(5))
        assert again.actions == ()

    def test_a_fixed_spec_restarts_a_job_that_was_invalid_from_the_start(self) -> None:
        error = SpecError(field="spec.image", problem="must not be empty")
        invalid = plan_invalid_spec(status=JobStatus(), error=error, generation=1, now=T0)
        fixed = run(observe(make_job(), invalid.status), at(5))
        assert fixed.of_type(CreateDriver)[0].attempt == 1
