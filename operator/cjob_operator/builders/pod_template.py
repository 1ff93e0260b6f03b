"""Building a pod on a user's template (``spec.pod.driverTemplate`` / ``executorTemplate``).

The template is the base and the operator's pod is laid over it: a field both set
keeps the operator's value, lists of named things (volumes, variables, mounts,
tolerations, pull secrets, containers) are joined with the template's first, and the
template's other containers run beside the job's own. The parser has already refused
a template that sets what the operator sets (``cjob_spec.pod_ownership``), so the
overlay never hides a user's value; it is still the operator's that wins, should one
slip through.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from cjob_operator.builders.metadata import Manifest

JOINED_POD_FIELDS = ("volumes", "tolerations", "imagePullSecrets", "initContainers")
JOINED_CONTAINER_FIELDS = ("env", "envFrom", "volumeMounts", "ports")
MERGED_FIELDS = ("nodeSelector",)


def _joined(template: list[Any], ours: list[Any]) -> list[Any]:
    """The template's items, then ours; an item of ours replaces the template's of the
    same name (variables: the last of a name would win in the container anyway)."""
    names = {item.get("name") for item in ours if isinstance(item, Mapping)}
    kept = [item for item in template
            if not (isinstance(item, Mapping) and item.get("name") in names
                    and item.get("name") is not None)]
    return [*kept, *ours]


def _overlay(template: Mapping[str, Any], ours: Mapping[str, Any], *,
             joined: tuple[str, ...], merged: tuple[str, ...] = ()) -> dict[str, Any]:
    result = copy.deepcopy(dict(template))
    for key, value in ours.items():
        if key in joined and isinstance(result.get(key), list):
            result[key] = _joined(result[key], list(value))
        elif key in merged and isinstance(result.get(key), Mapping):
            result[key] = {**result[key], **value}
        else:
            result[key] = copy.deepcopy(value)
    return result


def container_on_template(template_spec: Mapping[str, Any], container: Mapping[str, Any],
                          ) -> list[dict[str, Any]]:
    """The pod's containers: ``container`` laid over the template's container of the same
    name (if any), first, then the template's other containers."""
    name = container.get("name")
    templates = [c for c in template_spec.get("containers") or [] if isinstance(c, Mapping)]
    own = next((c for c in templates if c.get("name") == name), {})
    return [_overlay(own, container, joined=JOINED_CONTAINER_FIELDS),
            *(copy.deepcopy(dict(c)) for c in templates if c.get("name") != name)]


def pod_on_template(template: Mapping[str, Any] | None, pod: Manifest) -> Manifest:
    """``pod`` (one container: the job's) built on ``template``."""
    if not template:
        return pod
    metadata = dict(pod.get("metadata") or {})
    template_metadata = template.get("metadata") or {}
    for key in ("labels", "annotations"):
        combined = {**(template_metadata.get(key) or {}), **(metadata.get(key) or {})}
        if combined:
            metadata[key] = combined
    template_spec = template.get("spec") or {}
    spec = _overlay(template_spec, {k: v for k, v in pod["spec"].items() if k != "containers"},
                    joined=JOINED_POD_FIELDS, merged=MERGED_FIELDS)
    (container,) = pod["spec"]["containers"]
    spec["containers"] = container_on_template(template_spec, container)
    return {**pod, "metadata": metadata, "spec": spec}
