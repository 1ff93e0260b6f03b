"""Per-key accumulators of ``aggregate``, shared by the operator and the combiner.

``aggregate``'s outputs are computed from a few accumulators per key: a count
(for ``count`` and ``mean``), a sum per column (``sum``, ``mean``), a minimum and
a maximum per column. One batch is folded into them with numpy in two steps:
:func:`fold` reduces the batch to one partial value per distinct key of the
batch, and :func:`merge_into` folds those partials into the arrays of the
operator's keys.

A *partial batch* is what the combiner sends over the exchange instead of the
raw records: the key column plus one column per accumulator, named
``PARTIAL_PREFIX + accumulator`` (``__cjob_partial_v1:count``,
``__cjob_partial_v1:sum:value``, ...), in a :class:`~job_runtime.records.Batch`
of kind :attr:`~job_runtime.records.BatchKind.PARTIAL`. The kind travels with the
batch (in the frame's kind over a channel); the operators read it, not the
columns. The prefix keeps the accumulators apart from the key's columns, and its
version lets a reader refuse a format it does not know (:func:`check_partial`).
Only where a batch was kept as plain rows (channel state of an unaligned
checkpoint) is its kind read back from its columns, by :func:`kind_of_columns`.

A partial batch of string or binary keys also carries the keys' identities
(:func:`~job_runtime.operators.key_identity.string_identities`, their 64 bits as an
``int64``, null for a null key) in :data:`KEY_IDENTITY`. The combiner hashes its distinct keys once, and
both the router (the key group is in the identity's low half) and the keyed
operator's key index use those hashes instead of walking the keys' bytes twice more.
The column is optional (a batch without it is hashed by the reader, as older
batches in channel state are) and versioned by its name. Its rows have distinct
keys: the operator takes such a batch's keys as its distinct keys, unnumbered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from job_runtime.operators.key_families import KeyFamily, canonical_type, family_of
from job_runtime.operators.key_identity import key_groups_of_identities, string_identities
from job_runtime.operators.key_numbering import dense_offsets, factorize_keys
from job_runtime.records import Batch, BatchKind

PARTIAL_VERSION = 1
PARTIAL_PREFIX = f"__cjob_partial_v{PARTIAL_VERSION}:"
_ANY_PARTIAL = "__cjob_partial_v"
KEY_IDENTITY_VERSION = 1
KEY_IDENTITY = f"__cjob_key_identity_v{KEY_IDENTITY_VERSION}"
"""The column of a partial batch that holds its keys' identities (see above)."""

AccumulatorSpecs = dict[str, tuple[str, str | None]]
"""Accumulator name (``count``, ``sum:<column>``, ``min:<column>``, ``max:<column>``)
to ``(function, column)``."""


class PartialFormatError(ValueError):
    """A partial batch this runtime cannot read (another format version or aggregate)."""


def accumulator_specs(aggregates: Sequence[tuple[str, str, str | None]]) -> AccumulatorSpecs:
    """The accumulators that ``aggregate(out=(func, column), ...)`` needs, each once."""
    specs: AccumulatorSpecs = {}
    for _, func, column in aggregates:
        if func in ("count", "mean"):
            specs["count"] = ("count", None)
        if func in ("sum", "mean"):
            specs[f"sum:{column}"] = ("sum", column)
        if func in ("min", "max"):
            specs[f"{func}:{column}"] = (func, column)
    return specs


def initial(func: str, n: int) -> np.ndarray:
    """Accumulators of ``n`` keys that have seen nothing yet."""
    if func == "count":
        return np.zeros(n, dtype=np.int64)
    if func == "sum":
        return np.zeros(n, dtype=np.float64)
    if func == "min":
        return np.full(n, np.inf)
    return np.full(n, -np.inf)


def fold_keys(*, keys: pa.Array | pa.ChunkedArray, column: Callable[[str], np.ndarray],
              specs: AccumulatorSpecs,
              partial: bool = False) -> tuple[pa.Array, dict[str, np.ndarray]]:
    """``(distinct keys, their folded accumulators)`` for records, or for partial rows
    when ``partial`` (the combiner's flush; see :func:`fold`).

    Dense integer keys are folded straight into arrays over their range, which
    are then cut down to the keys present: no numbering pass at all. Keys of any
    other type are numbered by :func:`~job_runtime.operators.key_numbering.factorize_keys`.
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if hash_foldable(keys.type, specs):
        return hash_fold(keys=keys, column=column, specs=specs, partial=partial)
    dense = None
    if pa.types.is_integer(keys.type) and not keys.null_count:
        numbers = np.asarray(keys.to_numpy(zero_copy_only=False))
        dense = dense_offsets(numbers)
    if dense is None:
        codes, uniques = factorize_keys(keys)
        return uniques, fold(column=column, codes=codes, n_unique=len(uniques), specs=specs,
                             partial=partial)
    offsets, low, span = dense
    folded = fold(column=column, codes=offsets, n_unique=span, specs=specs, partial=partial)
    counts = folded["count"] if "count" in folded else np.bincount(offsets, minlength=span)
    found = np.flatnonzero(counts)
    return (pa.array((found + low).astype(np.int64), type=pa.int64()),
            {name: values[found] for name, values in folded.items()})


_HASH_FOLDED_FAMILIES = frozenset({KeyFamily.STRING, KeyFamily.BINARY})
_HASH_FOLDED_FUNCS = frozenset({"count", "sum"})
_KEEP_NAN = pc.ScalarAggregateOptions(skip_nulls=False, min_count=0)
"""A sum over NaN is NaN, as numpy's; a group never sums to null (min_count 0)."""

