"""The families of key types: how the keys of a column compare, and the one type each
family's keys are held in.

Keys compare as Python compares them: ``1``, ``1.0`` and ``True`` are one key, every
NaN is one key and ``-0.0`` is ``0.0``, and ``None`` (a null) is a key of its own. A
column whose type family changes between batches (integers, then strings) is still
served, by a slower path over Python values (:func:`object_key`).
"""

from __future__ import annotations

import enum
from typing import Any

import pyarrow as pa

from job_runtime.key_hashing import nan_canonical


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


CANONICAL: dict[KeyFamily, pa.DataType] = {
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


def plain_keys(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A key column as one array of its values (chunks combined, a dictionary decoded)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return column


def concat_keys(parts: list[pa.Array | pa.ChunkedArray]) -> pa.Array:
    """One key column of batches whose key types may differ (``int32`` and ``int64``,
    a batch of nulls only, strings and large strings): in their family's type, or as
    Python values when the families differ (integers and floats)."""
    plain = [plain_keys(part) for part in parts]
    kinds = {part.type for part in plain}
    if len(kinds) == 1:
        return plain[0] if len(plain) == 1 else pa.concat_arrays(plain)
    families = {family_of(kind) for kind in kinds} - {None}
    if len(families) == 1 and (family := families.pop()) in CANONICAL:
        target = CANONICAL[family]
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
    return CANONICAL.get(family)


def canonical(column: pa.Array, family: KeyFamily) -> pa.Array:
    """``column`` in its family's one type, floats with one NaN and one zero."""
    if family == KeyFamily.STRUCT:
        fields = [field if (f := family_of(field.type)) is None else canonical(field, f)
                  for field in column.flatten()]
        return pa.StructArray.from_arrays(fields, names=[f.name for f in column.type])
    target = CANONICAL.get(family)
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


def object_key(value: Any) -> Any:
    """A dictionary key with Python's key semantics, and one NaN."""
    if isinstance(value, float) and value != value:
        return ("__cjob_nan__",)
    if isinstance(value, dict):
        return tuple(object_key(v) for v in value.values())
    return value
