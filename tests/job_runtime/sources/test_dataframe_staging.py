"""Staging a ``dataframe`` source once per job, against a second live driver of the job.

Each driver stages into a directory of its own and publishes it under the store's
fence; the first publication is the job's input for good. ``build`` here writes the
Parquet files a DataFrame would, and counts how often it ran.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cjob_checkpoint.store.backed import advance_fence
from cjob_checkpoint.store.memory import InMemoryCheckpointStore, MemoryBackend
from cjob_checkpoint.store.staged_inputs import (
    StagedInput,
    StagedInputFencedError,
    StagedInputOrigin,
)
from job_runtime.errors import UnpublishedInputError
from job_runtime.sources.dataframe import DataFrameSource
from job_runtime.sources.source_contract import SourceContext
from job_runtime.sources.staged_dataset import stage_once
from job_runtime.sources.staging import DriverStaging

NAME = "numbers"


class CountingBuild:
    """Writes ``rows`` as ``parts`` Parquet files and ``_SUCCESS``, as Spark would."""

    def __init__(self, rows: list[int], *, parts: int = 2) -> None:
        self.rows = rows
        self.parts = parts
        self.calls = 0

    def __call__(self, uri: str) -> None:
        self.calls += 1
        write_dataset(Path(uri.removeprefix("file://")), self.rows, parts=self.parts)


def write_dataset(directory: Path, rows: list[int], *, parts: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for part in range(parts):
        table = pa.table({"seq": rows[part::parts]})
        pq.write_table(table, directory / f"part-{part:05d}.parquet")
    (directory / "_SUCCESS").touch()


class Job:
    """One job's staging area and store, shared by the drivers of its attempts."""

    def __init__(self, tmp_path: Path) -> None:
        self.staging = str(tmp_path / "staging")
        self.backend = MemoryBackend()

    def driver(self, attempt: int) -> DriverStaging:
        """A driver of ``attempt`` that took the fence, as its start does."""
        advance_fence(self.backend, attempt, where="test")
        return self.stale_driver(attempt)

    def stale_driver(self, attempt: int) -> DriverStaging:
        """A driver of ``attempt`` that may no longer own the store."""
        store = InMemoryCheckpointStore(attempt=attempt, backend=self.backend)
        return DriverStaging(uri=self.staging, attempt=attempt, store=store)


def read_rows(staging: DriverStaging) -> list[int]:
    """Every row the subtasks of ``staging``'s driver read, split by split."""
    context = SourceContext(subtask=0, parallelism=1, staging_uri=staging.uri,
                            staged_inputs=staging.inputs)
    source = DataFrameSource(build=lambda spark: None, name=NAME, batch_size=None)
    rows: list[int] = []
    for split in source.splits(context=context):
        reader = source.open(split, None, context=context)
        while (batch := reader.read_batch()) is not None:
            rows.extend(record["seq"] for record in batch.rows)
        reader.close()
    return rows


@pytest.fixture
def job(tmp_path: Path) -> Job:
    return Job(tmp_path)


class TestFirstPublicationWins:
    def test_a_later_attempt_reads_the_published_copy_without_building_again(
            self, job: Job) -> None:
        first, later = CountingBuild(list(range(10))), CountingBuild(list(range(10, 20)))
        published = stage_once(staging=job.driver(1), name=NAME, stage=first)

        again = job.driver(2)
        reused = stage_once(staging=again, name=NAME, stage=later)

        assert (first.calls, later.calls) == (1, 0)
        assert reused == published and reused.attempt == 1
        assert sorted(read_rows(again)) == list(range(10))

    def test_a_copy_staged_while_another_attempt_published_is_dropped_for_the_first(
            self, job: Job) -> None:
        older, newer = job.driver(1), job.driver(1)

        def publish_meanwhile(uri: str) -> None:
            stage_once(staging=newer, name=NAME, stage=CountingBuild(list(range(5))))
            CountingBuild(list(range(100, 105)), parts=3)(uri)

        winner = stage_once(staging=older, name=NAME, stage=publish_meanwhile)

        assert winner.uri == newer.inputs[NAME] == older.inputs[NAME]
        assert sorted(read_rows(older)) == list(range(5))
        assert not Path(job.staging, f"{NAME}.attempts", older.own_directory).exists()

    def test_the_published_copy_is_each_drivers_own_directory_of_its_attempt(
            self, job: Job) -> None:
        staging = job.driver(3)

        published = stage_once(staging=staging, name=NAME, stage=CountingBuild([1, 2, 3]))

        assert published.uri == f"{job.staging}/{NAME}.attempts/{staging.own_directory}"
        assert staging.own_directory.startswith("attempt-3-")
        assert published.origin is StagedInputOrigin.STAGED
        assert job.driver(3).own_directory != staging.own_directory


