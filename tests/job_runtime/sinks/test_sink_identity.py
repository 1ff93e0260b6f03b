"""Each sink of a job writes under an identity of its own, and a restore never drops a
sink's uncommitted output.

The main sink keeps the job's identity (its files, transactional ids and staging as
when a job had one sink), so a checkpoint written before a side output was added
restores into it; every other sink writes under ``<job>.<name>``.
"""

from __future__ import annotations

import dataclasses

import pytest

from cjob_checkpoint.metadata import CheckpointMetadata, SinkTransactions
from job_runtime.errors import RestoreError
from job_runtime.execution.driver.restore import check_sinks
from job_runtime.sinks.files_sink import output_tag
from job_runtime.sinks.kafka import transactional_id
from job_runtime.sinks.sink_contract import MAIN_SINK, SinkContext, sink_job_id

CONTEXT = SinkContext(subtask=1, parallelism=2, attempt_tag="a1e3", job_id="clicks-u1",
                      staging_root="file:///ckpt/clicks-u1")


def two_sinks() -> CheckpointMetadata:
    """A checkpoint with transactions pending in the main sink and in ``late``, and
    none in ``done`` (nothing of it would be lost)."""
    return CheckpointMetadata(
        job="clicks-u1", checkpoint_id=5, timestamp=0.0, final=False, attempt=1,
        parallelism=1, max_parallelism=128,
        sinks=(SinkTransactions(subtask=0, pending=[["part-0-5"]]),
               SinkTransactions(subtask=0, pending=[["late-0-5"]], sink="late"),
               SinkTransactions(subtask=0, pending=[], sink="done")))


def test_the_main_sink_keeps_the_jobs_identity_and_staging() -> None:
    assert CONTEXT.of_sink(MAIN_SINK) == CONTEXT
    assert sink_job_id("clicks-u1", MAIN_SINK) == "clicks-u1"


def test_another_sink_gets_its_own_output_names_transactional_ids_and_staging() -> None:
    late = CONTEXT.of_sink("late")
    assert late.job_id == "clicks-u1.late"
    assert late.staging_root == "file:///ckpt/clicks-u1/sinks/late"
    assert dataclasses.replace(late, job_id=CONTEXT.job_id,
                               staging_root=CONTEXT.staging_root) == CONTEXT
    assert output_tag(late.job_id) != output_tag(CONTEXT.job_id)
    assert transactional_id(late.job_id, 1) != transactional_id(CONTEXT.job_id, 1)


def test_a_restore_into_a_job_that_has_every_sink_of_the_checkpoint_goes_ahead() -> None:
    check_sinks(two_sinks(), sinks={"sink", "late", "another"}, pointer="chk-5")
    # A sink with nothing pending may go.
    check_sinks(two_sinks(), sinks={"sink", "late"}, pointer="chk-5")


def test_a_restore_that_would_orphan_a_sinks_pending_output_is_refused_naming_it() -> None:
    with pytest.raises(RestoreError) as raised:
        check_sinks(two_sinks(), sinks={"sink", "late-data"}, pointer="chk-5")
    assert "uncommitted output of sink 'late'" in str(raised.value)
    assert "its sinks: late-data, sink" in str(raised.value)
