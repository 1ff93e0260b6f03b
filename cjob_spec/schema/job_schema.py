"""The schema of a whole CheckpointedJob: its name's rules, ``spec`` and ``status``.

The parser reads a document against it (its sections' fields, in order) and
``cjob_spec.schema.crd`` renders it as the CRD's ``openAPIV3Schema``.
"""

from __future__ import annotations

from cjob_spec.names import MAX_JOB_NAME_LENGTH
from cjob_spec.schema import patterns
from cjob_spec.schema.openapi import ObjectSchema, Rule, StringSchema, cel_matches
from cjob_spec.schema.spec_schema import SPEC
from cjob_spec.schema.status_schema import STATUS

ROOT = ObjectSchema(
    description="A long-running PySpark job with Flink-style barrier snapshots, restarted "
    "from its latest completed checkpoint after failures.",
    required=("spec",),
    rules=(
        Rule(rule=f"size(self.metadata.name) <= {MAX_JOB_NAME_LENGTH} && "
                  f"{cel_matches(patterns.JOB_NAME, subject='self.metadata.name')}",
             message=f"metadata.name must be at most {MAX_JOB_NAME_LENGTH} lower-case "
                     "letters, digits and '-', starting with a letter (it is part of Service "
                     "and executor pod names)"),
        Rule(rule="!has(oldSelf.status) || !has(oldSelf.status.latestCheckpoint) || "
                  "!has(self.spec.maxParallelism) || !has(oldSelf.spec.maxParallelism) || "
                  "self.spec.maxParallelism == oldSelf.spec.maxParallelism",
             message="spec.maxParallelism cannot change once the job has a checkpoint: its "
                     "keyed state is cut into that many key groups (create a new job to "
                     "change it)"),
    ),
    properties={
        "apiVersion": StringSchema(),
        "kind": StringSchema(),
        "metadata": ObjectSchema(),
        "spec": SPEC,
        "status": STATUS,
    },
)
"""The document: ``metadata`` is the API server's own, so only its name has rules."""
