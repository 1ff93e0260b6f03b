"""The CheckpointedJob CustomResourceDefinition, built from the schema, and its YAML.

``crds/checkpointedjob.yaml`` and the chart's copy are this module's output (``make
crds`` writes them); ``tests/cjob_spec/test_crd_generated.py`` fails when a committed
file differs from what the model, defaults and schema produce now.
"""

from __future__ import annotations

from typing import Any

import yaml

from cjob_spec.names import API_GROUP, KIND, PLURAL
from cjob_spec.schema.job_schema import ROOT

VERSION = "v1alpha1"
HEADER = """\
# CheckpointedJob: a long-running PySpark job that checkpoints its state with barrier
# snapshots and is restarted from its latest completed checkpoint.
# Generated from cjob_spec/schema (defaults and bounds from cjob_spec/defaults.py):
# edit those and run `make crds`, which writes this file and the chart's copy.
"""

def _column(name: str, kind: str, path: str) -> dict[str, str]:
    return {"name": name, "type": kind, "jsonPath": path}


PRINTER_COLUMNS = (
    _column("Phase", "string", ".status.phase"),
    _column("Attempt", "integer", ".status.attempt"),
    _column("Restarts", "integer", ".status.restarts"),
    _column("Last Checkpoint", "integer", ".status.latestCheckpoint.id"),
    _column("Checkpoint Age", "date", ".status.latestCheckpoint.completedAt"),
    _column("Age", "date", ".metadata.creationTimestamp"),
)


def crd_document() -> dict[str, Any]:
    """The CRD as the API server reads it."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{API_GROUP}",
            "labels": {"app.kubernetes.io/name": "checkpointed-jobs",
                       "app.kubernetes.io/part-of": "checkpointed-jobs"},
        },
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["cjob", "cjobs"],
                "categories": ["checkpointed", "spark"],
            },
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    # kubectl scale, the HorizontalPodAutoscaler and KEDA set
                    # spec.parallelism: a spec change, so the job is rescaled from its
                    # latest checkpoint through its key groups.
                    "scale": {
                        "specReplicasPath": ".spec.parallelism",
                        "statusReplicasPath": ".status.parallelism",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "additionalPrinterColumns": [dict(column) for column in PRINTER_COLUMNS],
                "schema": {"openAPIV3Schema": ROOT.document()},
            }],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Block style, lists indented under their key, as people write Kubernetes YAML."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def crd_text() -> str:
    """The CRD file's content: the header, then the document."""
    body = yaml.dump(crd_document(), Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     width=92, default_flow_style=False)
    return HEADER + body
