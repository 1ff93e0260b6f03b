"""A 64-bit identity of each key, by which a
:class:`~job_runtime.operators.key_index.KeyIndex` finds the keys it holds.

The identity is the value itself for integers, floats and booleans; for strings and
binaries a 64-bit hash (the key's CRC-32 beside its FNV-1a), and for composite keys a
hash of their fields. A key found by a hashed identity is compared with the stored
one (:func:`same_keys`), so that two keys sharing a hash are told apart.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from job_runtime.key_hashing import crc32_fnv1a_of_values, mix64_array
from job_runtime.operators.key_families import KeyFamily, family_of


def string_identities(array: pa.Array) -> np.ndarray:
    """A 64-bit identity of each null-free string or binary value: its CRC-32 in the low
    half, its FNV-1a (32 bits) in the high half. Equal values have equal identities;
    unequal ones share one about once in 2**64 pairs (and are told apart anyway).

    The low half is the CRC-32 that :func:`~job_runtime.key_hashing.stable_hash` mixes
    into a string's hash, so an identity also gives the key's key group
    (:func:`key_groups_of_identities`) without hashing the key again."""
    crc, fnv = crc32_fnv1a_of_values(array)
    return np.asarray((fnv.astype(np.uint64) << np.uint64(32)) | crc.astype(np.uint64))


def key_groups_of_identities(ids: np.ndarray, max_parallelism: int, *,
                             nulls_from: pa.Array) -> np.ndarray:
    """The key groups of string or binary keys whose :func:`string_identities` are
    ``ids``: what :func:`~job_runtime.key_hashing.key_groups_of_array` gives the keys.
    ``nulls_from`` is null where a key is (the keys, or their identity column): such
    a key's group is 0 whatever its entry in ``ids``."""
    hashed = mix64_array(ids & np.uint64(0xFFFFFFFF))
    groups = np.asarray(hashed % np.uint64(max_parallelism), dtype=np.int64)
    if nulls_from.null_count:
        groups[~np.asarray(nulls_from.is_valid().to_numpy(zero_copy_only=False))] = 0
    return groups


HASHED = frozenset({KeyFamily.STRING, KeyFamily.BINARY, KeyFamily.STRUCT})
"""Families whose identity is a hash: a found slot's key is compared with the probe."""
_NULL_IDENTITY = np.uint64(0x6A09E667F3BCC909)
"""A composite key's null field (any constant: identities are checked)."""


def identities(values: pa.Array, family: KeyFamily | None) -> np.ndarray:
    """A 64-bit identity of each key: the key's own bits for numbers, a hash of strings,
    binaries and composite keys (whose fields may be null)."""
    if family in (KeyFamily.STRING, KeyFamily.BINARY):
        return string_identities(values)
    if family == KeyFamily.STRUCT:
        acc = np.full(len(values), 17, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for field in values.flatten():
                part = np.full(len(field), _NULL_IDENTITY, dtype=np.uint64)
                valid = np.asarray(field.is_valid().to_numpy(zero_copy_only=False))
                if valid.any():
                    present = field if valid.all() else field.filter(pa.array(valid))
                    part[valid] = identities(present, family_of(field.type))
                acc = mix64_array(acc * np.uint64(31) + part)
        return acc
    if family is None:
        return np.full(len(values), _NULL_IDENTITY, dtype=np.uint64)
    numbers = np.asarray(values.to_numpy(zero_copy_only=False))
    if family == KeyFamily.FLOAT:
        return np.asarray(numbers.astype(np.float64).view(np.uint64))
    return np.asarray(numbers.astype(np.int64).view(np.uint64))


def same_keys(left: pa.Array, right: pa.Array) -> np.ndarray:
    """Whether each key of ``left`` equals the key of ``right`` beside it (nulls equal
    nulls; floats compared by their canonical bits, so NaN equals NaN)."""
    if pa.types.is_struct(left.type):
        same = np.ones(len(left), dtype=bool)
        for a, b in zip(left.flatten(), right.flatten(), strict=True):
            same &= same_keys(a, b)
        return same
    left_valid = np.asarray(left.is_valid().to_numpy(zero_copy_only=False))
    right_valid = np.asarray(right.is_valid().to_numpy(zero_copy_only=False))
    if pa.types.is_floating(left.type):
        a = np.asarray(left.to_numpy(zero_copy_only=False), dtype=np.float64).view(np.uint64)
        b = np.asarray(right.to_numpy(zero_copy_only=False), dtype=np.float64).view(np.uint64)
        equal = a == b
    elif pa.types.is_null(left.type):
        equal = np.zeros(len(left), dtype=bool)
    else:
        equal = np.asarray(pc.fill_null(pc.equal(left, right), False).to_numpy(
            zero_copy_only=False))
    both_null = ~left_valid & ~right_valid
    return np.asarray((equal & left_valid & right_valid) | both_null)
