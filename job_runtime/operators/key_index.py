"""Keys of any type numbered without a Python object per key: within a batch, and for good.

Two questions are asked of the keys of every batch an ``aggregate`` folds:

- *which rows share a key?* :func:`~job_runtime.operators.key_numbering.factorize_keys`
  numbers the distinct keys of one column (``codes``) and returns them once each
  (``uniques``, an Arrow array). Dense integer keys are numbered by direct
  addressing, every other type by Arrow's hash kernel (``dictionary_encode``), which
  hashes strings in their buffers.
- *which slot of the operator's state holds this key?* :class:`KeyIndex` maps the
  distinct keys of a batch to slots, adding the new ones. It keeps the keys in Arrow
  arrays and finds them by a 64-bit identity per key
  (:mod:`~job_runtime.operators.key_identity`): the value itself for integers,
  floats and booleans, and for strings and binaries a 64-bit hash (the key's CRC-32
  beside its FNV-1a), compared against the stored key so that two keys sharing a hash
  are told apart (such keys are kept in a small dictionary of their own). Integer keys
  that fill their range are found by direct addressing (one array indexed by the key);
  other identities sit in a compiled hash table of 64-bit integers (pandas'), which
  takes new keys in place, so no per-batch rebuild over every key; where pandas lacks
  it, in sorted arrays searched with ``searchsorted`` instead
  (:mod:`~job_runtime.operators.key_lookups`).

Keys compare as Python compares them (:mod:`~job_runtime.operators.key_families`):
``1``, ``1.0`` and ``True`` are one key, every NaN is one key and ``-0.0`` is ``0.0``,
and ``None`` (a null) is a key of its own. A column whose type family changes between
batches (integers, then strings) is still served, by a slower path over Python values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.operators.key_families import (
    CANONICAL,
    KeyFamily,
    canonical,
    family_of,
    object_key,
    plain_keys,
)
from job_runtime.operators.key_identity import HASHED, identities, same_keys
from job_runtime.operators.key_lookups import (
    DenseLookup,
    HashedLookup,
    SortedLookup,
    searched_lookup,
)

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
        self._lookup: HashedLookup | SortedLookup | DenseLookup = searched_lookup()
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
                    [], type=CANONICAL.get(self.family, pa.null()))
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
        """The slots of distinct keys (as
        :func:`~job_runtime.operators.key_numbering.factorize_keys` returns them), new
        keys given new slots.

        ``identities``: the keys'
        :func:`~job_runtime.operators.key_identity.string_identities` when the caller has them
        (a combiner computed them before the exchange; entries of null keys are
        ignored), so string keys are not hashed twice. Other families ignore them."""
        uniques = plain_keys(uniques)
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
            self._lookup = DenseLookup()
        self._chunks = [chunk.cast(self._type) for chunk in self._chunks]
        self._combined = None

    @property
    def _type(self) -> pa.DataType:
        """The one type of the keys held (a composite key: its first keys' struct)."""
        if self.family == KeyFamily.STRUCT:
            if self._struct is None:
                raise AssertionError("a composite key's type is set by its first keys")
            return self._struct
        return CANONICAL[self.family] if self.family is not None else pa.null()

    def _valid_slots(self, values: pa.Array, *, ids: np.ndarray | None = None) -> np.ndarray:
        if ids is None:
            ids = self._identities(values)
        held = self._lookup.find(ids)
        hashed = self.family in HASHED
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
                self._colliding[object_key(value)] = int(slots[i])
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
        if isinstance(lookup, HashedLookup) and not held.any() and lookup.add_new(ids, slots):
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
        if not isinstance(lookup, DenseLookup):
            lookup.add(ids, slots)
            return
        if lookup.add(ids, slots):
            return
        # Integer keys too sparse for their range: search them instead, all of them.
        held = np.flatnonzero(np.asarray(self.keys.is_valid().to_numpy(zero_copy_only=False)))
        held = held[held < held_before]
        searched = searched_lookup()
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
            same = same_keys(stored, probe)
            wrong = hit[~same]
            if len(wrong):
                found = found.copy()
                found[wrong] = -1
        if self._colliding:
            unknown = np.flatnonzero(found < 0)
            if len(unknown):
                for i, value in zip(unknown.tolist(),
                                    values.take(pa.array(unknown)).to_pylist(), strict=True):
                    found[i] = self._colliding.get(object_key(value), -1)
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
            self._objects.setdefault(object_key(value), slot)
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
            key = object_key(value)
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


def _arrow_of(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise TypeError(f"keys of several types cannot be output in one column: {exc}") from None
