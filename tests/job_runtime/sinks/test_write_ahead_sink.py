"""The write-ahead sink: what the outside system receives, and when.

The user's ``send`` must see an interval only after its checkpoint completed, and a
restore must re-send exactly the intervals the committer has not recorded, whatever
happened in between: declined checkpoints, failing sends, a rescale, a crash between
the send and the commit.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from job_runtime.errors import PipelineDefinitionError, UserCodeError
from job_runtime.records import Batch
from job_runtime.sinks import CheckpointCommitter, write_ahead
from job_runtime.sinks.arrival import ArrivalRecord, TransactionalSender
from job_runtime.sinks.commit import CommitRetry, LostTransactionError, SinkCommitError
from job_runtime.sinks.failures import RejectedRecordError, SinkFailedError, SinkFailureKind
from job_runtime.sinks.health import SinkHealth
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter
from job_runtime.sinks.write_ahead import WriteAheadWriter

QUICK = CommitRetry(attempts=2, first_delay=0.0, max_delay=0.0)


@dataclasses.dataclass
class Outside:
    """The system written to: what arrived, and the committer's records of it."""

    received: list[tuple[int, int, list[int]]] = dataclasses.field(default_factory=list)
    committed: set[tuple[str, int, int]] = dataclasses.field(default_factory=set)
    failures_left: int = 0

    def send(self, records: pa.Table, *, checkpoint_id: int, subtask: int) -> None:
        if self.failures_left:
            self.failures_left -= 1
            raise ConnectionError("the outside system is down")
        self.received.append((checkpoint_id, subtask, records.column("n").to_pylist()))

    def numbers(self) -> list[int]:
        return sorted(n for _, _, ns in self.received for n in ns)


class OutsideRecords(ArrivalRecord):
    """What the outside system's records say arrived, for this job."""

    def __init__(self, outside: Outside) -> None:
        self.outside = outside
        self.job_id = ""

    def open(self, *, job_id: str) -> None:
        self.job_id = job_id

    def is_committed(self, *, subtask: int, checkpoint_id: int) -> bool:
        return (self.job_id, subtask, checkpoint_id) in self.outside.committed


class OutsideCommitter(OutsideRecords, CheckpointCommitter):
    def commit(self, *, subtask: int, checkpoint_id: int) -> None:
        self.outside.committed.add((self.job_id, subtask, checkpoint_id))


def open_writer(outside: Outside, staging: Path, *, subtask: int = 0, parallelism: int = 1,
                attempt: str = "a1e1", job_id: str = "job-1",
                restored_job: str = "", stall_timeout: float = 0.0) -> SinkWriter:
    sink = write_ahead(outside.send, OutsideCommitter(outside), commit_retry=QUICK)
    return sink.open(context=SinkContext(subtask=subtask, parallelism=parallelism,
                                         attempt_tag=attempt, job_id=job_id,
                                         staging_root=str(staging),
                                         restored_job=restored_job or job_id,
                                         stall_timeout=stall_timeout))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def clocked_writer(outside: Outside, staging: Path, *,
                   stall_timeout: float = 0.0) -> tuple[WriteAheadWriter, Clock]:
    """A writer whose time is a :class:`Clock` the test moves, with one record staged
    for checkpoint 1 and that checkpoint completed."""
    writer = open_writer(outside, staging, stall_timeout=stall_timeout)
    assert isinstance(writer, WriteAheadWriter)
    clock = writer._clock = Clock()
    writer.write(rows(1))
    writer.snapshot(1)
    writer.notify_complete(1)
    return writer, clock


def staged_writer(send: Callable[..., None], staging: Path, *,
                  clock: Clock) -> WriteAheadWriter:
    """A writer that sends through ``send``, bound 60 s, time from ``clock``, with one
    record staged for checkpoint 1 (not yet completed)."""
    outside = Outside()
    outside.send = send  # type: ignore[method-assign]
    writer = open_writer(outside, staging, stall_timeout=60.0)
    assert isinstance(writer, WriteAheadWriter)
    writer._clock = clock
    writer.write(rows(1))
    writer.snapshot(1)
    return writer


def rows(*values: int) -> Batch:
    return Batch(rows=[{"n": v} for v in values])


def staged_files(staging: Path) -> list[Path]:
    return sorted(p for p in staging.rglob("*") if p.is_file())


