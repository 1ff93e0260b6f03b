"""``spec.pod``: volumes and their mounts, node selector, tolerations, affinity,
priority class and security contexts of the job's pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cjob_spec.errors import SpecError
from cjob_spec.errors import describe_value as _describe
from cjob_spec.model import PodSettings
from cjob_spec.parse.node import Node, suggest
from cjob_spec.parse.values import DNS_LABEL_PATTERN, check_json_value, string_map
from cjob_spec.security import (
    check_security_contexts,
    read_container_security_context,
    read_pod_security_context,
)


def _documents(value: object, path: str) -> list[tuple[str, Mapping[str, Any]]]:
    """A list of JSON mappings, each with its path (``spec.pod.volumes[0]``...)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(field=path, problem=f"must be a list, got {_describe(value)}")
    items: list[tuple[str, Mapping[str, Any]]] = []
    for index, item in enumerate(value):
        at = f"{path}[{index}]"
        if not isinstance(item, Mapping):
            raise SpecError(field=at, problem=f"must be a mapping, got {_describe(item)}")
        check_json_value(item, at)
        items.append((at, item))
    return items


def read_pod(node: Node) -> PodSettings:
    volumes: list[Mapping[str, Any]] = []
    for at, volume in _documents(node.get("volumes"), node.at("volumes")):
        # Volume sources are Kubernetes objects: their schema keeps what it does not name.
        name = Node(volume, at, node.schema.child("volumes")).required_string("name")
        if len(name) > 63 or not DNS_LABEL_PATTERN.match(name):
            raise SpecError(field=f"{at}.name", problem=f"must be a DNS label, got {name!r}")
        if any(v["name"] == name for v in volumes):
            raise SpecError(field=f"{at}.name", problem=f"volume {name!r} is declared twice")
        if len(volume) != 2:
            raise SpecError(field=at, problem="must have a name and exactly one volume source "
                            "(for example persistentVolumeClaim, hostPath, nfs)")
        volumes.append(volume)
    mounts: list[Mapping[str, Any]] = []
    for at, mount in _documents(node.get("volumeMounts"), node.at("volumeMounts")):
        fields = Node(mount, at, node.schema.child("volumeMounts"))
        name = fields.required_string("name")
        if not any(v["name"] == name for v in volumes):
            raise SpecError(field=f"{at}.name", problem=f"no volume named {name!r} in "
                            "spec.pod.volumes",
                            hint=suggest(name, [str(v["name"]) for v in volumes]))
        mount_path = fields.required_string("mountPath")
        if not mount_path.startswith("/"):
            raise SpecError(field=f"{at}.mountPath",
                            problem=f"must be an absolute path, got {mount_path!r}")
        if any(m["mountPath"] == mount_path for m in mounts):
            raise SpecError(field=f"{at}.mountPath",
                            problem=f"{mount_path!r} is mounted twice")
        fields.boolean("readOnly", default=False)
        mounts.append(mount)
    tolerations: list[Mapping[str, Any]] = []
    for at, toleration in _documents(node.get("tolerations"), node.at("tolerations")):
        Node(toleration, at, node.schema.child("tolerations"))   # refuses unknown keys
        tolerations.append(toleration)
    affinity: Mapping[str, Any] | None = None
    if node.get("affinity") is not None:
        affinity_node = node.section("affinity")
        check_json_value(dict(affinity_node.values), node.at("affinity"))
        affinity = dict(affinity_node.values)
    security_context: dict[str, Any] = {}
    if node.get("securityContext") is not None:
        security_context = read_pod_security_context(
            node.get("securityContext"), node.at("securityContext"))
    container_security_context: dict[str, Any] = {}
    if node.get("containerSecurityContext") is not None:
        container_security_context = read_container_security_context(
            node.get("containerSecurityContext"), node.at("containerSecurityContext"))
    check_security_contexts(
        pod=security_context, container=container_security_context, path=node.path)
    return PodSettings(
        security_context=security_context,
        container_security_context=container_security_context,
        volumes=tuple(volumes),
        volume_mounts=tuple(mounts),
        node_selector=string_map(node.get("nodeSelector"), node.at("nodeSelector")),
        tolerations=tuple(tolerations),
        affinity=affinity,
        priority_class_name=node.string("priorityClassName"),
    )
