"""decide_restart: backoff growth and cap, reset window, restart limit, permanent exit
codes, and the three policy types."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from spec_documents import minimal, with_field

from cjob_spec import (
    AttemptEnd,
    ExitCode,
    Finish,
    GiveUp,
    Restart,
    RestartPolicy,
    decide_restart,
    is_permanent,
    parse_job,
    reason_for_exit,
)
from cjob_spec.restart import backoff_seconds

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def policy(**fields: object) -> RestartPolicy:
    document = minimal()
    for key, value in fields.items():
        document = with_field(document, f"spec.restartPolicy.{key}", value)
    return parse_job(document).spec.restart_policy


def failed(
    exit_code: int | None = 1, *, at: datetime = NOW, reason: str = "DriverFailed"
) -> AttemptEnd:
    return AttemptEnd(reason=reason, exit_code=exit_code, at=at, message="")


@pytest.mark.parametrize(
    ("restarts", "delay"),
    [(0, 10), (1, 20), (2, 40), (3, 80), (4, 160), (5, 300), (6, 300), (40, 300)],
)
def test_backoff_doubles_from_the_initial_delay_up_to_the_cap(restarts: int, delay: float) -> None:
    assert backoff_seconds(policy(maxRestarts=100), restarts=restarts) == delay


def test_backoff_follows_the_multiplier() -> None:
    custom = policy(backoff={"initial": "1s", "max": "1h", "multiplier": 3})
    assert [backoff_seconds(custom, restarts=n) for n in range(4)] == [1, 3, 9, 27]


def test_a_huge_restart_count_does_not_overflow_the_backoff() -> None:
    assert backoff_seconds(policy(), restarts=10_000) == 300


@pytest.mark.parametrize(("restarts", "delay"), [(0, 10), (1, 20), (4, 160)])
def test_a_failure_is_restarted_after_the_backoff_counted_from_the_failure(
    restarts: int, delay: float
) -> None:
    failure_time = NOW - timedelta(seconds=3)
    decision = decide_restart(
        policy=policy(),
        end=failed(at=failure_time),
        restarts=restarts,
        healthy_since=None,
        now=NOW,
    )
    assert isinstance(decision, Restart)
    assert decision.delay_seconds == delay
    assert decision.restarts == restarts + 1
    assert decision.not_before == failure_time + timedelta(seconds=delay)
    assert decision.remaining_seconds(now=NOW) == delay - 3


def test_a_failure_seen_late_restarts_at_once() -> None:
    decision = decide_restart(
        policy=policy(),
        end=failed(at=NOW - timedelta(minutes=10)),
        restarts=0,
        healthy_since=None,
        now=NOW,
    )
    assert isinstance(decision, Restart)
    assert decision.remaining_seconds(now=NOW) == 0


def test_a_failure_time_in_the_future_is_clamped_to_now() -> None:
    decision = decide_restart(
        policy=policy(),
        end=failed(at=NOW + timedelta(hours=1)),
        restarts=0,
        healthy_since=None,
        now=NOW,
    )
    assert isinstance(decision, Restart)
    assert decision.not_before == NOW + timedelta(seconds=10)


def test_the_job_gives_up_when_max_restarts_are_spent() -> None:
    decision = decide_restart(
        policy=policy(maxRestarts=3), end=failed(), restarts=3, healthy_since=None, now=NOW
    )
    assert isinstance(decision, GiveUp)
    assert decision.reason == "RestartLimitExceeded"
    assert "gave up after 3 restart(s) (maxRestarts 3)" in decision.message


def test_max_restarts_zero_never_restarts() -> None:
    decision = decide_restart(
        policy=policy(maxRestarts=0), end=failed(), restarts=0, healthy_since=None, now=NOW
    )
    assert isinstance(decision, GiveUp)


@pytest.mark.parametrize(
    ("healthy_for", "expected_restarts"),
    [(timedelta(minutes=10), 1), (timedelta(hours=5), 1), (timedelta(minutes=9, seconds=59), 5)],
)
def test_an_attempt_healthy_for_the_reset_window_resets_the_count(
    healthy_for: timedelta, expected_restarts: int
) -> None:
    decision = decide_restart(
        policy=policy(maxRestarts=5),
        end=failed(),
        restarts=4,
        healthy_since=NOW - healthy_for,
        now=NOW,
    )
    assert isinstance(decision, Restart)
    assert decision.restarts == expected_restarts
    assert decision.delay_seconds == (10 if expected_restarts == 1 else 160)


def test_the_reset_window_saves_a_job_at_its_restart_limit() -> None:
    decision = decide_restart(
        policy=policy(maxRestarts=2),
        end=failed(),
        restarts=2,
        healthy_since=NOW - timedelta(hours=1),
        now=NOW,
    )
    assert isinstance(decision, Restart)
    assert decision.restarts == 1


@pytest.mark.parametrize(
    "code", [ExitCode.BAD_CONFIG, ExitCode.USER_CODE_ERROR, ExitCode.RESTORE_FAILED]
)
@pytest.mark.parametrize("kind", ["OnFailure", "Always"])
def test_permanent_exit_codes_give_up_at_once(code: ExitCode, kind: str) -> None:
    decision = decide_restart(
        policy=policy(type=kind), end=failed(int(code)), restarts=0, healthy_since=None, now=NOW
    )
    assert isinstance(decision, GiveUp)
    assert decision.reason == reason_for_exit(int(code))
    assert "permanent" in decision.message


@pytest.mark.parametrize(
    "code",
    [ExitCode.CHECKPOINT_FAILURES_EXCEEDED, ExitCode.STORAGE_UNREACHABLE, 1, 137, 143, None],
)
def test_transient_failures_are_restarted(code: int | None) -> None:
    decision = decide_restart(
        policy=policy(), end=failed(code), restarts=0, healthy_since=None, now=NOW
    )
    assert isinstance(decision, Restart)


@pytest.mark.parametrize(
    ("kind", "exit_code", "expected"),
    [
        ("Never", 0, Finish),
        ("Never", 1, Finish),
        ("Never", 3, Finish),
        ("Never", None, Finish),
        ("OnFailure", 0, Finish),
        ("OnFailure", 1, Restart),
        ("OnFailure", 4, Restart),
        ("OnFailure", 3, GiveUp),
        ("Always", 0, Restart),
        ("Always", 5, Restart),
        ("Always", 6, GiveUp),
    ],
)
def test_policy_types_decide_between_finishing_restarting_and_giving_up(
    kind: str, exit_code: int | None, expected: type
) -> None:
    decision = decide_restart(
        policy=policy(type=kind), end=failed(exit_code), restarts=0, healthy_since=None, now=NOW
    )
    assert isinstance(decision, expected)
    if isinstance(decision, Finish):
        assert decision.succeeded == (exit_code == 0)


def test_never_reports_the_failure_it_did_not_restart() -> None:
    decision = decide_restart(
        policy=policy(type="Never"),
        end=failed(137, reason="OOMKilled"),
        restarts=0,
        healthy_since=None,
        now=NOW,
    )
    assert isinstance(decision, Finish)
    assert decision.reason == "OOMKilled"
    assert "restart policy is Never" in decision.message


def test_always_restarts_a_clean_exit_within_the_same_budget() -> None:
    decision = decide_restart(
        policy=policy(type="Always", maxRestarts=1),
        end=failed(0),
        restarts=1,
        healthy_since=None,
        now=NOW,
    )
    assert isinstance(decision, GiveUp)


@pytest.mark.parametrize(
    ("code", "permanent", "reason"),
    [
        (0, False, "Finished"),
        (1, False, "DriverFailed"),
        (2, True, "InvalidConfiguration"),
        (3, True, "UserCodeError"),
        (4, False, "CheckpointFailuresExceeded"),
        (5, False, "StorageUnreachable"),
        (6, True, "RestoreFailed"),
        (9, False, "Fenced"),
        (137, False, "Killed"),
        (None, False, "DriverLost"),
    ],
)
def test_exit_codes_map_to_reasons_and_permanence(
    code: int | None, permanent: bool, reason: str
) -> None:
    assert is_permanent(code) is permanent
    assert reason_for_exit(code) == reason


def test_exit_code_values_are_the_runtime_contract() -> None:
    assert [int(code) for code in ExitCode] == [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
