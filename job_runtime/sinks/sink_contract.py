"""The sink contract: write, pre-commit at a barrier, commit when the checkpoint completes.

This is the two-phase commit protocol of Flink's ``TwoPhaseCommitSinkFunction``
reduced to what a files sink needs:

* ``write`` adds records to the open transaction (invisible to readers);
* ``snapshot(n)`` closes the open transaction, remembers it as pending for
  checkpoint ``n`` and returns the pending list as the sink's checkpoint state.
  At a barrier the task calls ``begin_snapshot(n)`` instead: it only closes the
  open transaction (the synchronous part) and returns a :class:`SinkSnapshot`
  whose ``complete()`` makes the pre-commit durable off the barrier path, in the
  uploader thread, which acknowledges the checkpoint only after it returned;
* ``notify_complete(n)`` commits every pending transaction up to ``n``; a commit
  that fails stays pending and is retried on the next completed checkpoint,
  except after the final checkpoint, which has no next one: then the commit is
  retried with backoff and finally raises, failing the attempt (see
  :mod:`job_runtime.sinks.commit`);
* ``restore(states)`` commits the transactions a restored checkpoint recorded as
  pending (commits are idempotent), before any new output is written.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

from cjob_checkpoint.metadata import MAIN_SINK
from job_runtime.records import Batch
from job_runtime.sinks.failures import SinkFailedError
from job_runtime.sinks.health import SinkHealth

__all__ = ["MAIN_SINK", "ReadySinkSnapshot", "Sink", "SinkContext", "SinkSnapshot",
           "SinkWriter", "sink_job_id"]


def sink_job_id(job_id: str, name: str) -> str:
    """The identity a job's sink ``name`` writes under: the job's own for the main
    sink (as when a job had one sink, so its output and transactional ids carry over),
    ``<job>.<name>`` for any other, so that two sinks of a job never share output
    names, transactional ids or staging files."""
    return job_id if name == MAIN_SINK or not job_id else f"{job_id}.{name}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SinkContext:
    subtask: int
    parallelism: int
    attempt_tag: str
    s3: Any = None
    job_id: str = ""
    """The job's identity (``<name>-<uid>``): output names carry it, so two jobs
    writing one path, or a job created again, never touch each other's files."""
    staging_root: str = ""
    """The job's own directory in the checkpoint storage, which every attempt of the job
    reads: where a sink keeps what must outlive an attempt (the write-ahead sink's
    intervals). Empty outside a job."""
    restored_parallelism: int = 0
    """The parallelism of the checkpoint the attempt restored (0 without one): a sink
    that owns resources per subtask (the Kafka sink's transactional ids) finds those
    of subtasks a rescale removed."""
    stall_timeout: float = 0.0
    """Seconds a sink may fail to deliver a completed checkpoint's output before it
    ends the attempt as stalled (``spec.health.sinkStallTimeout``; 0: never)."""
    restored_job: str = ""
    """The identity that wrote the checkpoint the attempt restored (empty without one):
    this job's own, or another job's after a foreign restore, whose pending output a
    sink finds under that job's name (its committer's records, its transactions)."""

    def of_sink(self, name: str) -> SinkContext:
        """This context for the job's sink ``name`` (see :func:`sink_job_id`)."""
        if name == MAIN_SINK:
            return self
        staging = f"{self.staging_root.rstrip('/')}/sinks/{name}" if self.staging_root else ""
        return dataclasses.replace(self, job_id=sink_job_id(self.job_id, name),
                                   staging_root=staging,
                                   restored_job=sink_job_id(self.restored_job, name))


class SinkSnapshot(abc.ABC):
    """A pre-commit begun at a barrier and made durable later, off the barrier path."""

    @abc.abstractmethod
    def complete(self) -> Any:
        """Make the pre-commit durable; return the sink's checkpoint state (plain JSON).

        Runs in the uploader thread, before the checkpoint is acknowledged. An
        exception declines the checkpoint; the transaction is not lost: a later
        checkpoint's ``complete`` pre-commits it again.
        """


@dataclasses.dataclass(frozen=True)
class ReadySinkSnapshot(SinkSnapshot):
    """A pre-commit that was complete when the barrier passed."""

    state: Any

    def complete(self) -> Any:
        return self.state


class SinkWriter(abc.ABC):
    @abc.abstractmethod
    def write(self, batch: Batch) -> None: ...

    @abc.abstractmethod
    def snapshot(self, checkpoint_id: int) -> Any:
        """Pre-commit and return picklable state (the pending transactions)."""

    def begin_snapshot(self, checkpoint_id: int) -> SinkSnapshot:
        """The synchronous part of a pre-commit, at the barrier.

        Without an override the whole pre-commit happens here; a sink with real
        I/O to do hands it to the returned object instead.
        """
        return ReadySinkSnapshot(self.snapshot(checkpoint_id))

    @abc.abstractmethod
    def notify_complete(self, checkpoint_id: int, *, final: bool = False) -> None:
        """Commit everything pending up to ``checkpoint_id``; may be called from any thread.

        With ``final`` (the job's last checkpoint) nothing may stay pending: raise
        :class:`job_runtime.sinks.commit.SinkCommitError` rather than return with
        uncommitted transactions.
        """

    @abc.abstractmethod
    def restore(self, states: list[Any]) -> None:
        """Commit the pending transactions of restored state before new output."""

    def health(self) -> SinkHealth:
        """What the writer holds back (nothing, for a writer that holds nothing)."""
        return SinkHealth()

    def overdue(self) -> SinkFailedError | None:
        """The stall of output that has waited past the stall bound, whether its send
        failed or still runs; ``None`` for a writer that holds nothing back. The
        subtask asks from its progress thread, so a send that hangs (and so never
        fails) ends the attempt too."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; uncommitted data stays invisible."""


class Sink(abc.ABC):
    name: str = "sink"
    exactly_once: bool = False

    @abc.abstractmethod
    def open(self, *, context: SinkContext) -> SinkWriter: ...

    def prepare_on_driver(self, *, job_id: str) -> None:  # noqa: B027 - optional hook
        """Runs once on the driver before anything else of the attempt: check what the
        sink writes to (a topic that exists, a broker that answers) so that a mistake
        ends the driver with one line instead of failing in every subtask."""

    def finish_job(self, *, job_id: str = "", s3: Any = None) -> None:  # noqa: B027 - optional hook
        """Runs once on the driver after the job finished."""

    def prepare_restore(self, *, checkpoint_id: int, job_id: str = "",  # noqa: B027
                        s3: Any = None) -> None:
        """Runs once on the driver before the job resumes from ``checkpoint_id``.

        Output that checkpoints newer than ``checkpoint_id`` committed (possible
        only when a restore falls back past a damaged checkpoint or goes back to
        an older one on purpose) will be produced again from the restored state,
        so an exactly-once sink withdraws it here.
        """
