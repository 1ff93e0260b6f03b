"""Which columns of a Parquet file the files sink dictionary-encodes.

Parquet writers dictionary-encode every column by default, and fall back to plain
encoding once a column chunk's dictionary outgrows its page. For a column whose
values rarely repeat (the keys of an ``aggregate``'s output, which are distinct in
every batch it emits; sums and means as floats) the dictionary is built and then
thrown away: in the realistic benchmark's output that took half of the writer's
time, for a file a little larger than plain encoding gives. A column whose values
repeat (a country, a status, small counts) keeps its dictionary, which makes it
several times smaller.

So a writer decides once per file, from a sample of the first rows it is given: a
column whose sample has at most half as many distinct values as rows is encoded
with a dictionary; one with more is written plain. Nested columns, and files that
start with too few rows to judge, keep the writer's default (a dictionary).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

SAMPLE_ROWS = 4096
"""Rows of the first table that decide each column's encoding."""
MIN_SAMPLE_ROWS = 256
"""Fewer rows than this say too little: every column keeps its dictionary."""
MAX_DISTINCT_SHARE = 0.5
"""A column whose sample has more distinct values than this share of its rows is
written without a dictionary."""


def dictionary_columns(table: pa.Table) -> bool | list[str]:
    """The ``use_dictionary`` argument of a Parquet writer whose first rows are ``table``:
    ``True`` (every column) or the names of the columns worth a dictionary."""
    if table.num_rows < MIN_SAMPLE_ROWS or any(
            pa.types.is_nested(field.type) for field in table.schema):
        return True
    sample = table.slice(0, SAMPLE_ROWS)
    chosen = []
    for name in table.schema.names:
        column = sample.column(name)
        distinct = pc.count_distinct(column, mode="all").as_py()
        if distinct <= MAX_DISTINCT_SHARE * len(column):
            chosen.append(name)
    return chosen
