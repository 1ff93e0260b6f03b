"""Keys numbered without a Python object per key: the same groups and slots as Python's
own dictionary would give, for every key type, nulls, NaN and keys sharing a hash."""

from __future__ import annotations

import datetime
import math
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from job_runtime.operators import key_identity
from job_runtime.operators.key_families import KeyFamily
from job_runtime.operators.key_index import KeyIndex
from job_runtime.operators.key_numbering import factorize_keys


def _python_key(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, dict):
        return tuple(_python_key(v) for v in value.values())
    return value


def _words(count: int, *, seed: int, distinct: int) -> list[str]:
    rng = random.Random(seed)
    pool = [f"user-{rng.randrange(10**9):09d}-{'x' * rng.randrange(0, 30)}"
            for _ in range(distinct)]
    return [pool[min(int(rng.paretovariate(1.1)) - 1, distinct - 1)] for _ in range(count)]


COLUMNS: dict[str, pa.Array] = {
    "strings": pa.array(_words(5000, seed=1, distinct=700)),
    "strings with nulls": pa.array([None if i % 7 == 0 else w
                                    for i, w in enumerate(_words(2000, seed=2, distinct=90))]),
    "large strings": pa.array(_words(1000, seed=3, distinct=50), type=pa.large_string()),
    "binary": pa.array([w.encode() for w in _words(1000, seed=4, distinct=80)]),
    "sparse 64-bit integers": pa.array(
        [int(v) for v in np.random.default_rng(5).choice(
            np.random.default_rng(6).integers(-(2**62), 2**62, 300), 3000)]),
    "dense integers": pa.array([i % 100 for i in range(3000)], type=pa.int32()),
    "integers with nulls": pa.array([None if i % 5 == 0 else i % 13 for i in range(500)]),
    "floats": pa.array([0.0, -0.0, 1.5, float("nan"), 1.5, float("inf"), 2.0, float("nan")] * 50),
    "booleans": pa.array([True, False, None, True] * 100),
    "nulls only": pa.nulls(10),
    "dates": pa.array([datetime.date(2026, 1, 1 + i % 9) for i in range(100)]),
    "dictionary strings": pa.array(_words(500, seed=7, distinct=40)).dictionary_encode(),
    "composite": pa.StructArray.from_arrays(
        [pa.array([None if i % 11 == 0 else w
                   for i, w in enumerate(_words(900, seed=8, distinct=30))]),
         pa.array([None if i % 13 == 0 else i % 7 for i in range(900)]),
         pa.array([float("nan") if i % 5 == 0 else float(i % 3) for i in range(900)])],
        names=["user", "n", "x"]),
}


class TestFactorizeKeys:
    @pytest.mark.parametrize("name", list(COLUMNS))
    def test_rows_share_a_code_exactly_when_python_says_their_keys_are_equal(
            self, name: str) -> None:
        column = COLUMNS[name]
        codes, uniques = factorize_keys(column)
        values = column.to_pylist()
        unique_values = uniques.to_pylist()
        assert len({_python_key(v) for v in unique_values}) == len(unique_values)
        assert [_python_key(unique_values[c]) for c in codes.tolist()] == \
            [_python_key(v) for v in values]

    def test_unsigned_keys_beyond_int64_take_the_python_path(self) -> None:
        column = pa.array([2**64 - 1, 3, 2**64 - 1], type=pa.uint64())
        codes, uniques = factorize_keys(column)
        assert codes.tolist() == [0, 1, 0]
        assert uniques.to_pylist() == [2**64 - 1, 3]

    def test_keys_arrow_cannot_hash_fail_with_a_clear_error(self) -> None:
        with pytest.raises(TypeError, match=r"keys of type list<item: int64> cannot be grouped"):
            factorize_keys(pa.array([[1], [2]]))


def _check_slots(index: KeyIndex, batches: list[pa.Array]) -> None:
    """Each key has one slot for good, distinct keys distinct slots, numbered from 0,
    and the index gives each slot's key back."""
    slot_of: dict[Any, int] = {}
    for batch in batches:
        _, uniques = factorize_keys(batch)
        slots = index.slots(uniques).tolist()
        for value, slot in zip(uniques.to_pylist(), slots, strict=True):
            assert slot_of.setdefault(_python_key(value), slot) == slot
        assert len(set(slot_of.values())) == len(slot_of)
    assert sorted(slot_of.values()) == list(range(index.size))
    back = index.take(np.arange(index.size)[::-1].copy()).to_pylist()[::-1]
    assert {slot: _python_key(v) for slot, v in enumerate(back)} == \
        {slot: key for key, slot in slot_of.items()}


