"""The schema of a CheckpointedJobSnapshot: which job's checkpoint to copy, and the
status the operator reports while it copies."""

from __future__ import annotations

from cjob_spec.names import MAX_JOB_NAME_LENGTH
from cjob_spec.schema import patterns
from cjob_spec.schema.openapi import (
    ArraySchema,
    BooleanSchema,
    IntegerSchema,
    ObjectSchema,
    Rule,
    StringSchema,
)
from cjob_spec.schema.status_schema import CONDITION, COUNT, TEXT, TIME
from cjob_spec.snapshot import DEFAULT_DISPOSE_ON_DELETE, SnapshotState

SNAPSHOT_SPEC = ObjectSchema(
    required=("jobName",),
    rules=(
        Rule(rule="self.jobName == oldSelf.jobName",
             message="jobName cannot change; apply a new snapshot"),
        Rule(rule="has(self.checkpoint) == has(oldSelf.checkpoint) && "
                  "(!has(self.checkpoint) || self.checkpoint == oldSelf.checkpoint)",
             message="checkpoint cannot change; apply a new snapshot"),
    ),
    properties={
        "jobName": StringSchema(
            description="The CheckpointedJob (in this namespace) whose checkpoint is copied.",
            min_length=1, max_length=MAX_JOB_NAME_LENGTH, pattern=patterns.JOB_NAME),
        "checkpoint": IntegerSchema(
            description="The checkpoint to copy, by id; it must still be retained. Default: "
            "the job's latest completed checkpoint when the snapshot is taken.",
            minimum=1),
        "disposeOnDelete": BooleanSchema(
            description="Delete the copy when this object is deleted. A copy that never "
            "completed is always deleted.",
            default=DEFAULT_DISPOSE_ON_DELETE),
    },
)

SNAPSHOT_STATUS = ObjectSchema(properties={
    "state": StringSchema(enum=tuple(state.value for state in SnapshotState)),
    "reason": TEXT,
    "message": TEXT,
    "jobUid": StringSchema(description="The uid of the job copied."),
    "checkpointId": COUNT,
    "source": StringSchema(description="The _metadata of the checkpoint copied."),
    "target": StringSchema(
        description="The snapshot's directory, <storage>/snapshots/<name>-<uid>."),
    "path": StringSchema(
        description="The copy's _metadata, which spec.restore.snapshot restores."),
    "sizeBytes": COUNT,
    "files": COUNT,
    "completedAt": TIME,
    "failures": IntegerSchema(description="Copies tried again after storage failed."),
    "jobSpec": ObjectSchema(
        description="The job's spec when the copy started: how the disposing pod reaches "
        "the storage after the job is gone. Written by the operator.",
        preserve_unknown=True),
    "observedGeneration": COUNT,
    "conditions": ArraySchema(items=CONDITION, map_keys=("type",)),
})

SNAPSHOT_ROOT = ObjectSchema(
    description="A copy of one completed checkpoint of a CheckpointedJob, kept until this "
    "object is deleted: restore it with spec.restore.snapshot of a job.",
    required=("spec",),
    properties={
        "apiVersion": TEXT,
        "kind": TEXT,
        "metadata": ObjectSchema(),
        "spec": SNAPSHOT_SPEC,
        "status": SNAPSHOT_STATUS,
    },
)
"""The whole CheckpointedJobSnapshot."""
