"""Which rows of a batch share a key, numbered without a Python object per key.

:func:`factorize_keys` numbers the distinct keys of one column (``codes``) and
returns them once each (``uniques``, an Arrow array). Dense integer keys are numbered
by direct addressing, every other type by Arrow's hash kernel (``dictionary_encode``),
which hashes strings in their buffers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.operators.key_families import (
    KeyFamily,
    canonical,
    family_of,
    object_key,
    plain_keys,
)


def dense_offsets(keys: np.ndarray) -> tuple[np.ndarray, int, int] | None:
    """``(keys - low, low, span)`` for integer keys that fill their range densely.

    Such keys (ids, buckets, ``seq % n``) can be numbered by their offset from the
    smallest one, with arrays as long as the range and no hashing: several times
    faster than a hash table over a million keys. ``None`` for other keys.
    """
    if keys.dtype.kind not in "iu" or not len(keys):
        return None
    low, high = int(keys.min()), int(keys.max())
    span = high - low + 1
    if span > max(DENSE_SPAN_FACTOR * len(keys), 1 << 16):
        return None
    offsets = np.asarray(keys - keys.dtype.type(low)).astype(np.intp, copy=False)
    return offsets, low, span


DENSE_SPAN_FACTOR = 4
"""Integer keys whose range is at most this many times their number are numbered by
direct addressing (see :func:`dense_offsets`)."""


def factorize_numbers(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, uniques)`` of a numpy array of keys: ``uniques[codes]`` equals ``keys``.

    Dense integer keys are numbered by :func:`dense_offsets`, others by pandas' hash
    table (numbers, not Python objects). Only the order of ``uniques`` differs
    between the two (sorted here, first appearance there); nothing depends on it.
    """
    dense = dense_offsets(keys)
    if dense is not None:
        offsets, low, span = dense
        present = np.zeros(span, dtype=bool)
        present[offsets] = True
        found = np.flatnonzero(present)
        numbers = np.empty(span, dtype=np.intp)
        numbers[found] = np.arange(len(found))
        return numbers[offsets], (found + low).astype(keys.dtype)
    import pandas as pd

    codes, uniques = pd.factorize(keys)
    return np.asarray(codes), np.asarray(uniques)


def factorize_keys(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """``(codes, uniques)`` of a key column of any type: ``uniques.take(codes)`` equals
    the column (in its family's type), ``uniques`` distinct, a null at most once."""
    column = plain_keys(column)
    family = family_of(column.type)
    if family is None:
        return np.zeros(len(column), dtype=np.intp), pa.nulls(1 if len(column) else 0)
    if family == KeyFamily.INTEGER and not column.null_count:
        try:
            column = canonical(column, family)
        except (pa.ArrowInvalid, OverflowError):
            return _factorize_objects(column)
        codes, uniques = factorize_numbers(
            np.asarray(column.to_numpy(zero_copy_only=False)))
        return codes, pa.array(uniques, type=pa.int64())
    if family == KeyFamily.STRUCT:
        return _factorize_struct(canonical(column, family))
    if family == KeyFamily.OBJECT:
        if pa.types.is_struct(column.type):
            return _factorize_objects(column)
        try:
            encoded = column.dictionary_encode(null_encoding="encode")
        except pa.ArrowNotImplementedError:
            return _factorize_objects(column)
        return (np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.intp),
                encoded.dictionary)
    try:
        column = canonical(column, family)
    except (pa.ArrowInvalid, OverflowError):
        return _factorize_objects(column)
    encoded = column.dictionary_encode(null_encoding="encode" if column.null_count else "mask")
    return (np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.intp),
            encoded.dictionary)


def _factorize_struct(column: pa.StructArray) -> tuple[np.ndarray, pa.Array]:
    """A composite key: each field numbered on its own, the numbers combined and
    numbered again (so they never exceed the number of rows)."""
    fields = column.flatten()
    combined = np.zeros(len(column), dtype=np.int64)
    for field in fields:
        codes, uniques = factorize_keys(field)
        combined, _ = factorize_numbers(combined * len(uniques) + codes)
        combined = combined.astype(np.int64, copy=False)
    codes = np.asarray(combined, dtype=np.intp)
    n_unique = int(codes.max()) + 1 if len(codes) else 0
    first = np.empty(n_unique, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)
    rows = pa.array(first, type=pa.int64())
    return codes, pa.StructArray.from_arrays([field.take(rows) for field in fields],
                                             names=[f.name for f in column.type])


def _factorize_objects(column: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """The Python path: keys as Python values (keys Arrow cannot hash, or unsigned
    keys beyond int64)."""
    values = column.to_pylist()
    numbers: dict[Any, int] = {}
    uniques: list[Any] = []
    codes = np.empty(len(values), dtype=np.intp)
    try:
        for i, value in enumerate(values):
            code = numbers.get(object_key(value))
            if code is None:
                code = numbers[object_key(value)] = len(uniques)
                uniques.append(value)
            codes[i] = code
    except TypeError as exc:
        raise TypeError(f"keys of type {column.type} cannot be grouped: {exc}") from None
    return codes, pa.array(uniques, type=column.type)
