"""The scheduling fields ``spec.pod`` gives every pod of a job: image pull secrets,
tolerations, affinity and priority. The driver's, standby's and storage pods get them
directly; the executors get them through the pod template Spark starts them from (their
node selection comes through Spark's settings)."""

from __future__ import annotations

from typing import Any

from cjob_spec.model import PodSettings


def shared_placement(pod: PodSettings) -> dict[str, Any]:
    """The fields of ``pod`` that are set, as a pod spec names them."""
    fields: dict[str, Any] = {}
    if pod.image_pull_secrets:
        fields["imagePullSecrets"] = [{"name": name} for name in pod.image_pull_secrets]
    if pod.tolerations:
        fields["tolerations"] = [dict(t) for t in pod.tolerations]
    if pod.affinity is not None:
        fields["affinity"] = dict(pod.affinity)
    if pod.priority_class_name:
        fields["priorityClassName"] = pod.priority_class_name
    return fields
