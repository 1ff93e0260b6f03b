"""Records in row form become one Arrow batch without losing a field.

Arrow's own conversion reads the columns from the first row only, so a field that a
later record of the same batch has (a ``map`` that adds a column to some records) was
dropped without a word.
"""

from __future__ import annotations

from job_runtime.records import Batch


def test_a_field_only_a_later_record_of_the_batch_has_is_kept() -> None:
    rows = [{"n": 1}, {"n": 2, "blob": "x"}, {"n": 3}]
    assert Batch(rows=rows).arrow.to_pylist() == [
        {"n": 1, "blob": None}, {"n": 2, "blob": "x"}, {"n": 3, "blob": None}]


def test_columns_keep_the_order_in_which_the_records_name_them() -> None:
    rows = [{"b": 1, "a": 2}, {"a": 3, "c": 4, "b": 5}]
    assert Batch(rows=rows).arrow.schema.names == ["b", "a", "c"]


def test_records_that_agree_convert_as_before() -> None:
    rows = [{"k": "a", "v": 1.5}, {"k": "b", "v": 2.0}]
    assert Batch(rows=rows).arrow.to_pylist() == rows