Values: TypeAlias = pa.Array | pa.ChunkedArray | np.ndarray


def hash_foldable(key_type: pa.DataType, specs: AccumulatorSpecs) -> bool:
    """Whether :func:`hash_fold` folds keys of ``key_type`` into ``specs``: string and
    binary keys (not dictionary-encoded), counts and sums only.

    Minima and maxima stay with numpy: Arrow's skip NaN, numpy's keep it."""
    return (family_of(key_type) in _HASH_FOLDED_FAMILIES
            and not pa.types.is_dictionary(key_type)
            and all(func in _HASH_FOLDED_FUNCS for func, _ in specs.values()))


def hash_fold(*, keys: pa.Array | pa.ChunkedArray, column: Callable[[str], Values],
              specs: AccumulatorSpecs, partial: bool) -> tuple[pa.Array, dict[str, np.ndarray]]:
    """:func:`fold_keys` by Arrow's hash aggregation, for keys :func:`hash_foldable` says
    it takes; ``column`` may give Arrow columns (chunked, as buffered) or numpy ones.

    Numbering the keys and then summing by the numbers walks the rows twice and
    turns every number into a numpy index; Arrow's grouped aggregation does both in
    one pass over the rows, and over chunks as they arrived, with no copy of the
    keys into one array first. The values are summed as float64 with a null taken
    as NaN, exactly what :func:`fold` computes.
    """
    family = family_of(keys.type)
    assert family is not None and hash_foldable(keys.type, specs)
    # What ``canonical`` does to strings and binaries, on chunked keys too: one type.
    target = canonical_type(family)
    if keys.type != target:
        keys = keys.cast(target)
    arrays: list[pa.Array | pa.ChunkedArray] = [keys]
    names = ["key"]
    aggregations: list[tuple[Any, ...]] = []
    outputs: dict[str, str] = {}
    for i, (name, (func, source)) in enumerate(specs.items()):
        if func == "count" and not partial:
            aggregations.append(([], "count_all"))
            outputs[name] = "count_all"
            continue
        if partial:
            source = PARTIAL_PREFIX + name
        assert source is not None
        arrays.append(_summable(column(source), counts=func == "count"))
        names.append(f"v{i}")
        aggregations.append((f"v{i}", "sum", _KEEP_NAN))
        outputs[name] = f"v{i}_sum"
    grouped = pa.Table.from_arrays(arrays, names=names).group_by(
        "key", use_threads=False).aggregate(aggregations)
    folded = {name: np.asarray(grouped.column(out).to_numpy(), dtype=np.int64 if
                               specs[name][0] == "count" else np.float64)
              for name, out in outputs.items()}
    return grouped.column("key").combine_chunks(), folded


def _summable(values: Values, *, counts: bool) -> pa.Array | pa.ChunkedArray:
    """Partial counts as int64; anything else as float64, a null as NaN (numpy's view
    of a null)."""
    if isinstance(values, np.ndarray):
        return pa.array(np.asarray(values, dtype=np.int64 if counts else np.float64))
    target = pa.int64() if counts else pa.float64()
    if values.type != target:
        values = values.cast(target)
    if not counts and values.null_count:
        values = values.fill_null(float("nan"))
    return values


def key_columns_of(key: str | tuple[str, ...], keys: pa.Array
                   ) -> tuple[list[str], list[pa.Array]]:
    """The output columns of keys: the key column, or a composite key's columns."""
    if isinstance(key, str):
        return [key], [keys]
    return list(key), list(keys.flatten())


def kind_of_columns(names: Iterable[str]) -> BatchKind:
    """The kind of a batch kept as plain rows, read from their columns: partial
    aggregates (of any version) have accumulator columns, records never do."""
    if any(name.startswith(_ANY_PARTIAL) for name in names):
        return BatchKind.PARTIAL
    return BatchKind.RECORDS


def arrow_columns(arrow: pa.RecordBatch) -> Callable[[str], np.ndarray]:
    """The columns of ``arrow`` as numpy arrays, for :func:`fold`."""

    def column(name: str) -> np.ndarray:
        return np.asarray(arrow.column(name).to_numpy(zero_copy_only=False))

    return column


