"""Keys of any type numbered without a Python object per key: within a batch, and for good.

Two questions are asked of the keys of every batch an ``aggregate`` folds:

- *which rows share a key?* :func:`factorize_keys` numbers the distinct keys of one
  column (``codes``) and returns them once each (``uniques``, an Arrow array). Dense
  integer keys are numbered by direct addressing, every other type by Arrow's hash
  kernel (``dictionary_encode``), which hashes strings in their buffers.
- *which slot of the operator's state holds this key?* :class:`KeyIndex` maps the
  distinct keys of a batch to slots, adding the new ones. It keeps the keys in Arrow
  arrays and finds them by a 64-bit identity per key: the value itself for integers,
  floats and booleans, and for strings and binaries a 64-bit hash (the key's CRC-32
  beside its FNV-1a), compared against the stored key so that two keys sharing a hash
  are told apart (such keys are kept in a small dictionary of their own). Integer keys
  that fill their range are found by direct addressing (one array indexed by the key);
  other identities sit in a compiled hash table of 64-bit integers (pandas'), which
  takes new keys in place, so no per-batch rebuild over every key; where pandas lacks
  it, in sorted arrays searched with ``searchsorted`` instead.

Keys compare as Python compares them: ``1``, ``1.0`` and ``True`` are one key, every
NaN is one key and ``-0.0`` is ``0.0``, and ``None`` (a null) is a key of its own. A
column whose type family changes between batches (integers, then strings) is still
served, by a slower path over Python values.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from job_runtime.key_hashing import crc32_fnv1a_of_values, mix64_array, nan_canonical


class KeyFamily(enum.Enum):
    """How the keys of a column are compared and found."""

    INTEGER = "integer"
    FLOAT = "float"
    BOOLEAN = "boolean"
    STRING = "string"
    BINARY = "binary"
    STRUCT = "struct"
    """A composite key: a struct of columns of the families above."""
    OBJECT = "object"
    """Any other type, or columns of mixed families: Python values."""


_CANONICAL: dict[KeyFamily, pa.DataType] = {
    KeyFamily.INTEGER: pa.int64(), KeyFamily.FLOAT: pa.float64(),
    KeyFamily.BOOLEAN: pa.bool_(), KeyFamily.STRING: pa.string(),
    KeyFamily.BINARY: pa.binary(),
}
"""32-bit offsets for strings: Arrow hashes them faster than large ones, and a column
of keys holds far less than 2 GiB (the index's own store widens when it must)."""


def family_of(kind: pa.DataType) -> KeyFamily | None:
    """The family of a key type; ``None`` for the null type (a column of nulls only)."""
    if pa.types.is_null(kind):
        return None
    if pa.types.is_dictionary(kind):
        return family_of(kind.value_type)
    if pa.types.is_integer(kind):
        return KeyFamily.INTEGER
    if pa.types.is_floating(kind):
        return KeyFamily.FLOAT
    if pa.types.is_boolean(kind):
        return KeyFamily.BOOLEAN
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return KeyFamily.STRING
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return KeyFamily.BINARY
    if pa.types.is_struct(kind):
        fields = {family_of(kind.field(i).type) for i in range(kind.num_fields)}
        return KeyFamily.OBJECT if fields & {KeyFamily.OBJECT, KeyFamily.STRUCT} \
            else KeyFamily.STRUCT
    return KeyFamily.OBJECT


def _plain(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return column


def concat_keys(parts: list[pa.Array | pa.ChunkedArray]) -> pa.Array:
    """One key column of batches whose key types may differ (``int32`` and ``int64``,
    a batch of nulls only, strings and large strings): in their family's type, or as
    Python values when the families differ (integers and floats)."""
    plain = [_plain(part) for part in parts]
    kinds = {part.type for part in plain}
    if len(kinds) == 1:
        return plain[0] if len(plain) == 1 else pa.concat_arrays(plain)
    families = {family_of(kind) for kind in kinds} - {None}
    if len(families) == 1 and (family := families.pop()) in _CANONICAL:
        target = _CANONICAL[family]
        try:
            return pa.concat_arrays([part.cast(target) for part in plain])
        except (pa.ArrowInvalid, OverflowError):
            pass
    values = [value for part in plain for value in part.to_pylist()]
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        raise TypeError(f"a key column holds values of several types "
                        f"({', '.join(sorted(str(kind) for kind in kinds))}): cast the key "
                        f"to one type before key_by()") from None


def typed_keys(keys: pa.Array, kind: pa.DataType | None) -> pa.Array:
    """``keys`` in the type of the key column they came from (``int32`` keys were
    numbered as ``int64``), or as they are when that type cannot hold them all."""
    if kind is None or keys.type == kind or pa.types.is_null(kind):
        return keys
    try:
        return keys.cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
        return keys


def canonical_type(family: KeyFamily) -> pa.DataType | None:
    """The one type a family's keys are held in (``None``: composite and Python keys)."""
    return _CANONICAL.get(family)


def canonical(column: pa.Array, family: KeyFamily) -> pa.Array:
    """``column`` in its family's one type, floats with one NaN and one zero."""
    if family == KeyFamily.STRUCT:
        fields = [field if (f := family_of(field.type)) is None else canonical(field, f)
                  for field in column.flatten()]
        return pa.StructArray.from_arrays(fields, names=[f.name for f in column.type])
    target = _CANONICAL.get(family)
    if target is None:
        return column
    if family == KeyFamily.INTEGER and pa.types.is_uint64(column.type):
        # Above 2**63 an unsigned key has no int64 of its own: such columns are rare
        # enough to take the Python path (the caller's ``OverflowError``).
        column = column.cast(target, safe=True)
    elif column.type != target:
        column = column.cast(target)
    if family == KeyFamily.FLOAT:
        column = nan_canonical(column)
    return column


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
    column = _plain(column)
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
            code = numbers.get(_object_key(value))
            if code is None:
                code = numbers[_object_key(value)] = len(uniques)
                uniques.append(value)
            codes[i] = code
    except TypeError as exc:
        raise TypeError(f"keys of type {column.type} cannot be grouped: {exc}") from None
    return codes, pa.array(uniques, type=column.type)


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


_HASHED = frozenset({KeyFamily.STRING, KeyFamily.BINARY, KeyFamily.STRUCT})
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


def _same_keys(left: pa.Array, right: pa.Array) -> np.ndarray:
    """Whether each key of ``left`` equals the key of ``right`` beside it (nulls equal
    nulls; floats compared by their canonical bits, so NaN equals NaN)."""
    if pa.types.is_struct(left.type):
        same = np.ones(len(left), dtype=bool)
        for a, b in zip(left.flatten(), right.flatten(), strict=True):
            same &= _same_keys(a, b)
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


class _SortedLookup:
    """Identities (``uint64``) to slots: a large sorted array and a small sorted delta."""

    def __init__(self) -> None:
        self._ids = np.empty(0, dtype=np.uint64)
        self._slots = np.empty(0, dtype=np.int64)
        self._delta_ids = np.empty(0, dtype=np.uint64)
        self._delta_slots = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._ids) + len(self._delta_ids)

    @staticmethod
    def _find(ids: np.ndarray, slots: np.ndarray, probe: np.ndarray, order: np.ndarray,
              out: np.ndarray) -> None:
        if not len(ids):
            return
        sorted_probe = probe[order]
        at = np.searchsorted(ids, sorted_probe)
        inside = at < len(ids)
        at[~inside] = 0
        hit = inside & (ids[at] == sorted_probe)
        out[order[hit]] = slots[at[hit]]

    def find(self, probe: np.ndarray) -> np.ndarray:
        """The slot of each identity, ``-1`` where unknown."""
        out = np.full(len(probe), -1, dtype=np.int64)
        if not len(self) or not len(probe):
            return out
        order = np.argsort(probe, kind="stable")
        self._find(self._ids, self._slots, probe, order, out)
        self._find(self._delta_ids, self._delta_slots, probe, order, out)
        return out

    def add(self, ids: np.ndarray, slots: np.ndarray) -> None:
        """Add distinct identities not present yet."""
        order = np.argsort(ids, kind="stable")
        ids, slots = ids[order], slots[order]
        at = np.searchsorted(self._delta_ids, ids)
        self._delta_ids = np.insert(self._delta_ids, at, ids)
        self._delta_slots = np.insert(self._delta_slots, at, slots)
        if len(self._delta_ids) * 8 > len(self._ids) + (1 << 14):
            at = np.searchsorted(self._ids, self._delta_ids)
            self._ids = np.insert(self._ids, at, self._delta_ids)
            self._slots = np.insert(self._slots, at, self._delta_slots)
            self._delta_ids = np.empty(0, dtype=np.uint64)
            self._delta_slots = np.empty(0, dtype=np.int64)


class _HashedLookup:
    """Identities to slots in a compiled hash table (pandas' ``Int64HashTable``): a
    lookup costs one probe per identity, where a search of sorted arrays costs a sort
    of the probe and a binary search of each (five times slower over a million keys),
    and adding keys inserts them without moving the others."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def find(self, probe: np.ndarray) -> np.ndarray:
        """The slot of each identity, ``-1`` where unknown."""
        if not len(self._table) or not len(probe):
            return np.full(len(probe), -1, dtype=np.int64)
        return np.asarray(self._table.lookup(np.ascontiguousarray(probe).view(np.int64)),
                          dtype=np.int64)

    def add(self, ids: np.ndarray, slots: np.ndarray) -> None:
        """Add identities not present yet (one given twice keeps its last slot)."""
        if len(ids):
            self._table.map_keys_to_values(np.ascontiguousarray(ids).view(np.int64),
                                           np.ascontiguousarray(slots, dtype=np.int64))

    def add_new(self, ids: np.ndarray, slots: np.ndarray) -> bool:
        """:meth:`add`; whether every identity was new and distinct (the table grew by
        as many)."""
        before = len(self._table)
        self.add(ids, slots)
        return len(self._table) - before == len(ids)


def _searched_lookup() -> _HashedLookup | _SortedLookup:
    """A lookup of identities that are searched for (not directly addressed): the
    compiled hash table where pandas provides it, sorted arrays otherwise."""
    try:
        from pandas._libs.hashtable import Int64HashTable
    except ImportError:
        return _SortedLookup()
    table = Int64HashTable(1 << 10)
    if not hasattr(table, "map_keys_to_values"):
        return _SortedLookup()
    return _HashedLookup(table)


class _DenseLookup:
    """Integer keys that fill their range (ids, buckets, ``seq % n``): the slot of key
    ``k`` sits at ``k - low`` of one array, found by indexing, with no search at all."""

    def __init__(self) -> None:
        self._low = 0
        self._slots = np.empty(0, dtype=np.int64)
        self._count = 0

    def find(self, probe: np.ndarray) -> np.ndarray:
        values = probe.view(np.int64)
        out = np.full(len(values), -1, dtype=np.int64)
        if not self._count or not len(values):
            return out
        high = min(self._low + len(self._slots) - 1, 2**63 - 1)
        inside = (values >= self._low) & (values <= high)
        out[inside] = self._slots[values[inside] - self._low]
        return out

    def add(self, ids: np.ndarray, slots: np.ndarray) -> bool:
        """Add distinct keys not present yet; ``False`` (and nothing added) when the
        keys would no longer fill their range densely."""
        if not len(ids):
            return True
        values = ids.view(np.int64)
        low, high = int(values.min()), int(values.max())
        if self._count:
            low, high = min(low, self._low), max(high, self._low + len(self._slots) - 1)
        span = high - low + 1
        if span > max(DENSE_SPAN_FACTOR * (self._count + len(values)), 1 << 16):
            return False
        if not self._count or low < self._low or span > len(self._slots):
            # Room above for keys that keep growing (ids, sequence numbers).
            grown = np.full(span + span // 2, -1, dtype=np.int64)
            if self._count:
                start = self._low - low
                grown[start:start + len(self._slots)] = self._slots
            self._slots, self._low = grown, low
        self._slots[values - self._low] = slots
        self._count += len(values)
        return True


KEY_CHUNKS_KEPT_APART = 64
"""The key store is read in the chunks it was appended in (one per batch with new
keys) until there are this many; then they are combined into one array."""


class KeyIndex:
    """The slots of keys, ``0, 1, 2, ...`` in the order they were first added."""

    def __init__(self) -> None:
        self.family: KeyFamily | None = None
        self.size = 0
        self._chunks: list[pa.Array] = []
        self._combined: pa.Array | None = None
        self._lookup: _HashedLookup | _SortedLookup | _DenseLookup = _searched_lookup()
        self._colliding: dict[Any, int] = {}
        """String keys whose identity another key holds already (about never)."""
        self._objects: dict[Any, int] | None = None
        self._values: list[Any] = []
        """The Python path's index and keys (:attr:`KeyFamily.OBJECT`)."""
        self._null_slot = -1
        self._struct: pa.DataType | None = None

    # ------------------------------------------------------------------ reading

    @property
    def keys(self) -> pa.Array:
        """Every key, in slot order."""
        if self.family == KeyFamily.OBJECT:
            return _arrow_of(self._values)
        if self._combined is None:
            if not self._chunks:
                self._combined = pa.nulls(0) if self.family is None else pa.array(
                    [], type=_CANONICAL.get(self.family, pa.null()))
            elif len(self._chunks) == 1:
                self._combined = self._chunks[0]
            else:
                try:
                    self._combined = pa.concat_arrays(self._chunks)
                except pa.ArrowInvalid:
                    # More key bytes than 32-bit offsets reach.
                    wide = {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}
                    self._combined = pa.concat_arrays(
                        [chunk.cast(wide.get(chunk.type, chunk.type)) for chunk in self._chunks])
            self._chunks = [self._combined] if len(self._combined) else []
        return self._combined

    def take(self, slots: np.ndarray) -> pa.Array:
        """The keys at ``slots``.

        Taken from the chunks the keys were appended in while they are few: combining
        them first would copy every key held on each batch that added keys, for the
        few that batch looks at."""
        if self.family == KeyFamily.OBJECT:
            return _arrow_of(self.object_values(slots))
        at = pa.array(slots, type=pa.int64())
        if self._combined is None and 1 < len(self._chunks) <= KEY_CHUNKS_KEPT_APART:
            return pa.chunked_array(self._chunks).take(at).combine_chunks()
        return self.keys.take(at)

    # ------------------------------------------------------------------ slots

    def slots(self, uniques: pa.Array | pa.ChunkedArray, *,
              identities: np.ndarray | None = None) -> np.ndarray:
        """The slots of distinct keys (as :func:`factorize_keys` returns them), new keys
        given new slots.

        ``identities``: the keys' :func:`string_identities` when the caller has them
        (a combiner computed them before the exchange; entries of null keys are
        ignored), so string keys are not hashed twice. Other families ignore them."""
        uniques = _plain(uniques)
        family = family_of(uniques.type)
        if family is not None:
            if self.family is None:
                if family == KeyFamily.STRUCT:
                    self._struct = canonical(uniques, family).type
                self._settle(family)
            elif family != self.family and self.family != KeyFamily.OBJECT:
                self._to_objects()
            if self.family != KeyFamily.OBJECT and _beyond_int64(uniques):
                self._to_objects()
        if self.family is not None and self.family != KeyFamily.OBJECT:
            uniques = canonical(uniques, self.family) if family is not None else \
                uniques.cast(self._type)
            if uniques.type != self._type:
                # A composite key whose columns changed type (integers, then strings).
                self._to_objects()
        if self.family == KeyFamily.OBJECT:
            return self._object_slots(uniques)
        out = np.full(len(uniques), -1, dtype=np.int64)
        valid = np.ones(len(uniques), dtype=bool) if not uniques.null_count else \
            np.asarray(uniques.is_valid().to_numpy(zero_copy_only=False))
        null_at = np.flatnonzero(~valid)
        if len(null_at):
            if self._null_slot < 0:
                self._null_slot = self._append(uniques.take(pa.array(null_at[:1])))[0]
            out[null_at] = self._null_slot
        present = np.flatnonzero(valid)
        if len(present):
            values = uniques if len(present) == len(uniques) else \
                uniques.take(pa.array(present))
            ids = None
            if identities is not None and self.family in (KeyFamily.STRING, KeyFamily.BINARY):
                ids = identities if len(present) == len(uniques) else identities[present]
            out[present] = self._valid_slots(values, ids=ids)
        return out

    def _settle(self, family: KeyFamily) -> None:
        """The first keys that are not null decide the family (a null key seen before
        them takes their type)."""
        if family == KeyFamily.OBJECT:
            self._to_objects()
            return
        self.family = family
        if family == KeyFamily.INTEGER:
            self._lookup = _DenseLookup()
        self._chunks = [chunk.cast(self._type) for chunk in self._chunks]
        self._combined = None

    @property
    def _type(self) -> pa.DataType:
        """The one type of the keys held (a composite key: its first keys' struct)."""
        if self.family == KeyFamily.STRUCT:
            if self._struct is None:
                raise AssertionError("a composite key's type is set by its first keys")
            return self._struct
        return _CANONICAL[self.family] if self.family is not None else pa.null()

    def _valid_slots(self, values: pa.Array, *, ids: np.ndarray | None = None) -> np.ndarray:
        if ids is None:
            ids = self._identities(values)
        held = self._lookup.find(ids)
        hashed = self.family in _HASHED
        found = self._verified(values, held) if hashed else held
        missing = np.flatnonzero(found < 0)
        if not len(missing):
            return found
        new_values = values if len(missing) == len(values) else \
            values.take(pa.array(missing))
        new_ids = ids[missing]
        slots = self._append(new_values)
        if hashed:
            aside = self._add_hashed(new_ids, slots, held=held[missing] >= 0)
            for i, value in zip(aside.tolist(), new_values.take(pa.array(aside)).to_pylist(),
                                strict=True):
                self._colliding[_object_key(value)] = int(slots[i])
        else:
            # Distinct keys whose identities are their values: distinct identities.
            self._add_ids(new_ids, slots, held_before=int(slots[0]))
        found[missing] = slots
        return found

    def _add_hashed(self, ids: np.ndarray, slots: np.ndarray, *, held: np.ndarray) -> np.ndarray:
        """Make the hashed identities of new keys findable; returns the positions of the
        keys kept aside, to be found by value: those whose identity another key holds
        (``held``), and the second key (and any after it) of two new keys sharing one.

        Identities shared by different keys come about once in 2**64 pairs, so the
        hash table is asked first to take them all and to say, by its size, whether
        they were distinct; only when they were not (or some were held) are they sorted
        to find the first of each."""
        lookup = self._lookup
        if isinstance(lookup, _HashedLookup) and not held.any() and lookup.add_new(ids, slots):
            return np.empty(0, dtype=np.int64)
        _, first = np.unique(ids, return_index=True)
        taken = np.zeros(len(ids), dtype=bool)
        taken[first] = True
        taken[held] = False
        # Over a hash table that took them all, the first slot of each shared identity
        # is written again: the table keeps the last value given to a key.
        lookup.add(ids[taken], slots[taken])
        return np.flatnonzero(~taken)

    def _add_ids(self, ids: np.ndarray, slots: np.ndarray, *, held_before: int) -> None:
        """Make ``ids`` findable (slots from ``held_before`` on were just appended)."""
        lookup = self._lookup
        if not isinstance(lookup, _DenseLookup):
            lookup.add(ids, slots)
            return
        if lookup.add(ids, slots):
            return
        # Integer keys too sparse for their range: search them instead, all of them.
        held = np.flatnonzero(np.asarray(self.keys.is_valid().to_numpy(zero_copy_only=False)))
        held = held[held < held_before]
        searched = _searched_lookup()
        searched.add(identities(self.take(held), self.family), held)
        searched.add(ids, slots)
        self._lookup = searched

    def _verified(self, values: pa.Array, found: np.ndarray) -> np.ndarray:
        """``found`` with the slots whose key differs from the probe's (shared identity)
        looked up by value instead."""
        hit = np.flatnonzero(found >= 0)
        if len(hit):
            stored = self.take(found[hit])
            probe = values if len(hit) == len(values) else values.take(pa.array(hit))
            same = _same_keys(stored, probe)
            wrong = hit[~same]
            if len(wrong):
                found = found.copy()
                found[wrong] = -1
        if self._colliding:
            unknown = np.flatnonzero(found < 0)
            if len(unknown):
                for i, value in zip(unknown.tolist(),
                                    values.take(pa.array(unknown)).to_pylist(), strict=True):
                    found[i] = self._colliding.get(_object_key(value), -1)
        return found

    def _identities(self, values: pa.Array) -> np.ndarray:
        return identities(values, self.family)

    def _append(self, values: pa.Array) -> np.ndarray:
        start = self.size
        if len(values):
            self._chunks.append(values)
            self._combined = None
            self.size += len(values)
        return np.arange(start, self.size, dtype=np.int64)

    # ------------------------------------------------------------------ Python path

    def _to_objects(self) -> None:
        """Serve the keys from here on by Python value (a column changed family)."""
        values = self.keys.to_pylist() if self.size else []
        self._objects = {}
        for slot, value in enumerate(values):
            self._objects.setdefault(_object_key(value), slot)
        self._values = values
        self._chunks = []
        self._combined = None
        self.family = KeyFamily.OBJECT

    def slots_of_values(self, values: list[Any]) -> np.ndarray:
        """:meth:`slots` of distinct keys given as Python values (an older snapshot's)."""
        try:
            array = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            if self.family != KeyFamily.OBJECT:
                self._to_objects()
            return self._object_slots(values)
        return self.slots(array)

    def _object_slots(self, uniques: pa.Array | list[Any]) -> np.ndarray:
        assert self._objects is not None
        objects = self._objects
        out = np.empty(len(uniques), dtype=np.int64)
        values = uniques if isinstance(uniques, list) else uniques.to_pylist()
        for i, value in enumerate(values):
            key = _object_key(value)
            slot = objects.get(key)
            if slot is None:
                slot = objects[key] = len(self._values)
                self._values.append(value)
            out[i] = slot
        self.size = len(self._values)
        return out

    def object_values(self, slots: np.ndarray | None = None) -> list[Any]:
        """The keys at ``slots`` (every key when ``None``) as Python values."""
        if self.family != KeyFamily.OBJECT:
            return list((self.keys if slots is None else self.take(slots)).to_pylist())
        if slots is None:
            return list(self._values)
        values = self._values
        return [values[i] for i in slots.tolist()]


def _beyond_int64(uniques: pa.Array) -> bool:
    """Unsigned keys an int64 cannot hold (they take the Python path)."""
    if not pa.types.is_uint64(uniques.type):
        return False
    valid = uniques.drop_null()
    return bool(len(valid)) and int(np.asarray(valid.to_numpy()).max()) >= 2 ** 63


def _object_key(value: Any) -> Any:
    """A dictionary key with Python's key semantics, and one NaN."""
    if isinstance(value, float) and value != value:
        return ("__cjob_nan__",)
    if isinstance(value, dict):
        return tuple(_object_key(v) for v in value.values())
    return value


def _arrow_of(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise TypeError(f"keys of several types cannot be output in one column: {exc}") from None
