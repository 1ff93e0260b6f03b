"""Stable key hashing: the hash that places a key in its key group, per key and per column.

Keys are hashed with a hash that is the same in every process and every version
(Python's own ``hash`` of a ``str`` is salted per process): a checkpoint stores
state by key group, so a restored key must land in the key group it was stored
under, and records of that key must keep arriving there. The values are pinned by
a test; changing them would split every restored key's state.

The hash of a key, by its Python type:

- ``int`` (and ``bool``, and a ``float`` that is a whole number, so ``1``, ``1.0``
  and ``True`` are one key): splitmix64 of its two's-complement 64 bits;
- ``str``: splitmix64 of the CRC-32 of its UTF-8 bytes; ``bytes``: of their CRC-32;
- any other ``float``: splitmix64 of its IEEE-754 bits;
- ``None``: 0;
- a ``tuple`` (a composite key): its parts' hashes folded in order;
- anything else: splitmix64 of the CRC-32 of its ``repr``.

:func:`stable_hashes` computes the same values for a whole Arrow column without a
Python object per record: strings and binaries are dictionary-encoded by Arrow's
hash kernel, and only the distinct values are hashed, by a CRC-32 that walks all
of them at once, one byte position at a time (skewed data has far fewer distinct
keys than records); integers, floats and booleans are hashed in numpy.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_MASK64 = (1 << 64) - 1
_CRC_POLYNOMIAL = 0xEDB88320
"""The reflected CRC-32 polynomial of zlib (and of ``zlib.crc32``)."""


def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for byte in range(256):
        value = byte
        for _ in range(8):
            value = (value >> 1) ^ _CRC_POLYNOMIAL if value & 1 else value >> 1
        table[byte] = value
    return table


_CRC_TABLE = _crc_table()
_FNV_PRIME = np.uint32(16777619)
_FNV_OFFSET = np.uint32(2166136261)
_NAN = float("nan")
_NAN_BITS = struct.unpack("<Q", struct.pack("<d", _NAN))[0]


def _mix64(value: int) -> int:
    """A 64-bit finaliser (splitmix64) so that nearby integers spread evenly."""
    z = (value + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def mix64_array(values: np.ndarray) -> np.ndarray:
    """:func:`_mix64` of every value (taken as its 64 bits)."""
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return np.asarray(z ^ (z >> np.uint64(31)))


def stable_hash(key: Any) -> int:
    """A non-negative 64-bit hash of ``key`` that every process computes alike."""
    if isinstance(key, bool):
        return _mix64(int(key))
    if isinstance(key, int):
        return _mix64(key & _MASK64)
    if isinstance(key, str):
        return _mix64(zlib.crc32(key.encode("utf-8")))
    if isinstance(key, bytes):
        return _mix64(zlib.crc32(key))
    if isinstance(key, float):
        if key != key:
            key = _NAN  # every NaN is one key, whatever its payload bits
        elif key.is_integer():
            return _mix64(int(key) & _MASK64)
        return _mix64(struct.unpack("<q", struct.pack("<d", key))[0] & _MASK64)
    if isinstance(key, tuple):
        acc = 17
        for part in key:
            acc = _mix64((acc * 31 + stable_hash(part)) & _MASK64)
        return acc
    if key is None:
        return 0
    return _mix64(zlib.crc32(repr(key).encode("utf-8")))


def key_group_of(key: Any, max_parallelism: int) -> int:
    return stable_hash(key) % max_parallelism


def binary_views(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(data, starts, lengths)`` of a string or binary array without nulls: value ``i``
    is ``data[starts[i]:starts[i] + lengths[i]]``. No copy of the data."""
    if pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type):
        offset_type: type[np.signedinteger[Any]] = np.int64
    else:
        offset_type = np.int32
    _, offsets_buffer, data_buffer = array.buffers()[:3]
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type,
                            count=array.offset + len(array) + 1)[array.offset:]
    data = (np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None
            else np.zeros(0, dtype=np.uint8))
    starts = offsets[:-1].astype(np.int64)
    return data, starts, (offsets[1:] - offsets[:-1]).astype(np.int64)


def crc32_of_values(array: pa.Array) -> np.ndarray:
    """``zlib.crc32`` of each value of a string (UTF-8) or binary array without nulls."""
    crc, _ = _walk_values(array, fnv1a=False)
    return crc


