"""Our CRDs are generated from the schemas, and the schema, the model and the parser
describe the same document.

``crds/checkpointedjob.yaml`` and ``crds/checkpointedjobsnapshot.yaml`` (and the
chart's byte-identical copies, see ``tests/charts/test_chart_files.py``) are ``make
crds``'s output: a schema, default or bound changed without regenerating them fails
here, naming the command to run.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from paths import REPO
from spec_documents import minimal, with_field

from cjob_spec import SpecError, parse_job, security
from cjob_spec.model import (
    Backoff,
    CheckpointSpec,
    CleanupPolicy,
    DriverResources,
    ExecutorResources,
    HealthSpec,
    JobCode,
    JobSpec,
    PodSettings,
    RestartPolicy,
    RollbackSpec,
    S3Settings,
    SnapshotSchedule,
    SparkSpec,
    StandbySpec,
    StateSpec,
)
from cjob_spec.schema.crd import CHECKPOINTED_JOB_SNAPSHOT, RESOURCES, CustomResource
from cjob_spec.schema.pod_schema import CONTAINER_SECURITY_FIELDS, POD_SECURITY_FIELDS
from cjob_spec.schema.spec_schema import SPEC
from cjob_spec.snapshot import SPEC_FIELDS as SNAPSHOT_SPEC_FIELDS


@pytest.mark.parametrize("resource", RESOURCES, ids=[r.kind for r in RESOURCES])
def test_the_committed_crd_is_what_the_schema_renders(resource: CustomResource) -> None:
    committed = (REPO / "crds" / resource.file_name).read_text(encoding="utf-8")
    assert committed == resource.text(), (
        f"crds/{resource.file_name} differs from cjob_spec/schema; run: make crds")


def test_every_crd_of_ours_is_generated() -> None:
    generated = {resource.file_name for resource in RESOURCES}
    assert {path.name for path in (REPO / "crds").glob("*.yaml")} == generated


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# Each model section with the schema section it is read from (RestoreSpec is not here:
# its one ``source`` is read from two fields, ``from`` and ``snapshot``).
SECTIONS = [
    (JobSpec, ""),
    (JobCode, "job"),
    (SparkSpec, "spark"),
    (DriverResources, "spark.driver"),
    (ExecutorResources, "spark.executor"),
    (CheckpointSpec, "checkpoint"),
    (S3Settings, "checkpoint.s3"),
    (RestartPolicy, "restartPolicy"),
    (Backoff, "restartPolicy.backoff"),
    (SnapshotSchedule, "snapshots"),
    (RollbackSpec, "rollback"),
    (HealthSpec, "health"),
    (StandbySpec, "standby"),
    (StateSpec, "state"),
    (CleanupPolicy, "cleanupPolicy"),
    (PodSettings, "pod"),
]


@pytest.mark.parametrize(("model", "section"), SECTIONS,
                         ids=[model.__name__ for model, _ in SECTIONS])
def test_every_model_field_is_a_field_of_its_schema_section_and_back(
        model: type, section: str) -> None:
    schema = SPEC.at(section) if section else SPEC
    fields = {camel(f.name) for f in dataclasses.fields(model)}
    assert fields == set(schema.property_names)


def test_the_snapshot_parser_knows_the_fields_the_snapshot_schema_offers() -> None:
    spec = CHECKPOINTED_JOB_SNAPSHOT.schema.child("spec")
    assert spec.property_names == SNAPSHOT_SPEC_FIELDS


def test_the_security_context_readers_know_the_fields_the_schema_offers() -> None:
    assert tuple(POD_SECURITY_FIELDS) == security.POD_FIELDS
    assert tuple(CONTAINER_SECURITY_FIELDS) == security.CONTAINER_FIELDS


def test_a_field_added_to_the_schema_is_one_the_parser_reads() -> None:
    # The parser takes each section's fields from the schema: a known field passes
    # the unknown-field check, a misspelt one is refused with the schema's names.
    parse_job(with_field(minimal(), "spec.checkpoint.tolerableFailures", 2))
    with pytest.raises(SpecError, match=re.escape("did you mean 'tolerableFailures'?")):
        parse_job(with_field(minimal(), "spec.checkpoint.tolerableFailure", 2))


@pytest.mark.parametrize(("path", "limit"), [
    ("spec.job.entrypoint", 256),
    ("spec.checkpoint.storage", 1024),
    ("spec.checkpoint.triggerNonce", 253),
    ("spec.checkpoint.s3.region", 64),
    ("spec.restore.snapshot", 253),
])
def test_the_parser_refuses_a_string_longer_than_the_schema_allows(path: str,
                                                                  limit: int) -> None:
    document = with_field(minimal(), "spec.checkpoint.storage", "s3://bucket/x")
    head = {"spec.job.entrypoint": "a" * limit + ":b",
            "spec.checkpoint.storage": "s3://bucket/" + "x" * limit}.get(path, "x" * (limit + 1))
    with pytest.raises(SpecError, match=f"at most {limit} characters"):
        parse_job(with_field(document, path, head))
