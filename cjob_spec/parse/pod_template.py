"""``spec.pod.driverTemplate`` and ``spec.pod.executorTemplate``: the pods a role's
pods are built on, and what of them the operator keeps for itself.

A template may give anything Kubernetes allows a pod (sidecars, init containers,
volumes, tolerations, host aliases, topology spread...) except what the operator or
Spark sets (``cjob_spec.pod_ownership``), or what ``spec.pod`` already gives every
pod: then the template would be silently overridden, or one of two values would be,
so the field is named with where its value comes from. The rest is the API server's
to validate when the pod is created.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cjob_spec import pod_ownership
from cjob_spec.errors import SpecError
from cjob_spec.errors import describe_value as _describe
from cjob_spec.parse.values import check_json_value, string_map

POD_KEYS = ("apiVersion", "kind", "metadata", "spec")


@dataclass(frozen=True, kw_only=True)
class SharedPodFields:
    """What ``spec.pod`` gives every pod, which a template must not give again."""

    volumes: frozenset[str]
    mount_paths: frozenset[str]
    env: frozenset[str]
    node_selector: frozenset[str]
    set_fields: frozenset[str]
    """Of :data:`~cjob_spec.pod_ownership.SHARED_SINGLE_FIELDS`, those spec.pod sets."""


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(field=path, problem=f"must be a mapping, got {_describe(value)}")
    return value


def _items(value: object, path: str) -> list[tuple[str, Mapping[str, Any]]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(field=path, problem=f"must be a list, got {_describe(value)}")
    return [(f"{path}[{index}]", _mapping(item, f"{path}[{index}]"))
            for index, item in enumerate(value)]


def _name(item: Mapping[str, Any], at: str) -> str:
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError(field=f"{at}.name", problem="is required (a non-empty string)")
    return name


def check_env_name(name: str, at: str) -> None:
    """Refuse a variable the operator or Spark sets in the job's containers."""
    owner = pod_ownership.env_owner(name)
    if owner is not None:
        raise SpecError(field=at, problem=f"{name} is set by {owner}",
                        hint="give the variable another name")


def read_pod_template(value: object, path: str, *, container: str,
                      shared: SharedPodFields) -> dict[str, Any]:
    """A role's pod template, checked; returned as a plain document.

    ``container`` is the name of the role's own container in the template: its fields
    are merged with the operator's, every other container runs beside it.
    """
    template = _mapping(value, path)
    check_json_value(template, path)
    for key in template:
        if key not in POD_KEYS:
            raise SpecError(field=f"{path}.{key}", problem="is not a field of a pod template",
                            hint="a template has metadata and spec")
    if template.get("apiVersion", "v1") != "v1":
        raise SpecError(field=f"{path}.apiVersion", problem="must be v1")
    if template.get("kind", "Pod") != "Pod":
        raise SpecError(field=f"{path}.kind", problem="must be Pod")
    _check_metadata(template.get("metadata"), f"{path}.metadata")
    spec = _mapping(template.get("spec") or {}, f"{path}.spec")
    _check_spec(spec, f"{path}.spec", container=container, shared=shared)
    return {key: template[key] for key in ("metadata", "spec") if key in template}


def _check_metadata(value: object, path: str) -> None:
    if value is None:
        return
    metadata = _mapping(value, path)
    for key in metadata:
        if key not in pod_ownership.TEMPLATE_METADATA:
            raise SpecError(field=f"{path}.{key}", problem="is set by the operator",
                            hint="a template may give labels and annotations")
    for key in string_map(metadata.get("labels"), f"{path}.labels"):
        if pod_ownership.is_owned_label(key):
            raise SpecError(field=f"{path}.labels.{key}",
                            problem="is set by the operator or Spark")
    for key in string_map(metadata.get("annotations"), f"{path}.annotations"):
        if pod_ownership.is_owned_annotation(key):
            raise SpecError(field=f"{path}.annotations.{key}",
                            problem="is set by the operator")


