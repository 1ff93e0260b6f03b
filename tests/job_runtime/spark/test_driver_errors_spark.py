"""The Spark-tier tests of test_driver_errors.py: they start a real driver."""

from __future__ import annotations

from runtime_harness import JobHarness, error_lines

from cjob_spec.exit_codes import ExitCode


def test_an_exception_in_map_exits_3_with_the_users_traceback(harness: JobHarness) -> None:
    run = harness.run(entrypoint="failing_jobs:build",
                      args={"count": 4000, "rate": 2000, "output": str(harness.output)},
                      timeout=240)
    assert run.returncode == ExitCode.USER_CODE_ERROR, run.explain()
    assert "BadRecordError: cannot parse record 1234" in run.output
    assert "failing_jobs.py" in run.output, "the traceback should point into the user's file"
    assert any("user code in operator" in line for line in error_lines(run.output))
    assert run.status is not None and run.status["state"] == "failed"
