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
``__cjob_partial_v1:sum:value``, ...). The version sits in the column names
because a partial batch crosses processes (and may be kept as channel state in
an unaligned checkpoint), so a reader must be able to tell a format it does not
know from raw records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

PARTIAL_VERSION = 1
PARTIAL_PREFIX = f"__cjob_partial_v{PARTIAL_VERSION}:"
_ANY_PARTIAL = "__cjob_partial_v"

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


DENSE_SPAN_FACTOR = 4
"""Integer keys whose range is at most this many times their number are numbered by
direct addressing (see :func:`factorize`)."""


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


def factorize(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, uniques)``: ``uniques[codes]`` equals ``keys``, ``uniques`` distinct.

    Dense integer keys are numbered by :func:`dense_offsets`, others by pandas'
    hash table. Only the order of ``uniques`` differs between the two (sorted
    here, first appearance there); nothing depends on it.
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


def fold_keys(*, keys: np.ndarray, column: Callable[[str], np.ndarray],
              specs: AccumulatorSpecs,
              partial: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(distinct keys, their folded accumulators)`` for records, or for partial rows
    when ``partial`` (the combiner's flush; see :func:`fold`).

    Dense integer keys are folded straight into arrays over their range, which
    are then cut down to the keys present: no numbering pass at all.
    """
    dense = dense_offsets(keys)
    if dense is None:
        codes, uniques = factorize(keys)
        return uniques, fold(column=column, codes=codes, n_unique=len(uniques), specs=specs,
                             partial=partial)
    offsets, low, span = dense
    folded = fold(column=column, codes=offsets, n_unique=span, specs=specs, partial=partial)
    counts = folded["count"] if "count" in folded else np.bincount(offsets, minlength=span)
    found = np.flatnonzero(counts)
    return ((found + low).astype(keys.dtype),
            {name: values[found] for name, values in folded.items()})


def is_partial(arrow: pa.RecordBatch) -> bool:
    """Whether ``arrow`` holds partial aggregates (of any version) rather than records."""
    return any(name.startswith(_ANY_PARTIAL) for name in arrow.schema.names)


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


def partial_batch(*, key_column: str, keys: Any, folded: dict[str, np.ndarray]) -> pa.RecordBatch:
    """The partial batch of ``keys`` (one row each) with their folded accumulators."""
    arrays = [pa.array(keys), *(pa.array(values) for values in folded.values())]
    names = [key_column, *(PARTIAL_PREFIX + name for name in folded)]
    return pa.RecordBatch.from_arrays(arrays, names=names)
