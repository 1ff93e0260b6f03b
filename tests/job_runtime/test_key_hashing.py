"""Key hashing: the key group of a key never changes, and a column hashes like its values.

A checkpoint stores keyed state by key group. A restore puts each key back in the
key group it was stored under and new records of that key must keep arriving there,
so the hash of a key is a contract across processes and versions, not a detail.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from job_runtime.key_hashing import (
    combine_hashes,
    crc32_fnv1a_of_values,
    crc32_of_values,
    key_group_of,
    key_groups_of_array,
    stable_hash,
    stable_hashes,
)

MAX_P = 128

PINNED = [
    ("", 16294208416658607535, 47),
    ("a", 3187963305867457774, 110),
    ("user-0000042", 4519002045012196054, 86),
    ("Zürich", 4452803056307472222, 94),
    ("日本", 12386825645930559181, 77),
    (b"\x00\xff", 2244468897260870406, 6),
    (0, 16294208416658607535, 47),
    (1, 10451216379200822465, 65),
    (-1, 16490336266968443936, 32),
    (2**63, 5196802822362493915, 91),
    (2**64 - 1, 16490336266968443936, 32),
    (42, 13679457532755275413, 21),
    (1.0, 10451216379200822465, 65),
    (2.5, 7033843765569497573, 101),
    (-0.0, 16294208416658607535, 47),
    (float("inf"), 2638638862653029785, 25),
    (float("nan"), 14351126860892846918, 70),
    (True, 10451216379200822465, 65),
    (False, 16294208416658607535, 47),
    (None, 0, 0),
    (("a", 1), 7748305104197335225, 57),
    (("user", "x", 3), 13387214742205460460, 108),
]

SCALARS = [pinned for pinned in PINNED if not isinstance(pinned[0], tuple)]
"""Keys a column can hold (a tuple is a composite key, hashed from its columns)."""


class TestPinnedKeys:
    @pytest.mark.parametrize(("key", "hashed", "group"), PINNED, ids=[repr(k) for k, _, _ in PINNED])
    def test_a_key_keeps_the_hash_and_key_group_checkpoints_were_written_with(
            self, key: object, hashed: int, group: int) -> None:
        assert stable_hash(key) == hashed
        assert key_group_of(key, MAX_P) == group

    @pytest.mark.parametrize(("key", "hashed", "group"), SCALARS, ids=[repr(k) for k, _, _ in SCALARS])
    def test_a_column_of_the_key_hashes_to_the_pinned_values_too(
            self, key: object, hashed: int, group: int) -> None:
        kind = pa.uint64() if isinstance(key, int) and key >= 2**63 else None
        column = pa.array([key, key], type=kind)
        assert stable_hashes(column).tolist() == [hashed, hashed]
        assert key_groups_of_array(column, MAX_P).tolist() == [group, group]


def _words(count: int, *, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-_äöü日本"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
            for _ in range(count)]


def _scalar_hashes(values: list[object]) -> list[int]:
    return [stable_hash(v) for v in values]


class TestColumnsHashLikeTheirValues:
    def test_strings_of_every_length_hash_like_their_values(self) -> None:
        words = _words(3000, seed=1)
        assert stable_hashes(pa.array(words)).tolist() == _scalar_hashes(words)

    def test_large_strings_and_sliced_arrays_hash_like_their_values(self) -> None:
        words = _words(500, seed=2)
        large = pa.array(words, type=pa.large_string())
        assert stable_hashes(large).tolist() == _scalar_hashes(words)
        assert stable_hashes(large.slice(100, 50)).tolist() == _scalar_hashes(words[100:150])
        assert stable_hashes(pa.array(words).slice(7, 300)).tolist() == \
            _scalar_hashes(words[7:307])

    def test_binary_values_hash_like_bytes(self) -> None:
        values = [w.encode() + bytes([i % 256]) for i, w in enumerate(_words(500, seed=3))]
        assert stable_hashes(pa.array(values, type=pa.binary())).tolist() == \
            _scalar_hashes(values)

    def test_crc32_of_a_column_is_zlibs(self) -> None:
        import zlib

        words = _words(1000, seed=4)
        assert crc32_of_values(pa.array(words)).tolist() == \
            [zlib.crc32(w.encode()) for w in words]

    def test_the_walk_that_also_gives_fnv1a_gives_zlibs_crc32_and_fnv1a_of_each_value(
            self) -> None:
        import zlib

        def fnv1a(data: bytes) -> int:
            value = 2166136261
            for byte in data:
                value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
            return value

        words = [*_words(1000, seed=5), "", "é", "\u2603 snow"]
        for array in (pa.array(words), pa.array(words, type=pa.large_string()).slice(3),
                      pa.array([w.encode() for w in words], type=pa.binary())):
            crc, fnv = crc32_fnv1a_of_values(array)
            encoded = [w.encode() if isinstance(w, str) else w for w in array.to_pylist()]
            assert crc.tolist() == [zlib.crc32(b) for b in encoded]
            assert fnv.tolist() == [fnv1a(b) for b in encoded]

    def test_sparse_64_bit_integers_and_every_integer_type_hash_like_ints(self) -> None:
        rng = np.random.default_rng(5)
        values = [int(v) for v in rng.integers(-(2**63), 2**63 - 1, 1000, dtype=np.int64)]
        assert stable_hashes(pa.array(values)).tolist() == _scalar_hashes(values)
        small = [0, 1, 2, 100, 127]
        for kind in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint32(), pa.uint64()):
            assert stable_hashes(pa.array(small, type=kind)).tolist() == _scalar_hashes(small)
        big = [2**63, 2**64 - 1, 5]
        assert stable_hashes(pa.array(big, type=pa.uint64())).tolist() == _scalar_hashes(big)

    def test_floats_hash_like_floats_with_whole_numbers_as_integers(self) -> None:
        values = [0.0, -0.0, 1.0, -3.0, 2.5, 0.125, 1e-300, 1e300, 2.0**70, -(2.0**63),
                  float("inf"), float("-inf"), float("nan")]
        assert stable_hashes(pa.array(values)).tolist() == _scalar_hashes(values)
        assert stable_hashes(pa.array(values[:6], type=pa.float32())).tolist() == \
            _scalar_hashes(values[:6])

    def test_booleans_hash_like_zero_and_one(self) -> None:
        assert stable_hashes(pa.array([True, False])).tolist() == _scalar_hashes([1, 0])

    def test_nulls_hash_to_zero_in_every_type(self) -> None:
        for values in (["a", None, "b"], [1, None, 3], [1.5, None], [None, None],
                       [b"x", None]):
            assert stable_hashes(pa.array(values)).tolist() == _scalar_hashes(list(values))

    def test_dictionary_and_chunked_columns_hash_like_their_values(self) -> None:
        words = _words(200, seed=6)
        encoded = pa.array(words).dictionary_encode()
        assert stable_hashes(encoded).tolist() == _scalar_hashes(words)
        chunked = pa.chunked_array([pa.array(words[:50]), pa.array(words[50:])])
        assert stable_hashes(chunked).tolist() == _scalar_hashes(words)

    def test_other_types_hash_like_their_python_values(self) -> None:
        import datetime

        days = [datetime.date(2026, 1, d) for d in range(1, 20)]
        assert stable_hashes(pa.array(days)).tolist() == _scalar_hashes(days)

    def test_composite_keys_hash_like_tuples(self) -> None:
        pinned = [(key, hashed) for key, hashed, _ in PINNED if isinstance(key, tuple)]
        for key, hashed in pinned:
            parts = [stable_hashes(pa.array([part])) for part in key]
            assert combine_hashes(parts).tolist() == [hashed]
        words = _words(300, seed=7)
        numbers = list(range(300))
        combined = combine_hashes([stable_hashes(pa.array(words)),
                                   stable_hashes(pa.array(numbers))])
        assert combined.tolist() == _scalar_hashes(list(zip(words, numbers, strict=True)))
