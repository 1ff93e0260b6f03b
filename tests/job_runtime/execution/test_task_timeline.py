"""The times a subtask reports of its records (``first_record_at``, ``last_record_at``):
the driver serves them as its ``first_record`` and ``last_record`` milestones, from
which a recovery's time is read, so they are set by the first record a source reads,
also in a job with no keyed step after its source."""

from __future__ import annotations

import time

from source_tasks import FakeSubtask, source_task

from job_runtime.execution.subtask.source_task import SourceTask
from job_runtime.records import Batch
from job_runtime.sources.source_contract import Source, SourceContext, Split, SplitReader

WAIT = 10.0


class Batches(SplitReader):
    def __init__(self, batches: list[Batch]) -> None:
        self._left = list(batches)
        self._read = 0

    def read_batch(self) -> Batch | None:
        if not self._left:
            return None
        self._read += 1
        return self._left.pop(0)

    def position(self) -> int:
        return self._read


class OneSplit(Source):
    """One split that reads ``batches``, then ends."""

    name = "numbers"

    def __init__(self, batches: list[Batch]) -> None:
        self._batches = batches

    def splits(self, *, context: SourceContext) -> list[Split]:
        return [Split(index=0, description="the only split")]

    def open(self, split: Split, position: object, *, context: SourceContext) -> SplitReader:
        return Batches(self._batches)


def run_to_its_end(task: SourceTask, subtask: FakeSubtask) -> None:
    """Run ``task`` until its source finished, then stop it."""
    task.start()
    try:
        deadline = time.monotonic() + WAIT
        while subtask.finished_sources == 0:
            assert time.monotonic() < deadline, "the source never finished"
            time.sleep(0.01)
    finally:
        subtask.cancelled.set()
        task.join(WAIT)


def test_a_source_task_with_no_keyed_step_after_it_reports_its_first_and_last_record() -> None:
    subtask = FakeSubtask(subtask=0, parallelism=1)
    task, sink = source_task(OneSplit([Batch(rows=[{"n": 1}]), Batch(rows=[{"n": 2}])]),
                             subtask)
    before = time.time()
    run_to_its_end(task, subtask)
    assert sink.rows == [{"n": 1}, {"n": 2}]
    assert task.records_in == 2
    assert task.first_record_at is not None and task.last_record_at is not None
    assert before <= task.first_record_at <= task.last_record_at <= time.time()


def test_a_source_task_that_reads_nothing_reports_no_record_times() -> None:
    subtask = FakeSubtask(subtask=0, parallelism=1)
    task, _ = source_task(OneSplit([Batch(rows=[])]), subtask)
    run_to_its_end(task, subtask)
    assert task.first_record_at is None and task.last_record_at is None
