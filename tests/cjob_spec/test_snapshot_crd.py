"""The CheckpointedJobSnapshot CRD agrees with its model: the fields the parser reads,
the status the operator writes (and reads back), and what the schema refuses. Applying
it to a real API server is tested with the operator (tests/cjob_operator/cluster/)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from paths import REPO

from cjob_spec.errors import SpecError
from cjob_spec.snapshot import SnapshotState, SnapshotStatus, parse_snapshot_spec
from cjob_spec.snapshot_outcome import SnapshotOutcome, SnapshotOutcomeError, SnapshotTask
from cjob_spec.status import Condition, ConditionStatus

jsonschema = pytest.importorskip("jsonschema")

CRD = yaml.safe_load((REPO / "crds" / "checkpointedjobsnapshot.yaml").read_text())
SCHEMA: dict[str, Any] = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def document(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "checkpointed.io/v1alpha1", "kind": "CheckpointedJobSnapshot",
            "metadata": {"name": "keep"}, "spec": spec}


def schema_errors(value: dict[str, Any]) -> list[str]:
    return [e.message for e in jsonschema.Draft7Validator(SCHEMA).iter_errors(value)]


def leaves(value: Any, path: str) -> set[str]:
    if isinstance(value, dict) and path != ".status.jobSpec":
        return set().union(*(leaves(v, f"{path}.{k}") for k, v in value.items())) or {path}
    if isinstance(value, list) and value:
        return leaves(value[0], path)
    return {path}


def schema_leaves(schema: dict[str, Any], path: str) -> set[str]:
    if "items" in schema:
        return schema_leaves(schema["items"], path)
    if "properties" not in schema:
        return {path}
    return set().union(*(schema_leaves(child, f"{path}.{key}")
                         for key, child in schema["properties"].items()))


def test_the_crd_names_the_kind_with_its_short_name_and_status_subresource() -> None:
    names = CRD["spec"]["names"]
    assert (names["kind"], names["plural"]) == ("CheckpointedJobSnapshot",
                                                "checkpointedjobsnapshots")
    assert names["shortNames"][0] == "cjsnap"
    assert CRD["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_the_schema_has_exactly_the_spec_fields_the_parser_reads() -> None:
    full = document(jobName="sums", checkpoint=4, disposeOnDelete=False)
    parsed = parse_snapshot_spec(full)
    assert (parsed.job_name, parsed.checkpoint_id, parsed.dispose_on_delete) == ("sums", 4, False)
    assert leaves(full["spec"], ".spec") == schema_leaves(SCHEMA["properties"]["spec"], ".spec")
    assert schema_errors(full) == []


def test_the_status_the_operator_writes_is_in_the_schema_and_reads_back_the_same() -> None:
    status = SnapshotStatus(
        state=SnapshotState.COMPLETED, reason="SnapshotCompleted", message="copied",
        job_uid="u1", checkpoint_id=4, source="s3://b/c/sums-u1/chk-4/_metadata",
        target="s3://b/c/snapshots/keep-s1", path="s3://b/c/snapshots/keep-s1/sums-u1/chk-4/_metadata",
        size_bytes=10, files=3, completed_at=T0, failures=1,
        job_spec={"checkpoint": {"storage": "s3://b/c"}},
        conditions=(Condition(type="Ready", status=ConditionStatus.TRUE, reason="SnapshotCompleted",
                              message="copied", last_transition_time=T0,
                              observed_generation=1),),
        observed_generation=1)
    written = status.to_dict()
    assert leaves(written, ".status") <= schema_leaves(SCHEMA["properties"]["status"], ".status")
    assert schema_errors({**document(jobName="sums"), "status": written}) == []
    assert SnapshotStatus.from_dict(written) == status


@pytest.mark.parametrize(("spec", "field"), [
    ({}, "spec.jobName"),
    ({"jobName": "Sums_1"}, "spec.jobName"),
    ({"jobName": "1sums"}, "spec.jobName"),   # no job's name starts with a digit
    ({"jobName": "s" * 41}, "spec.jobName"),
    ({"jobName": "sums", "checkpoint": 0}, "spec.checkpoint"),
    ({"jobName": "sums", "checkpoint": True}, "spec.checkpoint"),
    ({"jobName": "sums", "disposeOnDelete": "yes"}, "spec.disposeOnDelete"),
    ({"jobName": "sums", "retained": 3}, "spec.retained"),
])
def test_a_bad_spec_is_refused_by_the_schema_and_by_the_parser_naming_the_field(
        spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_snapshot_spec(document(**spec))
    assert refused.value.field == field
    if "retained" not in spec:  # the API server prunes unknown fields instead
        assert schema_errors(document(**spec)) != []


class TestTheOutcomeRecord:
    def test_an_outcome_reads_back_as_written(self) -> None:
        outcome = SnapshotOutcome(task=SnapshotTask.TAKE, path="file:///s/_metadata",
                                  checkpoint_id=3, files=2, size_bytes=99)
        assert SnapshotOutcome.from_message(outcome.to_message()) == outcome
        assert len(outcome.to_message()) < 4096, "it fits a termination message"

    @pytest.mark.parametrize("message", [
        "Traceback (most recent call last): ...",
        '{"version": 2, "task": "Take"}',
        '{"version": 1, "task": "Copy"}',
        '{"version": 1, "task": "Take", "files": 3}',
        '{"version": 1, "task": "Take", "path": "x", "checkpointId": -1}',
    ])
    def test_anything_else_is_refused_not_half_read(self, message: str) -> None:
        with pytest.raises(SnapshotOutcomeError):
            SnapshotOutcome.from_message(message)
