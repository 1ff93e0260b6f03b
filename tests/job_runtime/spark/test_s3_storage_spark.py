"""Checkpoints on S3 while S3 misbehaves (moto's server behind a fault-injecting proxy).

An outage must cost checkpoints, not data: declined checkpoints are counted
against ``--tolerable-failures``; within the budget the job goes on and the
output stays exactly-once, beyond it the driver exits with a clear reason.
"""

from __future__ import annotations

from typing import Any

from runtime_harness import JobHarness

from cjob_spec.exit_codes import ExitCode

RATE = 1000


def driver_env(s3_faults: Any) -> dict[str, str]:
    """What a driver pod would get: credentials, region and the (proxied) endpoint."""
    endpoint = s3_faults.proxy.endpoint_url
    return {**s3_faults.bucket.env, "AWS_ENDPOINT_URL": endpoint,
            "AWS_ENDPOINT_URL_S3": endpoint}


def completed(status: dict[str, Any]) -> int:
    return int(status["checkpoints"]["completed"])


def failed(status: dict[str, Any]) -> int:
    return int(status["checkpoints"]["failed"])


def test_an_s3_outage_declines_checkpoints_and_the_job_goes_on_exactly_once(
        harness: JobHarness, s3_faults: Any) -> None:
    count = 16000
    proc = harness.start(entrypoint="crashing_jobs:running_sum",
                         args={"count": count, "rate": RATE, "output": str(harness.output)},
                         storage=f"{s3_faults.uri}/checkpoints", env=driver_env(s3_faults),
                         extra=["--tolerable-failures", "1000"])
    try:
        before = harness.wait_status(1, lambda s: completed(s) >= 2, proc=proc,
                                     what="two checkpoints complete on S3")
        assert before["latestCheckpoint"]["path"].startswith(f"{s3_faults.uri}/checkpoints/")
        s3_faults.proxy.fail_with(503, "ServiceUnavailable")
        outage = harness.wait_status(1, lambda s: failed(s) >= 2, proc=proc,
                                     what="checkpoints are declined during the outage")
        s3_faults.proxy.pass_through()
        after = harness.wait_status(
            1, lambda s: completed(s) > completed(outage), proc=proc,
            what="a checkpoint completes after the outage")
        # The newest checkpoint's _metadata really is in the bucket.
        key = after["latestCheckpoint"]["path"].removeprefix(f"{s3_faults.uri}/")
        s3_faults.bucket.client.head_object(Bucket=s3_faults.bucket.bucket, Key=key)
    finally:
        s3_faults.proxy.pass_through()
        run = harness.finish(proc, attempt=1)

    assert run.returncode == 0, run.explain()
    assert "checkpoint" in run.output and "aborted" in run.output
    assert run.status is not None and failed(run.status) >= 2
    assert harness.running_sum_problems(count=count) == []


def test_an_s3_outage_beyond_the_tolerable_failures_ends_the_driver_with_a_reason(
        harness: JobHarness, s3_faults: Any) -> None:
    proc = harness.start(entrypoint="crashing_jobs:running_sum",
                         args={"count": 100_000, "rate": RATE, "output": str(harness.output)},
                         storage=f"{s3_faults.uri}/checkpoints", env=driver_env(s3_faults),
                         extra=["--tolerable-failures", "0"])
    try:
        harness.wait_status(1, lambda s: completed(s) >= 1, proc=proc,
                            what="a checkpoint completes on S3")
        s3_faults.proxy.drop_connections()
    finally:
        run = harness.finish(proc, attempt=1)

    assert run.returncode in (ExitCode.CHECKPOINT_FAILURES_EXCEEDED,
                              ExitCode.STORAGE_UNREACHABLE), run.explain()
    errors = [line for line in run.output.splitlines() if " ERROR job_runtime" in line]
    assert errors, run.output[-4000:]
    assert any("exceed the tolerable 0" in line or "unreachable" in line for line in errors), \
        errors
    assert run.status is not None and run.status["state"] == "failed"