def crc32_fnv1a_of_values(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(CRC-32, 32-bit FNV-1a)`` of each value of a string or binary array without
    nulls, in one walk over the bytes (the keyed operator's identity of a string)."""
    crc, fnv = _walk_values(array, fnv1a=True)
    assert fnv is not None
    return crc, fnv


def _walk_values(array: pa.Array, *, fnv1a: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """The CRC-32 (and the FNV-1a) of each value, walked together.

    The values are walked one byte position per step: they are sorted longest first,
    so the values still going at position ``j`` are a prefix and every step is a
    handful of numpy operations over contiguous arrays; the byte each value has at
    that position is gathered once for both hashes.
    """
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.large_binary() if pa.types.is_large_string(array.type)
                           else pa.binary())
    data, starts, lengths = binary_views(array)
    n = len(lengths)
    crc = np.full(n, 0xFFFFFFFF, dtype=np.uint32)
    fnv = np.full(n, _FNV_OFFSET, dtype=np.uint32) if fnv1a else None
    if not n:
        return crc, fnv
    order = np.argsort(-lengths, kind="stable")
    starts, lengths = starts[order], lengths[order]
    ascending = lengths[::-1]
    table = _CRC_TABLE
    with np.errstate(over="ignore"):
        for position in range(int(lengths[0])):
            active = n - int(np.searchsorted(ascending, position, side="right"))
            current = crc[:active]
            byte = data[starts[:active] + position]
            crc[:active] = table[(current ^ byte) & 0xFF] ^ (current >> np.uint32(8))
            if fnv is not None:
                fnv[:active] = (fnv[:active] ^ byte) * _FNV_PRIME
    crc_out = np.empty(n, dtype=np.uint32)
    crc_out[order] = crc ^ np.uint32(0xFFFFFFFF)
    if fnv is None:
        return crc_out, None
    fnv_out = np.empty(n, dtype=np.uint32)
    fnv_out[order] = fnv
    return crc_out, fnv_out


def _hashes_of_distinct(array: pa.Array) -> np.ndarray:
    """Hashes of a null-free array of any type, each distinct value hashed once."""
    kind = array.type
    if pa.types.is_boolean(kind):
        return mix64_array(np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.uint64))
    if pa.types.is_integer(kind):
        values = np.asarray(array.to_numpy(zero_copy_only=False))
        return mix64_array(values.astype(np.int64) if values.dtype.kind == "i"
                           else values.astype(np.uint64))
    if pa.types.is_floating(kind):
        return _float_hashes(np.asarray(array.to_numpy(zero_copy_only=False),
                                        dtype=np.float64))
    encoded = array.dictionary_encode()
    uniques = encoded.dictionary
    if (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        hashed = mix64_array(crc32_of_values(uniques).astype(np.uint64))
    else:
        hashed = np.fromiter((stable_hash(v) for v in uniques.to_pylist()), dtype=np.uint64,
                             count=len(uniques))
    indices = np.asarray(encoded.indices.to_numpy(zero_copy_only=False))
    return np.asarray(hashed[indices])


def _float_hashes(values: np.ndarray) -> np.ndarray:
    """A whole number hashes as that integer; any other float by its bits."""
    whole = np.isfinite(values) & (np.floor(values) == values)
    # Whole numbers beyond 64 bits wrap in stable_hash's arbitrary-precision ints:
    # rare enough to hash one by one.
    huge = whole & (np.abs(values) >= 2.0 ** 63)
    bits = values.view(np.uint64).copy()
    bits[np.isnan(values)] = np.uint64(_NAN_BITS)
    normal = whole & ~huge
    bits[normal] = values[normal].astype(np.int64).view(np.uint64)
    out = mix64_array(bits)
    for i in np.flatnonzero(huge):
        out[i] = stable_hash(float(values[i]))
    return out


def stable_hashes(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``stable_hash`` of every value of ``column`` (``uint64``), vectorised."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pa.types.is_null(column.type):
        return np.zeros(len(column), dtype=np.uint64)
    if pa.types.is_struct(column.type):
        # A composite key: the tuple of its fields' values.
        return combine_hashes([stable_hashes(field) for field in column.flatten()])
    if not column.null_count:
        return _hashes_of_distinct(column)
    valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False))
    out = np.zeros(len(column), dtype=np.uint64)
    out[valid] = _hashes_of_distinct(column.filter(pa.array(valid)))
    return out


def combine_hashes(parts: list[np.ndarray]) -> np.ndarray:
    """The hash of tuples whose parts hash to ``parts`` (as :func:`stable_hash` folds a
    ``tuple``)."""
    n = len(parts[0]) if parts else 0
    acc = np.full(n, 17, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for part in parts:
            acc = mix64_array(acc * np.uint64(31) + part)
    return acc


def key_groups_of_array(column: pa.Array | pa.ChunkedArray, max_parallelism: int) -> np.ndarray:
    """The key group of every value of ``column``, vectorised for every type."""
    hashed = stable_hashes(column)
    return np.asarray(hashed % np.uint64(max_parallelism), dtype=np.int64)


def nan_canonical(column: pa.Array) -> pa.Array:
    """A float column with ``-0.0`` as ``0.0`` and every NaN as the one NaN: equal keys
    then have equal bits (what hashing and grouping by bits need)."""
    if not pa.types.is_floating(column.type):
        return column
    plus_zero = pc.add(column, pa.scalar(0.0, type=column.type))
    return pc.if_else(pc.is_nan(plus_zero),
                      pa.scalar(float("nan"), type=column.type), plus_zero)
