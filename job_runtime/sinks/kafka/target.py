"""What the Kafka sink's writers read of the sink: where to send, how, and how long to
wait. The writers (``transactions``, ``at_least_once``) sit below the sink that opens
them, so they name this protocol rather than the sink's class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import pyarrow as pa

from job_runtime.sinks.failures import BadRecords
from job_runtime.sinks.kafka.refusals import DeadLetter, EncodedRecord


class KafkaTarget(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def topic(self) -> str: ...

    @property
    def bootstrap(self) -> str: ...

    @property
    def control_topic(self) -> str:
        """The base name of the jobs' control topics (``control_topic_of``)."""
        ...

    @property
    def timeout(self) -> float:
        """Seconds any one call to the broker may take."""
        ...

    @property
    def client_config(self) -> Mapping[str, Any]: ...

    @property
    def bad_records(self) -> BadRecords: ...

    def producer_settings(self) -> dict[str, Any]: ...

    def encode_checked(self, records: pa.Table) -> list[EncodedRecord]: ...

    def dead_letter(self, *, key: bytes | None, value: bytes, problem: str,
                    checkpoint_id: int, subtask: int, position: int,
                    keep_value: bool) -> DeadLetter: ...