def _cut(column: pa.Array, parts: int) -> list[pa.Array]:
    step = max(1, len(column) // parts)
    return [column.slice(i, step) for i in range(0, len(column), step)]


class TestKeyIndex:
    @pytest.mark.parametrize("name", list(COLUMNS))
    def test_a_key_keeps_its_slot_across_batches_as_a_dictionary_would_give(
            self, name: str) -> None:
        _check_slots(KeyIndex(), _cut(COLUMNS[name], 7))

    def test_many_batches_of_new_string_keys_merge_the_sorted_delta_correctly(self) -> None:
        index = KeyIndex()
        for start in range(0, 60_000, 3000):
            batch = pa.array([f"k{i}" for i in range(start, start + 3000)])
            assert index.slots(batch).tolist() == list(range(start, start + 3000))
        again = pa.array([f"k{i}" for i in range(0, 60_000, 7)])
        assert index.slots(again).tolist() == list(range(0, 60_000, 7))

    def test_string_keys_that_share_an_identity_still_get_slots_of_their_own(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        # An identity of 4 values: nearly every key shares it with others.
        def weak(array: pa.Array) -> np.ndarray:
            return np.asarray([len(v) % 4 for v in array.to_pylist()], dtype=np.uint64)

        monkeypatch.setattr(key_identity, "string_identities", weak)
        _check_slots(KeyIndex(), _cut(COLUMNS["strings"], 9))
        _check_slots(KeyIndex(), _cut(COLUMNS["binary"], 9))
        _check_slots(KeyIndex(), _cut(COLUMNS["composite"], 9))

    def test_a_null_key_seen_before_any_other_takes_their_type(self) -> None:
        index = KeyIndex()
        assert index.slots(pa.nulls(1)).tolist() == [0]
        assert index.slots(pa.array(["a", None])).tolist() == [1, 0]
        assert index.family == KeyFamily.STRING
        assert index.keys.to_pylist() == [None, "a"]

    def test_keys_whose_type_changes_between_batches_compare_as_python_values(self) -> None:
        index = KeyIndex()
        assert index.slots(pa.array([1, 2])).tolist() == [0, 1]
        assert index.slots(pa.array([2.0, 3.5])).tolist() == [1, 2]
        assert index.slots(pa.array(["1", "x"])).tolist() == [3, 4]
        assert index.slots(pa.array([1, 3.5, None])).tolist() == [0, 2, 5]
        assert index.family == KeyFamily.OBJECT
        assert index.take(np.array([3, 4])).to_pylist() == ["1", "x"]

    def test_integer_keys_of_several_widths_are_one_family(self) -> None:
        index = KeyIndex()
        assert index.slots(pa.array([1, 2], type=pa.int8())).tolist() == [0, 1]
        assert index.slots(pa.array([2, 300], type=pa.int64())).tolist() == [1, 2]
        assert index.family == KeyFamily.INTEGER

    def test_integer_keys_that_stop_filling_their_range_keep_their_slots(self) -> None:
        index = KeyIndex()
        dense = pa.array(list(range(1000, 3000)))
        assert index.slots(dense).tolist() == list(range(2000))
        # Far outside the range: from here on the keys are searched, not indexed.
        sparse = pa.array([-(2**62), 2**62, 1500, 7, 2**40])
        assert index.slots(sparse).tolist() == [2000, 2001, 500, 2002, 2003]
        assert index.slots(pa.array([2999, 2**40, -(2**62), 1000, None])).tolist() == \
            [1999, 2003, 2000, 0, 2004]
        assert index.slots(pa.array([2**63 - 1, -(2**63)])).tolist() == [2005, 2006]
        assert index.slots(pa.array([-(2**63), 2**63 - 1, 1001])).tolist() == [2006, 2005, 1]

    def test_dense_integer_keys_that_grow_past_their_range_keep_their_slots(self) -> None:
        index = KeyIndex()
        for start in range(0, 200_000, 20_000):
            batch = pa.array(list(range(start, start + 20_000)))
            assert index.slots(batch).tolist() == list(range(start, start + 20_000))
        assert index.slots(pa.array([-5, 0, 199_999])).tolist() == [200_000, 0, 199_999]
