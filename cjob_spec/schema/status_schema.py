"""The schema of a CheckpointedJob's ``status``, which the operator writes.

Unknown fields are kept, so an operator that adds a status field keeps working with
the CRD of the release before it; the fields named here get types for ``kubectl
explain`` and for the printer columns and the scale subresource that read them.
"""

from __future__ import annotations

from cjob_spec.schema.openapi import (
    ArraySchema,
    IntegerSchema,
    NumberSchema,
    ObjectSchema,
    StringSchema,
)
from cjob_spec.status import ConditionStatus, ScalingReason

TEXT = StringSchema()
COUNT = IntegerSchema()
TIME = StringSchema(format="date-time")

CONDITION = ObjectSchema(
    required=("type", "status"),
    properties={
        "type": TEXT,
        "status": StringSchema(enum=tuple(status.value for status in ConditionStatus)),
        "reason": TEXT,
        "message": TEXT,
        "lastTransitionTime": TIME,
        "observedGeneration": COUNT,
    },
)

STATUS = ObjectSchema(
    preserve_unknown=True,
    properties={
        "phase": TEXT,
        "reason": TEXT,
        "message": TEXT,
        "attempt": COUNT,
        "restarts": COUNT,
        "driverPod": TEXT,
        "specHash": TEXT,
        "startedAt": TIME,
        "runningSince": TIME,
        "lastRestartAt": TIME,
        "nextRestartAt": TIME,
        "latestCheckpoint": ObjectSchema(properties={
            "id": COUNT, "path": TEXT, "completedAt": TIME, "sizeBytes": COUNT}),
        "restoredFrom": ObjectSchema(properties={"id": COUNT, "path": TEXT}),
        "lastFailure": ObjectSchema(properties={
            "reason": TEXT, "exitCode": COUNT, "message": TEXT, "at": TIME, "attempt": COUNT}),
        "observedGeneration": COUNT,
        "lastTriggerNonce": TEXT,
        "suspendRequestedAt": TIME,
        "parallelism": IntegerSchema(
            description="The parallelism of the current attempt (the scale subresource's "
            "replicas)."),
        "selector": StringSchema(
            description="The label selector of the job's pods (the scale subresource's, for "
            "autoscalers)."),
        "lastStableSpec": ObjectSchema(
            description="With spec.rollback: the last spec that ran well (an attempt of it "
            "completed a checkpoint), to return to.",
            properties={"specHash": TEXT,
                        "spec": ObjectSchema(preserve_unknown=True)}),
        "upgrade": ObjectSchema(
            description="With spec.rollback: the changed spec now running until it completes "
            "a checkpoint newer than checkpointId, or is rolled back.",
            properties={"specHash": TEXT, "startedAt": TIME, "checkpointId": COUNT}),
        "discardedThrough": IntegerSchema(
            description="After an upgradeMode Stateless upgrade or a redeploy: the newest "
            "checkpoint of the state it discarded; attempts start as discardedReplacement "
            "says until a checkpoint of a later attempt than discardedAttempt completes."),
        "discardedAttempt": IntegerSchema(
            description="With discardedThrough: the attempt the change stopped; a checkpoint "
            "its driver completed while it stopped holds the discarded state too."),
        "discardedReplacement": StringSchema(
            description="With discardedThrough: what attempts start from instead, Empty (a "
            "Stateless upgrade) or RestoreSource (a redeploy: spec.restore's from or "
            "snapshot).",
            enum=("Empty", "RestoreSource")),
        "lastRedeployNonce": TEXT,
        "rolledBackSpecHash": StringSchema(
            description="The hash of the spec that was rolled back; while the spec is "
            "unchanged the job runs lastStableSpec."),
        "autoscaler": ObjectSchema(
            description="With spec.autoscaler: its latest decision (recommended, reason, the "
            "rates it decided on) and, in mode Apply, the parallelism the job runs at "
            "instead of spec.parallelism until spec.parallelism changes.",
            properties={
                "reason": StringSchema(enum=tuple(reason.value for reason in ScalingReason)),
                "message": TEXT, "recommended": COUNT, "recommendedSince": TIME,
                "parallelism": COUNT, "specParallelism": COUNT, "lastScaledAt": TIME,
                "inputRate": NumberSchema(description="Records per second the sources read."),
                "lagRecords": COUNT,
                "capacityPerSubtask": NumberSchema(
                    description="Records per second one subtask read while the job was "
                    "behind."),
            }),
        "storageRoots": ArraySchema(
            description="Every checkpoint directory (<storage>/<job>-<uid>) an attempt of the "
            "job was started with, oldest first; cleanupPolicy Delete deletes each.",
            items=TEXT),
        "conditions": ArraySchema(items=CONDITION, map_keys=("type",)),
    },
)
"""``status``: what the operator reports."""