class TestWhenRecordsAreSent:
    def test_an_interval_is_sent_only_after_its_checkpoint_completes(
            self, tmp_path: Path) -> None:
        outside = Outside()
        writer = open_writer(outside, tmp_path)
        writer.write(rows(1, 2))
        writer.snapshot(1)
        writer.write(rows(3))
        assert outside.received == []
        writer.notify_complete(1)
        assert outside.received == [(1, 0, [1, 2])]
        writer.snapshot(2)
        writer.notify_complete(2)
        assert outside.received == [(1, 0, [1, 2]), (2, 0, [3])]

    def test_a_completion_sends_every_earlier_interval_in_checkpoint_order(
            self, tmp_path: Path) -> None:
        outside = Outside()
        writer = open_writer(outside, tmp_path)
        for checkpoint, value in ((1, 10), (2, 20), (3, 30)):
            writer.write(rows(value))
            writer.snapshot(checkpoint)
        writer.notify_complete(3)
        assert [(c, ns) for c, _, ns in outside.received] == [(1, [10]), (2, [20]), (3, [30])]

    def test_an_interval_whose_checkpoint_was_declined_goes_out_with_the_next(
            self, tmp_path: Path) -> None:
        outside = Outside()
        writer = open_writer(outside, tmp_path)
        writer.write(rows(1))
        writer.begin_snapshot(1)           # its staging never ran: checkpoint 1 declined
        writer.write(rows(2))
        writer.snapshot(2)
        writer.notify_complete(2)
        assert outside.numbers() == [1, 2]

    def test_an_empty_interval_sends_nothing(self, tmp_path: Path) -> None:
        outside = Outside()
        writer = open_writer(outside, tmp_path)
        writer.snapshot(1)
        writer.notify_complete(1)
        assert outside.received == []
        assert outside.committed == set()

    def test_a_sent_and_committed_interval_leaves_no_staged_file(self, tmp_path: Path) -> None:
        outside = Outside()
        writer = open_writer(outside, tmp_path)
        writer.write(rows(1))
        writer.snapshot(1)
        assert len(staged_files(tmp_path)) == 1
        writer.notify_complete(1)
        assert staged_files(tmp_path) == []
        assert outside.committed == {("job-1", 0, 1)}

    def test_batches_of_one_interval_with_different_columns_arrive_as_one_table(
            self, tmp_path: Path) -> None:
        tables: list[pa.Table] = []
        sink = write_ahead(lambda records, **_: tables.append(records),
                           OutsideCommitter(Outside()), commit_retry=QUICK)
        writer = sink.open(context=SinkContext(subtask=0, parallelism=1, attempt_tag="a1e1",
                                               staging_root=str(tmp_path)))
        writer.write(Batch(rows=[{"n": 1}]))
        writer.write(Batch(rows=[{"n": 2, "word": "two"}]))
        writer.snapshot(1)
        writer.notify_complete(1)
        assert tables[0].to_pylist() == [{"n": 1, "word": None}, {"n": 2, "word": "two"}]


class TestFailingSends:
    def test_a_failed_send_waits_for_the_next_checkpoint_and_keeps_the_order(
            self, tmp_path: Path) -> None:
        outside = Outside(failures_left=1)
        writer = open_writer(outside, tmp_path)
        writer.write(rows(1))
        writer.snapshot(1)
        writer.notify_complete(1)
        assert outside.received == []
        writer.write(rows(2))
        writer.snapshot(2)
        writer.notify_complete(2)
        assert [c for c, _, _ in outside.received] == [1, 2]

    def test_a_final_send_that_keeps_failing_fails_the_attempt_and_keeps_the_interval(
            self, tmp_path: Path) -> None:
        outside = Outside(failures_left=99)
        writer = open_writer(outside, tmp_path)
        writer.write(rows(1))
        state = writer.snapshot(1)
        with pytest.raises(SinkCommitError):
            writer.notify_complete(1, final=True)
        outside.failures_left = 0
        open_writer(outside, tmp_path, attempt="a2e1").restore([state])
        assert outside.numbers() == [1]

    def test_an_interval_neither_staged_nor_committed_fails_the_restore(
            self, tmp_path: Path) -> None:
        outside = Outside()
        writer = open_writer(outside, tmp_path)
        writer.write(rows(1))
        state = writer.snapshot(1)
        for path in staged_files(tmp_path):
            path.unlink()
        with pytest.raises(LostTransactionError):
            open_writer(outside, tmp_path, attempt="a2e1").restore([state])


