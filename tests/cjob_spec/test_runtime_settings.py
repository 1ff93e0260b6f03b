"""The runtime settings document: what it carries round trip, and what it refuses.

A supervisor and a runtime image of different releases may meet; a document the
runtime cannot run is refused in one line naming what is wrong, never guessed at.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cjob_spec.model import CheckpointMode, OnUnreadable, StateBackend
from cjob_spec.runtime_settings import SETTINGS_VERSION, RuntimeSettings, RuntimeSettingsError

EVERYTHING = RuntimeSettings(
    job_name="clicks", job_uid="u-1", entrypoint="clicks.job:build",
    checkpoint_storage="s3://ckpt/clicks", python_path=("jobs/", "s3://code/jobs.zip"),
    args={"limit": 10, "nested": {"a": [1, "$x"]}}, parallelism=3, max_parallelism=256,
    master="local[3]", spark_conf={"spark.ui.enabled": "false"}, checkpoint_interval=1.5,
    checkpoint_min_pause=0.25, checkpoint_timeout=60, checkpoint_mode=CheckpointMode.AT_LEAST_ONCE,
    unaligned=True, retained=4, tolerable_failures=2, checkpoint_stall_intervals=5,
    sink_stall_timeout=0, restore="s3://old/chk-3/_metadata", restore_exact=True,
    on_unreadable=OnUnreadable.FALLBACK_TO_PREVIOUS, allow_foreign_restore=True,
    allow_non_restored_state=True, state_backend=StateBackend.ROCKSDB, attempt=7,
    store="configmap:team/clicks-checkpoints", metrics_port=9108, status_file="/tmp/s.json")


def document(**changes: Any) -> str:
    body = json.loads(EVERYTHING.encode())
    body.update(changes)
    return json.dumps({k: v for k, v in body.items() if v is not ...})


def test_every_field_comes_back_as_it_was_sent() -> None:
    assert RuntimeSettings.decode(EVERYTHING.encode()) == EVERYTHING


def test_the_document_names_its_version_and_enums_by_their_spec_values() -> None:
    body = json.loads(EVERYTHING.encode())
    assert body["version"] == SETTINGS_VERSION
    assert body["checkpoint_mode"] == "AtLeastOnce"
    assert body["state_backend"] == "rocksdb"


def test_fields_left_out_take_their_defaults() -> None:
    minimal = json.dumps({"version": SETTINGS_VERSION, "job_name": "j", "job_uid": "u",
                          "entrypoint": "m:f", "checkpoint_storage": "file:///c"})
    assert RuntimeSettings.decode(minimal) == RuntimeSettings(
        job_name="j", job_uid="u", entrypoint="m:f", checkpoint_storage="file:///c")


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "runtime settings are not JSON"),
    ("[1, 2]", "runtime settings: expected a JSON object"),
    (document(version=2), "runtime settings: format version 2 is not 1"),
    (document(version=...), "runtime settings: format version None is not 1"),
    (document(colour="blue"), "unknown fields: colour"),
    (document(job_uid=...), "lack job_uid"),
    (document(parallelism="3"), "field parallelism must be an integer, got '3'"),
    (document(parallelism=True), "field parallelism must be an integer"),
    (document(checkpoint_interval="1s"), "field checkpoint_interval must be a number"),
    (document(unaligned="yes"), "field unaligned must be true or false"),
    (document(checkpoint_mode="exactly_once"),
     "field checkpoint_mode: 'exactly_once' is not one of ExactlyOnce, AtLeastOnce"),
    (document(python_path="jobs/"), "field python_path must be a list of strings"),
    (document(spark_conf={"spark.cores.max": 4}), "field spark_conf must be an object of strings"),
    (document(args=[1]), "field args must be an object"),
    (document(entrypoint=None), "field entrypoint must be a string"),
])
def test_a_document_the_runtime_cannot_run_is_refused_in_one_line(text: str,
                                                                 message: str) -> None:
    with pytest.raises(RuntimeSettingsError) as refused:
        RuntimeSettings.decode(text)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_optional_fields_may_be_null() -> None:
    settings = RuntimeSettings.decode(document(metrics_port=None, status_file=None))
    assert settings.metrics_port is None and settings.status_file is None


def test_a_field_added_since_the_version_shipped_is_left_out_while_unused() -> None:
    # A runtime that predates restore_exact refuses a document naming it: a supervisor
    # that does not redeploy must still run that runtime.
    plain = RuntimeSettings(job_name="clicks", job_uid="u-1", entrypoint="clicks.job:build",
                            checkpoint_storage="s3://ckpt/clicks")
    assert "restore_exact" not in json.loads(plain.encode())
    assert json.loads(EVERYTHING.encode())["restore_exact"] is True
    assert RuntimeSettings.decode(plain.encode()).restore_exact is False
