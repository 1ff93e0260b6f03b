"""JobStatus: the CR's camelCase shape both ways, lenient reading, condition rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spec_documents import T0, full_status

from cjob_spec import ConditionStatus, JobStatus, Phase, set_condition


def test_status_is_written_in_the_custom_resource_shape() -> None:
    data = full_status().to_dict()
    assert data["phase"] == "Running"
    assert data["attempt"] == 2 and data["restarts"] == 1
    assert data["driverPod"] == "clicks-attempt-2"
    assert data["latestCheckpoint"] == {
        "id": 42,
        "path": "s3://b/clicks-u/chk-42/_metadata",
        "completedAt": "2024-05-01T12:00:00Z",
        "sizeBytes": 1048576,
    }
    assert data["restoredFrom"] == {"id": 40, "path": "s3://b/clicks-u/chk-40/_metadata"}
    assert data["lastFailure"] == {
        "reason": "DriverFailed",
        "message": "exit code 1",
        "at": "2024-05-01T12:00:00Z",
        "exitCode": 1,
        "attempt": 1,
    }
    assert data["conditions"] == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Running",
            "message": "",
            "lastTransitionTime": "2024-05-01T12:00:00Z",
            "observedGeneration": 3,
        }
    ]
    assert data["observedGeneration"] == 3
    assert "nextRestartAt" not in data


def test_status_reads_back_what_it_wrote() -> None:
    status = full_status()
    assert JobStatus.from_dict(status.to_dict()) == status


def test_an_absent_status_is_a_job_never_reconciled() -> None:
    assert JobStatus.from_dict(None) == JobStatus()
    assert JobStatus.from_dict({}).phase is None
    assert JobStatus().to_dict() == {"attempt": 0, "restarts": 0, "conditions": []}


def test_a_damaged_status_is_read_leniently() -> None:
    status = JobStatus.from_dict(
        {
            "phase": "Dancing",
            "attempt": "two",
            "restarts": -4,
            "startedAt": "yesterday",
            "latestCheckpoint": {"id": "x"},
            "conditions": [
                {"type": "Ready"},
                "junk",
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T12:00:00Z"},
            ],
            "lastFailure": [],
        }
    )
    assert status.phase is None
    assert (status.attempt, status.restarts) == (0, 0)
    assert status.started_at is None
    assert status.latest_checkpoint is None
    assert status.last_failure is None
    assert [condition.type for condition in status.conditions] == ["Ready"]


def test_timestamps_with_offsets_and_fractions_are_read_as_utc() -> None:
    status = JobStatus.from_dict({"startedAt": "2024-05-01T14:00:00.123+02:00"})
    assert status.started_at == datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)


def test_a_new_condition_is_appended_with_the_current_time() -> None:
    conditions = set_condition(
        (),
        kind="Ready",
        status=ConditionStatus.FALSE,
        reason="Pending",
        message="m",
        now=T0 + timedelta(microseconds=500),
        observed_generation=1,
    )
    assert conditions[0].last_transition_time == T0
    assert conditions[0].observed_generation == 1


def test_the_transition_time_only_moves_when_the_status_flips() -> None:
    first = set_condition(
        (), kind="Ready", status=ConditionStatus.FALSE, reason="Pending", message="a", now=T0
    )
    later = T0 + timedelta(minutes=5)
    same = set_condition(
        first,
        kind="Ready",
        status=ConditionStatus.FALSE,
        reason="Restarting",
        message="b",
        now=later,
    )
    assert same[0].last_transition_time == T0
    assert (same[0].reason, same[0].message) == ("Restarting", "b")
    flipped = set_condition(
        same, kind="Ready", status=ConditionStatus.TRUE, reason="Running", message="", now=later
    )
    assert flipped[0].last_transition_time == later


def test_setting_one_condition_keeps_the_others_in_order() -> None:
    conditions = set_condition(
        (), kind="Ready", status=ConditionStatus.TRUE, reason="a", message="", now=T0
    )
    conditions = set_condition(
        conditions, kind="Failed", status=ConditionStatus.FALSE, reason="b", message="", now=T0
    )
    conditions = set_condition(
        conditions, kind="Ready", status=ConditionStatus.FALSE, reason="c", message="", now=T0
    )
    assert [(c.type, c.reason) for c in conditions] == [("Ready", "c"), ("Failed", "b")]


def test_terminal_phases_are_succeeded_and_failed() -> None:
    assert {phase for phase in Phase if phase.is_terminal} == {Phase.SUCCEEDED, Phase.FAILED}
