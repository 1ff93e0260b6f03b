"""``python -m job_runtime state``: a checkpoint's keyed state, printed (what ``cjob
state`` and ``kubectl cjob state`` show).

Without an operator it lists the keyed operators with state in the checkpoint; with
one, that operator's state as a table (the first ``limit`` rows), JSON lines or CSV,
read by :mod:`job_runtime.state.checkpoint_reader`. Every mistake is one line on standard error
and exit code 2 (a bad request) or 6 (a checkpoint that cannot be read), as the
driver's restore would exit.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from cjob_spec.exit_codes import ExitCode
from job_runtime.state.checkpoint_reader import StateReadError, operators, read

CELL_WIDTH = 48
"""A wider value is cut in the table (the JSON and CSV outputs keep it whole)."""


def show_state(*, checkpoint: str, operator: str | None, state: str | None,
               output: str = "table", limit: int | None,
               out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Print ``checkpoint``'s operators, or one operator's state; the exit code."""
    try:
        if operator is None:
            if state is not None:
                err.write("error: a state name needs the operator that keeps it (--operator)\n")
                return ExitCode.BAD_CONFIG
            _print_operators(checkpoint, output=output, out=out)
            return ExitCode.FINISHED
        table = read(checkpoint, operator=operator, state=state)
    except StateReadError as exc:
        err.write(f"error: {exc}\n")
        unreadable = str(exc).startswith("cannot read the checkpoint")
        return ExitCode.RESTORE_FAILED if unreadable else ExitCode.BAD_CONFIG
    total = table.num_rows
    shown = table if limit is None or output != "table" else table.slice(0, limit)
    rows = shown.to_pylist()
    if output == "json":
        for row in rows:
            out.write(json.dumps(row, default=str, sort_keys=False) + "\n")
    elif output == "csv":
        writer = csv.writer(out)
        writer.writerow(shown.column_names)
        for row in rows:
            writer.writerow([_text(row[name]) for name in shown.column_names])
    else:
        _print_table(shown.column_names, [[_cell(row[n]) for n in shown.column_names]
                                          for row in rows], out=out)
        if total > len(rows):
            out.write(f"({len(rows)} of {total} rows; --limit 0 or -o json for all)\n")
    return ExitCode.FINISHED


def _print_operators(checkpoint: str, *, output: str, out: TextIO) -> None:
    found = operators(checkpoint)
    if output == "json":
        for item in found:
            out.write(json.dumps({"operator": item.uid, "kind": item.kind, "key": item.key,
                                  "subtasks": item.subtasks, "sizeBytes": item.size_bytes})
                      + "\n")
        return
    header = ["OPERATOR", "KIND", "KEY", "SUBTASKS", "SIZE"]
    rows = [[item.uid, item.kind or "-", item.key or "-", str(item.subtasks),
             _size(item.size_bytes)] for item in found]
    if output == "csv":
        writer = csv.writer(out)
        writer.writerow([h.lower() for h in header])
        writer.writerows(rows)
        return
    if not rows:
        out.write("no keyed operator has state in this checkpoint\n")
        return
    _print_table(header, rows, out=out)


def _size(size_bytes: int) -> str:
    if size_bytes < 1024:
        return f"{size_bytes}B"
    size = size_bytes / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}GiB"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _cell(value: Any) -> str:
    text = _text(value)
    return text if len(text) <= CELL_WIDTH else text[:CELL_WIDTH - 3] + "..."


def _print_table(header: Sequence[str], rows: list[list[str]], *, out: TextIO) -> None:
    """Columns as kubectl prints them: upper-case headers, padded, three spaces apart."""
    names = [name.upper() for name in header]
    widths = [max([len(name), *(len(row[i]) for row in rows)]) for i, name in enumerate(names)]
    for line in [names, *rows]:
        out.write("   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                  .rstrip() + "\n")