class TestStalls:
    def test_pending_intervals_their_records_bytes_and_age_are_reported(
            self, tmp_path: Path) -> None:
        outside = Outside(failures_left=1)
        writer = open_writer(outside, tmp_path)
        assert isinstance(writer, WriteAheadWriter)
        clock = writer._clock = Clock()
        writer.write(rows(1, 2, 3))
        writer.snapshot(1)
        writer.notify_complete(1)
        clock.now += 30
        health = writer.health()
        assert (health.pending_intervals, health.pending_records) == (1, 3)
        assert health.pending_bytes > 0 and health.oldest_pending_seconds == 30
        writer.snapshot(2)
        writer.notify_complete(2)
        assert writer.health() == SinkHealth()

    def test_a_send_failing_longer_than_the_stall_bound_ends_the_attempt_as_stalled(
            self, tmp_path: Path) -> None:
        writer, clock = clocked_writer(Outside(failures_left=100), tmp_path, stall_timeout=60.0)
        clock.now += 59
        writer.snapshot(2)
        writer.notify_complete(2)
        clock.now += 2
        writer.snapshot(3)
        with pytest.raises(SinkFailedError) as failed:
            writer.notify_complete(3)
        assert failed.value.kind is SinkFailureKind.STALLED
        assert "checkpoint 1" in str(failed.value) and "61s" in str(failed.value)

    def test_a_send_that_blocks_past_the_stall_bound_before_it_fails_ends_the_attempt_at_once(
            self, tmp_path: Path) -> None:
        """The bound counts from the checkpoint's completion: a client that waits for
        its own timeout (a broker away) before the first failure has used it up."""
        clock = Clock()

        def send_until_the_client_times_out(records: pa.Table, *, checkpoint_id: int,
                                            subtask: int) -> None:
            clock.now += 70.0
            raise ConnectionError("no answer within the client's timeout")

        writer = staged_writer(send_until_the_client_times_out, tmp_path, clock=clock)
        with pytest.raises(SinkFailedError) as failed:
            writer.notify_complete(1)
        assert failed.value.kind is SinkFailureKind.STALLED
        assert "70s" in str(failed.value)

    def test_a_send_that_hangs_is_reported_overdue_once_its_output_waited_past_the_bound(
            self, tmp_path: Path) -> None:
        clock = Clock()
        entered, release = threading.Event(), threading.Event()

        def hanging_send(records: pa.Table, *, checkpoint_id: int, subtask: int) -> None:
            entered.set()
            release.wait(30)
            raise ConnectionError("gave up")

        writer = staged_writer(hanging_send, tmp_path, clock=clock)
        raised: list[BaseException] = []

        def send() -> None:
            try:
                writer.notify_complete(1)
            except SinkFailedError as exc:
                raised.append(exc)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            assert entered.wait(10)
            clock.now += 59
            assert writer.overdue() is None
            clock.now += 2
            stall = writer.overdue()
            assert stall is not None and stall.kind is SinkFailureKind.STALLED
            assert stall.checkpoint_id == 1 and "its send has not returned" in str(stall)
        finally:
            release.set()
            sender.join(10)
        # When the send gives up at last, it reports the same stall itself.
        assert [type(e) for e in raised] == [SinkFailedError]

    def test_a_writer_whose_output_flows_is_never_overdue(self, tmp_path: Path) -> None:
        writer, clock = clocked_writer(Outside(), tmp_path, stall_timeout=60.0)
        clock.now += 1000
        assert writer.overdue() is None

    def test_a_send_that_recovers_within_the_bound_starts_the_count_again(
            self, tmp_path: Path) -> None:
        outside = Outside(failures_left=1)
        writer, clock = clocked_writer(outside, tmp_path, stall_timeout=60.0)
        clock.now += 50
        writer.snapshot(2)
        writer.notify_complete(2)
        outside.failures_left = 1
        writer.write(rows(2))
        writer.snapshot(3)
        writer.notify_complete(3)
        clock.now += 50
        writer.snapshot(4)
        writer.notify_complete(4)
        assert outside.numbers() == [1, 2]

    def test_a_record_the_send_refuses_for_good_fails_at_once_naming_it(
            self, tmp_path: Path) -> None:
        def send(records: pa.Table, *, checkpoint_id: int, subtask: int) -> None:
            raise RejectedRecordError(position=1, problem="violates a unique constraint")

        sink = write_ahead(send, OutsideCommitter(Outside()), commit_retry=QUICK)
        writer = sink.open(context=SinkContext(subtask=0, parallelism=1, attempt_tag="a1e1",
                                               job_id="job-1", staging_root=str(tmp_path)))
        writer.write(rows(1, 2))
        writer.snapshot(1)
        for final in (False, True):
            with pytest.raises(SinkFailedError) as failed:
                writer.notify_complete(1, final=final)
            assert failed.value.kind is SinkFailureKind.REJECTED
            assert str(failed.value) == (
                "the write_ahead sink refused a record for good (subtask 0, interval of "
                "checkpoint 1): record 1 of the interval's 2: violates a unique constraint")


