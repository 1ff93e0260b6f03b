"""Reading a real job's checkpoints with ``job_runtime.state.read``: the state of a
keyed aggregate is exactly the aggregates of the records its sources had read at that
checkpoint, and open event-time windows read back as rows the job later emits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from runtime_harness import JobHarness, load_example

from cjob_checkpoint.checkpoint_storage import read_metadata
from cjob_checkpoint.metadata import CheckpointMetadata
from job_runtime.records import key_group_of
from job_runtime.state import OperatorState, operators, read

clicks_example = load_example("examples/clicks_per_minute/clicks.py")

KEYS = 97
SPLITS = 8  # the sequence source's default


def metadata_of(path: str) -> CheckpointMetadata:
    return CheckpointMetadata.from_bytes(read_metadata(path))


def read_so_far(metadata: CheckpointMetadata, *, count: int) -> list[int]:
    """The seqs the sequence source had read at the checkpoint: each split's
    ``[start, position)``."""
    bounds = [count * i // SPLITS for i in range(SPLITS + 1)]
    seqs: list[int] = []
    for split in range(SPLITS):
        position = metadata.source_position(split)
        stop = bounds[split] if position is None else int(position)
        seqs.extend(range(bounds[split], stop))
    return seqs


def read_while_running(harness: JobHarness, *, entrypoint: str, args: dict[str, Any]
                       ) -> tuple[str, OperatorState, pa.Table]:
    """Run the job; once three checkpoints completed, read the latest one's only keyed
    operator (its files never change once complete, so the job runs on meanwhile)."""
    # Every checkpoint retained: the one read must outlive the reading.
    proc = harness.start(entrypoint=entrypoint, args=args, extra=["--retained", "100"])
    try:
        status = harness.wait_status(
            1, lambda s: int(s.get("checkpoints", {}).get("completed", 0)) >= 3, proc=proc,
            what="three checkpoints")
        path: str = status["latestCheckpoint"]["path"]
        (listed,) = operators(path)
        table = read(path, operator=listed.uid)
    finally:
        run = harness.finish(proc, attempt=1)
    assert run.returncode == 0, run.explain()
    return path, listed, table


def test_an_aggregates_state_is_the_aggregates_of_what_its_sources_had_read(
        harness: JobHarness) -> None:
    count = 30_000
    path, listed, table = read_while_running(
        harness, entrypoint="aggregate_jobs:counted",
        args={"count": count, "rate": 3000, "output": str(harness.output)})
    assert listed.kind == "aggregate" and listed.key == "key"

    metadata = metadata_of(path)
    seqs = read_so_far(metadata, count=count)
    assert 0 < len(seqs) < count, "the checkpoint came mid-run"
    want: dict[int, dict[str, float]] = {}
    for seq in seqs:
        row = want.setdefault(seq % KEYS, {"count": 0, "sum:value": 0.0, "min:value": seq,
                                           "max:value": seq})
        row["count"] += 1
        row["sum:value"] += seq
        row["min:value"] = min(row["min:value"], seq)
        row["max:value"] = max(row["max:value"], seq)
    got = {row["key"]: row for row in table.to_pylist()}
    assert set(got) == set(want)
    for key, expected in want.items():
        row = got[key]
        assert row["key_group"] == key_group_of(key, metadata.max_parallelism)
        assert {name: float(row[name]) for name in expected} == \
            {name: float(value) for name, value in expected.items()}, key


def test_open_windows_read_back_as_rows_the_job_later_emits(harness: JobHarness) -> None:
    frame = clicks_example.clicks(6_000, users=20, step_ms=20, jitter_ms=3_000)
    clicks_example.write(harness.base / "input", frame, files=4)
    _, listed, table = read_while_running(
        harness, entrypoint="window_jobs:per_window",
        args={"input": str(harness.base / "input"), "output": str(harness.output),
              "batch_size": 100, "pause": 0.05})
    assert listed.kind == "window_aggregate"
    assert {"key_group", "user", "window_start", "count", "sum:amount"} <= \
        set(table.column_names)
    assert table.num_rows > 0, "no window was open at the checkpoint"
    assert pa.types.is_integer(table.column("window_start").type)
    emitted: dict[tuple[str, int], int] = {}
    for line in _output_lines(harness.output):
        record = json.loads(line)
        start = _epoch_ms(record["window_start"])
        emitted[(record["user"], start)] = max(emitted.get((record["user"], start), 0),
                                               int(record["n"]))
    for row in table.to_pylist():
        # A window open at the checkpoint fired later, with at least what it had.
        final = emitted.get((row["user"], int(row["window_start"])))
        assert final is not None, row
        assert int(row["count"]) <= final, (row, final)


def _output_lines(directory: Path) -> list[str]:
    return [line for path in sorted(directory.rglob("*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def _epoch_ms(value: Any) -> int:
    if isinstance(value, int | float):
        return int(value)
    import pandas as pd

    return int(pd.Timestamp(value).value // 1_000_000)
