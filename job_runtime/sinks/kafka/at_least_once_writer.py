"""The Kafka sink's at-least-once writer: records produced as they come, flushed at
each barrier (the checkpoint waits for the broker's acknowledgement), so a restore can
only repeat records, never lose them."""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa

from job_runtime.records import Batch
from job_runtime.sinks.failures import (
    SinkFailedError,
    SinkFailureKind,
)
from job_runtime.sinks.kafka.refusals import permanent, produce, refusal
from job_runtime.sinks.kafka.target import KafkaTarget
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter


class AtLeastOnceWriter(SinkWriter):
    """Produce as records come; a barrier waits until the broker acknowledged them all.

    A record the broker will never take fails the attempt as refused (no restart would
    get it through: the restored position reads it again), naming its position among
    the records written since the last barrier.
    """

    def __init__(self, *, sink: KafkaTarget, context: SinkContext) -> None:
        from confluent_kafka import Producer

        self._sink = sink
        self._subtask = context.subtask
        self._producer = Producer(sink.producer_settings())
        self._failures: list[str] = []
        self._refused: list[tuple[int, str]] = []
        self._written = 0
        """Records written since the last barrier: the next one's positions start here."""
        self._last_checkpoint = 0

    def _delivered(self, position: int, error: Any, message: Any) -> None:
        if error is None:
            return
        if permanent(error):
            self._refused.append((position, refusal(error)))
        else:
            self._failures.append(str(error))

    def _refuse(self, position: int, problem: str) -> SinkFailedError:
        return SinkFailedError(kind=SinkFailureKind.REJECTED, sink=self._sink.name,
                               subtask=self._subtask,
                               checkpoint_id=self._last_checkpoint + 1,
                               problem=f"record {position} of the interval: {problem}")

    def write(self, batch: Batch) -> None:
        from confluent_kafka import KafkaException

        if not len(batch):
            return
        for key, value, problem in self._sink.encode_checked(
                pa.Table.from_batches([batch.arrow])):
            position = self._written
            self._written += 1
            if problem is not None:
                raise self._refuse(position, problem)
            try:
                produce(self._producer, topic=self._sink.topic, key=key, value=value,
                         on_delivery=functools.partial(self._delivered, position))
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if error is None or not permanent(error):
                    raise
                raise self._refuse(position, refusal(error)) from None
        self._producer.poll(0)

    def snapshot(self, checkpoint_id: int) -> Any:
        left = self._producer.flush(self._sink.timeout)
        if self._refused:
            position, problem = min(self._refused)
            raise self._refuse(position, problem)
        if left or self._failures:
            failures, self._failures = self._failures, []
            raise RuntimeError(f"kafka sink: {left} records not acknowledged within "
                               f"{self._sink.timeout:g}s; failures: {failures[:3]}")
        self._written = 0
        self._last_checkpoint = checkpoint_id
        return None

    def notify_complete(self, checkpoint_id: int, *, final: bool = False) -> None:
        """Everything was acknowledged at the barrier."""

    def restore(self, states: list[Any]) -> None:
        """Nothing is pending: the records of restored checkpoints are all in the topic."""

    def close(self) -> None:
        self._producer.flush(1.0)