class TestRestores:
    def test_a_restore_sends_exactly_the_intervals_not_yet_committed_oldest_first(
            self, tmp_path: Path) -> None:
        outside = Outside()
        writer = open_writer(outside, tmp_path)
        for checkpoint, value in ((1, 10), (2, 20), (3, 30)):
            writer.write(rows(value))
            writer.snapshot(checkpoint)
        state = writer.snapshot(4)         # lists intervals 1, 2 and 3 as pending
        writer.notify_complete(1)          # the attempt dies after sending 1 only
        assert outside.numbers() == [10]

        open_writer(outside, tmp_path, attempt="a2e1").restore([state])
        assert [(c, ns) for c, _, ns in outside.received] == [(1, [10]), (2, [20]), (3, [30])]

    def test_a_crash_between_send_and_commit_re_sends_that_interval_only(
            self, tmp_path: Path) -> None:
        """Why ``send`` should write the committer's record in its own transaction:
        the sink cannot tell a sent interval from an unsent one without it."""
        outside = Outside()
        writer = open_writer(outside, tmp_path)
        writer.write(rows(1))
        writer.snapshot(1)
        writer.write(rows(2))
        state = writer.snapshot(2)
        writer.notify_complete(1)
        outside.send(pa.table({"n": [2]}), checkpoint_id=2, subtask=0)  # sent, not committed
        open_writer(outside, tmp_path, attempt="a2e1").restore([state])
        assert outside.numbers() == [1, 2, 2]

    def test_after_a_rescale_pending_intervals_keep_the_subtask_that_wrote_them(
            self, tmp_path: Path) -> None:
        outside = Outside()
        states: list[Any] = []
        for subtask in range(3):
            writer = open_writer(outside, tmp_path, subtask=subtask, parallelism=3)
            writer.write(rows(subtask))
            states.append(writer.snapshot(1))
        # Parallelism 3 -> 2: new subtask 0 gets old 0 and 2, new subtask 1 gets old 1.
        open_writer(outside, tmp_path, subtask=0, parallelism=2, attempt="a2e1").restore(
            [states[0], states[2]])
        open_writer(outside, tmp_path, subtask=1, parallelism=2, attempt="a2e1").restore(
            [states[1]])
        assert sorted((s, ns) for _, s, ns in outside.received) == [(0, [0]), (1, [1]),
                                                                    (2, [2])]
        assert outside.committed == {("job-1", s, 1) for s in range(3)}

    def test_another_jobs_commits_do_not_hide_this_jobs_intervals(self, tmp_path: Path) -> None:
        outside = Outside(committed={("job-0", 0, 1)})
        writer = open_writer(outside, tmp_path, job_id="job-1")
        writer.write(rows(1))
        writer.snapshot(1)
        writer.notify_complete(1)
        assert outside.numbers() == [1]


