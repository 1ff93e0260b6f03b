"""``spec.pod``: volumes and their mounts, variables, image pull secrets, node
selector, tolerations, affinity, priority class and security contexts of every pod of
the job, and the templates of the driver's and the executors' pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cjob_spec.errors import SpecError
from cjob_spec.errors import describe_value as _describe
from cjob_spec.model import CheckpointSpec, PodSettings
from cjob_spec.names import DRIVER_CONTAINER, EXECUTOR_CONTAINER
from cjob_spec.parse.node import Node, suggest
from cjob_spec.parse.pod_template import (
    SharedPodFields,
    check_env_name,
    check_mount_path,
    read_pod_template,
)
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
        check_mount_path(fields.required_string("mountPath"), f"{at}.mountPath",
                         taken=[str(m["mountPath"]) for m in mounts])
        fields.boolean("readOnly", default=False)
        mounts.append(mount)
    env: list[Mapping[str, Any]] = []
    for at, variable in _documents(node.get("env"), node.at("env")):
        name = Node(variable, at, node.schema.child("env")).required_string("name")
        check_env_name(name, f"{at}.name")
        if any(v["name"] == name for v in env):
            raise SpecError(field=f"{at}.name", problem=f"{name} is set twice")
        if ("value" in variable) == ("valueFrom" in variable):
            raise SpecError(field=at, problem="needs exactly one of value and valueFrom")
        env.append(variable)
    env_from = [source for at, source in _documents(node.get("envFrom"), node.at("envFrom"))
                if _one_env_source(source, at)]
    pull_secrets: list[str] = []
    for at, secret in _documents(node.get("imagePullSecrets"), node.at("imagePullSecrets")):
        pull_secrets.append(
            Node(secret, at, node.schema.child("imagePullSecrets")).required_string("name"))
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
    node_selector = string_map(node.get("nodeSelector"), node.at("nodeSelector"))
    priority_class_name = node.string("priorityClassName")
    shared = SharedPodFields(
        volumes=frozenset(str(v["name"]) for v in volumes),
        mount_paths=frozenset(str(m["mountPath"]) for m in mounts),
        env=frozenset(str(v["name"]) for v in env),
        node_selector=frozenset(node_selector),
        set_fields=frozenset(name for name, value in (("affinity", affinity),
                                                      ("priorityClassName", priority_class_name))
                             if value is not None))
    templates = {
        key: read_pod_template(node.get(key), node.at(key), container=container, shared=shared)
        for key, container in (("driverTemplate", DRIVER_CONTAINER),
                               ("executorTemplate", EXECUTOR_CONTAINER))
        if node.get(key) is not None}
    return PodSettings(
        env=tuple(env),
        env_from=tuple(env_from),
        image_pull_secrets=tuple(pull_secrets),
        driver_template=templates.get("driverTemplate"),
        executor_template=templates.get("executorTemplate"),
        security_context=security_context,
        container_security_context=container_security_context,
        volumes=tuple(volumes),
        volume_mounts=tuple(mounts),
        node_selector=node_selector,
        tolerations=tuple(tolerations),
        affinity=affinity,
        priority_class_name=priority_class_name,
    )


ENV_SOURCES = ("secretRef", "configMapRef")


def _one_env_source(source: Mapping[str, Any], at: str) -> bool:
    """An ``envFrom`` entry names exactly one Secret or ConfigMap, by name."""
    kinds = [kind for kind in ENV_SOURCES if kind in source]
    if len(kinds) != 1:
        raise SpecError(field=at, problem="needs exactly one of secretRef and configMapRef")
    reference = source[kinds[0]]
    if not isinstance(reference, Mapping) or not isinstance(reference.get("name"), str) \
            or not reference["name"]:
        raise SpecError(field=f"{at}.{kinds[0]}.name", problem="is required (the object's "
                        "name, in the job's namespace)")
    return True


def check_env_against_s3(pod: PodSettings, checkpoint: CheckpointSpec) -> None:
    """Refuse a variable of ``spec.pod.env`` that ``spec.checkpoint.s3`` sets: the
    driver would see one of the two values, and not the same one as a reader expects."""
    s3 = checkpoint.s3
    if s3 is None:
        return
    taken = {name for name, given in (
        ("AWS_ACCESS_KEY_ID", s3.credentials_secret), ("AWS_SECRET_ACCESS_KEY", s3.credentials_secret),
        ("AWS_ENDPOINT_URL", s3.endpoint), ("AWS_REGION", s3.region),
        ("AWS_DEFAULT_REGION", s3.region)) if given}
    for index, variable in enumerate(pod.env):
        if variable["name"] in taken:
            raise SpecError(field=f"spec.pod.env[{index}].name",
                            problem=f"{variable['name']} is set from spec.checkpoint.s3",
                            hint="set it there, or give the variable another name")
