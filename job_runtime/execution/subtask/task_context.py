"""What a task may ask of the subtask it runs in: a narrow protocol, not the runtime.

A task (a thread of one subtask, see :mod:`job_runtime.execution.subtask.task`) needs a
few things from its subtask: settings, whether to stop, a place to hand its
snapshots, the restored state files, and a way to report declines and failures.
Naming exactly those keeps the tasks testable without sockets and lets
:class:`~job_runtime.execution.subtask.runtime.SubtaskRuntime` change its internals
without the tasks noticing; ``tasks`` never imports ``subtask``.
"""

from __future__ import annotations

from typing import Protocol

from cjob_checkpoint.checkpoint_storage import StateHandle
from cjob_checkpoint.storage.s3 import S3Config
from job_runtime.execution.config import SubtaskConfig
from job_runtime.execution.subtask.uploader import UploadJob


class TaskContext(Protocol):
    @property
    def subtask(self) -> int:
        """This subtask's index, ``0 .. parallelism - 1``."""

    @property
    def config(self) -> SubtaskConfig: ...

    @property
    def s3_config(self) -> S3Config | None: ...

    def is_cancelled(self) -> bool:
        """Whether the subtask is stopping (a task failed, or the attempt is over)."""

    def submit_snapshot(self, job: UploadJob) -> None:
        """Hand a snapshot to the uploader, which writes it and acknowledges it."""

    def read_state(self, handle: StateHandle) -> bytes:
        """The bytes of a restored state file, checked against its handle."""

    def source_finished(self) -> None:
        """Every split of this subtask's source is read (the final checkpoint may start)."""

    def decline(self, checkpoint_id: int, reason: str, *, subsumed: bool) -> None:
        """This subtask cannot take part in ``checkpoint_id``."""

    def task_failed(self, exc: BaseException) -> None:
        """A task ended with ``exc``: the subtask stops, and Spark relaunches the stage."""
