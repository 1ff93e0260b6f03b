"""Parsing JSON into the fields a pipeline reads, and no others.

Arrow's JSON reader builds a column for every field of every object unless it is given
an explicit schema and told to ignore the fields outside it. On click records the
columns nobody reads (a page, a user agent) cost a fifth of the parse, so a source whose
pipeline reads a known set of columns parses with a schema of just those.

That is only exact once the fields' types are known, from a block or batch parsed whole,
and only while every column the pipeline reads is among the known fields: a read field
that first appears later would otherwise be dropped silently. A block the narrowed schema
does not fit (a read field of another type) fails to parse with it, and the caller parses
it whole as before.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.json as pajson


def known_types(schema: pa.Schema | None) -> pa.Schema | None:
    """``schema`` without its fields of type null (``None`` when none is left): a field
    all null in what was parsed says nothing of its type, which later blocks or batches
    that hold values tell. What a reader keeps as the types it knows."""
    if schema is None:
        return None
    fields = [f for f in schema if not pa.types.is_null(f.type)]
    return pa.schema(fields) if fields else None


def read_fields_schema(known: pa.Schema | None,
                       columns: frozenset[str] | None) -> pa.Schema | None:
    """The fields of ``known`` that the pipeline reads, or ``None`` when parsing must
    keep every field: the types are not known yet, the pipeline's columns are not known
    (a Python function sees whole records), it reads a field ``known`` lacks, or it
    reads none of the fields (the records must still arrive, as rows of every field)."""
    if known is None or columns is None:
        return None
    names = set(known.names)
    if not columns or not columns <= names:
        return None
    return pa.schema([field for field in known if field.name in columns])


def projected_options(known: pa.Schema | None, columns: frozenset[str] | None, *,
                      newlines_in_values: bool = False) -> pajson.ParseOptions | None:
    """Parse options that build only the read fields (see :func:`read_fields_schema`),
    or ``None`` when every field must be parsed."""
    schema = read_fields_schema(known, columns)
    if schema is None:
        return None
    return pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore",
                               newlines_in_values=newlines_in_values)
