"""The final checkpoint's commit: no later checkpoint retries it, so it must succeed.

After the final checkpoint the job ends and the driver removes the sink's staging
area. A final commit that fails and is only logged would therefore lose the
staged records while the job reports success. The writer retries the final
commit with backoff and then raises, which fails the attempt; the restart
restores the final checkpoint and commits its pending transactions again.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from job_runtime.records import Batch
from job_runtime.sinks import files
from job_runtime.sinks.files_sink import CommitRetry, SinkCommitError
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter

FAST_RETRY = CommitRetry(attempts=3, first_delay=0.05, max_delay=0.1)


def open_writer(path: str, *, s3: Any, attempt: str = "a1e1",
                retry: CommitRetry = FAST_RETRY) -> SinkWriter:
    return files(path, commit_retry=retry).open(context=SinkContext(
        subtask=0, parallelism=1, attempt_tag=attempt, s3=s3))


def rows(*values: int) -> Batch:
    return Batch(rows=[{"n": v} for v in values])


def keys(s3_faults: Any, prefix: str) -> list[str]:
    listed = s3_faults.bucket.client.list_objects_v2(Bucket=s3_faults.bucket.bucket,
                                                     Prefix=f"{prefix}/")
    return sorted(item["Key"][len(prefix) + 1:] for item in listed.get("Contents", []))


def visible(s3_faults: Any, prefix: str) -> list[int]:
    client = s3_faults.bucket.client
    found: list[int] = []
    for name in keys(s3_faults, prefix):
        if "/" in name or name.startswith((".", "_")):
            continue
        body = client.get_object(Bucket=s3_faults.bucket.bucket, Key=f"{prefix}/{name}")["Body"]
        found.extend(json.loads(line)["n"] for line in body.read().decode().splitlines())
    return sorted(found)


class TestAFinalCommitThatKeepsFailing:
    def test_it_raises_instead_of_reporting_success(self, s3_faults: Any) -> None:
        writer = open_writer(f"{s3_faults.uri}/out", s3=s3_faults.s3_config)
        writer.write(rows(1, 2))
        writer.snapshot(1)
        s3_faults.proxy.fail_with(503, "ServiceUnavailable")
        try:
            with pytest.raises(SinkCommitError, match="checkpoint 1"):
                writer.notify_complete(1, final=True)
        finally:
            s3_faults.proxy.pass_through()

    def test_its_staged_records_survive_and_a_restore_commits_them(self,
                                                                  s3_faults: Any) -> None:
        path = f"{s3_faults.uri}/out"
        writer = open_writer(path, s3=s3_faults.s3_config)
        writer.write(rows(1, 2))
        state = writer.snapshot(1)
        s3_faults.proxy.fail_with(503, "ServiceUnavailable")
        try:
            with pytest.raises(SinkCommitError):
                writer.notify_complete(1, final=True)
        finally:
            s3_faults.proxy.pass_through()
        assert visible(s3_faults, "out") == []
        assert [k for k in keys(s3_faults, "out") if k.startswith("_pending/")]

        restarted = open_writer(path, s3=s3_faults.s3_config, attempt="a1e2")
        restarted.restore([state])
        assert visible(s3_faults, "out") == [1, 2]


class TestAFinalCommitDuringAShortOutage:
    def test_it_is_retried_with_backoff_until_it_succeeds(self, s3_faults: Any) -> None:
        writer = open_writer(f"{s3_faults.uri}/out", s3=s3_faults.s3_config,
                             retry=CommitRetry(attempts=8, first_delay=0.2, max_delay=1.0))
        writer.write(rows(1, 2))
        writer.snapshot(1)
        s3_faults.proxy.fail_with(503, "ServiceUnavailable")
        heal = threading.Timer(1.0, s3_faults.proxy.pass_through)
        heal.start()
        try:
            writer.notify_complete(1, final=True)
        finally:
            heal.cancel()
            s3_faults.proxy.pass_through()
        assert visible(s3_faults, "out") == [1, 2]


class TestACommitBeforeTheFinalCheckpoint:
    def test_it_still_only_logs_and_leaves_the_retry_to_the_next_checkpoint(
            self, s3_faults: Any) -> None:
        writer = open_writer(f"{s3_faults.uri}/out", s3=s3_faults.s3_config)
        writer.write(rows(1))
        writer.snapshot(1)
        s3_faults.proxy.fail_with(503, "ServiceUnavailable")
        try:
            writer.notify_complete(1)
        finally:
            s3_faults.proxy.pass_through()
        writer.write(rows(2))
        writer.snapshot(2)
        writer.notify_complete(2, final=True)
        assert visible(s3_faults, "out") == [1, 2]