class TestAForeignRestore:
    """Job B restores job A's checkpoint (A created again, a snapshot restored into a
    new job): A's pending intervals are A's until B sends one."""

    def test_an_interval_the_other_job_sent_is_not_sent_again_though_its_file_is_gone(
            self, tmp_path: Path) -> None:
        outside = Outside()
        first = open_writer(outside, tmp_path / "a", job_id="job-a")
        first.write(rows(1))
        state = first.snapshot(1)
        first.notify_complete(1)           # sent, recorded, its file deleted
        assert staged_files(tmp_path / "a") == []
        second = open_writer(outside, tmp_path / "b", job_id="job-b", restored_job="job-a")
        second.restore([state])
        assert outside.numbers() == [1]

    def test_an_interval_the_other_job_did_not_send_is_sent_once_and_its_file_kept(
            self, tmp_path: Path) -> None:
        outside = Outside()
        first = open_writer(outside, tmp_path / "a", job_id="job-a")
        first.write(rows(1))
        state = first.snapshot(1)          # the first job ended before sending it
        open_writer(outside, tmp_path / "b", job_id="job-b", restored_job="job-a").restore(
            [state])
        assert outside.numbers() == [1]
        assert outside.committed == {("job-b", 0, 1)}
        # The first job's file stays: it may still be restored from the same checkpoint.
        assert len(staged_files(tmp_path / "a")) == 1
        # The second job restored again from the same checkpoint: sent already.
        open_writer(outside, tmp_path / "b", job_id="job-b", restored_job="job-a",
                    attempt="a2e1").restore([state])
        assert outside.numbers() == [1]

    def test_an_interval_of_an_earlier_format_belongs_to_the_job_whose_checkpoint_holds_it(
            self, tmp_path: Path) -> None:
        outside = Outside()
        first = open_writer(outside, tmp_path / "a", job_id="job-a")
        first.write(rows(1))
        (entry,) = first.snapshot(1)
        first.notify_complete(1)
        earlier = {key: value for key, value in entry.items() if key != "job"}
        earlier["version"] = 1
        open_writer(outside, tmp_path / "b", job_id="job-b", restored_job="job-a").restore(
            [[earlier]])
        assert outside.numbers() == [1]


class TestBadInput:
    def test_a_send_that_is_not_callable_is_a_pipeline_error(self) -> None:
        with pytest.raises(PipelineDefinitionError, match="send function"):
            write_ahead("not a function", OutsideCommitter(Outside()))  # type: ignore[arg-type]

    def test_a_committer_of_the_wrong_type_is_a_pipeline_error(self) -> None:
        with pytest.raises(PipelineDefinitionError, match="CheckpointCommitter"):
            write_ahead(Outside().send, object())  # type: ignore[arg-type]

    def test_records_whose_column_changes_type_within_a_batch_are_a_user_error(
            self, tmp_path: Path) -> None:
        writer = open_writer(Outside(), tmp_path)
        with pytest.raises(UserCodeError, match="one type"):
            writer.write(Batch(rows=[{"n": 1}, {"n": "one"}]))

    def test_outside_a_job_the_sink_needs_a_staging_path(self) -> None:
        sink = write_ahead(Outside().send, OutsideCommitter(Outside()))
        with pytest.raises(PipelineDefinitionError, match="staging"):
            sink.open(context=SinkContext(subtask=0, parallelism=1, attempt_tag="a1e1"))


class OutsideTransactions(OutsideRecords, TransactionalSender):
    """Sends an interval and its record of arrival as one step, as a transaction would."""

    def send(self, records: pa.Table, *, checkpoint_id: int, subtask: int) -> None:
        self.outside.send(records, checkpoint_id=checkpoint_id, subtask=subtask)
        self.outside.committed.add((self.job_id, subtask, checkpoint_id))


class TestATransactionalSender:
    def transactional_writer(self, outside: Outside, staging: Path) -> WriteAheadWriter:
        return WriteAheadWriter(committer=OutsideTransactions(outside),
                                context=SinkContext(subtask=0, parallelism=1,
                                                    attempt_tag="a1e1", job_id="job-1",
                                                    staging_root=str(staging)),
                                staging=str(staging / "write-ahead"), commit_retry=QUICK,
                                memory_bytes=1 << 20, name="transactional")

    def test_sends_each_interval_once_with_its_record_and_none_again_after_a_restore(
            self, tmp_path: Path) -> None:
        outside = Outside()
        writer = self.transactional_writer(outside, tmp_path)
        writer.write(rows(1, 2))
        state = writer.snapshot(1)
        writer.notify_complete(1)
        assert outside.received == [(1, 0, [1, 2])]
        assert outside.committed == {("job-1", 0, 1)}
        restored = self.transactional_writer(outside, tmp_path)
        restored.restore([state])
        assert outside.received == [(1, 0, [1, 2])], "sent again after a restore"

    def test_takes_no_send_function_beside_it(self, tmp_path: Path) -> None:
        with pytest.raises(TypeError, match="TransactionalSender"):
            WriteAheadWriter(committer=OutsideTransactions(Outside()), send=Outside().send,
                             context=SinkContext(subtask=0, parallelism=1, attempt_tag="a",
                                                 job_id="j", staging_root=str(tmp_path)),
                             staging=str(tmp_path), commit_retry=QUICK, memory_bytes=1,
                             name="transactional")