def _check_spec(spec: Mapping[str, Any], path: str, *, container: str,
                shared: SharedPodFields) -> None:
    for key, owner in pod_ownership.OWNED_POD_FIELDS.items():
        if key in spec:
            raise SpecError(field=f"{path}.{key}", problem=f"is {owner}")
    for key, field in pod_ownership.SHARED_SINGLE_FIELDS.items():
        if key in spec and field in shared.set_fields:
            raise SpecError(field=f"{path}.{key}", problem=f"spec.pod.{field} sets it for "
                            "every pod", hint="set it in one place")
    for key in string_map(spec.get("nodeSelector"), f"{path}.nodeSelector"):
        if key in shared.node_selector:
            raise SpecError(field=f"{path}.nodeSelector.{key}",
                            problem="spec.pod.nodeSelector sets it for every pod",
                            hint="set it in one place")
    volumes = _check_volumes(spec.get("volumes"), f"{path}.volumes", shared=shared)
    names: set[str] = set()
    for kind in ("initContainers", "containers"):
        for at, item in _items(spec.get(kind), f"{path}.{kind}"):
            name = _name(item, at)
            if name in names:
                raise SpecError(field=f"{at}.name", problem=f"container {name!r} is declared "
                                "twice")
            names.add(name)
            if kind == "containers" and name == container:
                _check_main_container(item, at, volumes=volumes | shared.volumes,
                                      shared=shared)


def _check_volumes(value: object, path: str, *, shared: SharedPodFields) -> frozenset[str]:
    names: set[str] = set()
    for at, volume in _items(value, path):
        name = _name(volume, at)
        if name in pod_ownership.OPERATOR_VOLUMES or name.startswith(
                pod_ownership.SPARK_VOLUME_PREFIX):
            raise SpecError(field=f"{at}.name", problem=f"volume name {name!r} is the "
                            "operator's or Spark's", hint="give the volume another name")
        if name in shared.volumes:
            raise SpecError(field=f"{at}.name", problem=f"volume {name!r} is declared in "
                            "spec.pod.volumes too", hint="declare it in one place")
        if name in names:
            raise SpecError(field=f"{at}.name", problem=f"volume {name!r} is declared twice")
        names.add(name)
    return frozenset(names)


def _check_main_container(container: Mapping[str, Any], path: str, *,
                          volumes: frozenset[str], shared: SharedPodFields) -> None:
    for key, owner in pod_ownership.OWNED_CONTAINER_FIELDS.items():
        if key in container:
            raise SpecError(field=f"{path}.{key}", problem=f"is {owner}")
    for at, variable in _items(container.get("env"), f"{path}.env"):
        name = _name(variable, at)
        check_env_name(name, f"{at}.name")
        if name in shared.env:
            raise SpecError(field=f"{at}.name", problem=f"{name} is set in spec.pod.env too",
                            hint="set it in one place")
    for at, mount in _items(container.get("volumeMounts"), f"{path}.volumeMounts"):
        name = _name(mount, at)
        if name not in volumes:
            raise SpecError(field=f"{at}.name", problem=f"no volume named {name!r} in the "
                            "template's or spec.pod's volumes")
        check_mount_path(mount.get("mountPath"), f"{at}.mountPath", taken=shared.mount_paths)


def check_mount_path(value: object, path: str, *, taken: Sequence[str] | frozenset[str]) -> str:
    """An absolute mount path that is not the operator's, nor mounted already."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise SpecError(field=path, problem=f"must be an absolute path, got {_describe(value)}")
    directory = pod_ownership.OPERATOR_DIR
    if value == directory or value.startswith(f"{directory}/"):
        raise SpecError(field=path, problem=f"{value!r} is where the operator mounts its own "
                        "files", hint=f"mount it outside {directory}")
    if value in taken:
        raise SpecError(field=path, problem=f"{value!r} is mounted twice")
    return value
