"""The Structured Streaming large-state baseline still runs, and what it measures makes sense.

The smoke run is tiny (a few thousand keys) and measures nothing worth
quoting; it keeps the benchmark from rotting between full runs and checks the
one promise changelog checkpointing makes: once the state is full, a
checkpoint writes about the changed keys, not the whole state. The input plan
and the reading of the checkpoint directory are checked without Spark.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.ss_rocksdb_state import (
    RESULT_PREFIX,
    VERSION,
    BatchReport,
    CheckpointBytes,
    Plan,
    ReportFormatError,
    WorkerReport,
    added_bytes,
    dump,
    parse,
    walk,
)

KEYS = 4000
VALUE_BYTES = 1024


class TestTheInputPlan:
    def test_the_fill_writes_every_key_once_in_chunks(self) -> None:
        plan = Plan(keys=10, fill_keys_per_batch=4, update_keys=1, parallelism=2)
        assert plan.fill_batches == 3
        filled = [k for i in range(3) for start, count in plan.ranges(i)
                  for k in range(start, start + count)]
        assert filled == list(range(10))

    def test_updates_change_every_key_once_before_any_key_twice(self) -> None:
        plan = Plan(keys=10, fill_keys_per_batch=10, update_keys=3, parallelism=1)
        updated = [k for i in range(1, 5) for start, count in plan.ranges(i)
                   for k in range(start, start + count)]
        assert updated[:10] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
        assert updated[10:] == [0, 1]
        assert sorted(updated[9:12]) == [0, 1, 9]

    def test_each_range_is_cut_into_one_row_per_task(self) -> None:
        plan = Plan(keys=100, fill_keys_per_batch=100, update_keys=10, parallelism=3)
        rows = plan.rows(0)
        assert len(rows) == 3
        assert sum(r["count"] for r in rows) == 100
        assert all(r["round"] == 0 for r in rows)


class TestReadingTheCheckpointDirectory:
    def test_new_and_grown_files_count_by_kind_and_crc_files_with_theirs(
            self, tmp_path: Path) -> None:
        (tmp_path / "offsets").mkdir()
        (tmp_path / "state" / "0" / "1").mkdir(parents=True)
        (tmp_path / "offsets" / "0").write_bytes(b"x" * 10)
        before = walk(tmp_path)
        (tmp_path / "offsets" / "0").write_bytes(b"x" * 15)
        (tmp_path / "offsets" / "1").write_bytes(b"x" * 7)
        (tmp_path / "state" / "0" / "1" / "3.changelog").write_bytes(b"c" * 100)
        (tmp_path / "state" / "0" / "1" / ".3.changelog.crc").write_bytes(b"c" * 4)
        (tmp_path / "state" / "0" / "1" / "2.zip").write_bytes(b"z" * 50)
        (tmp_path / "state" / "0" / "1" / "tmp-upload").write_bytes(b"t" * 3)

        added = added_bytes(before, walk(tmp_path))

        assert added == CheckpointBytes(changelog=104, snapshot=50, log=12, other=3)
        assert added.per_batch == 104 + 12 + 3


class TestTheWorkerReport:
    def _report(self) -> WorkerReport:
        batch = BatchReport(
            batch_id=0, phase="fill", keys_written=1, state_rows=1, duration_ms=1.0,
            add_batch_ms=1.0, commit_ms=1.0, changelog_commit_ms=None, file_sync_ms=1.0,
            checkpoint_ms=None, flush_ms=2.0, compact_ms=None, files_copied=0, bytes_copied=None, load_ms=1.0,
            load_from_snapshot_ms=None, replay_changelog_ms=None,
            replayed_changelog_files=None, loaded_from_dfs=None, sst_bytes=None,
            memory_bytes=1, ended_at=1.0,
            added=CheckpointBytes(changelog=1, snapshot=0, log=1, other=0))
        return WorkerReport(spark_version="4.3.0", keys=1, value_bytes=1, parallelism=1,
                            batches=(batch,), restores=(), checkpoint_bytes_after_fill=2,
                            checkpoint_bytes_at_end=2, metrics_missing=("rocksdbFilesCopied",))

    def test_a_report_survives_the_line_it_is_printed_as(self) -> None:
        report = self._report()
        assert parse(dump(report)) == report

    def test_a_report_of_another_version_is_a_clear_error(self) -> None:
        data = dataclasses.asdict(self._report())
        data["version"] = VERSION + 1
        with pytest.raises(ReportFormatError, match="version"):
            parse(RESULT_PREFIX + json.dumps(data))
