"""The project's CustomResourceDefinitions, built from the schemas, and their YAML.

``crds/checkpointedjob.yaml``, ``crds/checkpointedjobsnapshot.yaml`` and the chart's
copies are this module's output (``make crds`` writes them);
``tests/cjob_spec/test_crd_generated.py`` fails when a committed file differs from
what the model, defaults and schemas produce now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from cjob_spec.names import API_GROUP, KIND, PLURAL, SNAPSHOT_KIND, SNAPSHOT_PLURAL
from cjob_spec.schema.job_schema import ROOT
from cjob_spec.schema.openapi import ObjectSchema
from cjob_spec.schema.snapshot_schema import SNAPSHOT_ROOT

VERSION = "v1alpha1"
LABELS = {"app.kubernetes.io/name": "checkpointed-jobs",
          "app.kubernetes.io/part-of": "checkpointed-jobs"}


@dataclass(frozen=True, kw_only=True)
class Column:
    """One ``kubectl get`` column."""

    name: str
    type: str
    json_path: str
    description: str | None = None
    priority: int | None = None
    """1: shown only with ``-o wide``."""

    def document(self) -> dict[str, Any]:
        body: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.description is not None:
            body["description"] = self.description
        if self.priority is not None:
            body["priority"] = self.priority
        body["jsonPath"] = self.json_path
        return body


@dataclass(frozen=True, kw_only=True)
class CustomResource:
    """One kind of ours as the API server serves it."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    columns: tuple[Column, ...]
    schema: ObjectSchema
    header: str
    """The comment the file starts with: what the resource is, and how it is made."""
    scale: dict[str, str] | None = None
    """The scale subresource's paths, for a resource ``kubectl scale`` resizes."""

    @property
    def file_name(self) -> str:
        return f"{self.kind.lower()}.yaml"

    def document(self) -> dict[str, Any]:
        """The CRD as the API server reads it."""
        subresources: dict[str, Any] = {"status": {}}
        if self.scale is not None:
            subresources["scale"] = dict(self.scale)
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{self.plural}.{API_GROUP}", "labels": dict(LABELS)},
            "spec": {
                "group": API_GROUP,
                "scope": "Namespaced",
                "names": {
                    "kind": self.kind,
                    "listKind": f"{self.kind}List",
                    "plural": self.plural,
                    "singular": self.kind.lower(),
                    "shortNames": list(self.short_names),
                    "categories": list(self.categories),
                },
                "versions": [{
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "additionalPrinterColumns": [column.document() for column in self.columns],
                    "schema": {"openAPIV3Schema": self.schema.document()},
                }],
            },
        }

    def text(self) -> str:
        """The CRD file's content: the header, then the document."""
        body = yaml.dump(self.document(), Dumper=_Dumper, sort_keys=False,
                         allow_unicode=True, width=92, default_flow_style=False)
        return self.header + body


class _Dumper(yaml.SafeDumper):
    """Block style, lists indented under their key, as people write Kubernetes YAML."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


GENERATED = "# Generated from cjob_spec/schema: edit it and run `make crds`, which writes\n" \
            "# this file and the chart's copy.\n"

CHECKPOINTED_JOB = CustomResource(
    kind=KIND,
    plural=PLURAL,
    short_names=("cjob", "cjobs"),
    categories=("checkpointed", "spark"),
    columns=(
        Column(name="Phase", type="string", json_path=".status.phase"),
        Column(name="Attempt", type="integer", json_path=".status.attempt"),
        Column(name="Restarts", type="integer", json_path=".status.restarts"),
        Column(name="Last Checkpoint", type="integer", json_path=".status.latestCheckpoint.id"),
        Column(name="Checkpoint Age", type="date",
               json_path=".status.latestCheckpoint.completedAt"),
        Column(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        Column(name="Parallelism", type="integer", json_path=".status.parallelism",
               priority=1),
        Column(name="Recommended", type="integer",
               json_path=".status.autoscaler.recommended", priority=1),
    ),
    schema=ROOT,
    # kubectl scale, the HorizontalPodAutoscaler and KEDA set spec.parallelism: a spec
    # change, so the job is rescaled from its latest checkpoint through its key groups.
    scale={"specReplicasPath": ".spec.parallelism",
           "statusReplicasPath": ".status.parallelism",
           "labelSelectorPath": ".status.selector"},
    header="# CheckpointedJob: a long-running PySpark job that checkpoints its state with\n"
           "# barrier snapshots and is restarted from its latest completed checkpoint.\n"
           + GENERATED,
)

CHECKPOINTED_JOB_SNAPSHOT = CustomResource(
    kind=SNAPSHOT_KIND,
    plural=SNAPSHOT_PLURAL,
    short_names=("cjsnap", "cjsnaps"),
    categories=("checkpointed",),
    columns=(
        Column(name="Job", type="string", json_path=".spec.jobName"),
        Column(name="Checkpoint", type="integer", json_path=".status.checkpointId"),
        Column(name="Size", type="integer", json_path=".status.sizeBytes",
               description="Bytes copied."),
        Column(name="State", type="string", json_path=".status.state"),
        Column(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        Column(name="Path", type="string", json_path=".status.path", priority=1),
    ),
    schema=SNAPSHOT_ROOT,
    header="# CheckpointedJobSnapshot: a durable, self-contained copy of one completed\n"
           "# checkpoint of a CheckpointedJob, never pruned by `retained`, readable after\n"
           "# the job and its checkpoints are deleted, and restorable into the same or\n"
           "# another job (spec.restore.snapshot).\n" + GENERATED,
)

RESOURCES = (CHECKPOINTED_JOB, CHECKPOINTED_JOB_SNAPSHOT)
"""Every CRD of ours (kopf's peering CRDs are kopf's, copied as they are)."""

