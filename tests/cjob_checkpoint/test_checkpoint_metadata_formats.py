"""Every ``_metadata`` format version ever written stays readable.

``metadata_formats/v<N>/<case>/_metadata`` are files exactly as a runtime that
wrote version N left them (storage's header included). A job restores
checkpoints an older runtime wrote, so each one must still read, with the
values the restore hands to sources, keyed operators, channels and sinks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cjob_checkpoint.checkpoint_storage import StateHandle, unframe_metadata
from cjob_checkpoint.metadata import (
    FORMAT_VERSION,
    MAIN_SINK,
    READABLE_VERSIONS,
    CheckpointMetadata,
    MetadataError,
)

FORMATS = Path(__file__).parent / "metadata_formats"
SAMPLES = sorted(FORMATS.glob("v*/*/_metadata"))
JOB = "word-count-0f6c2a1e"


def sample(version: int, case: str) -> CheckpointMetadata:
    body = unframe_metadata((FORMATS / f"v{version}" / case / "_metadata").read_bytes())
    return CheckpointMetadata.from_bytes(body)


def state(checkpoint_id: int, uid: str, subtask: int, size: int, crc: int) -> StateHandle:
    return StateHandle(uri=f"s3://bucket/checkpoints/{JOB}/chk-{checkpoint_id}/{uid}/{subtask}",
                       size_bytes=size, crc32=crc)


class TestEveryVersionEverWritten:
    def test_each_readable_version_has_samples_and_every_sample_is_a_readable_version(
            self) -> None:
        versions = {int(p.parent.parent.name.removeprefix("v")) for p in SAMPLES}
        assert versions == set(READABLE_VERSIONS)
        assert FORMAT_VERSION in versions

    @pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.parent.name}/"
                                                             f"{p.parent.name}")
    def test_every_sample_reads(self, path: Path) -> None:
        metadata = CheckpointMetadata.from_bytes(unframe_metadata(path.read_bytes()))
        assert metadata.job == JOB

    @pytest.mark.parametrize("path", [p for p in SAMPLES
                                      if p.parent.parent.name == f"v{FORMAT_VERSION}"],
                             ids=lambda p: p.parent.name)
    def test_the_current_version_is_written_exactly_as_its_samples(self, path: Path) -> None:
        body = unframe_metadata(path.read_bytes())
        assert CheckpointMetadata.from_bytes(body).to_bytes() == body


class TestVersionOneRestoresEachPart:
    def test_source_positions_per_split_and_none_for_a_split_never_read(self) -> None:
        metadata = sample(1, "keyed-unaligned-files-sink")
        assert metadata.source_position(0) == {"offset": 1000}
        assert metadata.source_position(1) == {"offset": 1001}
        assert metadata.source_position(2) is None
        assert metadata.source_position(9) is None

    def test_keyed_state_goes_to_the_subtasks_whose_key_groups_overlap(self) -> None:
        metadata = sample(1, "keyed-unaligned-files-sink")
        assert metadata.max_parallelism == 128 and metadata.parallelism == 2
        low = state(12, "reduce-1", 0, 2048, 12345)
        high = state(12, "reduce-1", 1, 2049, 12346)
        assert metadata.keyed_state("reduce-1", key_groups=range(0, 64)) == [low]
        assert metadata.keyed_state("reduce-1", key_groups=range(32, 96)) == [low, high]
        assert metadata.keyed_state("other", key_groups=range(0, 128)) == []

    def test_channel_state_is_kept_per_stage(self) -> None:
        metadata = sample(1, "keyed-unaligned-files-sink")
        assert metadata.channel_state(1) == [state(12, "stage-1-channels", 1, 513, 778)]
        assert metadata.channel_state(0) == []

    def test_sink_transactions_of_old_subtasks_are_spread_over_the_new_ones(self) -> None:
        metadata = sample(1, "keyed-unaligned-files-sink")
        both = metadata.sink_transactions(subtask=0, parallelism=1)
        assert [t[0][1] for t in both] == ["file:///out/.staging/part-0-12",
                                           "file:///out/.staging/part-1-12"]
        assert metadata.sink_transactions(subtask=1, parallelism=3) == [
            [[12, "file:///out/.staging/part-1-12", "file:///out/part-1-12.jsonl", 41],
             [11, "file:///out/.staging/part-1-11", "file:///out/part-1-11.jsonl", 7]]]
        assert metadata.sink_transactions(subtask=2, parallelism=3) == []

    def test_a_final_checkpoint_without_keyed_state(self) -> None:
        metadata = sample(1, "stateless-final-print-sink")
        assert metadata.final and metadata.checkpoint_id == 3 and metadata.attempt == 3
        assert metadata.operators == {} and metadata.channels == {} and metadata.sinks == ()
        assert [metadata.source_position(s) for s in range(3)] == [{"row": 50}] * 3


class TestUnreadableMetadataIsNamed:
    def body(self, **changes: object) -> bytes:
        data = json.loads(unframe_metadata(
            (FORMATS / "v1" / "stateless-final-print-sink" / "_metadata").read_bytes()))
        data.update(changes)
        return json.dumps(data).encode()

    def test_a_newer_version_is_refused_with_the_versions_this_runtime_reads(self) -> None:
        with pytest.raises(MetadataError, match=r"format version 99 is not supported .*1"):
            CheckpointMetadata.from_bytes(self.body(version=99))

    def test_a_field_of_the_wrong_type_is_named(self) -> None:
        with pytest.raises(MetadataError, match=r"'maxParallelism'.*must be an integer"):
            CheckpointMetadata.from_bytes(self.body(maxParallelism="128"))

    def test_a_missing_field_is_named(self) -> None:
        data = json.loads(self.body())
        del data["job"]
        with pytest.raises(MetadataError, match=r"lacks the field 'job'"):
            CheckpointMetadata.from_json(data)

    def test_text_that_is_not_json_is_refused(self) -> None:
        with pytest.raises(MetadataError, match="not valid JSON"):
            CheckpointMetadata.from_bytes(b"{not json")


class TestVersionTwoListsSharedFiles:
    def test_incremental_state_handles_name_their_shared_files(self) -> None:
        metadata = sample(2, "rocksdb-incremental")
        (low, high) = metadata.operators["count-1"]
        assert [f.name for f in low.shared] == ["000009.sst", "000014.sst"]
        assert low.shared[0].handle.uri.endswith("/shared/count-1-0-5d1f0c2a9b7e-19-000009.sst")
        assert low.shared[0].handle.size_bytes == 861193
        assert [f.name for f in high.shared] == ["000008.sst"]

    def test_the_checkpoint_knows_every_shared_file_it_references(self) -> None:
        assert {uri.rsplit("/", 1)[1] for uri in sample(2, "rocksdb-incremental").shared_files()} \
            == {"count-1-0-5d1f0c2a9b7e-19-000009.sst", "count-1-0-5d1f0c2a9b7e-21-000014.sst",
                "count-1-1-77aa01b2c3d4-20-000008.sst"}

    def test_full_snapshots_reference_no_shared_file_in_either_version(self) -> None:
        assert sample(2, "hashmap-keyed").shared_files() == set()
        assert sample(1, "keyed-unaligned-files-sink").shared_files() == set()

    def test_a_version_one_document_with_shared_files_is_refused(self) -> None:
        data = json.loads(unframe_metadata(
            (FORMATS / "v2" / "rocksdb-incremental" / "_metadata").read_bytes()))
        data["version"] = 1
        with pytest.raises(MetadataError, match=r"'shared' files, which format version 1"):
            CheckpointMetadata.from_json(data)


class TestVersionThreeKeysTransactionsBySink:
    def test_each_sink_gets_only_its_own_pending_transactions(self) -> None:
        metadata = sample(3, "two-sinks")
        main = metadata.sink_transactions(subtask=0, parallelism=1)
        late = metadata.sink_transactions(subtask=0, parallelism=1, sink="late")
        assert [t[0][1] for t in main] == ["file:///out/.staging/part-0-5"]
        assert [t[0][1] for t in late] == ["file:///late/.staging/part-0-5"]
        assert metadata.sink_transactions(subtask=0, parallelism=1, sink="other") == []
        assert metadata.sink_names() == {"sink", "late"}

    @pytest.mark.parametrize("older", [(1, "keyed-unaligned-files-sink"), (2, "hashmap-keyed")])
    def test_the_one_sink_of_an_older_version_is_the_main_sink(
            self, older: tuple[int, str]) -> None:
        metadata = sample(*older)
        assert metadata.sink_names() == {MAIN_SINK}
        assert metadata.sink_transactions(subtask=0, parallelism=1) != []
        assert metadata.sink_transactions(subtask=0, parallelism=1, sink="late") == []

    def test_a_sink_whose_transactions_are_not_an_object_is_named(self) -> None:
        data = json.loads(unframe_metadata(
            (FORMATS / "v3" / "two-sinks" / "_metadata").read_bytes()))
        data["sinks"]["late"] = [1, 2]
        with pytest.raises(MetadataError, match="transactions of sink 'late' must be an object"):
            CheckpointMetadata.from_json(data)


class TestVersionFourDescribesTheKeyedOperators:
    def test_each_keyed_operator_is_read_with_its_kind_stage_key_and_state_layout(
            self) -> None:
        metadata = sample(4, "keyed-with-pipeline")
        assert metadata.pipeline is not None
        assert [(op.uid, op.kind, op.stage, op.key) for op in metadata.pipeline] == [
            ("reduce-1", "reduce", 1, "word"), ("per-minute", "window_aggregate", 2, "word")]
        assert "tumbling" in metadata.pipeline[1].state

    @pytest.mark.parametrize("older", [(1, "keyed-unaligned-files-sink"), (2, "hashmap-keyed"),
                                       (3, "two-sinks")])
    def test_an_older_version_knows_no_pipeline(self, older: tuple[int, str]) -> None:
        assert sample(*older).pipeline is None

    def test_a_descriptor_that_is_not_an_object_is_named(self) -> None:
        data = json.loads(unframe_metadata(
            (FORMATS / "v4" / "keyed-with-pipeline" / "_metadata").read_bytes()))
        data["pipeline"] = [1]
        with pytest.raises(MetadataError, match="operator descriptor"):
            CheckpointMetadata.from_json(data)