class TestFencing:
    def test_a_fenced_attempt_cannot_publish_and_fails_naming_the_input(self, job: Job) -> None:
        stale = job.stale_driver(1)
        job.driver(2)
        build = CountingBuild(list(range(10)))

        with pytest.raises(StagedInputFencedError) as raised:
            stage_once(staging=stale, name=NAME, stage=build)

        assert "attempt 1 may not publish the staged input 'numbers'" in str(raised.value)
        assert raised.value.current_attempt == 2
        assert job.stale_driver(2).store.staged_input(NAME) is None
        assert not Path(job.staging, f"{NAME}.attempts", stale.own_directory).exists()

    def test_the_newer_attempt_then_stages_and_publishes_its_own_copy(self, job: Job) -> None:
        stale = job.stale_driver(1)
        newer = job.driver(2)
        with pytest.raises(StagedInputFencedError):
            stage_once(staging=stale, name=NAME, stage=CountingBuild(list(range(10))))

        published = stage_once(staging=newer, name=NAME, stage=CountingBuild(list(range(7))))

        assert published.attempt == 2
        assert sorted(read_rows(newer)) == list(range(7))


class TestLeftovers:
    def test_an_unpublished_leftover_copy_is_neither_read_nor_reused(self, job: Job) -> None:
        leftover = Path(job.staging, f"{NAME}.attempts", "attempt-1-deadbeef")
        write_dataset(leftover, list(range(50, 60)), parts=2)
        build = CountingBuild(list(range(10)))
        staging = job.driver(2)

        published = stage_once(staging=staging, name=NAME, stage=build)

        assert build.calls == 1
        assert "attempt-1-deadbeef" not in published.uri
        assert sorted(read_rows(staging)) == list(range(10))

    def test_the_published_copy_is_never_deleted_by_a_driver_that_lost(self, job: Job) -> None:
        winner = job.driver(1)
        published = stage_once(staging=winner, name=NAME, stage=CountingBuild([1, 2]))
        loser = job.stale_driver(1)

        def lose(uri: str) -> None:
            raise AssertionError("a published input is never staged again")

        stage_once(staging=loser, name=NAME, stage=lose)

        assert Path(published.uri, "_SUCCESS").exists()


class TestStagingOfEarlierVersions:
    def test_a_complete_shared_directory_is_adopted_as_it_is_and_published(
            self, job: Job) -> None:
        write_dataset(Path(job.staging, NAME), list(range(30)), parts=3)
        build = CountingBuild(list(range(5)))
        staging = job.driver(4)

        published = stage_once(staging=staging, name=NAME, stage=build)

        assert build.calls == 0
        assert published.uri == f"{job.staging}/{NAME}"
        assert published.origin is StagedInputOrigin.ADOPTED
        assert sorted(read_rows(staging)) == list(range(30))
        assert job.stale_driver(4).store.staged_input(NAME) == published

    def test_the_adopted_directory_lists_the_same_splits_as_before_publication(
            self, job: Job) -> None:
        write_dataset(Path(job.staging, NAME), list(range(30)), parts=3)
        staging = job.driver(1)
        stage_once(staging=staging, name=NAME, stage=CountingBuild([]))
        context = SourceContext(subtask=0, parallelism=1, staging_uri=job.staging,
                                staged_inputs=staging.inputs)

        splits = DataFrameSource(build=lambda spark: None, name=NAME,
                                 batch_size=None).splits(context=context)

        assert [(s.index, s.description) for s in splits] == [
            (i, f"{job.staging}/{NAME}/part-{i:05d}.parquet") for i in range(3)]

    def test_a_shared_directory_without_success_is_not_adopted(self, job: Job) -> None:
        Path(job.staging, NAME).mkdir(parents=True)
        build = CountingBuild([1])

        published = stage_once(staging=job.driver(1), name=NAME, stage=build)

        assert build.calls == 1 and published.origin is StagedInputOrigin.STAGED


class TestSubtasks:
    def test_a_subtask_not_told_the_published_copy_refuses_to_guess(self, tmp_path: Path) -> None:
        context = SourceContext(subtask=0, parallelism=1, staging_uri=str(tmp_path))
        source = DataFrameSource(build=lambda spark: None, name=NAME, batch_size=None)

        with pytest.raises(UnpublishedInputError, match="'numbers'"):
            source.splits(context=context)

    def test_the_record_a_driver_reads_names_the_published_location(self, job: Job) -> None:
        job.driver(1).store.publish_staged_input(
            StagedInput(name=NAME, uri=f"{job.staging}/elsewhere", attempt=1))
        staging = job.driver(2)

        stage_once(staging=staging, name=NAME, stage=CountingBuild([1]))

        assert staging.inputs == {NAME: f"{job.staging}/elsewhere"}