def fold(*, column: Callable[[str], np.ndarray], codes: np.ndarray, n_unique: int,
         specs: AccumulatorSpecs, partial: bool) -> dict[str, np.ndarray]:
    """One value per accumulator and distinct key (``codes`` number the keys of the rows).

    ``column(name)`` gives a column of the rows. ``partial`` says whether the rows
    are records or partial aggregates (see :func:`check_partial`): counts of
    records are counted, counts of partials are added up; sums, minima and maxima
    combine alike either way.
    """
    out: dict[str, np.ndarray] = {}
    for name, (func, source) in specs.items():
        if partial:
            source = PARTIAL_PREFIX + name
        if func == "count":
            if partial:
                assert source is not None
                out[name] = np.bincount(codes, weights=column(source),
                                        minlength=n_unique).astype(np.int64)
            else:
                out[name] = np.bincount(codes, minlength=n_unique).astype(np.int64)
            continue
        assert source is not None
        values = np.asarray(column(source), dtype=np.float64)
        if func == "sum":
            out[name] = np.bincount(codes, weights=values, minlength=n_unique)
        elif func == "min":
            lowest = np.full(n_unique, np.inf)
            np.minimum.at(lowest, codes, values)
            out[name] = lowest
        else:
            highest = np.full(n_unique, -np.inf)
            np.maximum.at(highest, codes, values)
            out[name] = highest
    return out


def check_partial(names: Sequence[str], specs: AccumulatorSpecs) -> None:
    """Refuse a partial batch that lacks an accumulator this operator needs."""
    missing = [PARTIAL_PREFIX + name for name in specs if PARTIAL_PREFIX + name not in names]
    if missing:
        raise PartialFormatError(
            f"partial aggregates lack the columns {missing}: they come from a different "
            f"aggregate() or from a runtime that writes another format (this one reads "
            f"version {PARTIAL_VERSION})")


def merge_into(accumulators: dict[str, np.ndarray], slots: np.ndarray,
               folded: dict[str, np.ndarray], specs: AccumulatorSpecs) -> None:
    """Fold per-key partials into the accumulator arrays at ``slots`` (distinct slots)."""
    for name, (func, _) in specs.items():
        acc = accumulators[name]
        if func in ("count", "sum"):
            acc[slots] += folded[name]
        elif func == "min":
            acc[slots] = np.minimum(acc[slots], folded[name])
        else:
            acc[slots] = np.maximum(acc[slots], folded[name])


def partial_batch(*, key: str | tuple[str, ...], keys: pa.Array,
                  folded: dict[str, np.ndarray]) -> Batch:
    """The partial batch of ``keys`` (distinct, one row each; a composite key's as its
    columns) with their folded accumulators, and their identities when they are
    strings or binaries."""
    names, arrays = key_columns_of(key, keys)
    arrays = [*arrays, *(pa.array(values) for values in folded.values())]
    names = [*names, *(PARTIAL_PREFIX + name for name in folded)]
    identities = _identity_column(keys)
    if identities is not None:
        arrays.append(identities)
        names.append(KEY_IDENTITY)
    return Batch(arrow=pa.RecordBatch.from_arrays(arrays, names=names), kind=BatchKind.PARTIAL)


def _identity_column(keys: pa.Array) -> pa.Array | None:
    if pa.types.is_dictionary(keys.type):
        keys = keys.cast(keys.type.value_type)
    if family_of(keys.type) not in (KeyFamily.STRING, KeyFamily.BINARY):
        return None
    # Stored as int64, the same 64 bits: a batch kept as rows (channel state of an
    # unaligned checkpoint) comes back through Python ints, which Arrow reads as int64
    # and cannot fit above 2**63.
    if not keys.null_count:
        return pa.array(string_identities(keys).view(np.int64), type=pa.int64())
    valid = np.asarray(keys.is_valid().to_numpy(zero_copy_only=False))
    ids = np.zeros(len(keys), dtype=np.uint64)
    ids[valid] = string_identities(keys.filter(pa.array(valid)))
    return pa.array(ids.view(np.int64), type=pa.int64(), mask=~valid)


def partial_identities(batch: Batch) -> np.ndarray | None:
    """The identities a partial batch carries for its keys (0 for a null key), or
    ``None`` when it carries none (or holds records)."""
    if batch.kind is not BatchKind.PARTIAL:
        return None
    arrow = batch.arrow
    if KEY_IDENTITY not in arrow.schema.names:
        return None
    column = arrow.column(KEY_IDENTITY)
    if column.null_count:
        column = column.fill_null(0)
    if not pa.types.is_int64(column.type):
        return None  # not a column this runtime wrote: the reader hashes the keys
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64).view(np.uint64)


def partial_key_groups(batch: Batch, max_parallelism: int) -> np.ndarray | None:
    """The key groups of a partial batch's keys, from the identities it carries (a
    null key's group is 0, as for records); ``None`` when it carries none."""
    ids = partial_identities(batch)
    if ids is None:
        return None
    return key_groups_of_identities(ids, max_parallelism,
                                    nulls_from=batch.arrow.column(KEY_IDENTITY))
