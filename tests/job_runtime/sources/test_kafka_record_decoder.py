"""A Kafka source's batch of JSON values becomes columns: after the first batch only the
fields the pipeline reads are built, with the same values as parsing every field, and a
batch the known types do not fit, or a read field first seen later, still reads right.

The records are stand-ins for the client's messages (the decoder only calls their
accessors); the same decoding against a real broker is in the Kafka tier."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from job_runtime.errors import UserCodeError
from job_runtime.sources.kafka.decode import RecordDecoder
from job_runtime.sources.kafka.plan import KafkaPartition

PART = KafkaPartition(topic="clicks", partition=0, start=0, end=None)


@dataclasses.dataclass
class Message:
    payload: bytes | None
    at: int

    def value(self) -> bytes | None:
        return self.payload

    def offset(self) -> int:
        return self.at

    def key(self) -> bytes | None:
        return None

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_000 + self.at)


def messages(objects: list[Any], first: int = 0) -> list[Message]:
    return [Message(None if o is None else json.dumps(o).encode(), first + i)
            for i, o in enumerate(objects)]


def decoder(*columns: str) -> RecordDecoder:
    return RecordDecoder(value_format="json", operator="kafka", part=PART, subtask=0,
                         columns=frozenset(columns) if columns else None)


def clicks(first: int, count: int) -> list[dict[str, Any]]:
    return [{"user": f"u{i % 7}", "ts": 1_000 + i, "page": f"/p{i}", "agent": "x" * (i % 5)}
            for i in range(first, first + count)]


def test_later_batches_build_only_the_read_fields_with_the_values_a_whole_parse_gives() -> None:
    narrow, whole = decoder("user", "ts"), decoder()
    for first in (0, 100, 200):
        batch = messages(clicks(first, 100), first)
        read = narrow.to_arrow(batch)
        assert read.schema.names == ["user", "ts"]
        assert read.to_pylist() == whole.to_arrow(batch).select(["user", "ts"]).to_pylist()


def test_unread_fields_of_mixed_types_do_not_fail_a_later_batch() -> None:
    narrow = decoder("user")
    narrow.to_arrow(messages(clicks(0, 10)))
    odd = [{"user": "a", "page": 1}, {"user": "b", "page": "x"}, {"user": "c", "page": [2]}]
    assert narrow.to_arrow(messages(odd, 10)).to_pylist() == \
        [{"user": "a"}, {"user": "b"}, {"user": "c"}]


def test_a_read_field_of_another_type_later_is_read_with_its_own_type() -> None:
    narrow = decoder("user", "ts")
    narrow.to_arrow(messages(clicks(0, 10)))
    later = [{"user": "a", "ts": 1.5}, {"user": "b", "ts": 2.5}]
    assert narrow.to_arrow(messages(later, 10)).to_pylist() == later


def test_a_read_field_first_seen_in_a_later_batch_is_kept() -> None:
    narrow = decoder("user", "region")
    narrow.to_arrow(messages(clicks(0, 10)))
    later = [{"user": "a", "region": "eu"}, {"user": "b", "region": "us"}]
    assert narrow.to_arrow(messages(later, 10)).to_pylist() == later
    assert narrow.to_arrow(messages(later, 12)).to_pylist() == later


def test_tombstones_and_metadata_columns_read_as_before() -> None:
    narrow = decoder("user", "offset")
    narrow.to_arrow(messages(clicks(0, 10)))
    read = narrow.to_arrow(messages([{"user": "a"}, None], 10))
    assert read.to_pylist() == [{"user": "a", "offset": 10}, {"user": None, "offset": 11}]


def test_a_value_that_is_not_an_object_is_still_named_by_its_offset() -> None:
    narrow = decoder("user")
    narrow.to_arrow(messages(clicks(0, 10)))
    bad = [*messages([{"user": "a"}], 10), Message(b"[1, 2]", 11)]
    with pytest.raises(UserCodeError, match="offset 11: the value is JSON but not an object"):
        narrow.to_arrow(bad)
