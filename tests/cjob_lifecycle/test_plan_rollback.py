"""``spec.rollback``: the last spec that ran well is kept; a changed spec that fails, or
completes no checkpoint in time, gives way to it until the spec changes again."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from operator_world import at, checkpoint, document, driver, observe, run, status

from cjob_lifecycle.actions import CreateDriver, DeleteDriver, EmitEvent
from cjob_lifecycle.observed import Observed, StoreView
from cjob_lifecycle.plan import Plan, effective_job
from cjob_spec import CheckpointedJob, JobStatus, Phase, Reason, parse_job, spec_hash
from cjob_spec.status import StableSpec

ROLLBACK = {"rollback.enabled": True, "rollback.readinessTimeout": "2m"}
V1: dict[str, Any] = document(**ROLLBACK)
V2: dict[str, Any] = document(**ROLLBACK, **{"job.entrypoint": "clicks.broken:build"})


def job_of(doc: dict[str, Any]) -> CheckpointedJob:
    return parse_job(doc)


def world(doc: dict[str, Any], job_status: JobStatus, *pods: Any,
          latest_id: int = 5, latest_at: float = 10) -> Observed:
    store = StoreView(exists=True, latest=checkpoint(latest_id, at(latest_at)),
                      fence_attempt=max([0, *(p.attempt for p in pods)]))
    observed = observe(job_of(doc), job_status, *pods, store=store)
    return dataclasses.replace(observed, raw_spec=doc["spec"])


def stable_v1() -> StableSpec:
    return StableSpec(spec_hash=spec_hash(job_of(V1)), spec=V1["spec"])


def upgraded_to_v2(**changes: Any) -> JobStatus:
    """Attempt 2 runs V2, started at 20 s; the newest checkpoint (5) is from before."""
    return status(Phase.RUNNING, 2, job=job_of(V2), started_at=at(20),
                  stable_spec=stable_v1(), latest_checkpoint=checkpoint(5, at(10)), **changes)


def events(result: Plan) -> list[tuple[str, str]]:
    return [(e.type, str(e.reason)) for e in result.of_type(EmitEvent)]


class TestTheStableSpec:
    def test_a_spec_whose_attempt_completed_a_checkpoint_after_it_started_is_kept(self) -> None:
        v1 = job_of(V1)
        result = run(world(V1, status(Phase.RUNNING, 1, job=v1), driver(1, job=v1),
                           latest_at=30), at(31))
        assert result.status.stable_spec == stable_v1()

    def test_a_checkpoint_from_before_the_attempt_proves_nothing(self) -> None:
        v1 = job_of(V1)
        observed = world(V1, status(Phase.RUNNING, 1, job=v1, started_at=at(20)),
                         driver(1, job=v1), latest_at=10)
        assert run(observed, at(31)).status.stable_spec is None

    def test_without_rollback_nothing_is_kept(self) -> None:
        plain = document()
        job = job_of(plain)
        result = run(world(plain, status(Phase.RUNNING, 1, job=job), driver(1, job=job),
                           latest_at=30), at(31))
        assert result.status.stable_spec is None
        assert all(c.type != "RolledBack" for c in result.status.conditions)


class TestRollingBack:
    def test_a_changed_spec_whose_attempt_fails_gives_way_to_the_stable_spec(self) -> None:
        v1, v2 = job_of(V1), job_of(V2)
        failed = driver(2, "Failed", job=v2, created=at(20), exit_code=3)
        first = run(world(V2, upgraded_to_v2(), failed), at(90))
        assert first.status.phase is Phase.RESTARTING
        assert first.status.reason == Reason.ROLLED_BACK
        assert first.status.rolled_back_spec_hash == spec_hash(v2)
        assert ("Warning", "RolledBack") in events(first)
        (warning,) = [e for e in first.of_type(EmitEvent) if e.reason == Reason.ROLLED_BACK]
        assert "attempt 2 failed (UserCodeError" in warning.message

        # The next pass runs the stable spec: its driver carries V1's hash.
        second = run(world(V2, first.status), at(91))
        (create,) = second.of_type(CreateDriver)
        assert create.attempt == 3 and create.restore_pointer == "latest"
        assert second.status.spec_hash == spec_hash(v1)
        assert ("Normal", "RolledBack") in events(second)
        rolled = {c.type: c for c in second.status.conditions}["RolledBack"]
        assert rolled.status.value == "True"
        assert effective_job(world(V2, second.status)).spec.job.entrypoint == "clicks.job:build"

    def test_a_changed_spec_that_completes_no_checkpoint_in_time_is_rolled_back(self) -> None:
        v2 = job_of(V2)
        running = driver(2, job=v2, created=at(20))
        waiting = run(world(V2, upgraded_to_v2(), running), at(60))
        assert waiting.status.phase is Phase.RUNNING
        assert waiting.status.upgrade is not None and waiting.status.upgrade.checkpoint_id == 5
        assert waiting.requeue_after is not None and waiting.requeue_after <= 80
        late = run(world(V2, waiting.status, running), at(20) + timedelta(minutes=2, seconds=1))
        assert DeleteDriver(name="clicks-attempt-2", reason=Reason.ROLLED_BACK) in \
            late.of_type(DeleteDriver)
        assert late.status.reason == Reason.ROLLED_BACK
        assert "completed no checkpoint within 2m" in (late.status.message or "")

    def test_a_changed_spec_that_completes_a_checkpoint_becomes_the_stable_one(self) -> None:
        v2 = job_of(V2)
        running = driver(2, job=v2, created=at(20))
        waiting = run(world(V2, upgraded_to_v2(), running), at(60))
        proven = run(world(V2, waiting.status, running, latest_id=6, latest_at=70), at(71))
        assert proven.status.upgrade is None
        assert proven.status.stable_spec == StableSpec(spec_hash=spec_hash(v2), spec=V2["spec"])
        assert proven.status.rolled_back_spec_hash is None


class TestWhileRolledBack:
    def rolled_back(self, doc: dict[str, Any]) -> Observed:
        v1 = job_of(V1)
        back = status(Phase.RUNNING, 3, job=v1, started_at=at(100), stable_spec=stable_v1(),
                      rolled_back_spec_hash=spec_hash(job_of(V2)))
        return world(doc, back, driver(3, job=v1, created=at(100)), latest_at=10)

    def test_fields_no_driver_depends_on_still_come_from_the_job(self) -> None:
        doc = document(**ROLLBACK, **{"job.entrypoint": "clicks.broken:build",
                                      "checkpoint.triggerNonce": "n-7"})
        observed = self.rolled_back(doc)
        job = effective_job(observed)
        assert job.spec.job.entrypoint == "clicks.job:build"
        assert job.spec.checkpoint.trigger_nonce == "n-7"
        result = run(observed, at(130))
        assert result.of_type(DeleteDriver) == [], "the same spec: no upgrade"
        assert (result.status.phase, result.status.reason) == (Phase.RUNNING,
                                                               Reason.ROLLED_BACK)
        assert result.status.last_trigger_nonce == "n-7"

    def test_a_spec_changed_again_is_tried(self) -> None:
        v3 = document(**ROLLBACK, **{"job.entrypoint": "clicks.fixed:build"})
        observed = self.rolled_back(v3)
        assert effective_job(observed).spec.job.entrypoint == "clicks.fixed:build"
        result = run(observed, at(130))
        assert [d.reason for d in result.of_type(DeleteDriver)] == [Reason.SPEC_CHANGED]
        assert result.status.rolled_back_spec_hash is None


class TestTheTrialsStart:
    def test_a_checkpoint_within_the_second_the_attempt_started_proves_nothing(self) -> None:
        """``startedAt`` has whole seconds: the old attempt's last checkpoint, completed a
        moment before the new attempt's pod was created, must not prove the new spec."""
        v2 = job_of(V2)
        trial = upgraded_to_v2().replace(latest_checkpoint=checkpoint(5, at(20.4)))
        result = run(world(V2, trial, driver(2, job=v2, created=at(20)), latest_id=5,
                           latest_at=20.4), at(21))
        assert result.status.stable_spec == stable_v1()
        assert result.status.upgrade is not None and result.status.upgrade.checkpoint_id == 5
