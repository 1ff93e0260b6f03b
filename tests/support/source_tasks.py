"""A source task run on its own thread, without sockets: what it asks of its subtask
(:class:`FakeSubtask`, the ``TaskContext`` it is given) and a sink that keeps what it
is written (:class:`Collected`)."""

from __future__ import annotations

import threading
from typing import Any

from cjob_checkpoint.checkpoint_storage import StateHandle
from cjob_spec.model import CheckpointMode
from job_runtime import Pipeline, sinks
from job_runtime.execution.config import SubtaskConfig
from job_runtime.execution.stages import plan_stages
from job_runtime.execution.subtask.source_task import SourceTask
from job_runtime.execution.subtask.uploader import UploadJob
from job_runtime.records import Batch
from job_runtime.sinks.sink_contract import SinkWriter
from job_runtime.sources.source_contract import Source


class FakeSubtask:
    """What a source task asks of its subtask (``TaskContext``), without sockets."""

    def __init__(self, *, subtask: int, parallelism: int) -> None:
        self.subtask = subtask
        self.config = SubtaskConfig(
            job_id="job-uid", job_name="job", entrypoint="m:f", python_path=(), args={},
            parallelism=parallelism, max_parallelism=128, coordinator_host="127.0.0.1",
            coordinator_port=1, checkpoint_root="file:///unused", staging_uri="file:///unused",
            mode=CheckpointMode.EXACTLY_ONCE, unaligned=False)
        self.s3_config = None
        self.cancelled = threading.Event()
        self.finished_sources = 0
        self.failure: BaseException | None = None

    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()

    def submit_snapshot(self, job: UploadJob) -> None:
        pass

    def read_state(self, handle: StateHandle) -> bytes:
        raise AssertionError("nothing is restored here")

    def source_finished(self) -> None:
        self.finished_sources += 1

    def decline(self, checkpoint_id: int, reason: str, *, subsumed: bool) -> None:
        pass

    def task_failed(self, exc: BaseException) -> None:
        self.failure = exc


class Collected(SinkWriter):
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def write(self, batch: Batch) -> None:
        self.rows.extend(batch.rows)

    def snapshot(self, checkpoint_id: int) -> Any:
        return None

    def notify_complete(self, checkpoint_id: int, *, final: bool = False) -> None:
        pass

    def restore(self, states: list[Any]) -> None:
        pass


def source_task(source: Source, subtask: FakeSubtask) -> tuple[SourceTask, Collected]:
    """A task reading ``source`` straight into a :class:`Collected` sink."""
    p = Pipeline()
    p.source(source).sink(sinks.discard())
    sink = Collected()
    task = SourceTask(source=source, restore=None, runtime=subtask, plan=plan_stages(p)[0],
                      outputs=[], sink=sink)
    return task, sink
