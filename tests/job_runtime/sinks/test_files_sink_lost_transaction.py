"""A restored checkpoint's pending transaction whose data is gone.

The checkpoint promised those records to the output. Logging and carrying on
would drop them silently while the job reports exactly-once output, so the
restore fails and the attempt with it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from job_runtime.records import Batch
from job_runtime.sinks import files
from job_runtime.sinks.files_sink import CommitRetry, LostTransactionError
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter


def open_writer(path: Path, *, attempt: str) -> SinkWriter:
    return files(str(path), commit_retry=CommitRetry(attempts=2, first_delay=0.01)).open(
        context=SinkContext(subtask=0, parallelism=1, attempt_tag=attempt))


class TestRestoringALostPendingTransaction:
    def test_it_fails_the_restore_instead_of_logging(self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        crashed = open_writer(out, attempt="a1e1")
        crashed.write(Batch(rows=[{"n": 1}]))
        state = crashed.snapshot(1)
        for staged in (out / "_pending").iterdir():
            staged.unlink()                 # e.g. a cleanup that ran too early

        restored = open_writer(out, attempt="a2e1")
        with pytest.raises(LostTransactionError, match="checkpoint 1"):
            restored.restore([state])

    def test_an_already_committed_transaction_restores_without_error(
            self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        writer = open_writer(out, attempt="a1e1")
        writer.write(Batch(rows=[{"n": 1}]))
        state = writer.snapshot(1)
        writer.notify_complete(1)

        open_writer(out, attempt="a2e1").restore([state])
        assert [p.name for p in out.iterdir() if p.is_file()] == ["part-0000000001-00000.jsonl"]
