"""How the write-ahead sink learns which checkpoint intervals reached the outside, and
who records it: the contract its users implement.

An :class:`ArrivalRecord` answers whether the interval ``(subtask, checkpoint)`` of a
job arrived. Either a :class:`CheckpointCommitter` records it after the user's
``send`` returned (two steps: a crash between them re-sends that one interval), or a
:class:`TransactionalSender` sends the interval and its record in one transaction (the
Kafka sink's records with their commit marker), so a crash leaves both or neither.
"""

from __future__ import annotations

import abc
from typing import Protocol

import pyarrow as pa


class SendFunction(Protocol):
    """Sends one interval; returns how many of its records went to a dead-letter
    destination instead (``None``: none), and raises
    :class:`~job_runtime.sinks.failures.RejectedRecordError` for a record that will
    never be accepted."""

    def __call__(self, records: pa.Table, *, checkpoint_id: int,
                 subtask: int) -> int | None: ...


class ArrivalRecord(abc.ABC):
    """Knows which intervals ``(subtask, checkpoint)`` of a job reached the outside.

    Pickled to the executors with the pipeline: open connections in :meth:`open`, not
    in ``__init__``. Keys must include ``job_id`` so that another job (or the same name
    created again) never finds this job's records. What writes the record is either a
    :class:`CheckpointCommitter` (a step after the send) or a
    :class:`TransactionalSender` (in the send's own transaction).
    """

    def open(self, *, job_id: str) -> None:  # noqa: B027 - optional hook
        """Connect; called on the executor before the first question."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Disconnect."""

    @abc.abstractmethod
    def is_committed(self, *, subtask: int, checkpoint_id: int) -> bool:
        """Whether the interval of ``subtask`` closed by ``checkpoint_id`` arrived."""

    def learn_interval(self, *, subtask: int, checkpoint_id: int,  # noqa: B027 - optional
                       key: str) -> None:
        """Told of each interval before any question about it, with its secret ``key``
        (hex; empty for an interval an older release staged). The key is kept only in
        the job's checkpoints, so a committer that proves its records with it can tell
        them from records anyone else wrote where it keeps them."""


class CheckpointCommitter(ArrivalRecord):
    """Records, after the user's ``send`` returned, that an interval arrived."""

    @abc.abstractmethod
    def commit(self, *, subtask: int, checkpoint_id: int) -> None:
        """Record that it arrived; must be idempotent (a retry may record it again)."""


class TransactionalSender(ArrivalRecord):
    """Sends an interval and the record that it arrived in one transaction (the Kafka
    sink's records with their commit marker), so there is no commit step: a crash
    leaves both or neither."""

    @abc.abstractmethod
    def send(self, records: pa.Table, *, checkpoint_id: int, subtask: int) -> int | None:
        """As :class:`SendFunction`, with the arrival recorded in the same transaction."""
