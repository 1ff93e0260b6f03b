"""A JSON parse leaves out the fields a pipeline does not read only when that cannot
change what the pipeline sees: the read fields' types known, every one of them among
the known fields."""

from __future__ import annotations

import pyarrow as pa
import pytest

from job_runtime.sources.json_projection import known_types, projected_options, read_fields_schema

KNOWN = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("page", pa.string())])


def test_the_schema_holds_the_read_fields_with_their_known_types_in_file_order() -> None:
    assert read_fields_schema(KNOWN, frozenset({"amount", "user"})) == \
        pa.schema([("user", pa.string()), ("amount", pa.int64())])


@pytest.mark.parametrize(("known", "columns"), [
    (None, frozenset({"user"})),
    (KNOWN, None),
    (KNOWN, frozenset()),
    (KNOWN, frozenset({"user", "referrer"})),
])
def test_every_field_is_parsed_when_leaving_some_out_could_lose_one(
        known: pa.Schema | None, columns: frozenset[str] | None) -> None:
    assert read_fields_schema(known, columns) is None
    assert projected_options(known, columns) is None


def test_the_options_ignore_the_unread_fields_and_keep_newlines_in_values_as_asked() -> None:
    options = projected_options(KNOWN, frozenset({"user"}), newlines_in_values=True)
    assert options is not None
    assert options.explicit_schema == pa.schema([("user", pa.string())])
    assert options.unexpected_field_behavior == "ignore"
    assert options.newlines_in_values


def test_the_known_types_leave_out_fields_only_null_so_far() -> None:
    parsed = pa.schema([("user", pa.string()), ("region", pa.null())])
    assert known_types(parsed) == pa.schema([("user", pa.string())])
    assert known_types(pa.schema([("region", pa.null())])) is None
    assert known_types(None) is None
